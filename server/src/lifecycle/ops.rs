//! The controller-operation queue: operations queued, handed to healthy controller hosts
//! within limits, finished, or retried with backoff.

use std::collections::HashMap;
use std::time::Duration;

use csivol_api::domain::ErrorClass;
use csivol_api::{self as api, ClaimState, ControllerOpKind, PluginError};

use super::changes::{delete_attachment, set_claim_state, touch_volume};
use super::events::{event, format_error};
use super::group_snapshots::{group_of_op, group_op_failed, group_op_kind, group_op_waiting};
use super::settings::Limits;
use super::snapshots::{snapshot_of_op, snapshot_op_failed, snapshot_op_kind, snapshot_op_waiting};
use crate::error::ApiResult;
use crate::model::{Lifecycle, OpRow, time};
use crate::store::{OpSlot, Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::schedule;

/// Exponential backoff with jitter: 1 s doubling to 5 min, ±20 %.
pub fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << attempt.min(9))
        .min(Duration::from_secs(300));
    base.mul_f64(rand::rng().random_range(0.8..1.2))
}

/// Hands unassigned, due controller operations of `plugin` to healthy hosts, within the
/// limits: one in flight per (plugin, node) and `controller_concurrency` per plugin, the
/// slots shared fairly between attaches, detaches and the rest, and between volumes
/// (`csivol_rules::schedule`). Each operation's wait, from due to handed out, is observed.
pub fn schedule_ops(ctx: &mut impl Txn, plugin: &str, limits: &Limits) -> ApiResult<()> {
    let hosts = ctx.controller_hosts(plugin)?;
    // With hosts and every slot taken, nothing can be handed out: the queue is not read.
    // Under a steady load that is most calls (each queued operation asks), and the queue
    // is the long part; the running operations are `controller_concurrency` at most.
    let assigned = if hosts.is_empty() {
        Vec::new()
    } else {
        let assigned = ctx.assigned_ops(plugin)?;
        if assigned.len() >= limits.controller_concurrency as usize {
            return Ok(());
        }
        assigned
    };
    let waiting = ctx.due_ops(plugin, ctx.now())?;
    if waiting.is_empty() {
        return Ok(());
    }
    if hosts.is_empty() {
        // Say why on everything that waits, so `status` and `claim --wait` can show it.
        let msg = format!(
            "waiting for a controller host: no healthy agent hosts the controller of plugin `{plugin}`"
        );
        for o in &waiting {
            if !ctx.note_op_waiting(o.id, &msg)? {
                continue;
            }
            if let Some(op) = ctx.op(o.id)? {
                if snapshot_of_op(&op).is_some() {
                    snapshot_op_waiting(ctx, &op, &msg)?;
                    continue;
                }
                if group_of_op(&op).is_some() {
                    group_op_waiting(ctx, &op, &msg)?;
                    continue;
                }
            }
            match &o.node {
                Some(n) => ctx.note_attach_waiting(&o.volume, n, &msg)?,
                None => ctx.set_volume_error(&o.volume, &msg, false)?,
            }
            touch_volume(ctx, &o.volume)?;
        }
        return Ok(());
    }
    let mut load: HashMap<String, u32> = hosts.iter().map(|h| (h.clone(), 0)).collect();
    for o in &assigned {
        if let Some(host) = &o.host {
            *load.entry(host.clone()).or_default() += 1;
        }
    }
    let free = (limits.controller_concurrency as usize).saturating_sub(assigned.len());
    let running: Vec<schedule::Running<'_>> = assigned.iter().map(running).collect();
    let queued: Vec<schedule::Waiting<'_>> = waiting.iter().map(queued).collect();
    let last = served_last(limits).get(plugin).copied();
    let picked = schedule::pick(&queued, &running, free, last);
    if let Some(class) = picked.last {
        served_last(limits).insert(plugin.to_owned(), class);
    }
    let by_id: HashMap<i64, &OpSlot> = waiting.iter().map(|o| (o.id, o)).collect();
    for id in picked.ids {
        let o = by_id[&id];
        let host = hosts
            .iter()
            .min_by_key(|h| load[*h])
            .expect("hosts is not empty")
            .clone();
        *load.get_mut(&host).expect("known host") += 1;
        ctx.assign_op(id, &host)?;
        ctx.touch(Key::NodeOps(host));
        limits
            .metrics
            .op_waited(plugin, o.kind.as_str(), ctx.now() - o.due_since);
    }
    Ok(())
}

fn served_last(limits: &Limits) -> std::sync::MutexGuard<'_, HashMap<String, schedule::OpClass>> {
    limits.served_last.lock().unwrap_or_else(|e| e.into_inner())
}

