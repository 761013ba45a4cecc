//! The cluster state database: opening it (and migrating its schema), and [`Db`], the
//! handle every part of the server reads and writes through: writes go to the writer
//! thread (`writer`), reads to the read connections (`read_pool`).

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension};
use tokio::sync::mpsc;

use super::connection::{STATEMENT_CACHE, plan_once};
use super::migrations::{migrate, schema_version};
use super::read_pool::ReadPool;
use super::writer::{self, BoxJob, WriteCtx, WriterParts};
use crate::clock::Clock;
use crate::error::{ApiError, ApiResult};
use crate::watch::{Generation, Hub};

/// The cluster id recorded in the database (every migrated database has one).
pub fn cluster_id(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row("SELECT id FROM cluster", [], |r| r.get(0))
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // WAL lets readers run beside the writer; synchronous=FULL makes each commit durable
    // (the WAL is fsynced) before it returns.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Overwritten and deleted content is zeroed, so that a secret sealed again under a new
    // key, or a volume deregistered, leaves no old bytes in free pages.
    conn.pragma_update(None, "secure_delete", "ON")?;
    plan_once(conn)
}

/// Opens (creating or migrating) the database at `path`; returns the connection and the
/// last committed change index.
pub fn open(path: &Path) -> anyhow::Result<(Connection, u64)> {
    open_at(path, schema_version())
}

/// [`open`], migrating only up to schema version `schema` (the etcd store's mirror of a
/// cluster still at the previous version during a rolling upgrade).
pub fn open_at(path: &Path, schema: i64) -> anyhow::Result<(Connection, u64)> {
    use anyhow::Context;
    let mut conn = Connection::open(path)
        .with_context(|| format!("failed to open the state database {}", path.display()))?;
    configure(&conn).with_context(|| format!("failed to configure {}", path.display()))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = schema_version();
    if version > known {
        anyhow::bail!(
            "the state database {} has schema version {version}, newer than this csivol-server \
             understands ({known}); run a newer csivol-server, or restore a backup made by this version",
            path.display()
        );
    }
    if version < schema {
        migrate(&mut conn, version, schema)
            .with_context(|| format!("failed to migrate {}", path.display()))?;
        tracing::info!(path = %path.display(), from = version, to = schema, "database schema migrated");
    }
    let index: i64 = conn.query_row("SELECT value FROM meta WHERE key = 'index'", [], |r| {
        r.get(0)
    })?;
    Ok((conn, index as u64))
}

/// The database handle: a writer thread fed by a channel, and read connections.
#[derive(Clone)]
pub struct Db {
    jobs: mpsc::UnboundedSender<BoxJob>,
    reads: ReadPool,
    pub hub: Arc<Hub>,
    /// Why the last commit failed, until one succeeds.
    write_error: Arc<Mutex<Option<String>>>,
    /// Bumped when another server changed the tokens (etcd store), so that this one
    /// reloads them.
    pub tokens_changed: Arc<tokio::sync::Notify>,
    /// The schema version the state is kept in (the etcd store's writer moves it when the
    /// cluster's is raised).
    schema: Arc<std::sync::atomic::AtomicI64>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("path", &self.reads.path())
            .finish()
    }
}

/// The event log's last entry (0 when empty): where a follower of the log whose position
/// is from another generation of the state is sent on from.
pub fn last_event(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row("SELECT COALESCE(MAX(idx), 0) FROM events", [], |r| {
        r.get::<_, i64>(0)
    })
    .map(|i| i.max(0) as u64)
}

impl Db {
    /// Opens the SQLite store. Every start begins a new generation of the state: the
    /// database may be another than the one the last run served (a backup restored under
    /// it), and nothing in the file says so for certain. Each write request runs at the
    /// time `clock` shows then.
    pub fn start(path: &Path, clock: Clock) -> anyhow::Result<Self> {
        let (conn, index) = open(path)?;
        let events_from = last_event(&conn)?;
        Self::start_with(
            path,
            index,
            (Generation::mint(), events_from),
            (schema_version(), clock),
            move |parts| {
                writer::run(conn, index, parts);
            },
        )
    }

