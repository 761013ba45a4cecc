//! The nodes' own CSI calls, as their agents count them: cumulative counts since each
//! agent's start, sent on the node channel with the agent's start id, kept in this
//! server's memory only. The server adds what is new since the last count it had of an
//! agent into `csivol_csi_call_seconds{plugin,method,code}` (no node label: a series per
//! node would be millions at 10,000 nodes) and into per-node call and error counters.
//!
//! A count is read against what this server last had of the same agent start: a new start
//! id is a restart, whose counts are all new (not a drop); an agent this server has no
//! count of (it just started, or the agent moved to it from another server) gives only the
//! base the next counts are read against, since its counts may have been added elsewhere.

use std::collections::HashMap;
use std::sync::Mutex;

use csivol_api::{CALL_BUCKETS, CallCounts, NodeStats, PluginCallStats};
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

type CallKey = (String, String, String);

/// What this server heard of one node's agent.
#[derive(Debug, Default)]
struct NodeCalls {
    start: String,
    /// The agent's last counts, by (plugin, method, code).
    last: HashMap<CallKey, CallCounts>,
    /// What this server added for the node, by plugin: calls, and calls not `OK`.
    calls: HashMap<String, (u64, u64)>,
}

/// Sums of calls across nodes, by (plugin, method, code).
#[derive(Debug, Default, Clone)]
struct Summed {
    count: u64,
    micros: u64,
    buckets: Vec<u64>,
}

#[derive(Debug, Default)]
struct Book {
    nodes: HashMap<String, NodeCalls>,
    summed: HashMap<CallKey, Summed>,
}

/// The nodes' CSI call counts (see the module's comment).
#[derive(Debug, Default)]
pub struct NodeCallCounts(Mutex<Book>);

impl NodeCallCounts {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes a node's `stats` line's call counts.
    pub fn record(&self, node: &str, stats: &NodeStats) {
        if stats.calls.is_empty() {
            return;
        }
        let mut guard = self.book();
        let book = &mut *guard;
        let known = book.nodes.get(node).map(|n| n.start.clone());
        let n = book.nodes.entry(node.to_owned()).or_default();
        let restarted = known.as_deref().is_some_and(|s| s != stats.start);
        if restarted {
            n.last.clear();
        }
        n.start.clone_from(&stats.start);
        for c in &stats.calls {
            let key = (c.plugin.clone(), c.method.clone(), c.code.clone());
            let new = match (known.is_some(), n.last.get(&key)) {
                // The first count this server has of the agent: a base only.
                (false, _) => None,
                (true, Some(last)) => delta(last, c),
                // A call kind not counted before by this start (or after a restart).
                (true, None) => Some(c.clone()),
            };
            n.last.insert(key.clone(), c.clone());
            let Some(new) = new.filter(|d| d.count > 0) else {
                continue;
            };
            let per_node = n.calls.entry(c.plugin.clone()).or_default();
            per_node.0 += new.count;
            if new.code != "OK" {
                per_node.1 += new.count;
            }
            let s = book.summed.entry(key).or_insert_with(|| Summed {
                buckets: vec![0; CALL_BUCKETS.len() + 1],
                ..Summed::default()
            });
            s.count += new.count;
            s.micros += new.micros;
            for (sum, b) in s.buckets.iter_mut().zip(&new.buckets) {
                *sum += b;
            }
        }
    }

    /// Each node's calls of `plugin` by method, over its agent's life: count, errors,
    /// p50 and p99.
    pub fn of_plugin(&self, plugin: &str) -> Vec<PluginCallStats> {
        let book = self.book();
        let mut out: Vec<PluginCallStats> = Vec::new();
        for (node, n) in &book.nodes {
            let mut by_method: HashMap<&str, (u64, u64, Vec<u64>)> = HashMap::new();
            for c in n.last.values().filter(|c| c.plugin == plugin) {
                let m = by_method
                    .entry(&c.method)
                    .or_insert_with(|| (0, 0, vec![0; CALL_BUCKETS.len() + 1]));
                m.0 += c.count;
                if c.code != "OK" {
                    m.1 += c.count;
                }
                for (sum, b) in m.2.iter_mut().zip(&c.buckets) {
                    *sum += b;
                }
            }
            for (method, (count, errors, buckets)) in by_method {
                out.push(PluginCallStats {
                    node: node.clone(),
                    method: method.to_owned(),
                    calls: count,
                    errors,
                    p50_us: quantile(&buckets, count, 0.5),
                    p99_us: quantile(&buckets, count, 0.99),
                });
            }
        }
        out.sort_by(|a, b| (&a.node, &a.method).cmp(&(&b.node, &b.method)));
        out
    }
}

