//! Consistent reads from the mirror: before a read is answered, the server learns the
//! revision of etcd's last commit with one linearizable request and waits until its
//! mirror has applied it, then reads the mirror. That is Kubernetes' consistent read from
//! its watch cache (KEP-2340), and it makes every read see every write acknowledged before
//! it, by any server. Reads that arrive together share one request: each round asks etcd
//! once for the reads that were waiting when it began, so a read never takes a revision
//! learned before it arrived.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csivol_etcd_client::{Client, History};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::writer::{Remote, WentBack};
use crate::error::{ApiError, ApiResult};

/// How long a read may wait to be made consistent before it is answered `unavailable`
/// (never with data that may be stale).
pub const READ_BOUND: Duration = Duration::from_secs(5);

/// Pause before asking etcd again after a round failed.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The mirror's revision and the rounds that learn etcd's. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Reads {
    inner: Arc<Inner>,
}

type Waiter = oneshot::Sender<Result<i64, String>>;

#[derive(Debug)]
struct Inner {
    client: Client,
    /// `<prefix>/d/head`: every commit puts it, so its revision is the last commit's.
    head: Vec<u8>,
    /// The revision of `head` the mirror reflects (the writer thread moves it).
    applied: watch::Receiver<i64>,
    /// Reads waiting for the next round.
    waiting: Mutex<Vec<Waiter>>,
    wake: Notify,
    /// Why the mirror no longer follows etcd, if it stopped (see `writer`).
    halted: Arc<Mutex<Option<String>>>,
    /// The id of the etcd cluster this server follows (0 until first seen).
    cluster_id: AtomicU64,
    /// Where to say that etcd's state went back in time: the writer.
    writer: mpsc::UnboundedSender<Remote>,
}

impl Reads {
    /// Starts the rounds; `applied` follows the mirror, `halted` says why it stopped.
    pub fn start(
        client: Client,
        head: Vec<u8>,
        applied: watch::Receiver<i64>,
        halted: Arc<Mutex<Option<String>>>,
        writer: mpsc::UnboundedSender<Remote>,
    ) -> Self {
        let inner = Arc::new(Inner {
            client,
            head,
            applied,
            waiting: Mutex::new(Vec::new()),
            wake: Notify::new(),
            halted,
            cluster_id: AtomicU64::new(0),
            writer,
        });
        tokio::spawn(rounds(Arc::clone(&inner)));
        Self { inner }
    }

    /// Returns once the mirror holds everything etcd had committed when this was called,
    /// or `unavailable` after [`READ_BOUND`].
    pub async fn catch_up(&self) -> ApiResult<()> {
        if let Some(why) = self
            .inner
            .halted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return Err(ApiError::unavailable(why));
        }
        let deadline = Instant::now() + READ_BOUND;
        let target = loop {
            match self.etcd_revision(deadline).await? {
                Ok(rev) => break rev,
                Err(e) if Instant::now() + RETRY_PAUSE < deadline => {
                    tracing::debug!(error = %e, "etcd did not say its revision; asking again");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(e) => return Err(not_consistent(&format!("etcd did not answer: {e}"))),
            }
        };
        let mut applied = self.inner.applied.clone();
        match tokio::time::timeout_at(deadline, applied.wait_for(|r| *r >= target)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(ApiError::unavailable("the etcd store has stopped")),
            Err(_) => Err(not_consistent(&format!(
                "this server's copy of the state has not reached etcd's revision {target} (it is at {})",
                *self.inner.applied.borrow()
            ))),
        }
    }

    /// The revision of etcd's last commit, from a round that began after this call.
    async fn etcd_revision(&self, deadline: Instant) -> ApiResult<Result<i64, String>> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        self.inner.wake.notify_one();
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(ApiError::unavailable("the etcd store has stopped")),
            Err(_) => Err(not_consistent("etcd did not say its revision in time")),
        }
    }
}

fn not_consistent(why: &str) -> ApiError {
    ApiError::unavailable(format!(
        "this answer could not be made consistent within {}: {why}",
        humantime::format_duration(READ_BOUND)
    ))
    .with_hint("retry; a possibly stale answer is allowed with --stale (`?stale=true`)")
}

/// One linearizable request per round, for every read waiting when the round began.
async fn rounds(inner: Arc<Inner>) {
    loop {
        inner.wake.notified().await;
        let waiters = std::mem::take(&mut *inner.waiting.lock().unwrap_or_else(|e| e.into_inner()));
        if waiters.is_empty() {
            continue;
        }
        let rev = match inner.client.history(&inner.head).await {
            Ok(now) => {
                let known = inner.cluster_id.swap(now.cluster_id, Ordering::AcqRel);
                match gone_back(known, *inner.applied.borrow(), &now) {
                    None => Ok(now.mod_revision),
                    Some(went) => {
                        // Not answered from the copy of a state etcd no longer holds: the
                        // writer loads it again first.
                        let why = went.why.clone();
                        let _ = inner.writer.send(Remote::WentBack(went));
                        Err(why)
                    }
                }
            }
            Err(e) => Err(e.to_string()),
        };
        for w in waiters {
            let _ = w.send(rev.clone());
        }
    }
}

/// Whether etcd's state went back in time under a server that followed the etcd cluster
/// `cluster_id` (0: not seen yet) up to the head's revision `head_rev`, now that etcd says
/// `now`: its cluster id changed, or its head was last changed at a revision below the
/// one the server reflects (every commit puts the head, so its revision only grows).
/// Either is what restoring an etcd snapshot does; `--bump-revision` moves etcd's
/// revision forward, never the head's.
pub fn gone_back(cluster_id: u64, head_rev: i64, now: &History) -> Option<WentBack> {
    if cluster_id != 0 && now.cluster_id != cluster_id {
        return Some(WentBack {
            why: format!(
                "the etcd cluster's id changed from {cluster_id:x} to {:x}",
                now.cluster_id
            ),
            new_cluster: true,
        });
    }
    // A head that is gone is no state gone back: no cluster is left under the prefix.
    if now.mod_revision != 0 && now.mod_revision < head_rev {
        return Some(WentBack {
            why: format!(
                "etcd's head is at revision {}, below the {head_rev} this server's copy of the state reflects",
                now.mod_revision
            ),
            new_cluster: false,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_etcd_snapshot_is_found_by_its_cluster_id_or_its_head() {
        let now = |cluster_id, mod_revision| History {
            cluster_id,
            revision: 500,
            mod_revision,
        };
        assert!(gone_back(0, 0, &now(7, 100)).is_none(), "a first look");
        assert!(gone_back(7, 100, &now(7, 100)).is_none(), "nothing moved");
        assert!(
            gone_back(7, 100, &now(7, 140)).is_none(),
            "other servers wrote"
        );
        let went = gone_back(7, 100, &now(8, 140)).expect("another cluster");
        assert!(went.new_cluster, "{went:?}");
        assert_eq!(went.why, "the etcd cluster's id changed from 7 to 8");
        let went = gone_back(7, 100, &now(7, 60)).expect("the head went back");
        assert!(!went.new_cluster);
        assert!(
            went.why.contains("revision 60, below the 100"),
            "{}",
            went.why
        );
        assert!(
            gone_back(7, 100, &now(7, 0)).is_none(),
            "no head left: nothing to reload"
        );
    }
}
