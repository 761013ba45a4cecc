//! Change indexes for blocking queries: every committed write batch gets the next index, and
//! each key it touched (a node's desired state, a volume, the event log) remembers it, so a
//! waiter on one key is woken only by changes to that key.
//!
//! Changes to a node's desired state are also kept in a short journal per node (which of
//! its volumes changed at which index), so that an agent that holds the state as of an index
//! is sent only the volumes changed since (`Hub::node_changes`).
//!
//! Indexes belong to a *generation* of the state: the state can go back in time (a backup
//! restored, an etcd snapshot restored) and its indexes with it, so an index a client holds
//! means something only together with the generation it came from ([`Cursor`]). A new
//! generation is minted at every start of a SQLite server and every restore; with the etcd
//! store the servers share it through etcd. When it changes under a running server
//! ([`Hub::reset`]), every waiter wakes and every journal starts again.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// Changes a node's journal keeps: an agent further behind is sent its whole desired
/// state. An agent's query trims what it no longer needs, so a journal is usually short.
const JOURNAL: usize = 64;

/// Serialised as the etcd store ships a commit's keys to the other servers (`replicated::mirror::Head`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    /// What a node must do, as a whole: its status, or changes not named by volume. An agent
    /// holding an older index is sent its whole desired state.
    Node(String),
    /// One volume's entries in a node's desired state (its claims there, its attachment,
    /// its node expansion). Wakes the node's waiters like [`Key::Node`].
    NodeVolume { node: String, volume: String },
    /// A node's controller operations, which every desired state carries whole. Wakes the
    /// node's waiters like [`Key::Node`].
    NodeOps(String),
    /// A volume, its claims and attachments.
    Volume(String),
    /// The event log.
    Events,
    /// A snapshot.
    Snapshot(String),
    /// A pool's line: a claim joined, left or was granted a member.
    Pool(String),
}

#[derive(Debug)]
struct Entry {
    index: u64,
    notify: Arc<Notify>,
}

impl Key {
    /// The key of one volume's entries in `node`'s desired state: the node's agent is sent
    /// that volume's entries anew.
    pub fn node_volume(node: &str, volume: &str) -> Self {
        Self::NodeVolume {
            node: node.to_owned(),
            volume: volume.to_owned(),
        }
    }

    /// The key blocking queries wait on: a node's waiters for every change of the node.
    fn waiter(self) -> Self {
        match self {
            Self::NodeVolume { node, .. } | Self::NodeOps(node) => Self::Node(node),
            other => other,
        }
    }
}

/// One node's last changes, in index order: a volume's entries, or the whole (`None`).
#[derive(Debug)]
struct Journal {
    changes: VecDeque<(u64, Option<String>)>,
    /// Every change of the node with a greater index is in `changes`.
    complete_after: u64,
}

/// The generation of the state an index belongs to: a random number, shown as 16 hex
/// digits on the wire ([`csivol_api::GENERATION_HEADER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Generation(pub u64);

impl Generation {
    /// A new generation, never 0.
    pub fn mint() -> Self {
        Self(rand::random::<u64>().max(1))
    }

    /// The text a client is given and sends back.
    pub fn text(self) -> String {
        format!("{:016x}", self.0)
    }

    /// A generation a client sent. Text this server never gave is a generation that is not
    /// its own (`Some(Generation(0))`): the client is answered with the whole state.
    pub fn parse(text: &str) -> Self {
        Self(u64::from_str_radix(text.trim(), 16).unwrap_or(0))
    }
}

/// What a client follows from: an index, and the generation it came from (`None` from a
/// client that does not send one, an older one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub generation: Option<Generation>,
    pub index: u64,
}

/// The generation a hub serves and where it began.
#[derive(Debug)]
struct Timeline {
    generation: AtomicU64,
    /// Index of every key not in `entries`: the index the generation began at here (the
    /// server's start, or the reset).
    base: AtomicU64,
    /// The newest index published: a client's index past it is from another generation.
    last: AtomicU64,
    /// The event log's last entry when the generation began: a follower of the log whose
    /// position is from another generation is sent what was logged since.
    events_from: AtomicU64,
}

#[derive(Debug)]
pub struct Hub {
    timeline: Timeline,
    entries: Mutex<HashMap<Key, Entry>>,
    journals: Mutex<HashMap<String, Journal>>,
    /// The generation served, for what must follow a reset (the server settles then).
    generations: tokio::sync::watch::Sender<Generation>,
    /// The generation a reset began whose settling is not recorded yet (0: none): until it
    /// is, every agent is told to register again (see `lifecycle::settle`), so that none
    /// acts on the state gone back before the server knows what it holds.
    unsettled: AtomicU64,
}

