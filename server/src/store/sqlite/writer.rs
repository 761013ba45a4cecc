//! The writer thread: one thread commits every write request, the requests waiting
//! together as one group in one transaction (one fsync per group), each request running
//! in its [`WriteCtx`]. A write is answered only after its group's commit is durable. The
//! etcd store's writer runs groups the same way ([`run_group`]) over its mirror.

use std::sync::{Arc, Mutex};

use rusqlite::{Connection, params};
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::error::{ApiError, ApiResult};
use crate::watch::{Hub, Key};

/// What a write request sees: the open transaction, the index its group commits at, the
/// time, and the keys it changes.
pub struct WriteCtx<'a> {
    pub tx: &'a rusqlite::Transaction<'a>,
    pub index: u64,
    pub now: i64,
    pub(crate) touched: Vec<Key>,
    pub(crate) on_commit: Vec<AfterCommit>,
    /// What this request already read or wrote that it would otherwise ask again of the
    /// database, up to the next write that could change it (see [`Memo`]).
    pub(crate) memo: Memo,
}

/// A request's memory of what it asked of the database, each item forgotten by every
/// write that could change it. A request touches a volume from several places (its claim,
/// its attachment, the queue), and each used to stamp the volume's row and ask again
/// whether its plugin needs ControllerPublish.
#[derive(Default)]
pub(crate) struct Memo {
    /// Volumes stamped at this request's index and time, with no other write to their
    /// rows since: stamping one again would write the same values.
    pub stamped: Vec<String>,
    /// Whether a plugin needs ControllerPublish, as read since the last write to
    /// `node_plugins`.
    pub controller_publish: std::cell::RefCell<Vec<(String, bool)>>,
}

impl WriteCtx<'_> {
    /// A new request's context in `tx`, at `now` (the server's clock as the request runs).
    pub(crate) fn new<'a>(tx: &'a rusqlite::Transaction<'a>, index: u64, now: i64) -> WriteCtx<'a> {
        WriteCtx {
            tx,
            index,
            now,
            touched: Vec::new(),
            on_commit: Vec::new(),
            memo: Memo::default(),
        }
    }
}

pub(crate) type AfterCommit = Box<dyn FnOnce() + Send>;

impl WriteCtx<'_> {
    /// Marks `key` changed by this request (wakes its blocking queries after commit).
    pub fn touch(&mut self, key: Key) {
        self.touched.push(key);
    }

    /// Runs `f` once this request's changes are committed, never if they are rolled back:
    /// log lines about a change are written after it happened (`store::Txn::after_commit`).
    pub(crate) fn after_commit(&mut self, f: AfterCommit) {
        self.on_commit.push(f);
    }
}

/// One write request. The etcd store runs a group's requests again when another server
/// committed first (its mirror moved on), so a request may run more than once; it is
/// answered once, with the result of its last run.
pub(crate) trait Job: Send {
    /// Runs the request; whether it succeeded (its changes are kept).
    fn run(&mut self, ctx: &mut WriteCtx<'_>) -> bool;
    /// Answers the request: its result, or the commit's error.
    fn finish(self: Box<Self>, commit_error: Option<ApiError>);
    /// Whether only the leader may commit it (`Db::write_led`).
    fn led(&self) -> bool;
}

struct Request<T, F> {
    led: bool,
    f: F,
    result: Option<ApiResult<T>>,
    reply: oneshot::Sender<ApiResult<T>>,
}

impl<T, F> Job for Request<T, F>
where
    T: Send,
    F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send,
{
    fn run(&mut self, ctx: &mut WriteCtx<'_>) -> bool {
        self.result = None;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.f)(ctx))) {
            Ok(r) => {
                let ok = r.is_ok();
                self.result = Some(r);
                ok
            }
            Err(_) => {
                tracing::error!("a write request panicked; its changes are rolled back");
                false
            }
        }
    }

    fn led(&self) -> bool {
        self.led
    }

    fn finish(self: Box<Self>, commit_error: Option<ApiError>) {
        let answer = match (commit_error, self.result) {
            (Some(e), _) => Err(e),
            (None, Some(r)) => r,
            (None, None) => Err(ApiError::internal("the write request panicked")),
        };
        let _ = self.reply.send(answer);
    }
}

pub(crate) type BoxJob = Box<dyn Job>;

/// A write request running `f` (only on the leader if `led`), and where its answer comes.
pub(super) fn request<T, F>(led: bool, f: F) -> (BoxJob, oneshot::Receiver<ApiResult<T>>)
where
    T: Send + 'static,
    F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    let job = Box::new(Request {
        led,
        f,
        result: None,
        reply,
    });
    (job, answer)
}

