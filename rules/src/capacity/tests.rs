use csivol_api::CapacityQuery;

use super::*;

fn seg(zone: &str) -> Topology {
    if zone.is_empty() {
        return Topology::new();
    }
    [("zone".to_owned(), zone.to_owned())].into_iter().collect()
}

fn sample(zone: &str, available: u64, max: Option<u64>) -> CapacitySample {
    CapacitySample {
        query: CapacityQuery {
            segment: seg(zone),
            parameters: BTreeMap::new(),
        },
        available_bytes: available,
        maximum_volume_size: max,
        minimum_volume_size: None,
    }
}

fn check(required: u64, zones: &[&str], samples: &[(CapacitySample, bool)]) -> Verdict {
    let known: Vec<Known<'_>> = samples
        .iter()
        .map(|(s, fresh)| Known {
            sample: s,
            fresh: *fresh,
        })
        .collect();
    let required_segments: Vec<Topology> = zones.iter().map(|z| seg(z)).collect();
    let none = BTreeMap::new();
    judge(
        &Wanted {
            required_bytes: required,
            parameters: &none,
            required: &required_segments,
        },
        &known,
    )
}

#[test]
fn only_a_fresh_sample_below_the_request_refuses() {
    let too_big = |segment: &str, limit, bytes, fits: Option<&str>| Verdict::TooBig {
        segment: seg(segment),
        limit,
        bytes,
        fits: fits.map(seg),
    };
    /// Name, bytes asked for, required zones, samples (with freshness), verdict.
    type Case<'a> = (
        &'a str,
        u64,
        Vec<&'a str>,
        Vec<(CapacitySample, bool)>,
        Verdict,
    );
    let cases: Vec<Case<'_>> = vec![
        ("nothing sampled", 10, vec![], vec![], Verdict::Proceed),
        (
            "whole plugin, fits",
            10,
            vec![],
            vec![(sample("", 10, Some(10)), true)],
            Verdict::Proceed,
        ),
        (
            "whole plugin, maximum below the request",
            11,
            vec![],
            vec![(sample("", 100, Some(10)), true)],
            too_big("", Limit::MaximumVolumeSize, 10, None),
        ),
        (
            "whole plugin, available below, no maximum stated",
            11,
            vec![],
            vec![(sample("", 10, None), true)],
            too_big("", Limit::Available, 10, None),
        ),
        (
            "a stale sample decides nothing",
            11,
            vec![],
            vec![(sample("", 10, None), false)],
            Verdict::Proceed,
        ),
        (
            "required segment too small, another fits",
            50,
            vec!["c"],
            vec![
                (sample("c", 0, Some(0)), true),
                (sample("a", 40, None), true),
                (sample("b", 60, None), true),
            ],
            too_big("c", Limit::MaximumVolumeSize, 0, Some("b")),
        ),
        (
            "one of the required segments fits",
            50,
            vec!["c", "b"],
            vec![(sample("c", 0, None), true), (sample("b", 60, None), true)],
            Verdict::Proceed,
        ),
        (
            "a required segment nobody sampled may fit",
            50,
            vec!["c", "d"],
            vec![(sample("c", 0, None), true)],
            Verdict::Proceed,
        ),
        (
            "no size asked for",
            0,
            vec![],
            vec![(sample("", 0, Some(0)), true)],
            Verdict::Proceed,
        ),
    ];
    for (name, required, zones, samples, want) in cases {
        assert_eq!(check(required, &zones, &samples), want, "{name}");
    }
}

#[test]
fn other_parameter_sets_decide_nothing() {
    let mut s = sample("", 1, None);
    s.query.parameters.insert("tier".into(), "slow".into());
    assert_eq!(check(10, &[], &[(s, true)]), Verdict::Proceed);
}

#[test]
fn preferred_segments_are_ordered_by_known_free_capacity() {
    let samples = [
        sample("a", 10, None),
        sample("c", 30, None),
        sample("d", 5, None),
    ];
    let known: Vec<Known<'_>> = samples
        .iter()
        .map(|s| Known {
            sample: s,
            fresh: s.query.segment != seg("d"),
        })
        .collect();
    let mut preferred = vec![seg("a"), seg("b"), seg("c"), seg("d")];
    order_preferred(&mut preferred, &BTreeMap::new(), &known);
    // b (unknown) and d (stale) keep their places; a and c swap.
    assert_eq!(preferred, vec![seg("c"), seg("b"), seg("a"), seg("d")]);
}
