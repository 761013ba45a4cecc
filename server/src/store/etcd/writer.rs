//! The etcd store's writer thread: a group of write requests runs on the mirror inside a
//! SQLite transaction, the rows it changed go to etcd in ONE transaction that holds only if
//! `<prefix>/d/head` is still at the revision the mirror reflects, and only then does the
//! mirror commit and the requests get their answers. When another server committed first,
//! the mirror rolls back, catches up from the watch and the group runs again; changes made
//! by other servers are applied here too, between groups, so that one thread writes the
//! mirror.

use std::time::Duration;

use csivol_etcd_client::{Client, Event, KeyValue};
use rusqlite::Connection;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::mirror::{self, Head, Keys, Table};
use crate::db::{BoxJob, GroupEffects, Savepoints, WriterParts, run_group, take_group};
use crate::error::ApiError;

/// What the watch hands the writer.
#[derive(Debug)]
pub enum Remote {
    /// Every change of one etcd revision under `<prefix>/d/`.
    Revision(i64, Vec<Event>),
    /// The watch fell behind a compaction: the whole prefix at one revision.
    Reload(i64, Vec<KeyValue>),
    /// etcd's state went back in time, as the watch or a consistent read found.
    WentBack(WentBack),
}

/// How etcd's state was found gone back in time (see `reads::gone_back`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WentBack {
    pub why: String,
    /// The etcd cluster's id changed: whatever the revisions say, it holds another history.
    pub new_cluster: bool,
}

/// Most times a group runs again because other servers kept committing first.
const MAX_ATTEMPTS: u32 = 64;

pub struct Writer {
    pub conn: Connection,
    pub tables: Vec<Table>,
    pub keys: Keys,
    pub client: Client,
    pub rt: Handle,
    pub remote: mpsc::UnboundedReceiver<Remote>,
    /// The change index the mirror holds.
    pub index: u64,
    /// The revision `head` was last put at, as the mirror reflects it (the commit's compare).
    pub head_rev: i64,
    /// The last etcd revision applied (revisions up to it are skipped by the watch).
    pub applied: i64,
    /// Most operations in one etcd transaction (etcd's `--max-txn-ops`).
    pub max_ops: usize,
    /// This server's leadership, and the election key its once-only writes compare.
    pub leadership: super::Leadership,
    pub leader_key: Vec<u8>,
    /// The schema the rows are written in: the cluster's.
    pub schema: i64,
    /// `schema`, as `Db::schema` shows it.
    pub schema_shown: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Since when `csivol-server upgrade finalize` has been rewriting the rows (commits
    /// wait meanwhile).
    pub migrating: Option<std::time::Instant>,
    /// Why the mirror stopped following etcd (a schema this build does not know, or a
    /// revision it missed, until a reload), if it did: reads and writes are refused with it.
    pub halted: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Set (to what `halted` says) while the mirror has missed a revision: cleared by the
    /// reload that catches it up (`follow`).
    pub behind: Option<String>,
    /// The revision of `head` the mirror reflects, for consistent reads (`reads`).
    pub mirror_rev: tokio::sync::watch::Sender<i64>,
    /// This server's commits are named `<id>-<n>` in the head they put.
    pub id: String,
    pub commits: u64,
    /// Tells the watch where to follow from again after the state went back in time.
    pub rewind: tokio::sync::watch::Sender<i64>,
}

/// Answers the once-only requests of `group` with `why` and returns the others.
fn refuse_led(group: Vec<BoxJob>, why: &str) -> Vec<BoxJob> {
    let (led, rest): (Vec<_>, Vec<_>) = group.into_iter().partition(|j| j.led());
    for job in led {
        job.finish(Some(ApiError::unavailable(why)));
    }
    rest
}

enum Msg {
    Job(BoxJob),
    Remote(Remote),
    /// Time to try reloading a mirror that fell behind.
    Reload,
    Closed,
}

enum Outcome {
    Committed(GroupEffects, i64),
    Conflict(i64),
    /// The group holds once-only requests and this server no longer leads.
    Deposed,
    /// More operations than one transaction may hold (rolled back, nothing sent).
    TooBig(usize),
    /// Not committed: why.
    Failed(String),
    /// etcd could not be reached for long enough that whether the commit went through is
    /// not known: why.
    Unknown(String),
}

/// What one guarded transaction came to, however many times it was sent.
enum Sent {
    Committed(i64),
    Conflict(i64),
    Deposed,
    Failed(String),
    Unknown(String),
}

/// How long a commit is sent again while etcd cannot be reached (a member died, the
/// members elect a leader) before its requests are answered `unavailable`: an election
/// takes about a second, more on a loaded machine.
const RETRY_UNREACHABLE: Duration = Duration::from_secs(10);

/// Longest that commits wait for a schema migration to finish before they are refused.
const MIGRATION_HOLD: Duration = Duration::from_secs(60);

/// How often a mirror that missed a revision tries to reload the state while nothing else
/// wakes it.
const RELOAD_AGAIN: Duration = Duration::from_secs(1);

/// Pause between sends of a commit etcd did not answer.
const RESEND_PAUSE: Duration = Duration::from_millis(50);

/// What the writer answers through: the hub, the error slot, the tokens' bell.
struct Ends {
    hub: std::sync::Arc<crate::watch::Hub>,
    write_error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    tokens_changed: std::sync::Arc<tokio::sync::Notify>,
}

impl Ends {
    fn set_error(&self, e: Option<String>) {
        let mut slot = self.write_error.lock().unwrap_or_else(|e| e.into_inner());
        if e.is_none()
            && let Some(was) = slot.take()
        {
            tracing::info!(was = %was, "etcd accepts writes again");
        }
        if e.is_some() {
            *slot = e;
        }
    }
}

impl Writer {
    pub fn run(mut self, parts: WriterParts) {
        let WriterParts {
            mut rx,
            hub,
            write_error,
            tokens_changed,
            schema,
        } = parts;
        self.schema_shown = schema;
        let ends = Ends {
            hub,
            write_error,
            tokens_changed,
        };
        loop {
            let behind = self.behind.is_some();
            let msg = self.rt.block_on(async {
                tokio::select! {
                    biased;
                    r = self.remote.recv() => r.map_or(Msg::Closed, Msg::Remote),
                    j = rx.recv() => j.map_or(Msg::Closed, Msg::Job),
                    // A mirror that fell behind tries again on its own, so that it serves
                    // again without waiting for the next change to come.
                    () = tokio::time::sleep(RELOAD_AGAIN), if behind => Msg::Reload,
                }
            });
            let first = match msg {
                Msg::Closed => return,
                Msg::Reload => {
                    self.reload(&ends.hub, &ends.tokens_changed);
                    continue;
                }
                Msg::Remote(r) => {
                    self.apply(r, &ends.hub, &ends.tokens_changed);
                    continue;
                }
                Msg::Job(j) => j,
            };
            let group = take_group(first, &mut rx);
            self.commit(group, &ends);
        }
    }

