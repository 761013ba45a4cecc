//! The cluster state database: schema migrations, one writer thread that commits requests
//! in groups (each request in its own savepoint, one fsync per group), and a pool of read
//! connections. A write is acknowledged only after its group's commit is durable.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use tokio::sync::{mpsc, oneshot};

use crate::error::{ApiError, ApiResult};
use crate::watch::{Generation, Hub, Key};

/// Schema migrations, in order; the database's `user_version` is how many were applied.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO meta (key, value) VALUES ('index', 1);

CREATE TABLE tokens (
    id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    node TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE nodes (
    name TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    registered_at INTEGER NOT NULL,
    lost_at INTEGER,
    fence_after_ms INTEGER,
    fenced_at INTEGER
);

CREATE TABLE node_plugins (
    node TEXT NOT NULL,
    plugin TEXT NOT NULL,
    registration TEXT NOT NULL,
    csi_node_id TEXT,
    max_volumes INTEGER NOT NULL,
    node_service INTEGER NOT NULL,
    controller INTEGER NOT NULL,
    controller_service INTEGER NOT NULL,
    controller_publish INTEGER NOT NULL,
    stage_unstage INTEGER NOT NULL,
    PRIMARY KEY (node, plugin)
);
CREATE INDEX node_plugins_plugin ON node_plugins (plugin);

CREATE TABLE volumes (
    name TEXT PRIMARY KEY,
    plugin TEXT NOT NULL,
    external_id TEXT NOT NULL,
    access_mode TEXT NOT NULL,
    attachment TEXT NOT NULL,
    fs_type TEXT NOT NULL,
    mount_flags TEXT NOT NULL,
    context TEXT NOT NULL,
    parameters TEXT NOT NULL,
    secrets TEXT NOT NULL,
    capacity_bytes INTEGER,
    lifecycle TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
);
CREATE INDEX volumes_plugin ON volumes (plugin);

CREATE TABLE claims (
    volume TEXT NOT NULL,
    alloc TEXT NOT NULL,
    node TEXT NOT NULL,
    mode TEXT NOT NULL,
    state TEXT NOT NULL,
    target_path TEXT,
    error TEXT,
    next_retry_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL,
    PRIMARY KEY (volume, alloc)
);
CREATE INDEX claims_node ON claims (node, state);

CREATE TABLE attachments (
    volume TEXT NOT NULL,
    node TEXT NOT NULL,
    state TEXT NOT NULL,
    publish_context TEXT NOT NULL,
    forced INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    next_retry_at INTEGER,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (volume, node)
);
CREATE INDEX attachments_node ON attachments (node, state);

CREATE TABLE ops (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    plugin TEXT NOT NULL,
    volume TEXT NOT NULL,
    node TEXT,
    host TEXT,
    attempt INTEGER NOT NULL DEFAULT 0,
    not_before INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    payload TEXT NOT NULL DEFAULT '{}',
    created_at INTEGER NOT NULL,
    assigned_at INTEGER
);
CREATE INDEX ops_host ON ops (host);
CREATE INDEX ops_plugin ON ops (plugin, host);
CREATE INDEX ops_volume ON ops (volume);

CREATE TABLE events (
    idx INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    kind TEXT NOT NULL,
    volume TEXT,
    node TEXT,
    alloc TEXT,
    actor TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX events_volume ON events (volume);
CREATE INDEX events_node ON events (node);
"#,
    r#"
-- Whether a plugin needs ControllerPublish is asked for every claim; answer it from an
-- index instead of every node's row.
CREATE INDEX node_plugins_caps ON node_plugins (plugin, controller, controller_publish);
CREATE INDEX node_plugins_service ON node_plugins (plugin, controller_service);
CREATE INDEX events_alloc ON events (alloc);
"#,
    r#"
-- What a claim waits for on its node (node truth: readiness is checked against the mount
-- table), and the plugin's abnormal volume condition.
ALTER TABLE claims ADD COLUMN waiting TEXT;
ALTER TABLE claims ADD COLUMN waiting_since INTEGER;
ALTER TABLE claims ADD COLUMN waiting_timeout_ms INTEGER;
ALTER TABLE claims ADD COLUMN condition TEXT;
"#,
    r#"
-- CI claims: leases (released when not renewed), labels, and the volume's queue (claims in
-- state 'queued', granted in arrival order: created_at, then rowid).
ALTER TABLE claims ADD COLUMN ttl_ms INTEGER;
ALTER TABLE claims ADD COLUMN expires_at INTEGER;
ALTER TABLE claims ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
-- A claim that was being released (or cleaned up after a failure) when its node was lost:
-- when the node returns, it is released through it, not resumed.
ALTER TABLE claims ADD COLUMN release_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX claims_expires ON claims (expires_at) WHERE expires_at IS NOT NULL;
"#,
    r#"
-- The cluster's identity, made once with the schema and kept by backups. The server also
-- writes it beside the database (`cluster.id`), so that a data dir whose database went
-- missing or empty is recognised as a lost cluster instead of becoming a new, empty one.
CREATE TABLE cluster (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
INSERT INTO cluster (id, created_at)
    VALUES (lower(hex(randomblob(16))), CAST(strftime('%s', 'now') AS INTEGER) * 1000);
"#,
    r#"
-- Fencing: a node's labels (as its agent reported them), the policy's failed attempts,
-- and every run of a fence method with its evidence.
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE nodes ADD COLUMN fence_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN fence_error TEXT;
ALTER TABLE nodes ADD COLUMN fence_failed_at INTEGER;

CREATE TABLE fences (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    at INTEGER NOT NULL,
    method TEXT NOT NULL,
    command TEXT NOT NULL,
    exit_status INTEGER,
    timed_out INTEGER NOT NULL,
    output TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL,
    ok INTEGER NOT NULL
);
CREATE INDEX fences_node ON fences (node, id);
"#,
    r#"
-- Whether a node takes new claims (eligible, ineligible, draining): an operator's choice
-- that a registration keeps.
ALTER TABLE nodes ADD COLUMN eligibility TEXT NOT NULL DEFAULT 'eligible';
"#,
    r#"
-- Token names (`token create --name alice`), shown as the actor in events; unique.
ALTER TABLE tokens ADD COLUMN name TEXT;
CREATE UNIQUE INDEX tokens_name ON tokens (name) WHERE name IS NOT NULL;
"#,
    r#"
-- Tokens expire and are revoked (kept, so that the refusal can say which); when each was
-- last used; which plugins' controllers a node token's node may host.
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER;
ALTER TABLE tokens ADD COLUMN controllers TEXT NOT NULL DEFAULT '[]';
-- Controller hosts an operator allowed (`csivol plugin controllers P --allow N`). The nodes
-- that hosted a controller before hosting was authorised keep hosting it: they were
-- accepted then, and refusing them at upgrade would stall every volume of their plugin.
CREATE TABLE controller_hosts (
    plugin TEXT NOT NULL,
    node TEXT NOT NULL,
    allowed_by TEXT NOT NULL,
    allowed_at INTEGER NOT NULL,
    PRIMARY KEY (plugin, node)
);
INSERT INTO controller_hosts (plugin, node, allowed_by, allowed_at)
    SELECT plugin, node, 'upgrade', CAST(strftime('%s', 'now') AS INTEGER) * 1000
    FROM node_plugins WHERE controller = 1;
"#,
    r#"
-- An expansion in progress or failed (`csivol volume expand`), as JSON: the capacity asked
-- for, its phase, and each node's NodeExpandVolume.
ALTER TABLE volumes ADD COLUMN expansion TEXT;
"#,
    r#"
-- Controller-side reconciliation: per plugin, what its last listings showed that differs
-- from csivol's attachments (JSON, `reconcile::Kept`), replaced at each listing.
CREATE TABLE controller_findings (
    plugin TEXT PRIMARY KEY,
    findings TEXT NOT NULL,
    listed_at INTEGER NOT NULL
);
"#,
    r#"
-- Topology: the segments each node plugin reports (NodeGetInfo's `accessible_topology`, read
-- by every claim, so a column rather than the registration's JSON; the registrations
-- recorded before fill it), the segments a volume is accessible from, and what
-- `volume create` asked for.
ALTER TABLE node_plugins ADD COLUMN topology TEXT NOT NULL DEFAULT '{}';
UPDATE node_plugins
    SET topology = COALESCE(json_extract(registration, '$.node.info.accessible_topology'), '{}')
    WHERE json_valid(registration);
ALTER TABLE volumes ADD COLUMN accessible_topology TEXT NOT NULL DEFAULT '[]';
ALTER TABLE volumes ADD COLUMN topology_request TEXT;
"#,
    r#"
-- Snapshots taken through a plugin's controller (`csivol snapshot create`): the volume they
-- were taken of (kept when that volume is deleted), the plugin's id and `ready_to_use`,
-- tracked until true.
CREATE TABLE snapshots (
    name TEXT PRIMARY KEY,
    volume TEXT NOT NULL,
    plugin TEXT NOT NULL,
    snapshot_id TEXT NOT NULL,
    state TEXT NOT NULL,
    ready_to_use INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    creation_time INTEGER,
    parameters TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
);
CREATE INDEX snapshots_volume ON snapshots (volume);
"#,
    r#"
-- One value sealed with the secrets key the cluster first started with: a server given
-- another key (a second server over etcd, a data dir with the wrong key file) is refused at
-- start, before it needs a secret it could not open.
CREATE TABLE secrets_check (id INTEGER PRIMARY KEY CHECK (id = 1), sealed TEXT NOT NULL);
"#,
    r#"
-- The labels an operator set on a node (`csivol node label`), kept apart from those its
-- agent reports (`labels`, replaced at every registration): only an operator's choose and
-- fill its fence method.
ALTER TABLE nodes ADD COLUMN operator_labels TEXT NOT NULL DEFAULT '{}';
"#,
    r#"
-- A planned stop (an agent's `node-stopping`): when, and whether it took its volumes down;
-- the node is `stopped` until it registers again or its grace runs out. And what each
-- node's agent last observed a plugin make for a claim (`plugin show`), kept across the
-- node's registrations.
ALTER TABLE nodes ADD COLUMN stopped_at INTEGER;
ALTER TABLE nodes ADD COLUMN stop_took_down INTEGER;
ALTER TABLE node_plugins ADD COLUMN observed TEXT;
"#,
    r#"
-- Mutable parameters (ControllerModifyVolume): what a volume has, as JSON, and a change
-- asked for and not applied yet, or refused (`csivol volume modify`).
ALTER TABLE volumes ADD COLUMN mutable_parameters TEXT NOT NULL DEFAULT '{}';
ALTER TABLE volumes ADD COLUMN modification TEXT;
"#,
    r#"
-- Live attach limits (NodeGetInfo read again while a node runs): when the server last asked
-- a node to read them (a ControllerPublishVolume to it answered RESOURCE_EXHAUSTED), and per
-- node plugin the last change of its limit (JSON: from, to, at_ms, reason) and when it was
-- last read.
ALTER TABLE nodes ADD COLUMN limits_refresh_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE node_plugins ADD COLUMN limit_change TEXT;
ALTER TABLE node_plugins ADD COLUMN limit_read_at INTEGER;
"#,
    r#"
-- Group snapshots (`csivol snapshot create --group`): several volumes of one plugin cut
-- together by its GroupController. The group's members are rows of `snapshots` naming it
-- in `group_name`; they are deleted with the group, never alone.
CREATE TABLE group_snapshots (
    name TEXT PRIMARY KEY,
    plugin TEXT NOT NULL,
    volumes TEXT NOT NULL,
    group_snapshot_id TEXT NOT NULL,
    state TEXT NOT NULL,
    ready_to_use INTEGER NOT NULL,
    creation_time INTEGER,
    parameters TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
);
ALTER TABLE snapshots ADD COLUMN group_name TEXT;
CREATE INDEX snapshots_group ON snapshots (group_name);
"#,
    r#"
-- Exact retries. The first answer to each mutating request that carried an
-- `Idempotency-Key`, per token and key: the request it answered (method, path and the query
-- that matters; a digest of its body), and the answer as sent (status, body, index), so that
-- a repeat is answered the same without acting again. And a tombstone per released claim
-- (volume, alloc): when and at which change index its release began or it was last
-- removed, so that a claim request sent before that is not recorded again. Both are kept
-- for the server's `request_memory` and pruned by the leader.
CREATE TABLE request_keys (
    token TEXT NOT NULL,
    key TEXT NOT NULL,
    request TEXT NOT NULL,
    digest TEXT NOT NULL,
    status INTEGER NOT NULL,
    answer TEXT NOT NULL,
    answer_index INTEGER,
    at INTEGER NOT NULL,
    PRIMARY KEY (token, key)
);
CREATE INDEX request_keys_at ON request_keys (at);
CREATE TABLE claim_tombstones (
    volume TEXT NOT NULL,
    alloc TEXT NOT NULL,
    released_at INTEGER NOT NULL,
    released_index INTEGER NOT NULL,
    PRIMARY KEY (volume, alloc)
);
CREATE INDEX claim_tombstones_at ON claim_tombstones (released_at);

-- One backend volume is one csivol volume: a registration looks its external id up among
-- the plugin's volumes. Not UNIQUE: a database an older csivol wrote may hold an id under
-- two names, which is kept and named (`serve --check`, `csivol status`), never a failed
-- migration.
CREATE INDEX volumes_external_id ON volumes (plugin, external_id);

-- A claim's drift (its node found it not mounted as its plugin made it, or registered or
-- came back without it) as a field of its own, JSON: what found it (`check`,
-- `registration`, `return`), when (`at`, unix ms) and why (`reason`), until its republish
-- repairs it. Before, it was kept as the claim's error, `drift: WHY`: such a claim gets the
-- field (found by what the words say, at the claim's last change) and no error, which
-- shows the same words while no other error replaces them.
ALTER TABLE claims ADD COLUMN drift TEXT;
UPDATE claims SET
    drift = json_object(
        'found', CASE
            WHEN substr(error, 8) GLOB 'node * registered without it mounted' THEN 'registration'
            WHEN substr(error, 8) GLOB 'node * came back without it mounted' THEN 'return'
            ELSE 'check'
        END,
        'at', updated_at,
        'reason', substr(error, 8)
    ),
    error = NULL
    WHERE substr(error, 1, 7) = 'drift: ';
"#,
];

/// A migration compiled only into test builds (feature `schema-next`) and applied only
/// when [`SCHEMA_NEXT_ENV`] is set: the same binary then plays the next version of
/// csivol-server in rolling-upgrade tests. It adds a column and fills it, so that a test
/// sees the rows rewritten.
#[cfg(feature = "schema-next")]
const NEXT_MIGRATION: &str = r#"
ALTER TABLE volumes ADD COLUMN upgrade_probe TEXT;
UPDATE volumes SET upgrade_probe = 'migrated';
"#;

/// Set (to anything) in a test build's environment: this csivol-server knows one schema
/// version more, [`NEXT_MIGRATION`].
#[cfg(feature = "schema-next")]
pub const SCHEMA_NEXT_ENV: &str = "CSIVOL_TEST_SCHEMA_NEXT";

/// The migrations this build knows, in order.
fn migrations() -> &'static [&'static str] {
    #[cfg(feature = "schema-next")]
    {
        static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        if std::env::var_os(SCHEMA_NEXT_ENV).is_some() {
            return ALL.get_or_init(|| {
                let mut all = MIGRATIONS.to_vec();
                all.push(NEXT_MIGRATION);
                all
            });
        }
    }
    MIGRATIONS
}

/// The schema version whose migration holds `sql` (for tests of one migration).
#[cfg(test)]
pub(super) fn version_of(sql: &str) -> Option<i64> {
    MIGRATIONS
        .iter()
        .position(|m| m.contains(sql))
        .map(|i| i as i64 + 1)
}

/// How many schema migrations this build knows: a database at this `user_version` is current.
pub fn schema_version() -> i64 {
    migrations().len() as i64
}

/// The cluster id recorded in the database (every migrated database has one).
pub fn cluster_id(conn: &Connection) -> rusqlite::Result<String> {
    conn.query_row("SELECT id FROM cluster", [], |r| r.get(0))
}

/// The current time in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Distinct statements the server runs; all of them stay prepared.
const STATEMENT_CACHE: usize = 256;

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

/// One plan per statement whatever its parameters (SQLite's query planner stability
/// guarantee): without it SQLite prepares a cached statement again each time a parameter
/// it planned with (a bound `LIMIT ?`) is bound anew, which a listing does for every chunk
/// it reads.
fn plan_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
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

/// Applies the migrations from schema version `from` to `to`, in one transaction.
pub fn migrate(conn: &mut Connection, from: i64, to: i64) -> anyhow::Result<()> {
    use anyhow::Context;
    let tx = conn.transaction()?;
    for (i, sql) in migrations()
        .iter()
        .enumerate()
        .take(to as usize)
        .skip(from as usize)
    {
        tx.execute_batch(sql)
            .with_context(|| format!("failed to migrate to schema version {}", i + 1))?;
    }
    tx.pragma_update(None, "user_version", to)?;
    tx.commit()?;
    Ok(())
}

/// What a write request sees: the open transaction, the index its group commits at, the
/// time, and the keys it changes.
pub struct WriteCtx<'a> {
    pub tx: &'a rusqlite::Transaction<'a>,
    pub index: u64,
    pub now: i64,
    pub(super) touched: Vec<Key>,
    pub(super) on_commit: Vec<AfterCommit>,
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
    /// A new request's context in `tx`.
    pub(crate) fn new<'a>(tx: &'a rusqlite::Transaction<'a>, index: u64) -> WriteCtx<'a> {
        WriteCtx {
            tx,
            index,
            now: now_ms(),
            touched: Vec::new(),
            on_commit: Vec::new(),
            memo: Memo::default(),
        }
    }
}