/// What a group's successful requests asked for once it commits.
#[derive(Default)]
pub(crate) struct GroupEffects {
    pub touched: Vec<Key>,
    pub on_commit: Vec<AfterCommit>,
    /// How many of the group's requests succeeded (their changes are in the transaction).
    pub kept: usize,
}

/// How a group's requests are kept apart in its transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Savepoints {
    /// Each request in a savepoint of its own: a failed one rolls back alone, and the
    /// transaction holds only what succeeded, whatever happened (the etcd store ships the
    /// transaction's rows as they are; the SQLite writer's second try).
    Each,
    /// None: a savepoint makes SQLite copy every page its request changes into the
    /// statement journal, which only a failure needs. The group stops at its first failed
    /// request (`GroupEffects::kept` is then below the group's length), and the caller
    /// rolls the whole transaction back.
    None,
}

/// Runs `group` in `tx` (see [`Savepoints`]), and records the group's change index in
/// `meta`.
pub(crate) fn run_group(
    tx: &rusqlite::Transaction<'_>,
    group: &mut [BoxJob],
    index: u64,
    savepoints: Savepoints,
    clock: &Clock,
) -> Result<GroupEffects, String> {
    let each = savepoints == Savepoints::Each;
    // Prepared once per connection (its statement cache), not parsed again per request.
    let run = |sql: &str| -> Result<(), String> {
        (tx.prepare_cached(sql).and_then(|mut s| s.execute([])))
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let mut effects = GroupEffects::default();
    // No request changes the schema (migrations run apart).
    let _scope = super::shape::in_transaction();
    for job in group.iter_mut() {
        if each {
            run("SAVEPOINT job")?;
        }
        let mut ctx = WriteCtx::new(tx, index, clock.now_ms());
        if job.run(&mut ctx) {
            if each {
                run("RELEASE job")?;
            }
            effects.kept += 1;
            effects.touched.append(&mut ctx.touched);
            effects.on_commit.append(&mut ctx.on_commit);
        } else if each {
            run("ROLLBACK TO job")?;
            run("RELEASE job")?;
        } else {
            return Ok(effects);
        }
    }
    tx.prepare_cached("UPDATE meta SET value = ?1 WHERE key = 'index'")
        .and_then(|mut s| s.execute(params![index as i64]))
        .map_err(|e| e.to_string())?;
    Ok(effects)
}

/// Commits `group` at change index `index` in one transaction. It first runs the group
/// without savepoints; when a request fails, that transaction is rolled back and the group
/// run again with one savepoint per request (a request may run more than once, as the
/// etcd store's do; it is answered once). A group whose requests all failed commits
/// nothing and spends no change index (`GroupEffects::kept` is 0).
fn commit_group(
    conn: &mut Connection,
    group: &mut [BoxJob],
    index: u64,
    clock: &Clock,
) -> Result<GroupEffects, String> {
    {
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        let effects = run_group(&tx, group, index, Savepoints::None, clock)?;
        if effects.kept == group.len() {
            tx.commit().map_err(|e| e.to_string())?;
            return Ok(effects);
        }
        // A request failed: dropping the transaction rolls the whole group back.
    }
    if group.len() == 1 {
        return Ok(GroupEffects::default());
    }
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    let effects = run_group(&tx, group, index, Savepoints::Each, clock)?;
    if effects.kept > 0 {
        tx.commit().map_err(|e| e.to_string())?;
    }
    Ok(effects)
}

/// Most requests committed together in one transaction.
const MAX_GROUP: usize = 512;

/// What a writer thread is handed: the job channel, the hub and the error slot.
pub(crate) struct WriterParts {
    pub rx: mpsc::UnboundedReceiver<BoxJob>,
    pub hub: Arc<Hub>,
    pub write_error: Arc<Mutex<Option<String>>>,
    pub tokens_changed: Arc<tokio::sync::Notify>,
    pub schema: Arc<std::sync::atomic::AtomicI64>,
    /// The server's clock: each request runs at its time ([`WriteCtx::now`]).
    pub clock: Clock,
}

/// Takes up to [`MAX_GROUP`] waiting requests after `first`.
pub(crate) fn take_group(first: BoxJob, rx: &mut mpsc::UnboundedReceiver<BoxJob>) -> Vec<BoxJob> {
    let mut group = vec![first];
    while group.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(job) => group.push(job),
            Err(_) => break,
        }
    }
    group
}