    /// Commits `group` (again after conflicts; in halves when it changes more keys than one
    /// etcd transaction may hold) and answers its requests.
    fn commit(&mut self, mut group: Vec<BoxJob>, ends: &Ends) {
        let mut attempts = 0;
        loop {
            while let Ok(r) = self.remote.try_recv() {
                self.apply(r, &ends.hub, &ends.tokens_changed);
            }
            if let Err(e) = self.wait_for_schema(ends) {
                ends.set_error(Some(e.clone()));
                for job in group {
                    job.finish(Some(ApiError::unavailable(e.clone())));
                }
                return;
            }
            // Once-only requests commit only in this server's current term.
            let term = self.leadership.term();
            if term.is_none() && group.iter().any(|j| j.led()) {
                group = refuse_led(
                    group,
                    "this server does not lead; once-only work runs on the leader",
                );
                if group.is_empty() {
                    return;
                }
            }
            attempts += 1;
            match self.attempt(&mut group, term) {
                Outcome::Committed(effects, rev) => {
                    self.index += 1;
                    self.set_head_rev(rev);
                    self.applied = self.applied.max(rev);
                    ends.set_error(None);
                    for f in effects.on_commit {
                        f();
                    }
                    ends.hub.publish(self.index, effects.touched);
                    for job in group {
                        job.finish(None);
                    }
                    return;
                }
                Outcome::Deposed => {
                    group = refuse_led(group, "this server no longer leads");
                    if group.is_empty() {
                        return;
                    }
                }
                Outcome::TooBig(ops) if group.len() > 1 => {
                    tracing::debug!(
                        ops,
                        requests = group.len(),
                        "too many operations for one etcd transaction: committing in halves"
                    );
                    let second = group.split_off(group.len() / 2);
                    self.commit(group, ends);
                    self.commit(second, ends);
                    return;
                }
                Outcome::TooBig(ops) => {
                    let e = format!(
                        "this change is {ops} etcd operations, more than one etcd transaction \
                         may hold here ({}); raise etcd's --max-txn-ops and the servers' \
                         --etcd-max-txn-ops",
                        self.max_ops
                    );
                    for job in group {
                        job.finish(Some(ApiError::unavailable(e.clone())));
                    }
                    return;
                }
                Outcome::Conflict(target) if target > 0 && target < self.head_rev => {
                    // The head is older than the one this commit was compared against:
                    // etcd's state went back in time. The group runs again on the state
                    // as it is now.
                    let went = WentBack {
                        why: format!(
                            "etcd's head is at revision {target}, below the {} this server's copy reflects",
                            self.head_rev
                        ),
                        new_cluster: false,
                    };
                    self.went_back(&went, &ends.hub, &ends.tokens_changed);
                }
                Outcome::Conflict(target) if attempts < MAX_ATTEMPTS => {
                    self.catch_up(target, &ends.hub, &ends.tokens_changed);
                }
                Outcome::Conflict(_) => {
                    for job in group {
                        job.finish(Some(ApiError::unavailable(
                            "other servers kept committing first; try again",
                        )));
                    }
                    return;
                }
                Outcome::Failed(e) => {
                    tracing::error!(error = %e, "etcd commit failed; the group's requests are refused");
                    ends.set_error(Some(e.clone()));
                    for job in group {
                        job.finish(Some(ApiError::unavailable(format!(
                            "the state could not be committed to etcd: {e}"
                        ))));
                    }
                    return;
                }
                Outcome::Unknown(e) => {
                    // The watch brings the commit into the mirror if it went through.
                    tracing::error!(error = %e, "etcd did not answer a commit; the group's requests are answered unavailable");
                    ends.set_error(Some(e.clone()));
                    for job in group {
                        job.finish(Some(
                            ApiError::unavailable(format!(
                                "etcd did not answer whether the change was committed: {e}"
                            ))
                            .with_hint(
                                "it may have been: read the state before acting on it again",
                            ),
                        ));
                    }
                    return;
                }
            }
        }
    }