pub(super) type AfterCommit = Box<dyn FnOnce() + Send>;

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
) -> Result<GroupEffects, String> {
    let each = savepoints == Savepoints::Each;
    // Prepared once per connection (its statement cache), not parsed again per request.
    let run = |sql: &str| -> Result<(), String> {
        (tx.prepare_cached(sql).and_then(|mut s| s.execute([])))
            .map(drop)
            .map_err(|e| e.to_string())
    };
    let mut effects = GroupEffects::default();
    for job in group.iter_mut() {
        if each {
            run("SAVEPOINT job")?;
        }
        let mut ctx = WriteCtx::new(tx, index);
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
) -> Result<GroupEffects, String> {
    {
        let tx = conn.transaction().map_err(|e| e.to_string())?;
        let effects = run_group(&tx, group, index, Savepoints::None)?;
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
    let effects = run_group(&tx, group, index, Savepoints::Each)?;
    if effects.kept > 0 {
        tx.commit().map_err(|e| e.to_string())?;
    }
    Ok(effects)
}

/// The database handle: a writer thread fed by a channel, and read connections.
#[derive(Clone)]
pub struct Db {
    jobs: mpsc::UnboundedSender<BoxJob>,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// Bounds concurrent reads, and so read connections and their page caches.
    read_slots: Arc<tokio::sync::Semaphore>,
    path: PathBuf,
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
        f.debug_struct("Db").field("path", &self.path).finish()
    }
}

/// Most reads running at once (each holds a read connection while it runs). Reads are
/// short; more of them than cores only adds connections, threads and memory.
const READERS: usize = 8;

/// Most requests committed together in one transaction.
const MAX_GROUP: usize = 512;

/// What a writer thread is handed: the job channel, the hub and the error slot.
pub(crate) struct WriterParts {
    pub rx: mpsc::UnboundedReceiver<BoxJob>,
    pub hub: Arc<Hub>,
    pub write_error: Arc<Mutex<Option<String>>>,
    pub tokens_changed: Arc<tokio::sync::Notify>,
    pub schema: Arc<std::sync::atomic::AtomicI64>,
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
    /// it), and nothing in the file says so for certain.
    pub fn start(path: &Path) -> anyhow::Result<Self> {
        let (conn, index) = open(path)?;
        let events_from = last_event(&conn)?;
        Self::start_with(
            path,
            index,
            (Generation::mint(), events_from),
            schema_version(),
            move |parts| {
                writer(conn, index, parts);
            },
        )
    }

    /// A database at `path` whose writer thread runs `writer` (the SQLite writer, or the
    /// etcd store's over its mirror) from change index `index` of `generation` (its event
    /// log's last entry beside it), at schema version `schema`.
    pub(crate) fn start_with(
        path: &Path,
        index: u64,
        (generation, events_from): (Generation, u64),
        schema: i64,
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
        };
        std::thread::Builder::new()
            .name("csivol-db-writer".into())
            .spawn(move || writer(parts))?;
        Ok(Self {
            jobs,
            readers: Arc::new(Mutex::new(Vec::new())),
            read_slots: Arc::new(tokio::sync::Semaphore::new(READERS)),
            path: path.to_owned(),
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
        &self.path
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
        let (reply, answer) = oneshot::channel();
        let job: BoxJob = Box::new(Request {
            led,
            f,
            result: None,
            reply,
        });
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
        let permit = self.read_permit().await?;
        let readers = Arc::clone(&self.readers);
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let r = read_on(&readers, &path, f);
            drop(permit);
            r
        })
        .await
        .map_err(|e| ApiError::internal(format!("read task failed: {e}")))?
    }

    /// [`Db::read`] on the calling thread, for reads bounded by a few rows (one volume,
    /// one node's changed volumes): a WAL reader never waits for the writer, and such a
    /// read costs less than the two thread hand-offs of a blocking task.
    pub async fn read_small<T>(&self, f: impl FnOnce(&Connection) -> ApiResult<T>) -> ApiResult<T> {
        let _permit = self.read_permit().await?;
        read_on(&self.readers, &self.path, f)
    }

    async fn read_permit(&self) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.read_slots)
            .acquire_owned()
            .await
            .map_err(|_| ApiError::unavailable("the database is closing"))
    }
}

