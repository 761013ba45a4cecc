//! How full a claim's volume is, in words: the cells and lines `status`, `volume show` and
//! `claim list -o wide` print.

use csivol_api::{Claim, ClaimUsage, UsageNumbers};

use crate::output::bytes;

/// What the CLI says of a claim whose node plugin has no GET_VOLUME_STATS.
pub const NOT_REPORTED: &str = "the plugin does not report usage";

/// A table cell: `9.1 MiB/10 MiB (91%)`, the inodes when only they were reported,
/// `not reported`, or `-` before the first sample.
pub fn cell(u: Option<&ClaimUsage>) -> String {
    match u {
        None => "-".to_owned(),
        Some(ClaimUsage::NotReported) => "not reported".to_owned(),
        Some(ClaimUsage::Sampled { usage, .. }) => match (usage.bytes, usage.inodes) {
            (Some(b), _) => numbers(b, bytes),
            (None, Some(i)) => format!("{} inodes", numbers(i, |n| n.to_string())),
            (None, None) => "-".to_owned(),
        },
    }
}

/// The `usage` line of a claim: both units, or why there is nothing to say.
pub fn detail(u: &ClaimUsage) -> String {
    match u {
        ClaimUsage::NotReported => NOT_REPORTED.to_owned(),
        ClaimUsage::Sampled { usage, at } => {
            let mut parts = Vec::new();
            if let Some(b) = usage.bytes {
                parts.push(numbers(b, bytes));
            }
            if let Some(i) = usage.inodes {
                parts.push(format!("{} inodes", numbers(i, |n| n.to_string())));
            }
            if parts.is_empty() {
                parts.push("the plugin reported no numbers".to_owned());
            }
            format!(
                "{} (sampled {} ago)",
                parts.join(", "),
                crate::output::age(at)
            )
        }
    }
}

/// A volume's cell in a list of volumes: its fullest claim's (the claims on several nodes
/// see one volume).
pub fn volume_cell(claims: &[Claim]) -> String {
    let percent = |c: &&Claim| match &c.usage {
        Some(ClaimUsage::Sampled { usage, .. }) => usage.bytes.and_then(|b| b.percent()),
        _ => None,
    };
    let fullest = claims
        .iter()
        .filter(|c| percent(c).is_some())
        .max_by(|a, b| {
            percent(a)
                .partial_cmp(&percent(b))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
    match fullest.or_else(|| claims.iter().find(|c| c.usage.is_some())) {
        Some(c) => cell(c.usage.as_ref()),
        None => "-".to_owned(),
    }
}

/// `used/total (percent)`, with what the plugin left out shown as `?`.
fn numbers(n: UsageNumbers, unit: impl Fn(u64) -> String) -> String {
    let used = n.used().map_or_else(|| "?".to_owned(), &unit);
    match n.percent() {
        Some(p) => format!("{used}/{} ({p:.0}%)", unit(n.total)),
        None => format!("{used}/{}", unit(n.total)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_say_what_was_reported() {
        let sampled = |bytes, inodes| {
            Some(ClaimUsage::Sampled {
                usage: csivol_api::VolumeUsage { bytes, inodes },
                at: "2026-01-01T00:00:00Z".into(),
            })
        };
        let n = |used, available, total| UsageNumbers {
            used,
            available,
            total,
        };
        for (usage, text) in [
            (None, "-"),
            (Some(ClaimUsage::NotReported), "not reported"),
            (
                sampled(Some(n(Some(1 << 20), None, 4 << 20)), None),
                "1 MiB/4 MiB (25%)",
            ),
            (
                sampled(Some(n(None, Some(1 << 20), 4 << 20)), None),
                "3 MiB/4 MiB (75%)",
            ),
            (sampled(Some(n(None, None, 4 << 20)), None), "?/4 MiB"),
            (
                sampled(None, Some(n(Some(9), None, 10))),
                "9/10 (90%) inodes",
            ),
            (sampled(None, None), "-"),
        ] {
            assert_eq!(cell(usage.as_ref()), text, "{usage:?}");
        }
        assert_eq!(detail(&ClaimUsage::NotReported), NOT_REPORTED);
    }
}