/// The SQLite writer thread: takes the waiting requests as one group, commits it
/// ([`commit_group`]), then answers them and wakes the blocking queries on what changed.
pub(super) fn run(mut conn: Connection, mut index: u64, parts: WriterParts) {
    let WriterParts {
        mut rx,
        hub,
        write_error,
        clock,
        ..
    } = parts;
    while let Some(first) = rx.blocking_recv() {
        let mut group = take_group(first, &mut rx);
        let next = index + 1;
        let committed = commit_group(&mut conn, &mut group, next, &clock);
        match committed {
            Ok(effects) if effects.kept == 0 => {
                for job in group {
                    job.finish(None);
                }
            }
            Ok(effects) => {
                index = next;
                let recovered = write_error.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(e) = recovered {
                    tracing::info!(was = %e, "the state database accepts writes again");
                }
                for f in effects.on_commit {
                    f();
                }
                hub.publish(index, effects.touched);
                for job in group {
                    job.finish(None);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "commit failed; the group's requests are refused");
                *write_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.clone());
                for job in group {
                    job.finish(Some(ApiError::unavailable(format!(
                        "the state database could not commit: {e}"
                    ))));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::store::sqlite::db::open;

    /// A write request for `run_group`, inserting `key` into `meta` and then failing or not;
    /// `runs` counts how often it ran.
    fn insert(key: &'static str, fail: bool, runs: &Arc<AtomicUsize>) -> BoxJob {
        let runs = Arc::clone(runs);
        Box::new(Request {
            led: false,
            f: move |ctx: &mut WriteCtx<'_>| -> ApiResult<()> {
                runs.fetch_add(1, Ordering::SeqCst);
                (ctx.tx).execute("INSERT INTO meta (key, value) VALUES (?1, 1)", [key])?;
                if fail {
                    return Err(ApiError::conflict("no"));
                }
                Ok(())
            },
            result: None,
            reply: oneshot::channel().0,
        })
    }

    fn meta_keys(conn: &Connection) -> Vec<String> {
        let mut s = conn.prepare("SELECT key FROM meta ORDER BY key").unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn a_group_runs_without_savepoints_and_again_with_them_when_a_request_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (mut conn, index) = open(&dir.path().join("state.db")).unwrap();
        let clock = Clock::wall();
        let index_now = |c: &Connection| -> u64 {
            c.query_row("SELECT value FROM meta WHERE key = 'index'", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap() as u64
        };
        let runs = || Arc::new(AtomicUsize::new(0));

        // Without savepoints, a group stops at its first failure.
        let (a, b, c) = (runs(), runs(), runs());
        {
            let tx = conn.transaction().unwrap();
            let mut group = [
                insert("a", false, &a),
                insert("b", true, &b),
                insert("c", false, &c),
            ];
            let effects = run_group(&tx, &mut group, index + 1, Savepoints::None, &clock).unwrap();
            assert_eq!(effects.kept, 1);
            assert_eq!(c.load(Ordering::SeqCst), 0, "nothing runs after a failure");
        }
        assert_eq!(meta_keys(&conn), ["index"], "rolled back when dropped");

        // Each in a savepoint (the etcd store's way): a failed request is gone already.
        {
            let tx = conn.transaction().unwrap();
            let effects = run_group(
                &tx,
                &mut [insert("a", true, &a)],
                index + 1,
                Savepoints::Each,
                &clock,
            )
            .unwrap();
            assert_eq!(effects.kept, 0);
            assert_eq!(meta_keys(&tx), ["index"]);
        }

        // Committed: every request succeeds at the first try, each runs once.
        let (a, b) = (runs(), runs());
        let effects = commit_group(
            &mut conn,
            &mut [insert("a", false, &a), insert("b", false, &b)],
            index + 1,
            &clock,
        )
        .unwrap();
        assert_eq!(effects.kept, 2);
        assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (1, 1));
        assert_eq!(meta_keys(&conn), ["a", "b", "index"]);
        assert_eq!(index_now(&conn), index + 1);

        // One fails: the group runs again with savepoints, the others are kept.
        let (c, d, e) = (runs(), runs(), runs());
        let mut group = [
            insert("c", false, &c),
            insert("d", true, &d),
            insert("e", false, &e),
        ];
        let effects = commit_group(&mut conn, &mut group, index + 2, &clock).unwrap();
        assert_eq!(effects.kept, 2);
        assert_eq!(c.load(Ordering::SeqCst), 2, "ran again with savepoints");
        assert_eq!(meta_keys(&conn), ["a", "b", "c", "e", "index"]);
        assert_eq!(index_now(&conn), index + 2);

        // Alone and failing, or all failing: nothing kept, no change index spent.
        let f = runs();
        let effects =
            commit_group(&mut conn, &mut [insert("f", true, &f)], index + 3, &clock).unwrap();
        assert_eq!((effects.kept, f.load(Ordering::SeqCst)), (0, 1));
        let effects = commit_group(
            &mut conn,
            &mut [insert("f", true, &f), insert("g", true, &f)],
            index + 3,
            &clock,
        )
        .unwrap();
        assert_eq!(effects.kept, 0);
        assert_eq!(meta_keys(&conn), ["a", "b", "c", "e", "index"]);
        assert_eq!(index_now(&conn), index + 2);
    }
}
