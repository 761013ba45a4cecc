//! When a volume counts as filling up: past the server's threshold, and until it has
//! fallen clearly below it again, so that a volume hovering at the threshold is told of
//! once, not at every sample.

/// How far below the threshold, in percentage points, a filling volume must fall before it
/// counts as no longer filling.
pub const HYSTERESIS: f64 = 5.0;

/// Whether a volume is filling up, given whether it was at the last sample, how full it is
/// now (percent; the fuller of bytes and inodes) and the threshold (percent).
pub fn filling(was: bool, percent: f64, threshold: f64) -> bool {
    if was {
        percent >= threshold - HYSTERESIS
    } else {
        percent >= threshold
    }
}

/// Whether a sample is a crossing worth an event: not filling before, filling now.
pub fn crossed(was: bool, now: bool) -> bool {
    !was && now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_fills_at_the_threshold_and_stops_filling_well_below_it() {
        for (was, percent, now) in [
            (false, 10.0, false),
            (false, 84.9, false),
            (false, 85.0, true),
            (false, 99.0, true),
            // Hovering just below the threshold after crossing it: still filling.
            (true, 84.0, true),
            (true, 80.0, true),
            (true, 79.9, false),
            (true, 10.0, false),
        ] {
            assert_eq!(filling(was, percent, 85.0), now, "{was} {percent}");
        }
    }

    #[test]
    fn a_volume_that_hovers_at_the_threshold_crosses_once() {
        let samples = [84.0, 86.0, 84.5, 85.5, 84.0, 86.0, 70.0, 90.0];
        let mut was = false;
        let mut crossings = Vec::new();
        for (i, p) in samples.iter().enumerate() {
            let now = filling(was, *p, 85.0);
            if crossed(was, now) {
                crossings.push(i);
            }
            was = now;
        }
        assert_eq!(
            crossings,
            [1, 7],
            "once on the way up, again only after falling clear"
        );
    }
}
