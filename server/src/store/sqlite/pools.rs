//! Volume labels and pools (`volume_labels`, `pools`, `volume_cache_keys`, `pool_claims`):
//! a volume's labels, the pools whose selectors choose their members by them, each
//! member's last cache key, and every claim made from a pool with why its member.
//!
//! The tables come with one schema migration. With the etcd store a server may run on
//! the schema before it until `upgrade finalize`: labelling a volume, making a pool and
//! claiming from one are then refused (a server of the previous release would neither
//! keep nor honour them), and every volume reads as unlabelled, in no pool.

use std::collections::BTreeMap;

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::{PoolClaimRow, PoolRow, to_json};
use crate::store::sqlite::db::optional;
use crate::store::sqlite::writer::WriteCtx;

/// Whether the schema has the tables (asked of the connection itself: a mirror migrated
/// in place by `upgrade finalize` has them from that moment on).
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "pools")
}

/// The refusal of a change the previous schema cannot keep.
fn below_schema() -> ApiError {
    ApiError::invalid(
        "this cluster runs on the previous schema, which keeps no volume labels and no pools",
    )
    .with_hint("run `csivol-server upgrade finalize` once every server runs this release")
}

fn map(what: &str, json: &str) -> ApiResult<BTreeMap<String, String>> {
    serde_json::from_str(json)
        .map_err(|e| ApiError::internal(format!("{what} holds no JSON object of strings: {e}")))
}

/// A volume's labels; none where the schema does not keep them.
pub fn labels(conn: &Connection, volume: &str) -> ApiResult<BTreeMap<String, String>> {
    if !kept(conn)? {
        return Ok(BTreeMap::new());
    }
    let json: Option<String> = optional(
        conn.prepare_cached("SELECT labels FROM volume_labels WHERE volume = ?1")?
            .query_row([volume], |r| r.get(0)),
    )?;
    json.map_or(Ok(BTreeMap::new()), |j| map("volume_labels", &j))
}

/// Every labelled volume with its labels, by name.
pub fn all_labels(conn: &Connection) -> ApiResult<Vec<(String, BTreeMap<String, String>)>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt =
        conn.prepare_cached("SELECT volume, labels FROM volume_labels ORDER BY volume")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter()
        .map(|(v, j)| Ok((v, map("volume_labels", &j)?)))
        .collect()
}

/// The labels of the volumes after `after` up to `last` by name, for a listing's chunk.
pub fn labels_between(
    conn: &Connection,
    after: &str,
    last: &str,
) -> ApiResult<std::collections::HashMap<String, BTreeMap<String, String>>> {
    let mut out = std::collections::HashMap::new();
    if !kept(conn)? {
        return Ok(out);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT volume, labels FROM volume_labels WHERE volume > ?1 AND volume <= ?2",
    )?;
    let rows = stmt
        .query_map(params![after, last], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    for (v, j) in rows {
        out.insert(v, map("volume_labels", &j)?);
    }
    Ok(out)
}

/// Records a volume's labels (none removes its row). Below the schema that keeps them,
/// labels are refused, never dropped.
pub fn put_labels(
    ctx: &WriteCtx<'_>,
    volume: &str,
    labels: &BTreeMap<String, String>,
) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return if labels.is_empty() {
            Ok(())
        } else {
            Err(below_schema())
        };
    }
    if labels.is_empty() {
        exec(
            ctx.tx,
            "DELETE FROM volume_labels WHERE volume = ?1",
            [volume],
        )?;
        return Ok(());
    }
    exec(
        ctx.tx,
        "INSERT INTO volume_labels (volume, labels) VALUES (?1, ?2) \
         ON CONFLICT (volume) DO UPDATE SET labels = ?2",
        params![volume, to_json(labels)],
    )?;
    Ok(())
}

fn pool_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, Option<i64>, i64)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
}

fn to_pool(
    (name, selector, linger, created_at): (String, String, Option<i64>, i64),
) -> ApiResult<PoolRow> {
    Ok(PoolRow {
        selector: map("pools.selector", &selector)?,
        name,
        linger_ms: linger.map(|l| l.max(0) as u64),
        created_at,
    })
}

/// Every pool, by name; none where the schema does not keep them.
pub fn pools(conn: &Connection) -> ApiResult<Vec<PoolRow>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn
        .prepare_cached("SELECT name, selector, linger_ms, created_at FROM pools ORDER BY name")?;
    let rows = stmt
        .query_map([], pool_of)?
        .collect::<Result<Vec<_>, _>>()?;
    rows.into_iter().map(to_pool).collect()
}

/// One pool.
pub fn pool(conn: &Connection, name: &str) -> ApiResult<Option<PoolRow>> {
    if !kept(conn)? {
        return Ok(None);
    }
    let row = optional(
        conn.prepare_cached(
            "SELECT name, selector, linger_ms, created_at FROM pools WHERE name = ?1",
        )?
        .query_row([name], pool_of),
    )?;
    row.map(to_pool).transpose()
}