    /// Holds commits while a schema migration rewrites the rows, for at most
    /// [`MIGRATION_HOLD`]; refuses them when the mirror stopped, or fell behind and still
    /// cannot reload.
    fn wait_for_schema(&mut self, ends: &Ends) -> Result<(), String> {
        if self.behind.is_some() {
            self.reload(&ends.hub, &ends.tokens_changed);
        }
        loop {
            if let Some(why) = self
                .halted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
            {
                return Err(why);
            }
            let Some(since) = self.migrating else {
                return Ok(());
            };
            let left = MIGRATION_HOLD.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Err(format!(
                    "a schema migration has held writes for more than {}: it has not finished\n\
                     hint: run `csivol-server upgrade finalize` again to finish it",
                    humantime::format_duration(MIGRATION_HOLD)
                ));
            }
            let next = self
                .rt
                .block_on(async { tokio::time::timeout(left, self.remote.recv()).await });
            match next {
                Ok(Some(r)) => self.apply(r, &ends.hub, &ends.tokens_changed),
                Ok(None) => return Err("the etcd watch has stopped".into()),
                Err(_) => {}
            }
        }
    }

    /// Runs the group on the mirror and commits it to etcd, then to the mirror.
    fn attempt(&mut self, group: &mut [BoxJob], term: Option<i64>) -> Outcome {
        let next = self.index + 1;
        let fence = term.filter(|_| group.iter().any(|j| j.led()));
        self.commits += 1;
        let by = format!("{}-{}", self.id, self.commits);
        let result = (|| -> Result<Outcome, String> {
            let tx = self.conn.transaction().map_err(|e| e.to_string())?;
            mirror::clear_changes(&tx).map_err(|e| e.to_string())?;
            let effects = run_group(&tx, group, next, Savepoints::Each)?;
            let mut ops = Vec::new();
            for (name, rid) in mirror::changes(&tx).map_err(|e| e.to_string())? {
                let Some(t) = self.tables.iter().find(|t| t.name == name) else {
                    continue;
                };
                let key = self.keys.row(&name, rid);
                ops.push(
                    match mirror::read_row(&tx, t, rid).map_err(|e| e.to_string())? {
                        Some(v) => csivol_etcd_client::put(key, mirror::encode_row(v), 0),
                        None => csivol_etcd_client::delete(key),
                    },
                );
            }
            let seq = mirror::seq_value(&tx).map_err(|e| e.to_string())?;
            ops.push(csivol_etcd_client::put(self.keys.seq(), seq, 0));
            let head = Head {
                index: next,
                schema: self.schema,
                by: by.clone(),
                keys: Head::shipped(&effects.touched),
                migrating: false,
            };
            ops.push(csivol_etcd_client::put(self.keys.head(), head.encode(), 0));
            if ops.len() > self.max_ops {
                return Ok(Outcome::TooBig(ops.len()));
            }
            let guarded = Guarded {
                client: &self.client,
                rt: &self.rt,
                head: self.keys.head(),
                head_rev: self.head_rev,
                leader_key: &self.leader_key,
                fence,
                by: &by,
            };
            Ok(match guarded.send(ops) {
                Sent::Committed(rev) => {
                    if let Err(e) = tx.commit() {
                        // etcd has it: the watch brings it back into the mirror.
                        tracing::warn!(error = %e, "the mirror failed to commit what etcd committed; the watch catches up");
                        return Ok(Outcome::Committed(effects, self.head_rev));
                    }
                    Outcome::Committed(effects, rev)
                }
                Sent::Conflict(rev) => Outcome::Conflict(rev),
                Sent::Deposed => Outcome::Deposed,
                Sent::Failed(e) => Outcome::Failed(e),
                Sent::Unknown(e) => Outcome::Unknown(e),
            })
        })();
        result.unwrap_or_else(Outcome::Failed)
    }
}

