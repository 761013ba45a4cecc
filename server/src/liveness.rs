//! Node liveness, kept in memory: heartbeats update a clock per node and are never written to
//! the database (10,000 nodes heartbeating would otherwise be thousands of commits a second).
//! Only status changes (lost, back) are recorded. After a restart every node gets a full TTL.
//! A node whose agent stopped in order (`node-stopping`) is not lost at its TTL but once its
//! `planned_stop_grace` is out; the database holds when it stopped, so any server that
//! judges the node finds its grace there.
//! A loss decided here is retried until the database recorded it: a node that is lost in
//! memory but `ready` in the database would show `ready` forever with nothing blocked.
//! With several servers, heartbeats heard here are passed on to the leader through etcd
//! ([`Relay`]), and a heartbeat is answered once it was.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use csivol_api::NodeStatus;
use tokio::sync::{Notify, watch};

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
    /// A planned stop's grace: the node is not lost before this, whatever its TTL says.
    stopped_until: Option<Instant>,
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
            stopped_until: None,
        }
    }

    /// When the node is lost unless it is heard from.
    fn deadline(&self, ttl: Duration) -> Instant {
        self.stopped_until.unwrap_or(self.last + ttl)
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
    pub planned_stop_grace: Duration,
    pub nodes: HashMap<String, Beat>,
}

/// Longest wait between two attempts to record a loss.
const MAX_RETRY: Duration = Duration::from_secs(2);

/// The nodes heard from here since the last forward (etcd store), and whether they
/// registered; each heartbeat is numbered as it is heard.
#[derive(Debug, Default)]
struct Heard {
    nodes: HashMap<String, bool>,
    count: u64,
}

/// A heartbeat's number among those heard here: it has been passed on once every
/// heartbeat up to it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

/// With several servers, the leader learns of the heartbeats other servers heard only
/// through etcd (`seen/`): a server that answered a heartbeat it could not pass on would
/// let the leader mark a node lost whose agent was told all is well, and which would
/// have gone to another server had it known. So a heartbeat is answered once it was
/// passed on, and refused (`unavailable`) while passing on fails (etcd answered with an
/// error, or not within [`Liveness::forward_within`]), which sends the agent to its next
/// server. A forward that is only slow (a loaded etcd) is no failure: its heartbeats are
/// answered once it is through, or after [`Liveness::relay_within`] at the latest.
#[derive(Debug)]
struct Relay {
    /// The last heartbeat passed on.
    passed: watch::Sender<u64>,
    /// Whether the last forward failed, and none succeeded since.
    failing: watch::Sender<bool>,
    /// Rung by each heartbeat, for the forwarder.
    wanted: Notify,
}

#[derive(Debug)]
pub struct Liveness {
    ttl: Duration,
    planned_stop_grace: Duration,
    nodes: Mutex<HashMap<String, Live>>,
    heard: Mutex<Heard>,
    relay: Option<Relay>,
    /// With the etcd store: per node, the etcd revision of the last heartbeat this
    /// server accounted for (its own forward, or another server's it followed).
    seen: Mutex<HashMap<String, i64>>,
}

impl Liveness {
    /// Starts tracking `nodes` (name, lost?) with a fresh TTL each; a node that stopped in
    /// order is lost only `planned_stop_grace` after its stop.
    pub fn new(
        ttl: Duration,
        planned_stop_grace: Duration,
        nodes: impl IntoIterator<Item = (String, bool)>,
    ) -> Self {
        let now = Instant::now();
        let nodes = nodes
            .into_iter()
            .map(|(n, lost)| (n, Live::fresh(now, None, lost, 0)))
            .collect();
        Self {
            ttl,
            planned_stop_grace,
            nodes: Mutex::new(nodes),
            heard: Mutex::default(),
            relay: None,
            seen: Mutex::default(),
        }
    }