    /// A database at `path` whose writer thread runs `writer` (the SQLite writer, or the
    /// etcd store's over its mirror) from change index `index` of `generation` (its event
    /// log's last entry beside it), at schema version `schema`, on `clock`.
    pub(crate) fn start_with(
        path: &Path,
        index: u64,
        (generation, events_from): (Generation, u64),
        (schema, clock): (i64, Clock),
        writer: impl FnOnce(WriterParts) + Send + 'static,
    ) -> anyhow::Result<Self> {
        let schema = Arc::new(std::sync::atomic::AtomicI64::new(schema));
        let hub = Arc::new(Hub::new(generation, index, events_from));
        let (jobs, rx) = mpsc::unbounded_channel();
        let write_error = Arc::new(Mutex::new(None));
        let tokens_changed = Arc::new(tokio::sync::Notify::new());
        let parts = WriterParts {
            rx,
            hub: Arc::clone(&hub),
            write_error: Arc::clone(&write_error),
            tokens_changed: Arc::clone(&tokens_changed),
            schema: Arc::clone(&schema),
            clock,
        };
        std::thread::Builder::new()
            .name("csivol-db-writer".into())
            .spawn(move || writer(parts))?;
        Ok(Self {
            jobs,
            reads: ReadPool::new(path),
            hub,
            write_error,
            tokens_changed,
            schema,
        })
    }

