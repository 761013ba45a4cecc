//! Nodes as SQLite keeps them: registration with the node's plugins, status, planned
//! stops, attach limits, eligibility and removal; fences and claim leases.

use std::collections::BTreeMap;

use csivol_api::{self as api, Eligibility, NodeStatus, PluginRegistration};
use rusqlite::{Connection, params};

use super::rows::NODE_COLUMNS;
use super::statement::exec;
use crate::error::ApiResult;
use crate::model::{ClaimRow, NewFence, NodeFenceRow, NodeRow, time, to_json};
use crate::store::Snapshot;
use crate::store::sqlite::writer::WriteCtx;

// ---- nodes ----

pub fn nodes(conn: &Connection, only: Option<&str>) -> ApiResult<Vec<NodeRow>> {
    let sql = fixed_sql!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE (?1 IS NULL OR name = ?1) ORDER BY name"
    );
    let rows = conn
        .prepare_cached(sql)?
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
    let sql = claims_sql!(
        conn,
        "SELECT {columns} FROM claims WHERE expires_at <= ?1 \
         AND state NOT IN ('releasing', 'failed', 'blocked') ORDER BY expires_at"
    );
    let rows = conn
        .prepare_cached(sql)?
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

pub fn register_node(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    fence_after_ms: Option<u64>,
    labels: &BTreeMap<String, String>,
    plugins: &[PluginRegistration],
) -> ApiResult<()> {
    ctx.memo.controller_publish.get_mut().clear();
    exec(
        ctx.tx,
        "INSERT INTO nodes (name, status, registered_at, fence_after_ms, labels) VALUES (?1, 'ready', ?2, ?3, ?4) \
         ON CONFLICT (name) DO UPDATE SET status = 'ready', lost_at = NULL, fence_after_ms = ?3, labels = ?4, \
         fence_failures = 0, fence_error = NULL, stopped_at = NULL, stop_took_down = NULL",
        params![
            name,
            ctx.now,
            fence_after_ms.map(|v| v as i64),
            to_json(labels)
        ],
    )?;
    // What was known of each plugin's limit: a registration that reads another one is a
    // change like one read while the node ran; an unchanged one keeps the last change.
    // What the agent observed of each plugin outlives its registrations.
    let before: BTreeMap<String, (u32, Option<String>, Option<String>)> = ctx
        .tx
        .prepare_cached(
            "SELECT plugin, max_volumes, limit_change, observed FROM node_plugins WHERE node = ?1",
        )?
        .query_map([name], |r| {
            Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
        })?
        .collect::<Result<_, _>>()?;
    exec(ctx.tx, "DELETE FROM node_plugins WHERE node = ?1", [name])?;
    for p in plugins {
        let node_part = p.node.as_ref();
        let limit = node_part.map_or(0, |n| n.info.max_volumes_per_node);
        let limit_change = match before.get(&p.id) {
            Some((from, _, _)) if *from != limit && node_part.is_some() => {
                Some(to_json(&crate::model::LimitChangeRow {
                    from: *from,
                    to: limit,
                    at_ms: ctx.now,
                    reason: "registration".to_owned(),
                }))
            }
            Some((_, kept, _)) => kept.clone(),
            None => None,
        };
        exec(
            ctx.tx,
            "INSERT INTO node_plugins (node, plugin, registration, csi_node_id, max_volumes, node_service, controller, \
             controller_service, controller_publish, stage_unstage, topology, limit_change, observed) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                name,
                p.id,
                to_json(p),
                node_part.map(|n| n.info.node_id.clone()),
                limit,
                node_part.is_some(),
                p.controller.is_some(),
                p.capabilities.controller_service,
                p.controller.is_some_and(|c| c.publish_unpublish_volume),
                node_part.is_some_and(|n| n.capabilities.stage_unstage_volume),
                to_json(
                    &node_part
                        .and_then(|n| n.info.accessible_topology.clone())
                        .unwrap_or_default()
                ),
                limit_change,
                before.get(&p.id).and_then(|b| b.2.clone()),
            ],
        )?;
    }
    Ok(())
}

pub fn set_node_status(ctx: &mut WriteCtx<'_>, name: &str, status: NodeStatus) -> ApiResult<()> {
    if status == NodeStatus::Lost {
        exec(
            ctx.tx,
            "UPDATE nodes SET status = 'lost', lost_at = ?1 WHERE name = ?2",
            params![ctx.now, name],
        )?;
    } else {
        exec(
            ctx.tx,
            "UPDATE nodes SET status = ?1 WHERE name = ?2",
            params![status.as_str(), name],
        )?;
    }
    Ok(())
}

pub fn set_node_stopped(ctx: &mut WriteCtx<'_>, name: &str, took_down: bool) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET status = 'stopped', stopped_at = ?1, stop_took_down = ?2 WHERE name = ?3",
        params![ctx.now, took_down, name],
    )?;
    Ok(())
}

pub fn set_plugin_observed(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    plugin: &str,
    observed: &str,
) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE node_plugins SET observed = ?1 WHERE node = ?2 AND plugin = ?3",
        params![observed, node, plugin],
    )?;
    Ok(())
}

pub fn set_node_fenced_at(ctx: &mut WriteCtx<'_>, name: &str, at_ms: i64) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET fenced_at = ?1 WHERE name = ?2",
        params![at_ms, name],
    )?;
    Ok(())
}

pub fn ask_node_limits(ctx: &mut WriteCtx<'_>, name: &str) -> ApiResult<()> {
    exec(
        ctx.tx,
        "UPDATE nodes SET limits_refresh_at = ?1 WHERE name = ?2",
        params![ctx.now, name],
    )?;
    Ok(())
}

pub fn set_node_limit(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    plugin: &str,
    limit: u32,
    reason: &str,
) -> ApiResult<Option<u32>> {
    ctx.memo.controller_publish.get_mut().clear();
    let Some(from) = ctx
        .node_plugin(node, plugin)?
        .filter(|p| p.node_service)
        .map(|p| p.max_volumes)
    else {
        return Ok(None);
    };
    let change = (from != limit).then(|| {
        to_json(&crate::model::LimitChangeRow {
            from,
            to: limit,
            at_ms: ctx.now,
            reason: reason.to_owned(),
        })
    });
    exec(
        ctx.tx,
        "UPDATE node_plugins SET max_volumes = ?3, limit_read_at = ?4, \
           limit_change = coalesce(?5, limit_change), \
           registration = json_set(registration, '$.node.info.max_volumes_per_node', ?3) \
         WHERE node = ?1 AND plugin = ?2",
        params![node, plugin, limit, ctx.now, change],
    )?;
    Ok((from != limit).then_some(from))
}
