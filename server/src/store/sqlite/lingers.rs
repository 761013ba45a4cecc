//! Stagings kept after a release (`lingers`): a row per volume and node whose staging the
//! node keeps with no claim, with the alloc whose release left it and until when.
//!
//! The table comes with the schema migration that brings pools. With the etcd store a
//! server may run on the schema before it until `upgrade finalize`: nothing lingers then
//! (no row is written, none is read), and every release takes its staging down.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::ApiResult;
use crate::model::LingerRow;
use crate::store::sqlite::writer::WriteCtx;

fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "lingers")
}

fn select(
    conn: &Connection,
    filter: &str,
    args: impl rusqlite::Params,
) -> ApiResult<Vec<LingerRow>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT volume, node, alloc, since, until FROM lingers WHERE {filter} ORDER BY volume, node"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(args, |r| {
            Ok(LingerRow {
                volume: r.get(0)?,
                node: r.get(1)?,
                alloc: r.get(2)?,
                since: r.get(3)?,
                until: r.get(4)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The lingers of a volume, or of a node, or both.
pub fn of(
    conn: &Connection,
    volume: Option<&str>,
    node: Option<&str>,
) -> ApiResult<Vec<LingerRow>> {
    select(
        conn,
        "(?1 IS NULL OR volume = ?1) AND (?2 IS NULL OR node = ?2)",
        params![volume, node],
    )
}

/// The lingers of the volumes after `after` up to `last` by name, for a listing's chunk.
pub fn between(conn: &Connection, after: &str, last: &str) -> ApiResult<Vec<LingerRow>> {
    select(conn, "volume > ?1 AND volume <= ?2", params![after, last])
}

/// The lingers whose time ran out by `now`.
pub fn due(conn: &Connection, now: i64) -> ApiResult<Vec<LingerRow>> {
    select(conn, "until <= ?1", [now])
}

/// Records a linger (nothing below the schema that keeps them: nothing lingers there).
pub fn put(ctx: &WriteCtx<'_>, l: &LingerRow) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "INSERT INTO lingers (volume, node, alloc, since, until) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT (volume, node) DO UPDATE SET alloc = ?3, since = ?4, until = ?5",
        params![l.volume, l.node, l.alloc, l.since, l.until],
    )?;
    Ok(())
}

/// Ends a linger.
pub fn delete(ctx: &WriteCtx<'_>, volume: &str, node: &str) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "DELETE FROM lingers WHERE volume = ?1 AND node = ?2",
        params![volume, node],
    )?;
    Ok(())
}
