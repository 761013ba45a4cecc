//! Namespaces' quotas (`namespace_quotas`) and what a namespace uses of them.
//!
//! The table comes with the schema's newest migration: below it no quota is kept, and
//! setting one is refused (a server of the previous release would not honour it).

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::db::optional;
use crate::store::sqlite::writer::WriteCtx;

/// Whether the schema has the table.
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "namespace_quotas")
}

/// A namespace's quota; `None`: it has none.
pub fn quota(conn: &Connection, namespace: &str) -> ApiResult<Option<csivol_api::Quota>> {
    if !kept(conn)? {
        return Ok(None);
    }
    let text: Option<String> = optional(
        conn.prepare_cached("SELECT quota FROM namespace_quotas WHERE namespace = ?1")?
            .query_row([namespace], |r| r.get(0)),
    )?;
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| {
            ApiError::internal(format!(
                "the quota recorded for namespace `{namespace}` does not parse: {e}"
            ))
        })
    })
    .transpose()
}

/// Sets a namespace's quota (one that bounds nothing removes it).
pub fn set(ctx: &WriteCtx<'_>, namespace: &str, quota: &csivol_api::Quota) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Err(super::namespaces::below_schema());
    }
    if quota.is_empty() {
        exec(
            ctx.tx,
            "DELETE FROM namespace_quotas WHERE namespace = ?1",
            [namespace],
        )?;
    } else {
        exec(
            ctx.tx,
            "INSERT INTO namespace_quotas (namespace, quota) VALUES (?1, ?2) \
             ON CONFLICT (namespace) DO UPDATE SET quota = ?2",
            params![namespace, serde_json::to_string(quota)?],
        )?;
    }
    Ok(())
}

/// Forgets a namespace's quota (the namespace is forgotten).
pub fn forget(ctx: &WriteCtx<'_>, namespace: &str) -> ApiResult<()> {
    if kept(ctx.tx)? {
        exec(
            ctx.tx,
            "DELETE FROM namespace_quotas WHERE namespace = ?1",
            [namespace],
        )?;
    }
    Ok(())
}

/// What a quota bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bound {
    Volumes,
    CapacityBytes,
    Claims,
    FreshVolumes,
}

/// How much of `bound` namespace `namespace` uses.
pub fn used(conn: &Connection, namespace: &str, bound: Bound) -> ApiResult<u64> {
    let agg = |what: &str, table: &str, column: &str| {
        super::namespaces::aggregate(conn, namespace, what, table, column)
    };
    match bound {
        Bound::Volumes => agg("count(*)", "volumes", "name"),
        // A volume growing counts at the capacity it grows to.
        Bound::CapacityBytes => agg(
            "sum(max(coalesce(capacity_bytes, 0), \
             coalesce(json_extract(expansion, '$.capacity_bytes'), 0)))",
            "volumes",
            "name",
        ),
        // A claim waiting in a pool's line counts as the claim it becomes, in the pool's
        // namespace.
        Bound::Claims => {
            let waiting = if super::shape::has_table(conn, "pool_waiters")? {
                agg("count(*)", "pool_waiters", "pool")?
            } else {
                0
            };
            Ok(agg("count(*)", "claims", "volume")? + waiting)
        }
        Bound::FreshVolumes if super::shape::has_table(conn, "job_volumes")? => {
            agg("count(*)", "job_volumes", "volume")
        }
        Bound::FreshVolumes => Ok(0),
    }
}

/// Who in namespace `namespace` uses most of `bound`, and how much: the token that made the
/// most claims (its name; claims made before tokens were recorded count as `unknown`), the
/// largest volume (its key), the alloc with the most per-job volumes. None for the number
/// of volumes, which no one holds.
pub fn most(conn: &Connection, namespace: &str, bound: Bound) -> ApiResult<Option<(String, u64)>> {
    let (sql, column) = match bound {
        Bound::Volumes => return Ok(None),
        Bound::CapacityBytes => (
            "SELECT name, coalesce(capacity_bytes, 0) FROM volumes WHERE {} \
             ORDER BY 2 DESC, name LIMIT 1",
            "name",
        ),
        Bound::Claims => (
            "SELECT coalesce((SELECT name FROM tokens WHERE id = claimer), claimer, 'unknown'), \
             count(*) FROM claims WHERE {} GROUP BY claimer ORDER BY 2 DESC, 1 LIMIT 1",
            "volume",
        ),
        Bound::FreshVolumes if super::shape::has_table(conn, "job_volumes")? => (
            "SELECT alloc, count(*) FROM job_volumes WHERE {} GROUP BY alloc \
             ORDER BY 2 DESC, alloc LIMIT 1",
            "volume",
        ),
        Bound::FreshVolumes => return Ok(None),
    };
    let (clause, params) = super::namespaces::within(namespace, column);
    let sql = sql.replace("{}", &clause);
    optional(
        conn.prepare_cached(&sql)?
            .query_row(rusqlite::params_from_iter(params), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            }),
    )
}
