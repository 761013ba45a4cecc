//! What the nodes' agents sample, held in this server's memory only: each published
//! claim's volume usage as its node plugin last said it, and which node plugins do not
//! report usage. Samples are worth something until the next one, so none is written to the
//! cluster state (100,000 volumes sampled every minute would be thousands of writes a
//! second); only a volume crossing the filling threshold is, as an event. A server that
//! starts, or an agent that moves to another server, starts this afresh: the next resync
//! of every node fills it again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use csivol_api::{self as api, ClaimUsage, NodeStats, UsageNumbers, VolumeUsage};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;

use crate::model::time;

/// How long a sample is kept without a newer one: agents sample every published volume
/// at each resync (a minute by default), so one this old is of a claim no longer
/// published, or of a node gone.
pub const SAMPLE_KEPT_MS: i64 = 15 * 60 * 1000;

/// One claim's last sample.
#[derive(Clone, Debug)]
struct Sample {
    node: String,
    plugin: String,
    /// `None`: the node plugin does not report usage.
    usage: Option<VolumeUsage>,
    at_ms: i64,
    /// Whether the volume counts as filling up (`csivol_rules::usage::filling`).
    filling: bool,
}

#[derive(Debug, Default)]
struct Book {
    /// By (volume, alloc).
    samples: HashMap<(String, String), Sample>,
}

/// A volume that crossed the threshold with a sample: the event to write.
#[derive(Clone, Debug, PartialEq)]
pub struct Crossing {
    pub volume: String,
    pub alloc: String,
    pub node: String,
    /// How full, in words (`91% of its bytes used (9100 of 10000), ...`).
    pub what: String,
}

/// The nodes' samples (see the module's comment).
#[derive(Debug)]
pub struct NodeSamples {
    book: Mutex<Book>,
    /// `volume_filling_percent`.
    threshold: f64,
}

