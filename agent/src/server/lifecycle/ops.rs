//! The controller-operation queue: operations queued, handed to healthy controller hosts
//! within limits, finished, or retried with backoff.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use csivol_proto::api::{self, ClaimState, ControllerOpKind, PluginError};
use csivol_proto::domain::ErrorClass;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Limits, delete_attachment, event, exec, format_error, set_claim_state, touch_volume};
use crate::server::db::WriteCtx;
use crate::server::error::ApiResult;
use crate::server::model::{AttachmentRow, ClaimRow, NodePluginRow, VolumeRow, time};
use crate::server::watch::Key;

pub(super) fn insert_op(
    ctx: &mut WriteCtx<'_>,
    kind: &str,
    plugin: &str,
    volume: &str,
    node: Option<&str>,
    payload: &str,
) -> ApiResult<()> {
    let exists: Option<i64> = ctx
        .tx
        .prepare_cached("SELECT id FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS ?3")?
        .query_row(params![volume, kind, node], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        ctx.tx
            .prepare_cached("INSERT INTO ops (kind, plugin, volume, node, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
            .execute(params![kind, plugin, volume, node, payload, ctx.now])?;
    }
    Ok(())
}

/// Exponential backoff with jitter: 1 s doubling to 5 min, ±20 %.
pub fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << attempt.min(9))
        .min(Duration::from_secs(300));
    base.mul_f64(rand::rng().random_range(0.8..1.2))
}

