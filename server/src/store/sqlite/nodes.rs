//! Node eligibility and removal, fences and claim leases as SQLite keeps them.

use std::collections::BTreeMap;

use csivol_api::{self as api, Eligibility};
use rusqlite::{Connection, params};

use super::exec;
use super::rows::NODE_COLUMNS;
use crate::db::WriteCtx;
use crate::error::ApiResult;
use crate::model::{ClaimRow, NewFence, NodeFenceRow, NodeRow, time};

// ---- nodes ----

pub fn nodes(conn: &Connection, only: Option<&str>) -> ApiResult<Vec<NodeRow>> {
    let sql =
        format!("SELECT {NODE_COLUMNS} FROM nodes WHERE (?1 IS NULL OR name = ?1) ORDER BY name");
    let rows = conn
        .prepare_cached(&sql)?
        .query_map([only], NodeRow::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn set_node_eligibility(ctx: &WriteCtx<'_>, node: &str, e: Eligibility) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET eligibility = ?1 WHERE name = ?2",
        params![e.as_str(), node],
    )?;
    Ok(())
}

pub fn delete_node(ctx: &WriteCtx<'_>, node: &str) -> ApiResult<()> {
    ctx.memo.controller_publish.borrow_mut().clear();
    exec(ctx.tx, "DELETE FROM node_plugins WHERE node = ?1", [node])?;
    exec(ctx.tx, "DELETE FROM nodes WHERE name = ?1", [node])?;
    Ok(())
}

// ---- fences ----

pub fn node_fence_facts(conn: &Connection, node: &str) -> ApiResult<NodeFenceRow> {
    let (operator, labels, failures, error, failed_at): (
        String,
        String,
        u32,
        Option<String>,
        Option<i64>,
    ) = conn
        .prepare_cached(
            "SELECT operator_labels, labels, fence_failures, fence_error, fence_failed_at \
             FROM nodes WHERE name = ?1",
        )?
        .query_row([node], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
    Ok(NodeFenceRow {
        operator_labels: serde_json::from_str(&operator)?,
        reported_labels: serde_json::from_str(&labels)?,
        failures,
        error,
        failed_at,
    })
}

pub fn fence_history(conn: &Connection, node: &str) -> ApiResult<Vec<api::FenceRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, at, node, method, command, exit_status, timed_out, output, duration_ms, actor, reason, ok \
         FROM fences WHERE node = ?1 ORDER BY id DESC LIMIT 20",
    )?;
    let rows = stmt.query_map([node], |r| {
        Ok((
            api::FenceRecord {
                id: r.get::<_, i64>(0)? as u64,
                at: time(r.get(1)?),
                node: r.get(2)?,
                method: r.get(3)?,
                command: Vec::new(),
                exit_status: r.get(5)?,
                timed_out: r.get(6)?,
                output: r.get(7)?,
                duration_ms: r.get::<_, i64>(8)? as u64,
                actor: r.get(9)?,
                reason: r.get(10)?,
                ok: r.get(11)?,
            },
            r.get::<_, String>(4)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut rec, command) = row?;
        rec.command = serde_json::from_str(&command)?;
        out.push(rec);
    }
    Ok(out)
}

pub fn insert_fence(ctx: &WriteCtx<'_>, f: &NewFence<'_>) -> ApiResult<u64> {
    exec(
        ctx.tx,
        "INSERT INTO fences (node, at, method, command, exit_status, timed_out, output, duration_ms, actor, reason, ok) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            f.node,
            f.at,
            f.method,
            serde_json::to_string(f.command)?,
            f.exit_status,
            f.timed_out,
            f.output,
            f.duration_ms as i64,
            f.actor,
            f.reason,
            f.ok
        ],
    )?;
    Ok(ctx.tx.last_insert_rowid() as u64)
}

pub fn note_fence_failure(ctx: &WriteCtx<'_>, node: &str, why: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET fence_failures = fence_failures + 1, fence_error = ?1, fence_failed_at = ?2 WHERE name = ?3",
        params![why, ctx.now, node],
    )?;
    Ok(())
}

pub fn set_node_fenced(ctx: &WriteCtx<'_>, node: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET status = 'fenced', fence_failures = 0, fence_error = NULL, fence_failed_at = NULL WHERE name = ?1",
        [node],
    )?;
    Ok(())
}

// ---- leases ----

pub fn expired_claims(conn: &Connection, now: i64) -> ApiResult<Vec<ClaimRow>> {
    let sql = format!(
        "SELECT {} FROM claims WHERE expires_at <= ?1 \
         AND state NOT IN ('releasing', 'failed', 'blocked') ORDER BY expires_at",
        super::drift::claim_columns(conn)?
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map([now], ClaimRow::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn any_lease_expired(conn: &Connection, now: i64) -> ApiResult<bool> {
    Ok(conn
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM claims WHERE expires_at <= ?1 \
             AND state NOT IN ('releasing', 'failed', 'blocked'))",
        )?
        .query_row([now], |r| r.get(0))?)
}

pub fn set_claim_lease(
    ctx: &WriteCtx<'_>,
    volume: &str,
    alloc: &str,
    ttl_ms: i64,
    expires_at: i64,
) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE claims SET ttl_ms = ?1, expires_at = ?2, updated_at = ?3, modify_index = ?4 \
         WHERE volume = ?5 AND alloc = ?6",
        params![ttl_ms, expires_at, ctx.now, ctx.index as i64, volume, alloc],
    )?;
    Ok(())
}

pub fn set_node_operator_labels(
    ctx: &WriteCtx<'_>,
    node: &str,
    labels: &BTreeMap<String, String>,
) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET operator_labels = ?1 WHERE name = ?2",
        params![serde_json::to_string(labels)?, node],
    )?;
    Ok(())
}