    /// The schema version the state is kept in.
    pub fn schema(&self) -> i64 {
        self.schema.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Why the database refuses writes (the last commit failed), or `None`.
    pub fn write_error(&self) -> Option<String> {
        self.write_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        self.reads.path()
    }

    /// Runs `f` in the writer's transaction; returns its result once committed durably.
    /// If `f` fails, its changes are rolled back and other requests of the group commit.
    /// `f` may run more than once (the etcd store runs it again after a conflict), so it
    /// must act only through `ctx`.
    pub async fn write<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send + 'static,
    {
        self.send(false, f).await
    }

    /// [`Db::write`] for once-only work: with the etcd store it commits only while this
    /// server leads (its commit compares the leader's term), so a deposed leader's write
    /// fails; the single SQLite server always leads.
    pub async fn write_led<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send + 'static,
    {
        self.send(true, f).await
    }

    async fn send<T, F>(&self, led: bool, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send + 'static,
    {
        let (job, answer) = writer::request(led, f);
        self.jobs
            .send(job)
            .map_err(|_| ApiError::unavailable("the database writer has stopped"))?;
        answer
            .await
            .map_err(|_| ApiError::unavailable("the database writer has stopped"))?
    }

    /// Runs `f` on a read connection (a consistent snapshot of committed state), on a
    /// blocking thread.
    pub async fn read<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> ApiResult<T> + Send + 'static,
    {
        self.reads.read(f).await
    }

    /// [`Db::read`] on the calling thread, for reads bounded by a few rows (one volume,
    /// one node's changed volumes): a WAL reader never waits for the writer, and such a
    /// read costs less than the two thread hand-offs of a blocking task.
    pub async fn read_small<T>(&self, f: impl FnOnce(&Connection) -> ApiResult<T>) -> ApiResult<T> {
        self.reads.read_small(f).await
    }
}

/// Reads a single optional row.
pub fn optional<T>(r: rusqlite::Result<T>) -> ApiResult<Option<T>> {
    Ok(r.optional()?)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::Ordering;

    use rusqlite::params;

    use super::*;

    #[test]
    fn refuses_a_newer_schema_and_migrates_an_empty_one() {
        let dir = tempfile_dir();
        let path = dir.join("state.db");
        let (conn, index) = open(&path).unwrap();
        assert_eq!(index, 1);
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let err = open(&path).unwrap_err().to_string();
        assert!(err.contains("schema version 99"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn migrates_an_older_schema_keeping_its_data() {
        let dir = tempfile_dir();
        let path = dir.join("state.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(super::super::migrations::MIGRATIONS[0])
                .unwrap();
            conn.pragma_update(None, "user_version", 1).unwrap();
            conn.execute("UPDATE meta SET value = 42 WHERE key = 'index'", [])
                .unwrap();
        }
        let (conn, index) = open(&path).unwrap();
        assert_eq!(index, 42, "data kept");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, schema_version());
        let has_index: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'node_plugins_caps')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(has_index);
        let has_fences: bool = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'fences')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(has_fences, "schema 4 adds the fence history");
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn meta_keys(conn: &Connection) -> Vec<String> {
        let mut s = conn.prepare("SELECT key FROM meta ORDER BY key").unwrap();
        s.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn tempfile_dir() -> PathBuf {
        // Tests run in parallel in one process: a counter keeps their directories apart.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "csivol-db-test-{}-{}-{n}",
            std::process::id(),
            Clock::wall().now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Every write request runs at the time the server's clock shows then (`Txn::now`):
    /// the clock the database was started with, not one of its own.
    #[tokio::test]
    async fn a_write_runs_at_the_time_of_the_clock_it_was_given() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::held_at(1_000);
        let db = Db::start(&dir.path().join("state.db"), clock.clone()).unwrap();
        assert_eq!(db.write(|ctx| Ok(ctx.now)).await.unwrap(), 1_000);
        clock.set(2_000);
        assert_eq!(db.write(|ctx| Ok(ctx.now)).await.unwrap(), 2_000);
    }

    /// A cached statement bound with a new `LIMIT` runs as prepared, on the writer's
    /// connection and on the readers' (a listing binds one per chunk it reads).
    #[tokio::test]
    async fn a_cached_statement_is_not_prepared_again_for_new_parameters() {
        const SQL: &str = "SELECT key FROM meta WHERE key > ?1 ORDER BY key LIMIT ?2";
        fn reprepared(c: &Connection) -> ApiResult<i32> {
            for limit in 1..=3 {
                let mut st = c.prepare_cached(SQL)?;
                st.query(params!["", limit])?.next()?;
            }
            let st = c.prepare_cached(SQL)?;
            Ok(st.get_status(rusqlite::StatementStatus::RePrepare))
        }
        let dir = tempfile_dir();
        let db = Db::start(&dir.join("state.db"), Clock::wall()).unwrap();
        assert_eq!(db.read(reprepared).await.unwrap(), 0, "a reader");
        assert_eq!(
            db.write(|ctx| reprepared(ctx.tx)).await.unwrap(),
            0,
            "the writer"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_lone_failed_or_panicking_write_leaves_nothing_and_the_next_one_commits() {
        let dir = tempfile_dir();
        let db = Db::start(&dir.join("state.db"), Clock::wall()).unwrap();
        let bad = db
            .write(|ctx| -> ApiResult<()> {
                ctx.tx
                    .execute("INSERT INTO meta (key, value) VALUES ('b', 1)", [])?;
                Err(ApiError::conflict("no"))
            })
            .await;
        assert_eq!(bad.unwrap_err().message, "no");
        let panicked = db
            .write(|ctx| -> ApiResult<()> {
                ctx.tx
                    .execute("INSERT INTO meta (key, value) VALUES ('p', 1)", [])?;
                panic!("a bug in a write request")
            })
            .await;
        assert!(panicked.is_err());
        db.write(|ctx| {
            ctx.tx
                .execute("INSERT INTO meta (key, value) VALUES ('a', 1)", [])?;
            Ok(())
        })
        .await
        .unwrap();
        let keys = db.read(|c| Ok(meta_keys(c))).await.unwrap();
        assert_eq!(keys, ["a", "index"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn failed_requests_roll_back_alone() {
        let dir = tempfile_dir();
        let db = Db::start(&dir.join("state.db"), Clock::wall()).unwrap();
        let ok = db.write(|ctx| {
            ctx.tx
                .execute("INSERT INTO meta (key, value) VALUES ('a', 1)", [])?;
            Ok(())
        });
        let bad = db.write(|ctx| -> ApiResult<()> {
            ctx.tx
                .execute("INSERT INTO meta (key, value) VALUES ('b', 1)", [])?;
            Err(ApiError::conflict("no"))
        });
        let (ok, bad) = tokio::join!(ok, bad);
        ok.unwrap();
        assert_eq!(bad.unwrap_err().message, "no");
        let keys = db
            .read(|c| {
                let mut s = c.prepare("SELECT key FROM meta ORDER BY key")?;
                let rows = s
                    .query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await
            .unwrap();
        assert_eq!(keys, ["a", "index"]);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
