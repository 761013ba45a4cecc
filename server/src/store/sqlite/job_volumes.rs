//! Per-job volumes (`job_volumes`, a row per volume made for one job's claim: its alloc,
//! the name the job gave it, its node, and until when a failed job's volume is kept).
//!
//! The table comes with one schema migration. With the etcd store a server may run on the
//! schema before it until `upgrade finalize`: making a per-job volume is then refused (a
//! server of the previous release would never delete it), and no volume reads as one.

use rusqlite::{Connection, Row, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::JobVolumeRow;
use crate::store::sqlite::writer::WriteCtx;

const COLUMNS: &str = "volume, alloc, name, node, created_at, kept_until";

/// Whether the schema has the table (asked of the connection itself: a mirror migrated in
/// place by `upgrade finalize` has it from that moment on).
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "job_volumes")
}

fn row(r: &Row<'_>) -> rusqlite::Result<JobVolumeRow> {
    Ok(JobVolumeRow {
        volume: r.get(0)?,
        alloc: r.get(1)?,
        name: r.get(2)?,
        node: r.get(3)?,
        created_at: r.get(4)?,
        kept_until: r.get(5)?,
    })
}

/// The per-job record of `volume`; none for any other volume, or below the schema.
pub fn get(conn: &Connection, volume: &str) -> ApiResult<Option<JobVolumeRow>> {
    if !kept(conn)? {
        return Ok(None);
    }
    let mut stmt = conn.prepare_cached(fixed_sql!(
        "SELECT {COLUMNS} FROM job_volumes WHERE volume = ?1"
    ))?;
    let mut rows = stmt.query_map([volume], row)?;
    Ok(rows.next().transpose()?)
}

/// The per-job volumes made for `alloc` under `name`, oldest first (a reused alloc may
/// have an older one still being deleted).
pub fn of_alloc(conn: &Connection, alloc: &str, name: &str) -> ApiResult<Vec<JobVolumeRow>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(fixed_sql!(
        "SELECT {COLUMNS} FROM job_volumes WHERE alloc = ?1 AND name = ?2 \
         ORDER BY created_at, volume"
    ))?;
    Ok(stmt
        .query_map(params![alloc, name], row)?
        .collect::<Result<Vec<_>, _>>()?)
}

/// Every per-job volume, by name (for the leader's sweep).
pub fn all(conn: &Connection) -> ApiResult<Vec<JobVolumeRow>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(fixed_sql!(
        "SELECT {COLUMNS} FROM job_volumes ORDER BY volume"
    ))?;
    Ok(stmt.query_map([], row)?.collect::<Result<Vec<_>, _>>()?)
}

/// The per-job records of the volumes after `after` up to `last` by name, for a
/// listing's chunk.
pub fn between(
    conn: &Connection,
    after: &str,
    last: &str,
) -> ApiResult<std::collections::HashMap<String, csivol_api::JobVolume>> {
    let mut out = std::collections::HashMap::new();
    if !kept(conn)? {
        return Ok(out);
    }
    let mut stmt = conn.prepare_cached(fixed_sql!(
        "SELECT {COLUMNS} FROM job_volumes WHERE volume > ?1 AND volume <= ?2"
    ))?;
    for r in stmt.query_map(params![after, last], row)? {
        let r = r?;
        out.insert(r.volume.clone(), r.to_api());
    }
    Ok(out)
}

/// Records a per-job volume, or changes its record. Refused below the schema that keeps
/// them, never dropped.
pub fn put(ctx: &WriteCtx<'_>, j: &JobVolumeRow) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Err(ApiError::invalid(
            "this cluster runs on the previous schema, which does not keep per-job volumes \
             (`--fresh`): a server of the previous release would never delete them",
        )
        .with_hint("run `csivol-server upgrade finalize` once every server runs this release"));
    }
    exec(
        ctx.tx,
        "INSERT INTO job_volumes (volume, alloc, name, node, created_at, kept_until) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (volume) DO UPDATE SET alloc = ?2, \
         name = ?3, node = ?4, created_at = ?5, kept_until = ?6",
        params![
            j.volume,
            j.alloc,
            j.name,
            j.node,
            j.created_at,
            j.kept_until
        ],
    )?;
    Ok(())
}

/// Forgets the per-job record of a volume that is gone.
pub fn remove(ctx: &WriteCtx<'_>, volume: &str) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "DELETE FROM job_volumes WHERE volume = ?1",
        [volume],
    )?;
    Ok(())
}
