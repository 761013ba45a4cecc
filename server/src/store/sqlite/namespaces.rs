//! Namespaces (`namespaces`): a row per namespace an operator made, and what lives in one.
//! `default` has no row: it always was, and holds every volume whose key names no
//! namespace (`api::split_key`), so that the rows of a cluster made before namespaces are
//! all in it, unchanged.
//!
//! The table comes with one schema migration. With the etcd store a server may run on the
//! schema before it until `upgrade finalize`: a namespace then cannot be made, and only
//! `default` exists, so that a server of the previous release, which knows no namespace,
//! never meets a volume of another one.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::db::optional;
use crate::store::sqlite::writer::WriteCtx;

/// Whether the schema has the table.
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "namespaces")
}

/// The refusal of a namespace the previous schema cannot keep.
pub fn below_schema() -> ApiError {
    ApiError::invalid(
        "this cluster runs on the previous schema, which keeps no namespaces but `default`",
    )
    .with_hint("run `csivol-server upgrade finalize` once every server runs this release")
}

/// Every namespace an operator made, by name, with when (unix ms).
pub fn namespaces(conn: &Connection) -> ApiResult<Vec<(String, i64)>> {
    if !kept(conn)? {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached("SELECT name, created_at FROM namespaces ORDER BY name")?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(rows)
}

/// When a namespace an operator made was made (unix ms); `None`: no such namespace.
pub fn namespace(conn: &Connection, name: &str) -> ApiResult<Option<i64>> {
    if !kept(conn)? {
        return Ok(None);
    }
    optional(
        conn.prepare_cached("SELECT created_at FROM namespaces WHERE name = ?1")?
            .query_row([name], |r| r.get(0)),
    )
}

/// Records a namespace; whether it is new.
pub fn put(ctx: &WriteCtx<'_>, name: &str) -> ApiResult<bool> {
    if !kept(ctx.tx)? {
        return Err(below_schema());
    }
    let n = exec(
        ctx.tx,
        "INSERT INTO namespaces (name, created_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        params![name, ctx.now],
    )?;
    Ok(n > 0)
}

/// Forgets a namespace.
pub fn delete(ctx: &WriteCtx<'_>, name: &str) -> ApiResult<()> {
    if kept(ctx.tx)? {
        exec(ctx.tx, "DELETE FROM namespaces WHERE name = ?1", [name])?;
    }
    Ok(())
}

/// The bounds of a namespace's keys (`NS~...`): `~` is the last printable ASCII character,
/// so every key of the namespace sorts at or after `NS~` and before `NS\x7f`.
fn bounds(namespace: &str) -> (String, String) {
    let sep = csivol_api::KEY_SEPARATOR;
    (format!("{namespace}{sep}"), format!("{namespace}\x7f"))
}

/// What lives in a namespace: how many volumes, the first `first` of their names (keys),
/// how many claims and snapshots.
pub struct Contents {
    pub volumes: u64,
    pub first_volumes: Vec<String>,
    pub claims: u64,
    pub snapshots: u64,
    /// The sum of its volumes' capacities (a volume of unknown capacity counts none).
    pub capacity_bytes: u64,
    /// How many of its volumes are per-job volumes.
    pub fresh_volumes: u64,
}

/// Which rows of a table a namespace holds, by the key in `column`, and the parameters
/// that clause takes: `default` holds every key that names no namespace.
pub(super) fn within(namespace: &str, column: &str) -> (String, Vec<String>) {
    if namespace == csivol_api::DEFAULT_NAMESPACE {
        (format!("instr({column}, '~') = 0"), Vec::new())
    } else {
        let (lo, hi) = bounds(namespace);
        (format!("{column} >= ?1 AND {column} < ?2"), vec![lo, hi])
    }
}

/// `what` (an aggregate: `count(*)`, `sum(capacity_bytes)`) over the rows of `table` that
/// namespace `namespace` holds by the key in `column`; none counts 0.
pub(super) fn aggregate(
    conn: &Connection,
    namespace: &str,
    what: &str,
    table: &str,
    column: &str,
) -> ApiResult<u64> {
    let (clause, params) = within(namespace, column);
    let sql = format!("SELECT coalesce({what}, 0) FROM {table} WHERE {clause}");
    let n: i64 = conn
        .prepare_cached(&sql)?
        .query_row(rusqlite::params_from_iter(params), |r| r.get(0))?;
    Ok(n.max(0) as u64)
}

/// What lives in namespace `namespace` (`default`: every key that names no namespace).
pub fn contents(conn: &Connection, namespace: &str, first: usize) -> ApiResult<Contents> {
    let count = |table: &str, column: &str| aggregate(conn, namespace, "count(*)", table, column);
    let (clause, params) = within(namespace, "name");
    let sql = format!("SELECT name FROM volumes WHERE {clause} ORDER BY name LIMIT {first}");
    let first_volumes = conn
        .prepare_cached(&sql)?
        .query_map(rusqlite::params_from_iter(params), |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(Contents {
        volumes: count("volumes", "name")?,
        first_volumes,
        claims: count("claims", "volume")?,
        // By the snapshot's own key: an adopted snapshot may name no volume.
        snapshots: count("snapshots", "name")?,
        capacity_bytes: aggregate(conn, namespace, "sum(capacity_bytes)", "volumes", "name")?,
        fresh_volumes: if super::shape::has_table(conn, "job_volumes")? {
            count("job_volumes", "volume")?
        } else {
            0
        },
    })
}
