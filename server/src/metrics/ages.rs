//! How long things have been stuck, for alerts that fire on "longer than N" rather than
//! on "more than zero": volumes blocked on a lost node, and the oldest claim in each state
//! between recorded and ready (or being released).
//!
//! A claim's row keeps no time of its last change of state (its `updated_at` moves with
//! every retry and report), so the server remembers, per claim, the state it last saw the
//! claim in and since when: the claim's last write when first seen in that state (a claim
//! written again since only seems younger), kept for as long as it stays in it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::model::StateCounts;

/// The claim states whose oldest claim is exported, in order.
pub const UNSETTLED: [&str; 4] = ["pending", "attaching", "publishing", "releasing"];

/// A volume by its name within its namespace (the last label), as the usage gauges name
/// it, and a node.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VolumeNodeLabel {
    pub volume: String,
    pub node: String,
    pub namespace: String,
}

/// A claim state (`state="..."`, as the claim gauges label it), defined here rather than
/// taken from the metrics above so that this file imports nothing of its parent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

type Seconds = Gauge<f64, AtomicU64>;

#[derive(Debug, Default)]
pub struct Ages {
    /// Seconds each blocked volume has been blocked on its lost node.
    blocked: Family<VolumeNodeLabel, Seconds>,
    /// Seconds the oldest claim of each unsettled state has been in it (0: none is).
    oldest: Family<StateLabel, Seconds>,
    /// Per claim (volume, alloc): the state it was last seen in and since when.
    seen: Mutex<HashMap<(String, String), (String, i64)>>,
}

impl Ages {
    pub fn register(registry: &mut Registry) -> Self {
        let ages = Self::default();
        registry.register(
            "volume_blocked_seconds",
            "How long a volume has been blocked on a lost node (since the node was lost), by volume, node and namespace",
            ages.blocked.clone(),
        );
        registry.register(
            "claims_oldest_seconds",
            "How long the oldest claim in each state between recorded and ready, or being released, has been in that state (0: none is)",
            ages.oldest.clone(),
        );
        ages
    }

    /// Refreshes both gauges from the store's rows at `now` (ms).
    pub fn refresh(&self, counts: &StateCounts, now: i64) {
        self.blocked.clear();
        for (key, node, since) in &counts.blocked {
            let (namespace, volume) = csivol_api::split_key(key);
            self.blocked
                .get_or_create(&VolumeNodeLabel {
                    volume: volume.to_owned(),
                    node: node.clone(),
                    namespace: namespace.to_owned(),
                })
                .set(seconds(now, *since));
        }
        let mut oldest: BTreeMap<&str, i64> = UNSETTLED.iter().map(|s| (*s, now)).collect();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = HashMap::with_capacity(counts.unsettled.len());
        for (volume, alloc, state, updated_at) in &counts.unsettled {
            let key = (volume.clone(), alloc.clone());
            let since = match seen.remove(&key) {
                Some((was, since)) if was == *state => since,
                _ => (*updated_at).min(now),
            };
            if let Some(o) = oldest.get_mut(state.as_str()) {
                *o = (*o).min(since);
            }
            next.insert(key, (state.clone(), since));
        }
        *seen = next;
        drop(seen);
        for (state, since) in oldest {
            self.oldest
                .get_or_create(&StateLabel {
                    state: state.to_owned(),
                })
                .set(seconds(now, since));
        }
    }
}

fn seconds(now: i64, since: i64) -> f64 {
    (now - since).max(0) as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(volume: &str, alloc: &str, state: &str, at: i64) -> (String, String, String, i64) {
        (volume.into(), alloc.into(), state.into(), at)
    }

    fn text(ages: &Ages) -> String {
        let mut r = Registry::with_prefix("csivol");
        r.register("volume_blocked_seconds", "", ages.blocked.clone());
        r.register("claims_oldest_seconds", "", ages.oldest.clone());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &r).unwrap();
        out
    }

    #[test]
    fn a_claim_counts_from_when_it_was_first_seen_in_its_state_despite_later_writes() {
        let ages = Ages::default();
        let mut counts = StateCounts {
            unsettled: vec![claim("v", "a", "publishing", 10_000)],
            ..Default::default()
        };
        ages.refresh(&counts, 12_000);
        assert!(
            text(&ages).contains("csivol_claims_oldest_seconds{state=\"publishing\"} 2.0"),
            "{}",
            text(&ages)
        );
        // A retry writes the claim again: it has still been publishing since 10s.
        counts.unsettled = vec![claim("v", "a", "publishing", 70_000)];
        ages.refresh(&counts, 100_000);
        let t = text(&ages);
        assert!(
            t.contains("csivol_claims_oldest_seconds{state=\"publishing\"} 90.0"),
            "{t}"
        );
        assert!(
            t.contains("csivol_claims_oldest_seconds{state=\"attaching\"} 0.0"),
            "{t}"
        );
        // It moved on and came back: counted from its new state's write.
        counts.unsettled = vec![claim("v", "a", "releasing", 100_000)];
        ages.refresh(&counts, 101_000);
        counts.unsettled = vec![claim("v", "a", "publishing", 105_000)];
        ages.refresh(&counts, 110_000);
        let t = text(&ages);
        assert!(
            t.contains("csivol_claims_oldest_seconds{state=\"publishing\"} 5.0"),
            "{t}"
        );
        assert!(
            t.contains("csivol_claims_oldest_seconds{state=\"releasing\"} 0.0"),
            "{t}"
        );
        // Gone: nothing is remembered of it.
        counts.unsettled.clear();
        ages.refresh(&counts, 120_000);
        assert!(ages.seen.lock().unwrap().is_empty());
    }

    #[test]
    fn blocked_volumes_count_from_their_nodes_loss_and_go_when_unblocked() {
        let ages = Ages::default();
        let mut counts = StateCounts {
            blocked: vec![
                ("v1".into(), "n2".into(), 40_000),
                ("team-a~v1".into(), "n2".into(), 70_000),
            ],
            ..Default::default()
        };
        ages.refresh(&counts, 100_000);
        let t = text(&ages);
        assert!(
            t.contains(
                "csivol_volume_blocked_seconds{volume=\"v1\",node=\"n2\",namespace=\"default\"} \
                 60.0"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "csivol_volume_blocked_seconds{volume=\"v1\",node=\"n2\",namespace=\"team-a\"} \
                 30.0"
            ),
            "{t}"
        );
        counts.blocked.clear();
        ages.refresh(&counts, 101_000);
        assert!(!text(&ages).contains("volume=\"v1\""), "{}", text(&ages));
    }
}
