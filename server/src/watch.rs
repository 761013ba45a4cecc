//! Change indexes for blocking queries: every committed write batch gets the next index, and
//! each key it touched (a node's desired state, a volume, the event log) remembers it, so a
//! waiter on one key is woken only by changes to that key.
//!
//! Changes to a node's desired state are also kept in a short journal per node (which of
//! its volumes changed at which index), so that an agent that holds the state as of an index
//! is sent only the volumes changed since (`Hub::node_changes`).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// Changes a node's journal keeps: an agent further behind is sent its whole desired
/// state. An agent's query trims what it no longer needs, so a journal is usually short.
const JOURNAL: usize = 64;

/// Serialised as the etcd store ships a commit's keys to the other servers (`etcd::mirror::Head`).
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
}

#[derive(Debug)]
struct Entry {
    index: u64,
    notify: Arc<Notify>,
}

impl Key {
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

#[derive(Debug)]
pub struct Hub {
    /// Index of every key not in `entries`: the index the server started at.
    base: u64,
    entries: Mutex<HashMap<Key, Entry>>,
    journals: Mutex<HashMap<String, Journal>>,
}

impl Hub {
    pub fn new(base: u64) -> Self {
        Self {
            base,
            entries: Mutex::new(HashMap::new()),
            journals: Mutex::new(HashMap::new()),
        }
    }

    /// The volumes whose entries in `node`'s desired state changed after index `since`, or
    /// `None` when the journal cannot say (the node changed as a whole since, or `since` is
    /// older than what the journal keeps, or than this server's start): then the agent needs
    /// the whole state. The agent holds the state as of `since`, so the node's changes up to
    /// it are dropped: an agent asking from an older index later is sent the whole state.
    pub fn node_changes(&self, node: &str, since: u64) -> Option<BTreeSet<String>> {
        if since < self.base {
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
                complete_after: self.base,
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
        self.entries().get(key).map_or(self.base, |e| e.index)
    }

    /// Records that a batch committed at `index` changed `keys`, and wakes their waiters.
    pub fn publish(&self, index: u64, keys: impl IntoIterator<Item = Key>) {
        let keys: Vec<Key> = keys.into_iter().collect();
        self.record(index, &keys);
        let mut entries = self.entries();
        for key in keys.into_iter().map(Key::waiter) {
            let entry = entries.entry(key).or_insert_with(|| Entry {
                index: self.base,
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

    /// Waits until `key` changed past `after`, or `wait` passed; returns the key's index.
    pub async fn wait(&self, key: &Key, after: u64, wait: Duration) -> u64 {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notify = {
                let mut entries = self.entries();
                let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
                    index: self.base,
                    notify: Arc::new(Notify::new()),
                });
                if entry.index > after {
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
            if current > after {
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

    #[tokio::test]
    async fn waiters_wake_on_their_key_only() {
        let hub = Arc::new(Hub::new(5));
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
        let hub = Hub::new(10);
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
        let hub = Hub::new(0);
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
        let hub = Hub::new(3);
        let key = Key::Events;
        assert_eq!(hub.wait(&key, 3, Duration::from_secs(30)).await, 3);
    }
}
