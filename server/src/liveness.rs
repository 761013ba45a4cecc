//! Node liveness, kept in memory: heartbeats update a clock per node and are never written to
//! the database (10,000 nodes heartbeating would otherwise be thousands of commits a second).
//! Only status changes (lost, back) are recorded. After a restart every node gets a full TTL.
//! A loss decided here is retried until the database recorded it: a node that is lost in
//! memory but `ready` in the database would show `ready` forever with nothing blocked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use csivol_api::NodeStatus;

#[derive(Debug, Clone, Copy)]
struct Live {
    last: Instant,
    /// Wall clock of the last heartbeat (unix ms), for display.
    last_ms: Option<i64>,
    lost: bool,
    /// Whether the database recorded the loss (meaningful while `lost`).
    recorded: bool,
    /// Failed attempts to record the loss, and when to try again.
    attempts: u32,
    next_try: Instant,
    /// Bumped by each registration, so that a loss decided before the node came back is
    /// never recorded after it.
    epoch: u64,
}

impl Live {
    fn fresh(now: Instant, last_ms: Option<i64>, lost: bool, epoch: u64) -> Self {
        Self {
            last: now,
            last_ms,
            lost,
            recorded: lost,
            attempts: 0,
            next_try: now,
            epoch,
        }
    }
}

/// A node lost in memory whose loss the database has yet to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrecorded {
    pub node: String,
    pub epoch: u64,
    /// Failed attempts so far.
    pub attempts: u32,
}

/// A node's heartbeat for display: see [`Liveness::beats`].
#[derive(Debug, Clone, Copy)]
pub struct Beat {
    /// Wall clock of the last heartbeat (unix ms); `None` before the first one this server saw.
    pub last_ms: Option<i64>,
    /// How long the node has been silent; `None` once it is lost.
    pub silent: Option<Duration>,
}

/// Every node's [`Beat`] and the TTL they are judged against.
#[derive(Debug, Clone, Default)]
pub struct Beats {
    pub ttl: Duration,
    pub nodes: HashMap<String, Beat>,
}

/// Longest wait between two attempts to record a loss.
const MAX_RETRY: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct Liveness {
    ttl: Duration,
    nodes: Mutex<HashMap<String, Live>>,
    /// With several servers (etcd store): the nodes heard from here since the last
    /// forward, and whether they registered, handed on to the leader through etcd.
    heard: Mutex<HashMap<String, bool>>,
}

impl Liveness {
    /// Starts tracking `nodes` (name, lost?) with a fresh TTL each.
    pub fn new(ttl: Duration, nodes: impl IntoIterator<Item = (String, bool)>) -> Self {
        let now = Instant::now();
        let nodes = nodes
            .into_iter()
            .map(|(n, lost)| (n, Live::fresh(now, None, lost, 0)))
            .collect();
        Self {
            ttl,
            nodes: Mutex::new(nodes),
            heard: Mutex::default(),
        }
    }

