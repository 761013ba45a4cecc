//! Node liveness, kept in memory: heartbeats update a clock per node and are never written to
//! the database (10,000 nodes heartbeating would otherwise be thousands of commits a second).
//! Only status changes (lost, back) are recorded. After a restart every node gets a full TTL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use csivol_proto::api::NodeStatus;

#[derive(Debug, Clone, Copy)]
struct Live {
    last: Instant,
    /// Wall clock of the last heartbeat (unix ms), for display.
    last_ms: Option<i64>,
    lost: bool,
}

#[derive(Debug)]
pub struct Liveness {
    ttl: Duration,
    nodes: Mutex<HashMap<String, Live>>,
}

impl Liveness {
    /// Starts tracking `nodes` (name, lost?) with a fresh TTL each.
    pub fn new(ttl: Duration, nodes: impl IntoIterator<Item = (String, bool)>) -> Self {
        let now = Instant::now();
        let nodes = nodes
            .into_iter()
            .map(|(n, lost)| {
                (
                    n,
                    Live {
                        last: now,
                        last_ms: None,
                        lost,
                    },
                )
            })
            .collect();
        Self {
            ttl,
            nodes: Mutex::new(nodes),
        }
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Live>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Records a heartbeat; `None` for a node the server does not know.
    pub fn heartbeat(&self, node: &str, now_ms: i64) -> Option<NodeStatus> {
        let mut nodes = self.nodes();
        let live = nodes.get_mut(node)?;
        if live.lost {
            // A lost node must register again, reporting what it still has mounted.
            return Some(NodeStatus::Lost);
        }
        live.last = Instant::now();
        live.last_ms = Some(now_ms);
        Some(NodeStatus::Ready)
    }

    /// The node registered: it is alive now.
    pub fn registered(&self, node: &str, now_ms: i64) {
        self.nodes().insert(
            node.to_owned(),
            Live {
                last: Instant::now(),
                last_ms: Some(now_ms),
                lost: false,
            },
        );
    }

    /// The node was fenced: its heartbeats are answered `lost` from now on, so that a
    /// running agent registers again (and learns that it is fenced).
    pub fn fenced(&self, node: &str) {
        if let Some(live) = self.nodes().get_mut(node) {
            live.lost = true;
        }
    }

    /// Nodes whose TTL ran out; they are marked lost here, before the database records it,
    /// so their heartbeats from now on are answered `lost`.
    pub fn expire(&self) -> Vec<String> {
        let now = Instant::now();
        let mut out = Vec::new();
        for (name, live) in self.nodes().iter_mut() {
            if !live.lost && now.duration_since(live.last) > self.ttl {
                live.lost = true;
                out.push(name.clone());
            }
        }
        out
    }

    pub fn last_heartbeat_ms(&self) -> HashMap<String, i64> {
        self.nodes()
            .iter()
            .filter_map(|(n, l)| l.last_ms.map(|t| (n.clone(), t)))
            .collect()
    }

    /// How often to look for expired nodes: often enough that a loss is seen well within a
    /// second of the TTL.
    pub fn check_interval(&self) -> Duration {
        (self.ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(250))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_and_return() {
        let l = Liveness::new(Duration::from_millis(0), [("n1".to_owned(), false)]);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(l.expire(), ["n1"]);
        assert!(l.expire().is_empty(), "expired once");
        assert_eq!(l.heartbeat("n1", 1), Some(NodeStatus::Lost));
        assert_eq!(l.heartbeat("nope", 1), None);
        l.registered("n1", 2);
        assert_eq!(l.last_heartbeat_ms()["n1"], 2);
    }
}
