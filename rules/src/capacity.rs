//! Whether a volume fits, from the plugin's GetCapacity answers. The CSI spec makes them
//! advisory (GetCapacity: "the available capacity of the storage pool from which the
//! controller provisions volumes"; CreateVolume remains the one that decides, and answers
//! OUT_OF_RANGE or RESOURCE_EXHAUSTED itself), so a creation is refused here only on a
//! fresh answer that says it cannot fit; with no such answer it goes to the plugin as
//! before.

use std::collections::BTreeMap;

use csivol_api::{CapacitySample, Topology};

/// A sample and whether it is recent enough to act on.
#[derive(Clone, Debug)]
pub struct Known<'a> {
    pub sample: &'a CapacitySample,
    pub fresh: bool,
}

/// What a creation asks for.
#[derive(Clone, Debug)]
pub struct Wanted<'a> {
    pub required_bytes: u64,
    pub parameters: &'a BTreeMap<String, String>,
    /// `topology_request.required` (CreateVolume's `requisite`): the volume must be in one
    /// of these; empty: anywhere.
    pub required: &'a [Topology],
}

/// Which figure of a sample is the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `maximum_volume_size`: "The largest size usable in CapacityRange.required_bytes".
    MaximumVolumeSize,
    /// `available_capacity`.
    Available,
}

/// The answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No fresh sample says it cannot fit: go to the plugin.
    Proceed,
    /// Every place the volume may go has a fresh sample below the request.
    TooBig {
        /// The segment judged (empty: the plugin's whole capacity) and its limit.
        segment: Topology,
        limit: Limit,
        bytes: u64,
        /// A sampled segment (with the same parameters) whose fresh sample fits.
        fits: Option<Topology>,
    },
}

/// The most a sample says a volume may have, and which figure says it.
fn limit(s: &CapacitySample) -> (u64, Limit) {
    match s.maximum_volume_size {
        // An absent maximum is one the plugin did not state, not a maximum of 0.
        Some(m) if m <= s.available_bytes => (m, Limit::MaximumVolumeSize),
        _ => (s.available_bytes, Limit::Available),
    }
}

/// Whether a volume of `wanted` fits, by the fresh samples of its parameter set.
pub fn judge(wanted: &Wanted<'_>, known: &[Known<'_>]) -> Verdict {
    if wanted.required_bytes == 0 {
        return Verdict::Proceed;
    }
    let of_set: Vec<&CapacitySample> = known
        .iter()
        .filter(|k| k.fresh && k.sample.query.parameters == *wanted.parameters)
        .map(|k| k.sample)
        .collect();
    let sample_of = |segment: &Topology| of_set.iter().find(|s| s.query.segment == *segment);
    let whole = Topology::new();
    let places: Vec<&Topology> = if wanted.required.is_empty() {
        vec![&whole]
    } else {
        wanted.required.iter().collect()
    };
    let mut worst = None;
    for place in places {
        let Some(s) = sample_of(place) else {
            // A place nobody sampled may well fit.
            return Verdict::Proceed;
        };
        let (bytes, which) = limit(s);
        if bytes >= wanted.required_bytes {
            return Verdict::Proceed;
        }
        worst.get_or_insert((place.clone(), which, bytes));
    }
    let Some((segment, limit_kind, bytes)) = worst else {
        return Verdict::Proceed;
    };
    let fits = of_set
        .iter()
        .filter(|s| !s.query.segment.is_empty() && limit(s).0 >= wanted.required_bytes)
        .max_by_key(|s| limit(s).0)
        .map(|s| s.query.segment.clone());
    Verdict::TooBig {
        segment,
        limit: limit_kind,
        bytes,
        fits,
    }
}

/// `preferred` ordered by free capacity where a fresh sample of the parameter set says it,
/// most first: the segments with a known figure trade places among themselves, the others
/// keep theirs (spec.md, CreateVolume's `preferred`: "the SP SHOULD attempt to make the
/// provisioned volume available using the preferred topologies in order from first to
/// last").
pub fn order_preferred(
    preferred: &mut [Topology],
    parameters: &BTreeMap<String, String>,
    known: &[Known<'_>],
) {
    let free = |t: &Topology| {
        known
            .iter()
            .filter(|k| k.fresh && k.sample.query.parameters == *parameters)
            .find(|k| k.sample.query.segment == *t)
            .map(|k| limit(k.sample).0)
    };
    let at: Vec<usize> = (0..preferred.len())
        .filter(|&i| free(&preferred[i]).is_some())
        .collect();
    let mut sorted: Vec<Topology> = at.iter().map(|&i| preferred[i].clone()).collect();
    // Stable: equal figures keep the operator's order.
    sorted.sort_by_key(|t| std::cmp::Reverse(free(t).unwrap_or(0)));
    for (i, t) in at.into_iter().zip(sorted) {
        preferred[i] = t;
    }
}

#[cfg(test)]
mod tests;