    fn heard(&self, node: &str, registered: bool) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        *heard.entry(node.to_owned()).or_default() |= registered;
    }

    /// The nodes heard from since the last call (name, registered?), for the leader.
    pub fn take_heard(&self) -> Vec<(String, bool)> {
        std::mem::take(&mut *self.heard.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .collect()
    }

    /// Another server heard from `node` (etcd store): as a heartbeat here, or a
    /// registration; a node this server did not track yet is tracked from now on.
    pub fn heard_elsewhere(&self, node: &str, registered: bool) {
        let mut nodes = self.nodes();
        match nodes.get_mut(node) {
            Some(live) if !registered => {
                if !live.lost {
                    live.last = Instant::now();
                    live.last_ms = Some(super::db::now_ms());
                }
            }
            Some(live) => {
                *live = Live::fresh(
                    Instant::now(),
                    Some(super::db::now_ms()),
                    false,
                    live.epoch + 1,
                );
            }
            None => {
                nodes.insert(
                    node.to_owned(),
                    Live::fresh(Instant::now(), Some(super::db::now_ms()), false, 0),
                );
            }
        }
    }

    /// This server just became the one that decides losses: every node (name, lost in the
    /// database?) gets a full TTL from now, as after a restart, so that taking over never
    /// marks a node lost by itself.
    pub fn restart_clocks(&self, db_nodes: Vec<(String, bool)>) {
        let now = Instant::now();
        let mut nodes = self.nodes();
        let mut fresh = HashMap::new();
        for (name, lost) in db_nodes {
            let epoch = nodes.get(&name).map_or(0, |l| l.epoch + 1);
            let last_ms = nodes.get(&name).and_then(|l| l.last_ms);
            fresh.insert(name, Live::fresh(now, last_ms, lost, epoch));
        }
        *nodes = fresh;
    }

    /// A server that does not decide losses follows the database (etcd store): a node
    /// recorded lost is answered `lost`, one recorded ready again is alive.
    pub fn follow(&self, db_nodes: Vec<(String, bool)>) {
        let now = Instant::now();
        let mut nodes = self.nodes();
        for (name, lost) in db_nodes {
            match nodes.get_mut(&name) {
                Some(live) if live.lost == lost => {}
                Some(live) => {
                    let epoch = live.epoch + 1;
                    *live = Live::fresh(now, live.last_ms, lost, epoch);
                }
                None => {
                    nodes.insert(name, Live::fresh(now, None, lost, 0));
                }
            }
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
        drop(nodes);
        self.heard(node, false);
        Some(NodeStatus::Ready)
    }

    /// The node registered: it is alive now.
    pub fn registered(&self, node: &str, now_ms: i64) {
        let mut nodes = self.nodes();
        let epoch = nodes.get(node).map_or(0, |l| l.epoch + 1);
        nodes.insert(
            node.to_owned(),
            Live::fresh(Instant::now(), Some(now_ms), false, epoch),
        );
        drop(nodes);
        self.heard(node, true);
    }

    /// The node was fenced: its heartbeats are answered `lost` from now on, so that a
    /// running agent registers again (and learns that it is fenced).
    pub fn fenced(&self, node: &str) {
        if let Some(live) = self.nodes().get_mut(node) {
            live.lost = true;
        }
    }

    /// The node was removed: nothing is tracked for it any more.
    pub fn forget(&self, node: &str) {
        self.nodes().remove(node);
    }

    /// Nodes whose loss is to be recorded now: those whose TTL just ran out (marked lost
    /// here, before the database records it, so that their heartbeats from now on are
    /// answered `lost`) and those whose earlier recording failed and whose retry is due.
    pub fn expire(&self) -> Vec<Unrecorded> {
        let now = Instant::now();
        let mut out = Vec::new();
        for (name, live) in self.nodes().iter_mut() {
            if !live.lost && now.duration_since(live.last) > self.ttl {
                live.lost = true;
                live.recorded = false;
                live.attempts = 0;
                live.next_try = now;
            }
            if live.lost && !live.recorded && live.next_try <= now {
                // Not handed out again until this attempt reports back.
                live.next_try = now + Duration::from_secs(3600);
                out.push(Unrecorded {
                    node: name.clone(),
                    epoch: live.epoch,
                    attempts: live.attempts,
                });
            }
        }
        out
    }

    /// Whether `u` still stands: the node is lost in memory and did not register since.
    pub fn still_lost(&self, u: &Unrecorded) -> bool {
        self.nodes()
            .get(&u.node)
            .is_some_and(|l| l.lost && l.epoch == u.epoch)
    }

    /// The database recorded `u`'s loss (or found nothing to record).
    pub fn recorded(&self, u: &Unrecorded) {
        if let Some(l) = self.nodes().get_mut(&u.node)
            && l.epoch == u.epoch
        {
            l.recorded = true;
        }
    }

    /// Recording `u`'s loss failed: try again after a backoff.
    pub fn record_failed(&self, u: &Unrecorded) {
        if let Some(l) = self.nodes().get_mut(&u.node)
            && l.epoch == u.epoch
        {
            l.attempts += 1;
            let backoff =
                (self.check_interval() * 2u32.saturating_pow(l.attempts.min(8))).min(MAX_RETRY);
            l.next_try = Instant::now() + backoff;
        }
    }

    /// Nodes lost in memory whose loss the database has not recorded yet, sorted.
    pub fn unrecorded(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .nodes()
            .iter()
            .filter(|(_, l)| l.lost && !l.recorded)
            .map(|(n, _)| n.clone())
            .collect();
        v.sort();
        v
    }

    /// Each node's heartbeat as the API shows it: when the last one came, and how long the
    /// node has been silent (since its last heartbeat, or since this server started
    /// watching it), against the TTL.
    pub fn beats(&self) -> Beats {
        let now = Instant::now();
        let nodes = self
            .nodes()
            .iter()
            .map(|(n, l)| {
                let beat = Beat {
                    last_ms: l.last_ms,
                    silent: (!l.lost).then(|| now.duration_since(l.last)),
                };
                (n.clone(), beat)
            })
            .collect();
        Beats {
            ttl: self.ttl,
            nodes,
        }
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
        let due = l.expire();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].node, "n1");
        assert!(l.expire().is_empty(), "handed out once per attempt");
        assert_eq!(l.unrecorded(), ["n1"]);
        l.record_failed(&due[0]);
        let again = wait_due(&l);
        assert_eq!(again.attempts, 1, "retried after a failure");
        l.recorded(&again);
        assert!(l.unrecorded().is_empty());
        assert!(l.expire().is_empty(), "recorded once");
        assert_eq!(l.heartbeat("n1", 1), Some(NodeStatus::Lost));
        assert_eq!(l.heartbeat("nope", 1), None);
        l.registered("n1", 2);
        assert_eq!(l.beats().nodes["n1"].last_ms, Some(2));
    }

    #[test]
    fn a_loss_decided_before_a_registration_is_never_recorded_after_it() {
        let l = Liveness::new(Duration::from_millis(0), [("n1".to_owned(), false)]);
        std::thread::sleep(Duration::from_millis(2));
        let due = l.expire();
        l.record_failed(&due[0]);
        l.registered("n1", 5);
        assert!(!l.still_lost(&due[0]));
        l.recorded(&due[0]);
        assert!(
            l.unrecorded().is_empty(),
            "the node is back, nothing to record"
        );
    }

    fn wait_due(l: &Liveness) -> Unrecorded {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(u) = l.expire().pop() {
                return u;
            }
            assert!(Instant::now() < deadline, "no retry became due");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