impl NodeSamples {
    pub fn new(threshold: f64) -> Self {
        Self {
            book: Mutex::default(),
            threshold,
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a node's `stats` line at `now_ms`; returns the volumes that crossed the
    /// threshold with it.
    pub fn record(&self, node: &str, stats: &NodeStats, now_ms: i64) -> Vec<Crossing> {
        let mut book = self.book();
        let mut crossings = Vec::new();
        for s in &stats.usage {
            let key = (s.volume.clone(), s.alloc.clone());
            // A sample from another node than the last one's is of another publication:
            // its history does not carry over.
            let was = book
                .samples
                .get(&key)
                .is_some_and(|old| old.filling && old.node == node);
            let percent = s.usage.as_ref().and_then(fullest);
            let filling = percent
                .is_some_and(|(p, _, _)| csivol_rules::usage::filling(was, p, self.threshold));
            if csivol_rules::usage::crossed(was, filling)
                && let Some((p, unit, n)) = percent
            {
                crossings.push(Crossing {
                    volume: s.volume.clone(),
                    alloc: s.alloc.clone(),
                    node: node.to_owned(),
                    what: format!(
                        "{p:.0}% of its {unit} used ({} of {}), past the threshold of {:.0}%",
                        n.used().unwrap_or(0),
                        n.total,
                        self.threshold
                    ),
                });
            }
            book.samples.insert(
                key,
                Sample {
                    node: node.to_owned(),
                    plugin: s.plugin.clone(),
                    usage: s.usage.clone(),
                    at_ms: now_ms,
                    filling,
                },
            );
        }
        book.samples
            .retain(|_, s| now_ms.saturating_sub(s.at_ms) < SAMPLE_KEPT_MS);
        crossings
    }

    /// Fills in each claim's usage: its last sample from its node, or that its node
    /// plugin does not report usage.
    pub fn fill(&self, claims: &mut [api::Claim]) {
        let book = self.book();
        for c in claims {
            // Samples are of the volume's key (its namespace's and its name).
            let key = api::volume_key(&c.namespace, &c.volume);
            c.usage = match book.samples.get(&(key, c.alloc.clone())) {
                Some(s) if s.node == c.node => Some(match &s.usage {
                    Some(usage) => ClaimUsage::Sampled {
                        usage: usage.clone(),
                        at: time(s.at_ms),
                    },
                    None => ClaimUsage::NotReported,
                }),
                _ => None,
            };
        }
    }
}

/// The fuller of bytes and inodes: percent, the unit's name and its numbers.
fn fullest(u: &VolumeUsage) -> Option<(f64, &'static str, UsageNumbers)> {
    let bytes = u.bytes.and_then(|n| n.percent().map(|p| (p, "bytes", n)));
    let inodes = u.inodes.and_then(|n| n.percent().map(|p| (p, "inodes", n)));
    match (bytes, inodes) {
        (Some(b), Some(i)) => Some(if i.0 > b.0 { i } else { b }),
        (b, i) => b.or(i),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UsageLabels {
    /// The volume's name within its namespace, which the last label names.
    volume: String,
    node: String,
    plugin: String,
    namespace: String,
}

/// The gauges of every sample kept, made at each scrape from the samples themselves, so
/// that a claim whose samples stopped goes from the scrape with them.
impl prometheus_client::collector::Collector for NodeSamples {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let book = self.book();
        type Pick = fn(&VolumeUsage) -> Option<u64>;
        let gauges: [(&str, &str, Pick); 6] = [
            (
                "volume_used_bytes",
                "Bytes used on a published volume, as its node plugin reports them",
                |u| u.bytes.and_then(|n| n.used()),
            ),
            (
                "volume_available_bytes",
                "Bytes available on a published volume, as its node plugin reports them",
                |u| u.bytes.and_then(|n| n.available),
            ),
            (
                "volume_capacity_bytes",
                "Total bytes of a published volume, as its node plugin reports them",
                |u| u.bytes.map(|n| n.total),
            ),
            (
                "volume_used_inodes",
                "Inodes used on a published volume, as its node plugin reports them",
                |u| u.inodes.and_then(|n| n.used()),
            ),
            (
                "volume_available_inodes",
                "Inodes available on a published volume, as its node plugin reports them",
                |u| u.inodes.and_then(|n| n.available),
            ),
            (
                "volume_capacity_inodes",
                "Total inodes of a published volume, as its node plugin reports them",
                |u| u.inodes.map(|n| n.total),
            ),
        ];
        for (name, help, pick) in gauges {
            let mut family = encoder.encode_descriptor(
                name,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            // A volume published twice on a node (several claims) is one series: its
            // usage is the volume's, whichever claim's sample it came with.
            let mut seen = BTreeSet::new();
            for ((volume, _), s) in &book.samples {
                let Some(v) = s.usage.as_ref().and_then(pick) else {
                    continue;
                };
                let (namespace, name) = api::split_key(volume);
                let labels = UsageLabels {
                    volume: name.to_owned(),
                    node: s.node.clone(),
                    plugin: s.plugin.clone(),
                    namespace: namespace.to_owned(),
                };
                if !seen.insert((volume.clone(), labels.node.clone())) {
                    continue;
                }
                let gauge = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
                gauge.encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(volume: &str, used: u64, total: u64) -> NodeStats {
        NodeStats {
            start: "s".into(),
            usage: vec![api::UsageSample {
                volume: volume.into(),
                alloc: "a".into(),
                plugin: "p".into(),
                usage: Some(VolumeUsage {
                    bytes: Some(UsageNumbers {
                        used: Some(used),
                        available: None,
                        total,
                    }),
                    inodes: None,
                }),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_volume_hovering_at_the_threshold_is_one_crossing() {
        let book = NodeSamples::new(85.0);
        let mut crossings = 0;
        for (i, used) in [50, 86, 84, 88, 83, 90].into_iter().enumerate() {
            crossings += book.record("n", &stats("v", used, 100), i as i64).len();
        }
        assert_eq!(crossings, 1);
        // Clear below, then past it again: a second crossing.
        assert!(book.record("n", &stats("v", 10, 100), 10).is_empty());
        let again = book.record("n", &stats("v", 95, 100), 11);
        assert_eq!(again.len(), 1);
        assert!(
            again[0].what.starts_with("95% of its bytes used"),
            "{again:?}"
        );
    }

    #[test]
    fn old_samples_go() {
        let book = NodeSamples::new(85.0);
        book.record("n", &stats("old", 1, 100), 0);
        book.record("n", &stats("new", 1, 100), SAMPLE_KEPT_MS);
        let keys: Vec<_> = book.book().samples.keys().map(|k| k.0.clone()).collect();
        assert_eq!(keys, ["new"]);
    }
}