/// What is new in `now` since `last`, of one agent start; `None` when the counts went
/// down (counts are cumulative within a start, so they cannot have: read as a base).
fn delta(last: &CallCounts, now: &CallCounts) -> Option<CallCounts> {
    if now.count < last.count || now.buckets.len() != last.buckets.len() {
        return None;
    }
    let buckets: Option<Vec<u64>> = now
        .buckets
        .iter()
        .zip(&last.buckets)
        .map(|(n, l)| n.checked_sub(*l))
        .collect();
    Some(CallCounts {
        count: now.count - last.count,
        micros: now.micros.saturating_sub(last.micros),
        buckets: buckets?,
        ..now.clone()
    })
}

/// The bound (in microseconds) of the bucket that holds the `q` quantile of `count` calls;
/// `None` past the last bound, or with no calls.
fn quantile(buckets: &[u64], count: u64, q: f64) -> Option<u64> {
    if count == 0 {
        return None;
    }
    let rank = (q * count as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, b) in buckets.iter().enumerate() {
        seen += b;
        if seen >= rank {
            return CALL_BUCKETS.get(i).map(|s| (s * 1e6).round() as u64);
        }
    }
    None
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodePluginLabels {
    node: String,
    plugin: String,
}

impl prometheus_client::collector::Collector for NodeCallCounts {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let book = self.book();
        let mut family = encoder.encode_descriptor(
            "csi_call_seconds",
            "How long the node agents' CSI calls took, by plugin, method and gRPC code",
            None,
            MetricType::Histogram,
        )?;
        for ((plugin, method, code), s) in &book.summed {
            let labels = CallLabels {
                plugin: plugin.clone(),
                method: method.clone(),
                code: code.clone(),
            };
            let buckets: Vec<(f64, u64)> = CALL_BUCKETS
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(s.buckets.iter().copied())
                .collect();
            family
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(s.micros as f64 / 1e6, s.count, &buckets, None)?;
        }
        for (name, help, errors) in [
            (
                "node_csi_calls",
                "CSI calls each node's agent made, by plugin",
                false,
            ),
            (
                "node_csi_call_errors",
                "CSI calls each node's agent made that did not answer OK, by plugin",
                true,
            ),
        ] {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (node, n) in &book.nodes {
                for (plugin, (calls, failed)) in &n.calls {
                    let labels = NodePluginLabels {
                        node: node.clone(),
                        plugin: plugin.clone(),
                    };
                    let v = if errors { *failed } else { *calls };
                    ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(start: &str, ok: u64, failed: u64) -> NodeStats {
        let counts = |code: &str, n: u64| {
            let mut buckets = vec![0; CALL_BUCKETS.len() + 1];
            buckets[3] = n;
            CallCounts {
                plugin: "p".into(),
                method: "NodePublishVolume".into(),
                code: code.into(),
                count: n,
                micros: n * 10_000,
                buckets,
            }
        };
        NodeStats {
            start: start.into(),
            calls: vec![counts("OK", ok), counts("INTERNAL", failed)],
            ..Default::default()
        }
    }

    fn node_calls(c: &NodeCallCounts) -> (u64, u64) {
        c.book().nodes["n"]
            .calls
            .get("p")
            .copied()
            .unwrap_or_default()
    }

    #[test]
    fn counts_are_read_against_the_agents_start() {
        let c = NodeCallCounts::default();
        // The first count this server hears of the agent is a base.
        c.record("n", &stats("a", 10, 1));
        assert_eq!(node_calls(&c), (0, 0));
        c.record("n", &stats("a", 15, 2));
        assert_eq!(node_calls(&c), (6, 1));
        // The same count twice adds nothing.
        c.record("n", &stats("a", 15, 2));
        assert_eq!(node_calls(&c), (6, 1));
        // A restart: its counts start again from zero and are all new, not a drop.
        c.record("n", &stats("b", 3, 0));
        assert_eq!(node_calls(&c), (9, 1));
        c.record("n", &stats("b", 4, 1));
        assert_eq!(node_calls(&c), (11, 2));
        let summed = &c.book().summed;
        let ok = &summed[&("p".into(), "NodePublishVolume".into(), "OK".into())];
        assert_eq!((ok.count, ok.buckets[3]), (9, 9));
    }

    #[test]
    fn quantiles_are_bucket_bounds() {
        let mut buckets = vec![0; CALL_BUCKETS.len() + 1];
        buckets[0] = 98;
        buckets[5] = 2;
        assert_eq!(quantile(&buckets, 100, 0.5), Some(1_000));
        assert_eq!(quantile(&buckets, 100, 0.99), Some(50_000));
        assert_eq!(quantile(&buckets, 0, 0.5), None);
        buckets[CALL_BUCKETS.len()] = 1000;
        assert_eq!(quantile(&buckets, 1100, 0.99), None, "past the last bound");
    }
}