impl Hub {
    /// A hub whose generation begins at index `base`, the event log's last entry being
    /// `events_from`.
    pub fn new(generation: Generation, base: u64, events_from: u64) -> Self {
        Self {
            timeline: Timeline {
                generation: AtomicU64::new(generation.0),
                base: AtomicU64::new(base),
                last: AtomicU64::new(base),
                events_from: AtomicU64::new(events_from),
            },
            entries: Mutex::new(HashMap::new()),
            journals: Mutex::new(HashMap::new()),
            generations: tokio::sync::watch::channel(generation).0,
            unsettled: AtomicU64::new(0),
        }
    }

    /// Whether the generation served began with a reset whose settling is not recorded yet.
    pub fn unsettled(&self) -> bool {
        let g = self.unsettled.load(Ordering::Acquire);
        g != 0 && g == self.timeline.generation.load(Ordering::Acquire)
    }

    /// Settling after the reset to `generation` is recorded.
    pub fn settled(&self, generation: Generation) {
        let _ =
            self.unsettled
                .compare_exchange(generation.0, 0, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The generation served, changing at every [`Hub::reset`].
    pub fn generations(&self) -> tokio::sync::watch::Receiver<Generation> {
        self.generations.subscribe()
    }

    fn base(&self) -> u64 {
        self.timeline.base.load(Ordering::Acquire)
    }

    /// The generation of the state this server serves.
    pub fn generation(&self) -> Generation {
        Generation(self.timeline.generation.load(Ordering::Acquire))
    }

    /// The newest index published.
    pub fn last(&self) -> u64 {
        self.timeline.last.load(Ordering::Acquire)
    }

    /// The event log's last entry when this generation began.
    pub fn events_from(&self) -> u64 {
        self.timeline.events_from.load(Ordering::Acquire)
    }

    /// Whether `cursor` names a generation other than this server's: an index from it
    /// means nothing here, whatever its value.
    pub fn foreign(&self, cursor: &Cursor) -> bool {
        cursor.generation.is_some_and(|g| g != self.generation())
    }

    /// Whether a client holding `cursor` must be answered at once with the whole state:
    /// its generation is not this one, or its index is ahead of every index this server
    /// published (the state went back in time under a client that sends no generation).
    pub fn outdated(&self, cursor: &Cursor) -> bool {
        self.foreign(cursor) || cursor.index > self.last()
    }

    /// The state went back in time, or on to another history: from now on it is of
    /// `generation`, at index `index`, its event log's last entry `events_from`. Every key
    /// is at `index`, the journals start again, and every waiter wakes (its cursor is of
    /// the generation before). A reset to the generation already served changes nothing.
    pub fn reset(&self, generation: Generation, index: u64, events_from: u64) {
        if generation == self.generation() {
            return;
        }
        let mut entries = self.entries();
        let mut journals = self.journals.lock().unwrap_or_else(|e| e.into_inner());
        self.timeline.base.store(index, Ordering::Release);
        self.timeline.last.store(index, Ordering::Release);
        self.timeline
            .events_from
            .store(events_from, Ordering::Release);
        self.unsettled.store(generation.0, Ordering::Release);
        self.timeline
            .generation
            .store(generation.0, Ordering::Release);
        journals.clear();
        for entry in entries.values_mut() {
            entry.index = index;
            entry.notify.notify_waiters();
        }
        self.generations.send_replace(generation);
    }

    /// The volumes whose entries in `node`'s desired state changed after index `since`, or
    /// `None` when the journal cannot say (the node changed as a whole since, or `since` is
    /// older than what the journal keeps, or than this server's start): then the agent needs
    /// the whole state. The agent holds the state as of `since`, so the node's changes up to
    /// it are dropped: an agent asking from an older index later is sent the whole state.
    pub fn node_changes(&self, node: &str, since: u64) -> Option<BTreeSet<String>> {
        if since < self.base() || since > self.last() {
            return None;
        }
        let mut journals = self.journals.lock().unwrap_or_else(|e| e.into_inner());
        let Some(journal) = journals.get_mut(node) else {
            // Nothing changed on the node since the server started.
            return Some(BTreeSet::new());
        };
        if since < journal.complete_after {
            return None;
        }
        while journal.changes.front().is_some_and(|(i, _)| *i <= since) {
            journal.changes.pop_front();
        }
        journal.complete_after = since;
        let mut volumes = BTreeSet::new();
        for (_, volume) in &journal.changes {
            volumes.insert(volume.clone()?);
        }
        Some(volumes)
    }

    fn record(&self, index: u64, keys: &[Key]) {
        // A batch touches the same entries many times; the journal needs each once.
        let changed: BTreeSet<(&String, Option<&String>)> = keys
            .iter()
            .filter_map(|key| match key {
                Key::Node(node) => Some((node, None)),
                Key::NodeVolume { node, volume } => Some((node, Some(volume))),
                _ => None,
            })
            .collect();
        if changed.is_empty() {
            return;
        }
        let mut journals = self.journals.lock().unwrap_or_else(|e| e.into_inner());
        for (node, volume) in changed {
            let journal = journals.entry(node.clone()).or_insert_with(|| Journal {
                changes: VecDeque::new(),
                complete_after: self.base(),
            });
            journal.changes.push_back((index, volume.cloned()));
            if journal.changes.len() > JOURNAL {
                let (dropped, _) = journal.changes.pop_front().expect("not empty");
                journal.complete_after = dropped;
            }
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of the last change to `key`.
    pub fn index(&self, key: &Key) -> u64 {
        self.entries()
            .get(key)
            .map_or_else(|| self.base(), |e| e.index)
    }

    /// Records that a batch committed at `index` changed `keys`, and wakes their waiters.
    pub fn publish(&self, index: u64, keys: impl IntoIterator<Item = Key>) {
        let keys: Vec<Key> = keys.into_iter().collect();
        self.record(index, &keys);
        let mut entries = self.entries();
        self.timeline.last.fetch_max(index, Ordering::AcqRel);
        for key in keys.into_iter().map(Key::waiter) {
            let entry = entries.entry(key).or_insert_with(|| Entry {
                index: self.base(),
                notify: Arc::new(Notify::new()),
            });
            entry.index = entry.index.max(index);
            entry.notify.notify_waiters();
        }
    }

    /// Every key a waiter asked about or a commit touched.
    pub fn keys(&self) -> Vec<Key> {
        self.entries().keys().cloned().collect()
    }

    /// Waits until `key` changed past `after`, or `wait` passed, or the generation changed
    /// (see [`Hub::reset`]: the caller compares it with the one it began in); returns the
    /// key's index.
    pub async fn wait(&self, key: &Key, after: u64, wait: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + wait;
        let began = self.generation();
        loop {
            let notify = {
                let mut entries = self.entries();
                let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
                    index: self.base(),
                    notify: Arc::new(Notify::new()),
                });
                if entry.index > after || self.generation() != began {
                    return entry.index;
                }
                Arc::clone(&entry.notify)
            };
            let notified = notify.notified();
            tokio::pin!(notified);
            // Register interest before re-checking, so a publish between the check above
            // and the wait below is not missed.
            notified.as_mut().enable();
            let current = self.index(key);
            if current > after || self.generation() != began {
                return current;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.index(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub(base: u64) -> Hub {
        Hub::new(Generation(1), base, 0)
    }

    #[tokio::test]
    async fn waiters_wake_on_their_key_only() {
        let hub = Arc::new(hub(5));
        let key = Key::Volume("v".into());
        assert_eq!(hub.index(&key), 5);
        assert_eq!(
            hub.wait(&key, 4, Duration::from_secs(5)).await,
            5,
            "already past"
        );

        let waiter = {
            let hub = Arc::clone(&hub);
            let key = key.clone();
            tokio::spawn(async move { hub.wait(&key, 5, Duration::from_secs(30)).await })
        };
        tokio::task::yield_now().await;
        hub.publish(6, [Key::Volume("other".into())]);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "another key does not wake it");
        hub.publish(7, [key.clone()]);
        assert_eq!(waiter.await.unwrap(), 7);
    }

    fn nv(node: &str, volume: &str) -> Key {
        Key::NodeVolume {
            node: node.into(),
            volume: volume.into(),
        }
    }

    #[test]
    fn the_journal_names_a_node_s_changed_volumes() {
        let hub = hub(10);
        assert_eq!(hub.node_changes("n", 10), Some(BTreeSet::new()));
        assert_eq!(
            hub.node_changes("n", 9),
            None,
            "older than the server's start"
        );
        hub.publish(11, [nv("n", "a"), nv("m", "b"), nv("n", "a")]);
        hub.publish(12, [Key::NodeOps("n".into()), nv("n", "c")]);
        let names = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(hub.node_changes("n", 10), names(&["a", "c"]));
        assert_eq!(hub.node_changes("n", 11), names(&["c"]));
        assert_eq!(hub.node_changes("n", 12), names(&[]));
        assert_eq!(hub.node_changes("m", 10), names(&["b"]));
        assert_eq!(
            hub.index(&Key::Node("n".into())),
            12,
            "volume and operation changes wake the node's waiters"
        );

        hub.publish(13, [Key::Node("n".into())]);
        assert_eq!(
            hub.node_changes("n", 12),
            None,
            "a change of the node as a whole"
        );
        assert_eq!(hub.node_changes("n", 13), names(&[]));
        assert_eq!(hub.node_changes("m", 10), names(&["b"]));
        assert_eq!(
            hub.node_changes("n", 11),
            None,
            "asked from before what the agent last said it holds: the whole state"
        );
    }

    #[test]
    fn an_agent_further_behind_than_the_journal_gets_the_whole_state() {
        let hub = hub(0);
        for i in 1..=JOURNAL as u64 + 1 {
            hub.publish(i, [nv("n", &format!("v{i}")), nv("m", "v")]);
        }
        assert_eq!(hub.node_changes("n", 0), None);
        assert_eq!(hub.node_changes("n", 1).map(|v| v.len()), Some(JOURNAL));
        assert_eq!(
            hub.node_changes("m", JOURNAL as u64).map(|v| v.len()),
            Some(1),
            "each node keeps its own journal"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn wait_times_out_with_current_index() {
        let hub = hub(3);
        let key = Key::Events;
        assert_eq!(hub.wait(&key, 3, Duration::from_secs(30)).await, 3);
    }

    #[test]
    fn a_cursor_of_another_generation_or_ahead_is_outdated() {
        let hub = Hub::new(Generation(7), 35, 90);
        let at = |generation: Option<u64>, index| Cursor {
            generation: generation.map(Generation),
            index,
        };
        assert!(
            !hub.outdated(&at(Some(7), 35)),
            "this generation, this index"
        );
        assert!(!hub.outdated(&at(Some(7), 20)), "behind: waits as before");
        assert!(!hub.outdated(&at(None, 35)), "an older client at the index");
        assert!(
            hub.outdated(&at(None, 37)),
            "an older client ahead of the state"
        );
        assert!(hub.outdated(&at(Some(7), 37)), "ahead, in this generation");
        assert!(hub.outdated(&at(Some(8), 30)), "another generation, behind");
        assert!(
            hub.outdated(&at(Some(8), 35)),
            "another generation, same index"
        );
        assert!(hub.foreign(&at(Some(0), 1)), "text the server never gave");
        hub.publish(40, [Key::Events]);
        assert!(
            !hub.outdated(&at(None, 37)),
            "the state passed the index again"
        );
        assert_eq!(
            Generation::parse(&Generation(0xab).text()),
            Generation(0xab)
        );
        assert_eq!(Generation::parse("not hex"), Generation(0));
        assert_ne!(Generation::mint(), Generation(0));
    }

    #[tokio::test]
    async fn a_reset_wakes_every_waiter_and_starts_the_journals_again() {
        let hub = Arc::new(Hub::new(Generation(1), 30, 100));
        hub.publish(36, [nv("n", "a")]);
        hub.publish(37, [Key::Volume("v".into())]);
        let waiter = |key: Key, after| {
            let hub = Arc::clone(&hub);
            tokio::spawn(async move { hub.wait(&key, after, Duration::from_secs(60)).await })
        };
        let node = waiter(Key::Node("n".into()), 36);
        let volume = waiter(Key::Volume("v".into()), 37);
        let events = waiter(Key::Events, 30);
        tokio::task::yield_now().await;
        assert!(!node.is_finished() && !volume.is_finished() && !events.is_finished());

        // Restored to index 35, which is below what the waiters hold.
        hub.reset(Generation(2), 35, 80);
        let woke = (
            node.await.unwrap(),
            volume.await.unwrap(),
            events.await.unwrap(),
        );
        assert_eq!(woke, (35, 35, 35), "every waiter wakes, at the new index");
        assert_eq!(hub.generation(), Generation(2));
        assert_eq!((hub.last(), hub.events_from()), (35, 80));
        assert_eq!(hub.index(&Key::Volume("v".into())), 35);
        assert_eq!(
            hub.node_changes("n", 36),
            None,
            "an index past the new state: the whole state"
        );
        assert_eq!(hub.node_changes("n", 35), Some(BTreeSet::new()));
        hub.publish(36, [nv("n", "b")]);
        assert_eq!(
            hub.node_changes("n", 35),
            Some(["b".to_owned()].into()),
            "the journal holds the new generation's changes only"
        );

        assert!(
            hub.unsettled(),
            "nothing may act on it until settling is recorded"
        );
        hub.settled(Generation(1));
        assert!(hub.unsettled(), "another generation's record");
        hub.settled(Generation(2));
        assert!(!hub.unsettled());

        // A reset to the generation served changes nothing.
        hub.reset(Generation(2), 10, 0);
        assert_eq!((hub.last(), hub.index(&Key::Volume("v".into()))), (36, 35));
    }
}