fn running(o: &OpSlot) -> schedule::Running<'_> {
    schedule::Running {
        kind: o.kind,
        volume: &o.volume,
        node: o.node.as_deref(),
    }
}

fn queued(o: &OpSlot) -> schedule::Waiting<'_> {
    schedule::Waiting {
        id: o.id,
        kind: o.kind,
        volume: &o.volume,
        node: o.node.as_deref(),
        due_since: o.due_since,
    }
}

/// Plugins with controller operations due for assignment (for the periodic scheduler).
pub fn plugins_with_due_ops(conn: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<Vec<String>> {
    conn.plugins_with_due_ops(now)
}

/// The operation a report answers, if the report is current: same attempt, from its host.
pub(super) fn load_op(
    conn: &(impl Snapshot + ?Sized),
    id: u64,
    attempt: u32,
    host: &str,
) -> ApiResult<Option<OpRow>> {
    let op = conn.op(id as i64)?;
    Ok(op.filter(|o| o.attempt == attempt && o.host.as_deref() == Some(host)))
}

/// Records how long an operation took from queueing to `result`.
pub(super) fn observe_op(limits: &Limits, now: i64, o: &OpRow, result: &str) {
    let label = crate::metrics::OpLabel {
        kind: o.kind.as_str().to_owned(),
        result: result.to_owned(),
    };
    limits
        .metrics
        .op_seconds
        .get_or_create(&label)
        .observe((now - o.created_at).max(0) as f64 / 1000.0);
}

pub(super) fn finish_unpublish(ctx: &mut impl Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let node = o.node.clone().unwrap_or_default();
    let forced = ctx
        .attachments_of_volume(&o.volume)?
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
        EventKind::VolumeDetached,
        Some(&o.volume),
        Some(&node),
        None,
        actor,
        how,
    )
}

pub(super) fn finish_delete(ctx: &mut impl Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    ctx.delete_deleting_volume(&o.volume)?;
    ctx.touch(Key::Volume(o.volume.clone()));
    event(
        ctx,
        EventKind::VolumeDeleted,
        Some(&o.volume),
        None,
        None,
        actor,
        "DeleteVolume succeeded; volume deregistered",
    )
}

pub(super) fn op_failed(
    ctx: &mut impl Txn,
    o: &OpRow,
    error: &PluginError,
    actor: &str,
) -> ApiResult<()> {
    if snapshot_of_op(o).is_some() {
        return snapshot_op_failed(ctx, o, error, actor);
    }
    if group_of_op(o).is_some() {
        return group_op_failed(ctx, o, error, actor);
    }
    if o.kind == OpKind::Modify {
        return super::modify::modify_failed(ctx, o, error, actor);
    }
    let class = ErrorClass::of_name(&error.code);
    let message = format!("{} failed: {}", o.kind.call(), format_error(error));
    if super::volumes::create_was_cancelled(ctx, o)? {
        return super::volumes::create_answered_after_cancel(ctx, o, &message, actor);
    }
    let node = o.node.clone();
    // NOT_FOUND from an unpublish or delete means the job is already done.
    if error.code == "NOT_FOUND" && matches!(o.kind, OpKind::Unpublish | OpKind::Delete) {
        return if o.kind == OpKind::Unpublish {
            finish_unpublish(ctx, o, actor)
        } else {
            finish_delete(ctx, o, actor)
        };
    }
    if o.kind == OpKind::Publish
        && error.code == "RESOURCE_EXHAUSTED"
        && let Some(n) = &node
    {
        // The node holds fewer volumes than its limit said (ControllerPublishVolume's error
        // table: "8 RESOURCE_EXHAUSTED | Indicates that the maximum supported number of
        // volumes that can be attached to the specified node are already attached"): its
        // agent reads it again, and the next claim decision counts what it reads. The
        // publish keeps its retries ("Caller MUST ensure that the number of volumes
        // already attached to the node is less then the maximum supported number of
        // volumes before retrying with exponential backoff").
        ctx.ask_node_limits(n)?;
        ctx.touch(Key::NodeOps(n.clone()));
    }
    let retry = class == ErrorClass::Retry || o.kind == OpKind::Unpublish;
    if retry {
        // An attachment is never dropped on an error: unpublish is retried until it
        // succeeds, so the volume is never reported free while it may still be attached.
        let next = ctx.now() + backoff(o.attempt).as_millis() as i64;
        ctx.retry_op(o.id, next, &message)?;
        match &node {
            Some(n) => ctx.set_attach_retry(&o.volume, n, &message, next)?,
            None if o.kind == OpKind::Expand => super::expand::controller_expand_failed(
                ctx,
                &o.volume,
                &format!("{message}; retrying at {}", time(next)),
                false,
            )?,
            None => ctx.set_volume_error(
                &o.volume,
                &format!("{message}; retrying at {}", time(next)),
                true,
            )?,
        }
        touch_volume(ctx, &o.volume)?;
        return Ok(());
    }
    ctx.delete_op(o.id)?;
    event(
        ctx,
        EventKind::OperationFailed,
        Some(&o.volume),
        node.as_deref(),
        None,
        actor,
        message.clone(),
    )?;
    match o.kind {
        OpKind::Publish => {
            let n = node.unwrap_or_default();
            delete_attachment(ctx, &o.volume, &n)?;
            for c in ctx.claims_of_volume(&o.volume)? {
                if c.node == n && matches!(c.state, ClaimState::Attaching | ClaimState::Pending) {
                    ctx.set_claim_error(&c.volume, &c.alloc, &message, None)?;
                    set_claim_state(ctx, &c, ClaimState::Failed)?;
                }
            }
        }
        OpKind::Create | OpKind::Delete => {
            // A failed create leaves a failed volume; a failed delete, the volume as it was.
            let lifecycle = if o.kind == OpKind::Create {
                Lifecycle::Failed
            } else {
                Lifecycle::Ready
            };
            ctx.set_volume_lifecycle(&o.volume, lifecycle, Some(&message))?;
            ctx.touch(Key::Volume(o.volume.clone()));
        }
        OpKind::Expand => super::expand::controller_expand_failed(ctx, &o.volume, &message, true)?,
        OpKind::Unpublish
        | OpKind::Modify
        | OpKind::CreateSnapshot
        | OpKind::DeleteSnapshot
        | OpKind::CreateGroupSnapshot
        | OpKind::DeleteGroupSnapshot => {}
    }
    Ok(())
}

