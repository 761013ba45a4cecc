//! Change indexes for blocking queries: every committed write batch gets the next index, and
//! each key it touched (a node's desired state, a volume, the event log) remembers it, so a
//! waiter on one key is woken only by changes to that key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// What a node must do: its claims, attachments and assigned controller operations.
    Node(String),
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

#[derive(Debug)]
pub struct Hub {
    /// Index of every key not in `entries`: the index the server started at.
    base: u64,
    entries: Mutex<HashMap<Key, Entry>>,
}

impl Hub {
    pub fn new(base: u64) -> Self {
        Self {
            base,
            entries: Mutex::new(HashMap::new()),
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
        let mut entries = self.entries();
        for key in keys {
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

    #[tokio::test(start_paused = true)]
    async fn wait_times_out_with_current_index() {
        let hub = Hub::new(3);
        let key = Key::Events;
        assert_eq!(hub.wait(&key, 3, Duration::from_secs(30)).await, 3);
    }
}
