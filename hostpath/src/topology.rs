//! Where a volume is placed and who may reach it: pure rules over topology segments,
//! table-tested.
//!
//! The storage system can provision in a segment when some node that announced itself to
//! the backend lies in it: a node's topology *lies in* a segment when it has every one of
//! the segment's key/value pairs (`{zone: a}` holds the node `{zone: a, rack: 1}`).

use crate::store::Segment;

/// Whether a node with topology `node` lies in `segment`.
pub fn lies_in(node: &Segment, segment: &Segment) -> bool {
    segment.iter().all(|(k, v)| node.get(k) == Some(v))
}

/// Whether a volume accessible from `volume` (empty: from everywhere) can be reached from a
/// node with topology `node`.
pub fn reachable(volume: &[Segment], node: &Segment) -> bool {
    volume.is_empty() || volume.iter().any(|s| lies_in(node, s))
}

/// Why a volume cannot be placed.
#[derive(Debug, PartialEq, Eq)]
pub struct NoFit(pub String);

/// Chooses where a new volume is accessible from, following the spec's
/// TopologyRequirement: the first `preferred` segment that is also requisite (when a
/// requisite list is given) and that some known node lies in, else the first such
/// `requisite` segment; without requisite segments, any known node's segment. With no
/// requirement at all the volume goes to `default` (the controller's own segment), or is
/// accessible from everywhere when there is none.
pub fn place(
    requisite: &[Segment],
    preferred: &[Segment],
    known: &[Segment],
    default: &Segment,
) -> Result<Vec<Segment>, NoFit> {
    if requisite.is_empty() && preferred.is_empty() {
        return Ok(if default.is_empty() {
            Vec::new()
        } else {
            vec![default.clone()]
        });
    }
    let provisionable = |s: &Segment| known.iter().any(|n| !n.is_empty() && lies_in(n, s));
    let candidates = preferred
        .iter()
        .filter(|p| requisite.is_empty() || requisite.contains(p))
        .chain(requisite);
    if let Some(s) = candidates.into_iter().find(|s| provisionable(s)) {
        return Ok(vec![s.clone()]);
    }
    if requisite.is_empty()
        && let Some(n) = known.iter().find(|n| !n.is_empty())
    {
        return Ok(vec![n.clone()]);
    }
    let wanted: Vec<_> = if requisite.is_empty() {
        preferred
    } else {
        requisite
    }
    .iter()
    .map(show)
    .collect();
    Err(NoFit(format!(
        "no node of this storage system lies in any of the requisite segments {}",
        wanted.join(", ")
    )))
}

/// `{zone=a,rack=1}`.
pub fn show(s: &Segment) -> String {
    let pairs: Vec<_> = s.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(","))
}

/// Parses `--topology KEY=VALUE`.
pub fn parse_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected KEY=VALUE"))?;
    if k.is_empty() || v.is_empty() {
        return Err(format!("`{s}`: KEY and VALUE must not be empty"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// `KEY=VALUE:BYTES`, as `--segment-capacity` takes it.
pub fn parse_segment_capacity(s: &str) -> Result<((String, String), u64), String> {
    let (pair, bytes) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}`: expected KEY=VALUE:BYTES"))?;
    let bytes = bytes
        .parse()
        .map_err(|_| format!("`{s}`: BYTES must be a whole number of bytes"))?;
    Ok((parse_pair(pair)?, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(pairs: &[(&str, &str)]) -> Segment {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn placement_follows_the_topology_requirement() {
        let a = seg(&[("zone", "a")]);
        let b = seg(&[("zone", "b")]);
        let c = seg(&[("zone", "c")]);
        let node_a = seg(&[("zone", "a"), ("rack", "1")]);
        let known = [node_a.clone(), b.clone()];
        let none = Segment::new();
        // (requisite, preferred, default, expected; None: refused)
        type Case<'a> = (
            Vec<Segment>,
            Vec<Segment>,
            &'a Segment,
            Option<Vec<Segment>>,
        );
        let cases: Vec<Case<'_>> = vec![
            (vec![], vec![], &none, Some(vec![])),
            (vec![], vec![], &b, Some(vec![b.clone()])),
            (vec![a.clone()], vec![], &none, Some(vec![a.clone()])),
            (
                vec![c.clone(), b.clone()],
                vec![],
                &none,
                Some(vec![b.clone()]),
            ),
            (
                vec![a.clone(), b.clone()],
                vec![b.clone()],
                &none,
                Some(vec![b.clone()]),
            ),
            // A preferred segment outside the requisite list is not a candidate.
            (
                vec![a.clone()],
                vec![b.clone()],
                &none,
                Some(vec![a.clone()]),
            ),
            (vec![c.clone()], vec![], &b, None),
            // Preferred only: the SP may choose any segment when none preferred fits.
            (vec![], vec![c.clone()], &none, Some(vec![node_a.clone()])),
            (vec![], vec![b.clone()], &none, Some(vec![b.clone()])),
        ];
        for (requisite, preferred, default, expected) in cases {
            let got = place(&requisite, &preferred, &known, default).ok();
            assert_eq!(
                got, expected,
                "requisite {requisite:?} preferred {preferred:?}"
            );
        }
        assert!(place(std::slice::from_ref(&a), &[], &[], &none).is_err());
    }

    #[test]
    fn reachability() {
        let a = seg(&[("zone", "a")]);
        let node_a = seg(&[("zone", "a"), ("rack", "1")]);
        let node_b = seg(&[("zone", "b")]);
        assert!(reachable(&[], &node_b));
        assert!(reachable(std::slice::from_ref(&a), &node_a));
        assert!(!reachable(std::slice::from_ref(&a), &node_b));
        assert!(!reachable(&[a], &Segment::new()));
    }

    #[test]
    fn parses_pairs() {
        assert_eq!(parse_pair("zone=a"), Ok(("zone".into(), "a".into())));
        assert!(parse_pair("zone").is_err());
        assert!(parse_pair("=a").is_err());
    }
}