    /// `node`'s heartbeat at etcd revision `rev` is accounted for here.
    pub fn seen_at(&self, node: &str, rev: i64) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let at = seen.entry(node.to_owned()).or_default();
        *at = (*at).max(rev);
    }

    /// The etcd revision of `node`'s last heartbeat accounted for here (0: none).
    pub fn seen_revision(&self, node: &str) -> i64 {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(node).copied().unwrap_or(0)
    }

    /// Heartbeats are answered once passed on to the other servers ([`Relay`]): with
    /// the etcd store, whose forwarder calls [`Liveness::take_heard`] and
    /// [`Liveness::passed_on`].
    pub fn relayed(mut self) -> Self {
        self.relay = Some(Relay {
            passed: watch::channel(0).0,
            failing: watch::channel(false).0,
            wanted: Notify::new(),
        });
        self
    }

    fn heard(&self, node: &str, registered: bool) -> Ticket {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        *heard.nodes.entry(node.to_owned()).or_default() |= registered;
        heard.count += 1;
        let ticket = Ticket(heard.count);
        drop(heard);
        if let Some(r) = &self.relay {
            r.wanted.notify_one();
        }
        ticket
    }

    /// The nodes heard from since the last call (name, registered?), for the leader, and
    /// the last heartbeat among them.
    pub fn take_heard(&self) -> (Vec<(String, bool)>, Ticket) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        let nodes = std::mem::take(&mut heard.nodes).into_iter().collect();
        (nodes, Ticket(heard.count))
    }

    /// Taken nodes that could not be passed on (the forward failed): they go with the
    /// next forward, and heartbeats are refused until one succeeds.
    pub fn not_passed_on(&self, nodes: Vec<(String, bool)>) {
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        for (node, registered) in nodes {
            *heard.nodes.entry(node).or_default() |= registered;
        }
        drop(heard);
        if let Some(r) = &self.relay {
            r.failing.send_if_modified(|f| !std::mem::replace(f, true));
        }
    }

    /// Every heartbeat up to `upto` is in etcd.
    pub fn passed_on(&self, upto: Ticket) {
        if let Some(r) = &self.relay {
            r.passed.send_if_modified(|p| {
                let newer = upto.0 > *p;
                *p = (*p).max(upto.0);
                newer
            });
            r.failing.send_if_modified(|f| std::mem::replace(f, false));
        }
    }

    /// Resolves when a heartbeat waits to be passed on (never without a relay).
    pub async fn wanted(&self) {
        match &self.relay {
            Some(r) => r.wanted.notified().await,
            None => std::future::pending().await,
        }
    }

    /// How long a heartbeat waits to be passed on before it is answered all the same
    /// (unless passing on failed meanwhile): well within the quarter of the TTL an agent
    /// gives each server.
    pub fn relay_within(&self) -> Duration {
        (self.ttl / 5).max(Duration::from_millis(100))
    }

    /// How long the forwarder waits for etcd before that forward counts as failed. A
    /// server cut off from etcd then refuses the next heartbeat (within an agent's
    /// heartbeat interval, a third of the TTL), so its agents reach another server
    /// within about two thirds of the TTL.
    pub fn forward_within(&self) -> Duration {
        (self.ttl / 4).max(Duration::from_millis(200))
    }

    /// Whether heartbeat `t` may be answered: passed on, or still under way within
    /// [`Liveness::relay_within`]; not while passing on fails (at once without a relay).
    pub async fn passed_in_time(&self, t: Ticket) -> bool {
        let Some(r) = &self.relay else {
            return true;
        };
        let (mut passed, mut failing) = (r.passed.subscribe(), r.failing.subscribe());
        if *failing.borrow_and_update() {
            return false;
        }
        tokio::select! {
            _ = passed.wait_for(|p| *p >= t.0) => true,
            _ = failing.wait_for(|f| *f) => false,
            () = tokio::time::sleep(self.relay_within()) => !*r.failing.borrow(),
        }
    }

    /// Another server heard from `node` (etcd store): as a heartbeat here, or a
    /// registration; a node this server did not track yet is tracked from now on. `now_ms`:
    /// the server's clock, shown as when the node was last heard from.
    pub fn heard_elsewhere(&self, node: &str, registered: bool, now_ms: i64) {
        let mut nodes = self.nodes();
        match nodes.get_mut(node) {
            Some(live) if !registered => {
                if !live.lost {
                    live.last = Instant::now();
                    live.last_ms = Some(now_ms);
                } else if !live.recorded {
                    // Decided lost here, not recorded yet, and heard from through another
                    // server meanwhile: it is not lost after all. (Once the loss is
                    // recorded only the node's registration brings it back.)
                    *live = Live::fresh(Instant::now(), Some(now_ms), false, live.epoch);
                }
            }
            Some(live) => {
                *live = Live::fresh(Instant::now(), Some(now_ms), false, live.epoch + 1);
            }
            None => {
                nodes.insert(
                    node.to_owned(),
                    Live::fresh(Instant::now(), Some(now_ms), false, 0),
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

    pub fn planned_stop_grace(&self) -> Duration {
        self.planned_stop_grace
    }

    /// The node's agent stopped in order: not lost before `until` (its grace), and its
    /// heartbeats, should any come, are answered `lost` so that it registers again.
    pub fn stopped(&self, node: &str, until: Instant) {
        if let Some(live) = self.nodes().get_mut(node) {
            live.stopped_until = Some(until);
        }
    }

    /// The database says `u`'s node stopped in order and is not lost before `until`: the
    /// loss decided at its TTL is withdrawn, to be decided again then.
    pub fn defer(&self, u: &Unrecorded, until: Instant) {
        if let Some(l) = self.nodes().get_mut(&u.node)
            && l.epoch == u.epoch
        {
            l.lost = false;
            l.recorded = false;
            l.stopped_until = Some(until);
        }
    }

    /// Records a heartbeat; `None` for a node the server does not know.
    pub fn heartbeat(&self, node: &str, now_ms: i64) -> Option<NodeStatus> {
        self.heartbeat_ticket(node, now_ms)
            .map(|(status, _)| status)
    }

    /// [`Liveness::heartbeat`], with the heartbeat's ticket to wait on until it was
    /// passed on (`None` when there is nothing to pass on: the node is lost).
    pub fn heartbeat_ticket(
        &self,
        node: &str,
        now_ms: i64,
    ) -> Option<(NodeStatus, Option<Ticket>)> {
        let mut nodes = self.nodes();
        let live = nodes.get_mut(node)?;
        if live.lost || live.stopped_until.is_some() {
            // A lost node must register again, reporting what it still has mounted; so
            // must a node whose agent said it stopped.
            return Some((NodeStatus::Lost, None));
        }
        live.last = Instant::now();
        live.last_ms = Some(now_ms);
        drop(nodes);
        let ticket = self.heard(node, false);
        Some((NodeStatus::Ready, Some(ticket)))
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
            if !live.lost && now > live.deadline(self.ttl) {
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

    /// `u` was heard from after all (a heartbeat another server passed on, which this
    /// one had not seen yet): alive, with a fresh TTL, and nothing to record.
    pub fn alive_after_all(&self, u: &Unrecorded) {
        if let Some(l) = self.nodes().get_mut(&u.node)
            && l.epoch == u.epoch
            && l.lost
            && !l.recorded
        {
            *l = Live::fresh(Instant::now(), l.last_ms, false, l.epoch);
        }
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
                    silent: (!l.lost && l.stopped_until.is_none())
                        .then(|| now.duration_since(l.last)),
                };
                (n.clone(), beat)
            })
            .collect();
        Beats {
            ttl: self.ttl,
            planned_stop_grace: self.planned_stop_grace,
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
        let l = Liveness::new(
            Duration::from_millis(0),
            Duration::ZERO,
            [("n1".to_owned(), false)],
        );
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
        let l = Liveness::new(
            Duration::from_millis(0),
            Duration::ZERO,
            [("n1".to_owned(), false)],
        );
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

    #[tokio::test]
    async fn a_heartbeat_is_answered_once_it_was_passed_on() {
        let l = Liveness::new(
            Duration::from_secs(1),
            Duration::ZERO,
            [("n1".to_owned(), false)],
        )
        .relayed();
        let (status, ticket) = l.heartbeat_ticket("n1", 1).unwrap();
        assert_eq!(status, NodeStatus::Ready);
        let ticket = ticket.expect("a live node's heartbeat is passed on");
        assert!(
            l.passed_in_time(ticket).await,
            "not passed on yet, but nothing failed: a slow etcd is no reason to refuse"
        );
        let (nodes, upto) = l.take_heard();
        assert_eq!(nodes, [("n1".to_owned(), false)]);
        l.not_passed_on(nodes);
        assert_eq!(l.take_heard().0.len(), 1, "kept for the next forward");
        assert!(
            !l.passed_in_time(ticket).await,
            "passing on failed: refused until a forward succeeds"
        );
        let (_, later) = l.heartbeat_ticket("n1", 2).unwrap();
        assert!(!l.passed_in_time(later.unwrap()).await);
        l.passed_on(upto);
        assert!(l.passed_in_time(ticket).await);
        // A heartbeat waiting when a forward fails is refused then, not at the deadline.
        let (_, waiting) = l.heartbeat_ticket("n1", 3).unwrap();
        let started = Instant::now();
        let (answer, ()) = tokio::join!(l.passed_in_time(waiting.unwrap()), async {
            tokio::task::yield_now().await;
            let (nodes, _) = l.take_heard();
            l.not_passed_on(nodes);
        });
        assert!(!answer);
        assert!(
            started.elapsed() < l.relay_within(),
            "{:?}",
            started.elapsed()
        );
        // Without a relay (one server), heartbeats are answered at once.
        let alone = Liveness::new(
            Duration::from_secs(1),
            Duration::ZERO,
            [("n1".to_owned(), false)],
        );
        let (_, t) = alone.heartbeat_ticket("n1", 1).unwrap();
        assert!(alone.passed_in_time(t.unwrap()).await);
    }

    #[test]
    fn a_silent_node_heard_elsewhere_after_all_is_not_lost() {
        let l = Liveness::new(
            Duration::from_millis(0),
            Duration::ZERO,
            [("n1".to_owned(), false)],
        );
        std::thread::sleep(Duration::from_millis(2));
        let due = l.expire();
        assert_eq!(l.unrecorded(), ["n1"]);
        l.seen_at("n1", 7);
        l.seen_at("n1", 5);
        assert_eq!(l.seen_revision("n1"), 7, "the latest revision counts");
        l.alive_after_all(&due[0]);
        assert!(l.unrecorded().is_empty(), "nothing to record");
        assert!(!l.still_lost(&due[0]));
        assert_eq!(l.heartbeat("n1", 3), Some(NodeStatus::Ready));
    }

    /// A heartbeat another server passed on, followed here while a loss waits to be
    /// recorded (its etcd check under way, or refused), takes the loss back: following
    /// it also accounts for its revision, so the check would no longer see it as news.
    #[test]
    fn a_heartbeat_followed_from_another_server_takes_back_an_unrecorded_loss() {
        let l = Liveness::new(
            Duration::from_millis(0),
            Duration::ZERO,
            [("n1".to_owned(), false)],
        );
        std::thread::sleep(Duration::from_millis(2));
        let due = l.expire();
        assert!(l.still_lost(&due[0]));
        l.heard_elsewhere("n1", false, 1);
        l.seen_at("n1", 9);
        assert!(!l.still_lost(&due[0]), "not lost after all");
        assert!(l.unrecorded().is_empty(), "nothing to record");
        // A recorded loss stands until the node registers again.
        std::thread::sleep(Duration::from_millis(2));
        let due = l.expire();
        l.recorded(&due[0]);
        l.heard_elsewhere("n1", false, 1);
        assert_eq!(l.heartbeat("n1", 4), Some(NodeStatus::Lost));
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

    #[test]
    fn a_stopped_node_is_lost_only_when_its_grace_is_out() {
        let l = Liveness::new(
            Duration::from_millis(0),
            Duration::from_secs(600),
            [("n1".to_owned(), false)],
        );
        l.stopped("n1", Instant::now() + Duration::from_secs(600));
        std::thread::sleep(Duration::from_millis(2));
        assert!(l.expire().is_empty(), "within its grace");
        assert_eq!(
            l.heartbeat("n1", 1),
            Some(NodeStatus::Lost),
            "register again"
        );
        assert_eq!(
            l.beats().nodes["n1"].silent,
            None,
            "not judged by its heartbeats"
        );
        // Another server heard the stop: the loss decided at the TTL is withdrawn.
        l.registered("n1", 2);
        std::thread::sleep(Duration::from_millis(2));
        let due = l.expire().pop().expect("past its TTL");
        l.defer(&due, Instant::now() + Duration::from_millis(20));
        assert!(l.expire().is_empty(), "deferred");
        assert!(l.unrecorded().is_empty());
        let due = wait_due(&l);
        assert_eq!(due.node, "n1", "lost once the grace is out");
        // A registration ends the stop.
        l.registered("n1", 3);
        assert_eq!(l.heartbeat("n1", 4), Some(NodeStatus::Ready));
    }
}