/// Hands unassigned, due controller operations of `plugin` to healthy hosts, within the
/// limits: one in flight per (plugin, node) and `controller_concurrency` per plugin.
pub fn schedule_ops(ctx: &mut WriteCtx<'_>, plugin: &str, limits: &Limits) -> ApiResult<()> {
    let hosts: Vec<String> = ctx
        .tx
        .prepare_cached(
            "SELECT np.node FROM node_plugins np JOIN nodes n ON n.name = np.node \
             WHERE np.plugin = ?1 AND np.controller = 1 AND n.status = 'ready' ORDER BY np.node",
        )?
        .query_map([plugin], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let waiting: Vec<(i64, Option<String>)> = ctx
        .tx
        .prepare_cached(
            "SELECT id, node FROM ops WHERE plugin = ?1 AND host IS NULL AND not_before <= ?2 ORDER BY id LIMIT 1000",
        )?
        .query_map(params![plugin, ctx.now], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if waiting.is_empty() {
        return Ok(());
    }
    if hosts.is_empty() {
        // Say why on everything that waits, so `status` and `claim --wait` can show it.
        let msg = format!(
            "waiting for a controller host: no healthy agent hosts the controller of plugin `{plugin}`"
        );
        for (id, node) in &waiting {
            let changed = exec(
                ctx.tx,
                "UPDATE ops SET error = ?1 WHERE id = ?2 AND error IS NOT ?1",
                params![msg, id],
            )?;
            if changed == 0 {
                continue;
            }
            let volume: String = ctx
                .tx
                .prepare_cached("SELECT volume FROM ops WHERE id = ?1")?
                .query_row([id], |r| r.get(0))?;
            match node {
                Some(n) => {
                    exec(
                        ctx.tx,
                        "UPDATE attachments SET error = ?1 WHERE volume = ?2 AND node = ?3",
                        params![msg, volume, n],
                    )?;
                    exec(
                        ctx.tx,
                        "UPDATE claims SET error = ?1, modify_index = ?2 \
                         WHERE volume = ?3 AND node = ?4 AND state IN ('attaching', 'pending')",
                        params![msg, ctx.index as i64, volume, n],
                    )?;
                }
                None => {
                    exec(
                        ctx.tx,
                        "UPDATE volumes SET error = ?1, modify_index = ?2 WHERE name = ?3",
                        params![msg, ctx.index as i64, volume],
                    )?;
                }
            }
            touch_volume(ctx, &volume)?;
        }
        return Ok(());
    }
    let mut load: HashMap<String, u32> = hosts.iter().map(|h| (h.clone(), 0)).collect();
    let mut busy_nodes = BTreeSet::new();
    let mut in_flight = 0;
    {
        let mut stmt = ctx
            .tx
            .prepare_cached("SELECT host, node FROM ops WHERE plugin = ?1 AND host IS NOT NULL")?;
        let rows = stmt.query_map([plugin], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        for row in rows {
            let (host, node) = row?;
            in_flight += 1;
            *load.entry(host).or_default() += 1;
            if let Some(n) = node {
                busy_nodes.insert(n);
            }
        }
    }
    for (id, node) in waiting {
        if in_flight >= limits.controller_concurrency {
            break;
        }
        if let Some(n) = &node
            && !busy_nodes.insert(n.clone())
        {
            continue;
        }
        let host = hosts
            .iter()
            .min_by_key(|h| load[*h])
            .expect("hosts is not empty")
            .clone();
        *load.get_mut(&host).expect("known host") += 1;
        in_flight += 1;
        ctx.tx
            .prepare_cached("UPDATE ops SET host = ?1, assigned_at = ?2 WHERE id = ?3")?
            .execute(params![host, ctx.now, id])?;
        ctx.touch(Key::Node(host));
    }
    Ok(())
}

/// Plugins with controller operations due for assignment (for the periodic scheduler).
pub fn plugins_with_due_ops(conn: &Connection, now: i64) -> ApiResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT plugin FROM ops WHERE host IS NULL AND not_before <= ?1",
    )?;
    let rows = stmt
        .query_map([now], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// A controller operation as stored.
#[derive(Clone, Debug)]
pub struct OpRow {
    pub id: i64,
    pub kind: String,
    pub plugin: String,
    pub volume: String,
    pub node: Option<String>,
    pub host: Option<String>,
    pub attempt: u32,
    pub not_before: i64,
    pub payload: String,
    pub created_at: i64,
}

pub(super) const OP_COLUMNS: &str =
    "id, kind, plugin, volume, node, host, attempt, not_before, payload, created_at";

pub(super) fn op_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OpRow> {
    Ok(OpRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        plugin: r.get(2)?,
        volume: r.get(3)?,
        node: r.get(4)?,
        host: r.get(5)?,
        attempt: r.get(6)?,
        not_before: r.get(7)?,
        payload: r.get(8)?,
        created_at: r.get(9)?,
    })
}

/// The operation a report answers, if the report is current: same attempt, from its host.
pub(super) fn load_op(
    conn: &Connection,
    id: u64,
    attempt: u32,
    host: &str,
) -> ApiResult<Option<OpRow>> {
    let sql = format!("SELECT {OP_COLUMNS} FROM ops WHERE id = ?1");
    let op = crate::server::db::optional(
        conn.prepare_cached(&sql)?
            .query_row([id as i64], op_from_row),
    )?;
    Ok(op.filter(|o| o.attempt == attempt && o.host.as_deref() == Some(host)))
}

pub fn ops_of_host(conn: &Connection, host: &str) -> ApiResult<Vec<OpRow>> {
    let sql = format!("SELECT {OP_COLUMNS} FROM ops WHERE host = ?1 ORDER BY id");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([host], op_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Records how long an operation took from queueing to `result`.
pub(super) fn observe_op(limits: &Limits, now: i64, o: &OpRow, result: &str) {
    let label = crate::server::metrics::OpLabel {
        kind: o.kind.clone(),
        result: result.to_owned(),
    };
    limits
        .metrics
        .op_seconds
        .get_or_create(&label)
        .observe((now - o.created_at).max(0) as f64 / 1000.0);
}

pub(super) fn delete_op(ctx: &mut WriteCtx<'_>, id: u64) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("DELETE FROM ops WHERE id = ?1")?
        .execute([id as i64])?;
    Ok(())
}

pub(super) fn finish_unpublish(ctx: &mut WriteCtx<'_>, o: &OpRow, actor: &str) -> ApiResult<()> {
    delete_op(ctx, o.id as u64)?;
    let node = o.node.clone().unwrap_or_default();
    let forced = AttachmentRow::of_volume(ctx.tx, &o.volume)?
        .into_iter()
        .any(|a| a.node == node && a.forced);
    delete_attachment(ctx, &o.volume, &node)?;
    let how = if forced {
        "force-detached (ControllerUnpublishVolume without the node)"
    } else {
        "ControllerUnpublishVolume succeeded: detached"
    };
    event(
        ctx,
        "volume-detached",
        Some(&o.volume),
        Some(&node),
        None,
        actor,
        how,
    )
}

pub(super) fn finish_delete(ctx: &mut WriteCtx<'_>, o: &OpRow, actor: &str) -> ApiResult<()> {
    delete_op(ctx, o.id as u64)?;
    exec(
        ctx.tx,
        "DELETE FROM volumes WHERE name = ?1 AND lifecycle = 'deleting'",
        [&o.volume],
    )?;
    ctx.touch(Key::Volume(o.volume.clone()));
    event(
        ctx,
        "volume-deleted",
        Some(&o.volume),
        None,
        None,
        actor,
        "DeleteVolume succeeded; volume deregistered",
    )
}

pub(super) fn op_failed(
    ctx: &mut WriteCtx<'_>,
    o: &OpRow,
    error: &PluginError,
    actor: &str,
) -> ApiResult<()> {
    let class = ErrorClass::of_name(&error.code);
    let message = format!("{} failed: {}", op_call(&o.kind), format_error(error));
    let node = o.node.clone();
    // NOT_FOUND from an unpublish or delete means the job is already done.
    if error.code == "NOT_FOUND" && matches!(o.kind.as_str(), "unpublish" | "delete") {
        return if o.kind == "unpublish" {
            finish_unpublish(ctx, o, actor)
        } else {
            finish_delete(ctx, o, actor)
        };
    }
    let retry = class == ErrorClass::Retry || matches!(o.kind.as_str(), "unpublish");
    if retry {
        // An attachment is never dropped on an error: unpublish is retried until it
        // succeeds, so the volume is never reported free while it may still be attached.
        let next = ctx.now + backoff(o.attempt).as_millis() as i64;
        exec(
            ctx.tx,
            "UPDATE ops SET attempt = attempt + 1, host = NULL, assigned_at = NULL, not_before = ?1, error = ?2 WHERE id = ?3",
            params![next, message, o.id],
        )?;
        if let Some(n) = &node {
            exec(
                ctx.tx,
                "UPDATE attachments SET error = ?1, next_retry_at = ?2, updated_at = ?3 WHERE volume = ?4 AND node = ?5",
                params![message, next, ctx.now, o.volume, n],
            )?;
            exec(
                ctx.tx,
                "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 \
                 WHERE volume = ?5 AND node = ?6 AND state IN ('attaching', 'pending')",
                params![message, next, ctx.now, ctx.index as i64, o.volume, n],
            )?;
        } else {
            exec(
                ctx.tx,
                "UPDATE volumes SET error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![
                    format!("{message}; retrying at {}", time(next)),
                    ctx.now,
                    ctx.index as i64,
                    o.volume
                ],
            )?;
        }
        touch_volume(ctx, &o.volume)?;
        return Ok(());
    }
    delete_op(ctx, o.id as u64)?;
    event(
        ctx,
        "operation-failed",
        Some(&o.volume),
        node.as_deref(),
        None,
        actor,
        message.clone(),
    )?;
    match o.kind.as_str() {
        "publish" => {
            let n = node.unwrap_or_default();
            delete_attachment(ctx, &o.volume, &n)?;
            for c in ClaimRow::of_volume(ctx.tx, &o.volume)? {
                if c.node == n && matches!(c.state, ClaimState::Attaching | ClaimState::Pending) {
                    exec(
                        ctx.tx,
                        "UPDATE claims SET error = ?1, next_retry_at = NULL WHERE volume = ?2 AND alloc = ?3",
                        params![message, c.volume, c.alloc],
                    )?;
                    set_claim_state(ctx, &c, ClaimState::Failed)?;
                }
            }
        }
        "create" => {
            exec(
                ctx.tx,
                "UPDATE volumes SET lifecycle = 'failed', error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![message, ctx.now, ctx.index as i64, o.volume],
            )?;
            ctx.touch(Key::Volume(o.volume.clone()));
        }
        "delete" => {
            exec(
                ctx.tx,
                "UPDATE volumes SET lifecycle = 'ready', error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![message, ctx.now, ctx.index as i64, o.volume],
            )?;
            ctx.touch(Key::Volume(o.volume.clone()));
        }
        _ => {}
    }
    Ok(())
}

pub(super) fn op_call(kind: &str) -> &'static str {
    match kind {
        "publish" => "ControllerPublishVolume",
        "unpublish" => "ControllerUnpublishVolume",
        "create" => "CreateVolume",
        _ => "DeleteVolume",
    }
}

/// Builds what an agent needs to run an operation.
pub fn op_to_api(conn: &Connection, o: &OpRow) -> ApiResult<Option<api::ControllerOp>> {
    let Some(v) = VolumeRow::load(conn, &o.volume)? else {
        return Ok(None);
    };
    let csi_node_id = |node: &Option<String>| -> ApiResult<String> {
        let n = node.as_deref().unwrap_or_default();
        Ok(NodePluginRow::load(conn, n, &o.plugin)?
            .and_then(|p| p.csi_node_id)
            .unwrap_or_else(|| n.to_owned()))
    };
    let kind = match o.kind.as_str() {
        "publish" => ControllerOpKind::Publish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(&o.node)?,
            capability: v.capability(),
            readonly: v.access_mode.max_writers() == Some(0),
            context: v.context.clone(),
            secrets: v.secrets.clone(),
        },
        "unpublish" => ControllerOpKind::Unpublish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(&o.node)?,
            secrets: v.secrets.clone(),
        },
        "create" => {
            let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
            ControllerOpKind::Create {
                volume: v.name.clone(),
                capability: v.capability(),
                capacity_bytes: payload["capacity_bytes"].as_u64().unwrap_or(0),
                parameters: v.parameters.clone(),
                secrets: v.secrets.clone(),
            }
        }
        _ => ControllerOpKind::Delete {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            secrets: v.secrets.clone(),
        },
    };
    Ok(Some(api::ControllerOp {
        id: o.id as u64,
        attempt: o.attempt,
        plugin: o.plugin.clone(),
        not_before_ms: o.not_before.max(0) as u64,
        kind,
    }))
}
