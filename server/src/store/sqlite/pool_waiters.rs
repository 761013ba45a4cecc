//! Pools' lines (`pool_waiters`): the claims waiting for any member of a pool, in arrival
//! order. The table comes with the migration that brings pools; a schema without it keeps
//! no line (every read finds it empty, and joining one is refused).

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::{PoolWaiterRow, to_json};
use crate::store::sqlite::writer::WriteCtx;

fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "pool_waiters")
}

/// The claims waiting in `pool`'s line (every pool's, without one), first in line first.
pub fn line(conn: &Connection, pool: Option<&str>) -> ApiResult<Vec<PoolWaiterRow>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT pool, request, claimer, actor, bounded, at, expires_at, held FROM pool_waiters \
         WHERE ?1 IS NULL OR pool = ?1 ORDER BY at, id",
    )?;
    type Raw = (
        String,
        String,
        String,
        String,
        bool,
        i64,
        Option<i64>,
        Option<String>,
    );
    let rows = stmt
        .query_map([pool], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?
        .collect::<Result<Vec<Raw>, _>>()?;
    rows.into_iter()
        .map(
            |(pool, request, claimer, actor, bounded, at, expires_at, held)| {
                let request = serde_json::from_str(&request).map_err(|e| {
                    ApiError::internal(format!("a waiter of pool `{pool}` holds no claim: {e}"))
                })?;
                Ok(PoolWaiterRow {
                    pool,
                    request,
                    claimer,
                    actor,
                    bounded,
                    at,
                    expires_at,
                    held,
                })
            },
        )
        .collect()
}

/// Records `w` in its pool's line, or changes its lease and held member; `None` takes
/// `alloc` out of `pool`'s line.
pub fn put(
    ctx: &WriteCtx<'_>,
    pool: &str,
    alloc: &str,
    w: Option<&PoolWaiterRow>,
) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return match w {
            None => Ok(()),
            Some(_) => Err(ApiError::invalid(
                "this cluster runs on a schema that keeps no pool's line",
            )
            .with_hint("run `csivol-server upgrade finalize` once every server runs this release")),
        };
    }
    match w {
        None => exec(
            ctx.tx,
            "DELETE FROM pool_waiters WHERE pool = ?1 AND alloc = ?2",
            [pool, alloc],
        )?,
        Some(w) => exec(
            ctx.tx,
            "INSERT INTO pool_waiters (pool, alloc, node, request, claimer, actor, bounded, at, \
             expires_at, held) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
             ON CONFLICT (pool, alloc) DO UPDATE SET expires_at = ?9, held = ?10",
            params![
                pool,
                alloc,
                w.request.claim.node,
                to_json(&w.request),
                w.claimer,
                w.actor,
                w.bounded,
                w.at,
                w.expires_at,
                w.held
            ],
        )?,
    };
    Ok(())
}