/// Builds what an agent needs to run an operation.
pub fn op_to_api(
    conn: &(impl Snapshot + ?Sized),
    o: &OpRow,
) -> ApiResult<Option<api::ControllerOp>> {
    let op = |kind| api::ControllerOp {
        id: o.id as u64,
        attempt: o.attempt,
        plugin: o.plugin.clone(),
        not_before_ms: o.not_before.max(0) as u64,
        kind,
    };
    if snapshot_of_op(o).is_some() {
        return Ok(snapshot_op_kind(conn, o)?.map(op));
    }
    if group_of_op(o).is_some() {
        return Ok(group_op_kind(conn, o)?.map(op));
    }
    let Some(v) = conn.volume(&o.volume)? else {
        return Ok(None);
    };
    let csi_node_id = |node: &Option<String>| -> ApiResult<String> {
        let n = node.as_deref().unwrap_or_default();
        Ok(conn
            .node_plugin(n, &o.plugin)?
            .and_then(|p| p.csi_node_id)
            .unwrap_or_else(|| n.to_owned()))
    };
    let kind = match o.kind {
        OpKind::Publish => ControllerOpKind::Publish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(&o.node)?,
            capability: v.capability(),
            readonly: v.access_mode.max_writers() == Some(0),
            context: v.context.clone(),
            secrets: v.secrets.clone(),
        },
        OpKind::Unpublish => ControllerOpKind::Unpublish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(&o.node)?,
            secrets: v.secrets.clone(),
        },
        OpKind::Create => {
            let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
            ControllerOpKind::Create {
                volume: v.name.clone(),
                capability: v.capability(),
                capacity_bytes: payload["capacity_bytes"].as_u64().unwrap_or(0),
                parameters: v.parameters.clone(),
                secrets: v.secrets.clone(),
                topology_request: v.topology_request.clone(),
                source: serde_json::from_value(payload["source"].clone()).ok(),
                mutable_parameters: v.mutable_parameters.clone(),
            }
        }
        OpKind::Delete => ControllerOpKind::Delete {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            secrets: v.secrets.clone(),
        },
        OpKind::Expand => {
            let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
            ControllerOpKind::Expand {
                volume: v.name.clone(),
                external_id: v.external_id.clone(),
                capacity_bytes: payload["capacity_bytes"].as_u64().unwrap_or(0),
                capability: v.capability(),
                secrets: v.secrets.clone(),
            }
        }
        OpKind::Modify => ControllerOpKind::Modify {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            parameters: super::modify::op_parameters(o)?,
            secrets: v.secrets.clone(),
        },
        OpKind::CreateSnapshot
        | OpKind::DeleteSnapshot
        | OpKind::CreateGroupSnapshot
        | OpKind::DeleteGroupSnapshot => return Ok(None),
    };
    Ok(Some(op(kind)))
}
