//! Backups and restores of a cluster kept in etcd, through csivol: a backup is every key
//! under the prefix read at one etcd revision (one consistent snapshot, taken while the
//! servers run) and written as the same SQLite file a single server's backup is, so either
//! store restores either; a restore copies a backup into an empty prefix and checks it row
//! by row.

use std::path::Path;

use anyhow::{Context, bail};
use rusqlite::{Connection, OpenFlags};

use super::EtcdConfig;
use super::mirror::{self, Head, KeyKind, Keys};
use crate::backup::{self, Summary};
use crate::db;

/// Writes the state under `cfg.prefix`, as etcd holds it now, to the backup file `to`.
pub async fn backup(cfg: &EtcdConfig, to: &Path) -> anyhow::Result<Summary> {
    let client = cfg.client()?;
    let keys = Keys::new(&cfg.prefix);
    let (revision, kvs) = super::read_state(&client, cfg, &keys).await?;
    let rows: Vec<(Vec<u8>, Vec<u8>)> = kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
    let head = cluster_head(&keys, &rows, &cfg.prefix)?;
    let to = to.to_owned();
    let summary = tokio::task::spawn_blocking(move || {
        backup::write_file(&to, |conn| load(conn, head.schema, &keys, &rows))
    })
    .await
    .context("the backup task failed")??;
    tracing::debug!(revision, "backed up the state as of this etcd revision");
    Ok(summary)
}

/// The head of the cluster in `rows`, refused when there is none, when a migration is
/// half done, or when it is newer than this build.
fn cluster_head(keys: &Keys, rows: &[(Vec<u8>, Vec<u8>)], prefix: &str) -> anyhow::Result<Head> {
    let Some((_, value)) = rows
        .iter()
        .find(|(k, _)| keys.parse(k) == Some(KeyKind::Head))
    else {
        bail!(
            "etcd holds no csivol cluster under {prefix}\nhint: pass the --etcd-prefix the servers run with"
        );
    };
    let head = Head::parse(value).map_err(anyhow::Error::msg)?;
    if head.migrating {
        bail!(
            "a schema migration of the cluster under {prefix} is under way: its rows are half \
             rewritten\nhint: let `csivol-server upgrade finalize` finish (run it again if it \
             stopped), then back up"
        );
    }
    if head.schema > db::schema_version() {
        bail!(
            "the cluster under {prefix} has schema version {}, newer than this csivol-server \
             understands ({})\nhint: back up with the servers' csivol-server",
            head.schema,
            db::schema_version()
        );
    }
    Ok(head)
}

/// Fills the empty database `conn` with `rows` at schema version `schema`, and checks that
/// every row of etcd is in it.
fn load(
    conn: &mut Connection,
    schema: i64,
    keys: &Keys,
    rows: &[(Vec<u8>, Vec<u8>)],
) -> anyhow::Result<()> {
    db::migrate(conn, 0, schema)?;
    let tables = mirror::tables(conn)?;
    mirror::load(conn, &tables, keys, rows).map_err(anyhow::Error::msg)?;
    mirror::check(conn, &tables, keys, rows).map_err(anyhow::Error::msg)
}

/// A backup read and checked for a restore into etcd, not written yet.
pub struct Prepared {
    pub summary: Summary,
    /// What it brings back: the prefix it goes to holds nothing now.
    pub plan: crate::store::sqlite::restore::Plan,
    rows: Vec<(Vec<u8>, Vec<u8>)>,
    index: u64,
}

/// Reads and checks the backup `from` for [`restore`]: migrated to this build's schema (as
/// a server migrates a restored `state.db`) and marked restored, so that the servers that
/// start on it hold back what two nodes must not hold until the nodes said what they hold.
pub async fn prepare(cfg: &EtcdConfig, from: &Path) -> anyhow::Result<Prepared> {
    use crate::store::sqlite::restore::{Holdings, Plan, mark};
    let keys = Keys::new(&cfg.prefix);
    let from_path = from.to_owned();
    tokio::task::spawn_blocking(move || {
        let src = Connection::open_with_flags(&from_path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("failed to open the backup {}", from_path.display()))?;
        let summary = backup::verify(&src, &from_path)?;
        let mut mem = Connection::open_in_memory()?;
        rusqlite::backup::Backup::new(&src, &mut mem)?
            .run_to_completion(i32::MAX, std::time::Duration::ZERO, None)
            .with_context(|| format!("failed to read {}", from_path.display()))?;
        db::migrate(&mut mem, summary.schema, db::schema_version())?;
        mark(&mem)?;
        let plan = Plan::new(&Holdings::default(), &Holdings::read(&mem)?);
        let tables = mirror::tables(&mem)?;
        let rows = mirror::all_rows(&mem, &tables, &keys)?;
        let index: i64 = mem.query_row("SELECT value FROM meta WHERE key = 'index'", [], |r| {
            r.get(0)
        })?;
        anyhow::Ok(Prepared {
            summary,
            plan,
            rows,
            index: index as u64,
        })
    })
    .await
    .context("the restore task failed")?
}

/// Copies a [`prepare`]d backup `from` into the empty prefix `cfg.prefix`; says what it
/// copied.
pub async fn restore(cfg: &EtcdConfig, from: &Path, prepared: &Prepared) -> anyhow::Result<String> {
    let client = cfg.client()?;
    super::migrate::copy_into(&client, &cfg.prefix, &prepared.rows, prepared.index)
        .await
        .with_context(|| format!("failed to restore {} into etcd", from.display()))
}