/// One commit's transaction and what guards it: the revision of `head` the mirror
/// reflects, and the leader's term for once-only work.
struct Guarded<'a> {
    client: &'a Client,
    rt: &'a Handle,
    head: Vec<u8>,
    head_rev: i64,
    leader_key: &'a [u8],
    fence: Option<i64>,
    /// The name the commit's head carries.
    by: &'a str,
}

impl Guarded<'_> {
    /// Commits `ops` in one transaction that holds only if `head` is still at the
    /// revision the mirror reflects (and, for once-only work, the leader key is still this
    /// server's term `fence`), and learns how it went even when etcd did not answer.
    ///
    /// A transaction whose answer was lost (its member died, the leader changed) is sent
    /// again, to another member: at most one of the two can hold, since the first that
    /// does moves `head`. When a send fails its compare, `head`'s next change after the
    /// compared revision says whether an earlier send went through: it carries `by`.
    fn send(&self, ops: Vec<csivol_etcd_client::RequestOp>) -> Sent {
        let (head, by, fence) = (self.head.clone(), self.by, self.fence);
        let mut compare = vec![csivol_etcd_client::mod_revision_is(
            head.clone(),
            self.head_rev,
        )];
        if let Some(t) = fence {
            compare.push(csivol_etcd_client::create_revision_is(
                self.leader_key.to_vec(),
                t,
            ));
        }
        let failure = vec![
            csivol_etcd_client::get(head.clone()),
            csivol_etcd_client::get(self.leader_key.to_vec()),
        ];
        let ours = |kv: &KeyValue| Head::parse(&kv.value).is_ok_and(|h| h.by == by);
        let deadline = std::time::Instant::now() + RETRY_UNREACHABLE;
        let mut uncertain = false;
        loop {
            let answer = self.rt.block_on(self.client.txn(
                compare.clone(),
                ops.clone(),
                failure.clone(),
            ));
            let resp = match answer {
                Ok(resp) => resp,
                Err(csivol_etcd_client::Error::Unavailable(e)) => {
                    if std::time::Instant::now() >= deadline {
                        return Sent::Unknown(e);
                    }
                    tracing::debug!(error = %e, "etcd did not answer a commit; sending it again");
                    uncertain = true;
                    std::thread::sleep(RESEND_PAUSE);
                    continue;
                }
                Err(e) if uncertain => return Sent::Unknown(e.to_string()),
                Err(e) => return Sent::Failed(e.to_string()),
            };
            if resp.succeeded {
                return Sent::Committed(resp.header.map_or(0, |h| h.revision));
            }
            let read = csivol_etcd_client::read_results(&resp);
            let find = |k: &[u8]| read.iter().find(|kv| kv.key == k);
            let now = find(&head);
            if let Some(kv) = now.filter(|kv| ours(kv)) {
                return Sent::Committed(kv.mod_revision);
            }
            if uncertain {
                // Another server may have committed on top of ours already.
                match self
                    .rt
                    .block_on(self.client.first_change_after(&head, self.head_rev))
                {
                    Ok(Some(kv)) if ours(&kv) => return Sent::Committed(kv.mod_revision),
                    Ok(_) => {}
                    Err(e) => return Sent::Unknown(e.to_string()),
                }
            }
            if let Some(t) = fence
                && find(self.leader_key).map(|kv| kv.create_revision) != Some(t)
            {
                return Sent::Deposed;
            }
            return Sent::Conflict(now.map_or(0, |kv| kv.mod_revision));
        }
    }
}