/// Runs `f` in a read transaction on a pooled read connection (opened when none is free).
fn read_on<T>(
    readers: &Mutex<Vec<Connection>>,
    path: &Path,
    f: impl FnOnce(&Connection) -> ApiResult<T>,
) -> ApiResult<T> {
    let conn = readers.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let conn = match conn {
        Some(c) => c,
        None => {
            let c = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            c.busy_timeout(std::time::Duration::from_secs(10))?;
            c.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            plan_once(&c)?;
            c
        }
    };
    let result = {
        let tx = conn.unchecked_transaction()?;
        let r = f(&tx);
        drop(tx);
        r
    };
    readers.lock().unwrap_or_else(|e| e.into_inner()).push(conn);
    result
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

fn writer(mut conn: Connection, mut index: u64, parts: WriterParts) {
    let WriterParts {
        mut rx,
        hub,
        write_error,
        ..
    } = parts;
    while let Some(first) = rx.blocking_recv() {
        let mut group = take_group(first, &mut rx);
        let next = index + 1;
        let committed = commit_group(&mut conn, &mut group, next);
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

/// Reads a single optional row.
pub fn optional<T>(r: rusqlite::Result<T>) -> ApiResult<Option<T>> {
    Ok(r.optional()?)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

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
            conn.execute_batch(MIGRATIONS[0]).unwrap();
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

    fn tempfile_dir() -> PathBuf {
        // Tests run in parallel in one process: a counter keeps their directories apart.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!(
            "csivol-db-test-{}-{}-{n}",
            std::process::id(),
            now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

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
        let dir = tempfile_dir();
        let (mut conn, index) = open(&dir.join("state.db")).unwrap();
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
            let effects = run_group(&tx, &mut group, index + 1, Savepoints::None).unwrap();
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
        let effects = commit_group(&mut conn, &mut group, index + 2).unwrap();
        assert_eq!(effects.kept, 2);
        assert_eq!(c.load(Ordering::SeqCst), 2, "ran again with savepoints");
        assert_eq!(meta_keys(&conn), ["a", "b", "c", "e", "index"]);
        assert_eq!(index_now(&conn), index + 2);

        // Alone and failing, or all failing: nothing kept, no change index spent.
        let f = runs();
        let effects = commit_group(&mut conn, &mut [insert("f", true, &f)], index + 3).unwrap();
        assert_eq!((effects.kept, f.load(Ordering::SeqCst)), (0, 1));
        let effects = commit_group(
            &mut conn,
            &mut [insert("f", true, &f), insert("g", true, &f)],
            index + 3,
        )
        .unwrap();
        assert_eq!(effects.kept, 0);
        assert_eq!(meta_keys(&conn), ["a", "b", "c", "e", "index"]);
        assert_eq!(index_now(&conn), index + 2);
        std::fs::remove_dir_all(dir).unwrap();
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
        let db = Db::start(&dir.join("state.db")).unwrap();
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
        let db = Db::start(&dir.join("state.db")).unwrap();
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
        let db = Db::start(&dir.join("state.db")).unwrap();
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