/// Records a pool (refused below the schema that keeps pools).
pub fn put_pool(ctx: &WriteCtx<'_>, p: &PoolRow) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Err(below_schema());
    }
    exec(
        ctx.tx,
        "INSERT INTO pools (name, selector, linger_ms, created_at) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (name) DO UPDATE SET selector = ?2, linger_ms = ?3",
        params![
            p.name,
            to_json(&p.selector),
            p.linger_ms.map(|l| l as i64),
            p.created_at
        ],
    )?;
    Ok(())
}

/// Removes a pool and its claims' history.
pub fn delete_pool(ctx: &WriteCtx<'_>, name: &str) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(ctx.tx, "DELETE FROM pools WHERE name = ?1", [name])?;
    exec(ctx.tx, "DELETE FROM pool_claims WHERE pool = ?1", [name])?;
    Ok(())
}

/// A volume's last cache key and when it was recorded, at a successful job's release.
pub fn cache_key(conn: &Connection, volume: &str) -> ApiResult<Option<(String, i64)>> {
    if !kept(conn)? {
        return Ok(None);
    }
    optional(
        conn.prepare_cached("SELECT cache_key, at FROM volume_cache_keys WHERE volume = ?1")?
            .query_row([volume], |r| Ok((r.get(0)?, r.get(1)?))),
    )
}

/// Records a volume's cache key (none forgets it).
pub fn set_cache_key(
    ctx: &WriteCtx<'_>,
    volume: &str,
    key: Option<&str>,
    at: i64,
) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    match key {
        None => exec(
            ctx.tx,
            "DELETE FROM volume_cache_keys WHERE volume = ?1",
            [volume],
        )?,
        Some(k) => exec(
            ctx.tx,
            "INSERT INTO volume_cache_keys (volume, cache_key, at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (volume) DO UPDATE SET cache_key = ?2, at = ?3",
            params![volume, k, at],
        )?,
    };
    Ok(())
}

const CLAIM_COLUMNS: &str =
    "id, pool, volume, alloc, node, cache_key, choice, why, at, released_at";

fn claim_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<PoolClaimRow> {
    let choice: String = r.get(6)?;
    Ok(PoolClaimRow {
        id: r.get(0)?,
        pool: r.get(1)?,
        volume: r.get(2)?,
        alloc: r.get(3)?,
        node: r.get(4)?,
        cache_key: r.get(5)?,
        choice: choice.parse().unwrap_or(csivol_api::PoolChoice::Cold),
        why: r.get(7)?,
        at: r.get(8)?,
        released_at: r.get(9)?,
    })
}

/// A pool's last `n` claims, newest first.
pub fn recent_claims(conn: &Connection, pool: &str, n: u32) -> ApiResult<Vec<PoolClaimRow>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(fixed_sql!(
        "SELECT {CLAIM_COLUMNS} FROM pool_claims WHERE pool = ?1 ORDER BY id DESC LIMIT ?2"
    ))?;
    let rows = stmt
        .query_map(params![pool, n], claim_of)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// The claim from a pool that `alloc` holds on `volume`, not released yet.
pub fn open_claim(conn: &Connection, volume: &str, alloc: &str) -> ApiResult<Option<PoolClaimRow>> {
    if !kept(conn)? {
        return Ok(None);
    }
    optional(
        conn.prepare_cached(fixed_sql!(
            "SELECT {CLAIM_COLUMNS} FROM pool_claims WHERE volume = ?1 AND alloc = ?2 \
             AND released_at IS NULL ORDER BY id DESC LIMIT 1"
        ))?
        .query_row([volume, alloc], claim_of),
    )
}

/// Records a claim made from a pool (its `id` and `released_at` are ignored).
pub fn insert_claim(ctx: &WriteCtx<'_>, c: &PoolClaimRow) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Err(below_schema());
    }
    exec(
        ctx.tx,
        "INSERT INTO pool_claims (pool, volume, alloc, node, cache_key, choice, why, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        params![
            c.pool,
            c.volume,
            c.alloc,
            c.node,
            c.cache_key,
            c.choice.as_str(),
            c.why,
            c.at
        ],
    )?;
    Ok(())
}

/// Marks `alloc`'s claims from a pool on `volume` released at `at`.
pub fn close_claims(ctx: &WriteCtx<'_>, volume: &str, alloc: &str, at: i64) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "UPDATE pool_claims SET released_at = ?3 WHERE volume = ?1 AND alloc = ?2 \
         AND released_at IS NULL",
        params![volume, alloc, at],
    )?;
    Ok(())
}

/// Forgets what a deleted volume had: its labels and its cache key.
pub fn forget_volume(ctx: &WriteCtx<'_>, volume: &str) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "DELETE FROM volume_labels WHERE volume = ?1",
        [volume],
    )?;
    exec(
        ctx.tx,
        "DELETE FROM volume_cache_keys WHERE volume = ?1",
        [volume],
    )?;
    Ok(())
}
