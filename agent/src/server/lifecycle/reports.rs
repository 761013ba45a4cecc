//! Agents' reports: the facts a node reports, each applied to the rows it concerns.

use std::collections::BTreeSet;

use csivol_proto::api::{AttachmentState, ClaimState, Report};
use rusqlite::params;

use super::attachments::{advance_volume, begin_detach};
use super::nodes::record_drift;
use super::ops::{
    delete_op, finish_delete, finish_unpublish, load_op, observe_op, op_failed, schedule_ops,
};
use super::{
    Limits, delete_claim, event, exec, format_error, list_or, set_claim_state, touch_volume,
};
use crate::server::db::WriteCtx;
use crate::server::error::ApiResult;
use crate::server::model::{AttachmentRow, ClaimRow, VolumeRow, time, to_json};
use crate::server::watch::Key;

/// How a drift report starts a claim's error, so that the next `published` is recorded
/// as its repair.
pub(super) const DRIFT: &str = "drift: ";

/// `POST /v1/nodes/{node}/reports`.
pub fn apply_reports(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    reports: Vec<Report>,
    limits: &Limits,
) -> ApiResult<()> {
    let actor = format!("node:{node}");
    let mut touched_volumes = BTreeSet::new();
    for report in reports {
        match report {
            Report::Published {
                volume,
                alloc,
                target_path,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                exec(
                    ctx.tx,
                    "UPDATE claims SET target_path = ?1, updated_at = ?2, modify_index = ?3 WHERE volume = ?4 AND alloc = ?5",
                    params![target_path, ctx.now, ctx.index as i64, volume, alloc],
                )?;
                touch_volume(ctx, &volume)?;
                if matches!(
                    c.state,
                    ClaimState::Publishing | ClaimState::Attaching | ClaimState::Pending
                ) {
                    let drift = c.error.as_deref().and_then(|e| e.strip_prefix(DRIFT));
                    set_claim_state(ctx, &c, ClaimState::Ready)?;
                    match drift {
                        Some(why) => event(
                            ctx,
                            "claim-repaired",
                            Some(&volume),
                            Some(node),
                            Some(&alloc),
                            &actor,
                            format!(
                                "repaired after drift ({why}): mounted from the volume again at {target_path}"
                            ),
                        )?,
                        None => {
                            limits
                                .metrics
                                .claim_ready_seconds
                                .observe((ctx.now - c.created_at).max(0) as f64 / 1000.0);
                            event(
                                ctx,
                                "claim-ready",
                                Some(&volume),
                                Some(node),
                                Some(&alloc),
                                &actor,
                                format!("published at {target_path}"),
                            )?
                        }
                    }
                }
            }
            Report::Drift {
                volume,
                alloc,
                reason,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?
                    .filter(|c| c.node == node && c.state == ClaimState::Ready)
                else {
                    continue;
                };
                record_drift(ctx, &c, &reason, limits)?;
            }
            Report::Waiting {
                volume,
                alloc,
                reason,
                since_ms,
                timeout_ms,
            } => {
                if ClaimRow::load(ctx.tx, &volume, &alloc)?
                    .is_some_and(|c| c.node == node && c.state == ClaimState::Publishing)
                {
                    exec(
                        ctx.tx,
                        "UPDATE claims SET waiting = ?1, waiting_since = ?2, waiting_timeout_ms = ?3, \
                         updated_at = ?4, modify_index = ?5 WHERE volume = ?6 AND alloc = ?7",
                        params![
                            reason,
                            since_ms as i64,
                            timeout_ms as i64,
                            ctx.now,
                            ctx.index as i64,
                            volume,
                            alloc
                        ],
                    )?;
                    touch_volume(ctx, &volume)?;
                }
            }
            Report::Condition {
                volume,
                alloc,
                abnormal,
                message,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                let condition = abnormal.then(|| message.clone());
                if c.condition == condition {
                    continue;
                }
                exec(
                    ctx.tx,
                    "UPDATE claims SET condition = ?1, updated_at = ?2, modify_index = ?3 \
                     WHERE volume = ?4 AND alloc = ?5",
                    params![condition, ctx.now, ctx.index as i64, volume, alloc],
                )?;
                touch_volume(ctx, &volume)?;
                let text = if abnormal {
                    format!("the plugin reports the volume abnormal: {message}")
                } else {
                    format!("the plugin reports the volume normal again: {message}")
                };
                event(
                    ctx,
                    "volume-condition",
                    Some(&volume),
                    Some(node),
                    Some(&alloc),
                    &actor,
                    text,
                )?;
            }
            Report::Unpublished { volume, alloc } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                if matches!(
                    c.state,
                    ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
                ) {
                    delete_claim(ctx, &c)?;
                    let how = if c.state == ClaimState::Blocked {
                        "blocked claim released by its returning node"
                    } else {
                        "released"
                    };
                    event(
                        ctx,
                        "claim-released",
                        Some(&volume),
                        Some(node),
                        Some(&alloc),
                        &actor,
                        how,
                    )?;
                    touched_volumes.insert(volume);
                }
            }
            Report::Unstaged { volume } => {
                let Some(v) = VolumeRow::load(ctx.tx, &volume)? else {
                    continue;
                };
                let atts = AttachmentRow::of_volume(ctx.tx, &volume)?;
                let Some(a) = atts.iter().find(|a| a.node == node) else {
                    continue;
                };
                let claims_here = ClaimRow::of_volume(ctx.tx, &volume)?
                    .into_iter()
                    .any(|c| c.node == node);
                // Attached counts too: a batch may carry the last claim's `unpublished`
                // and the `unstaged` together, before the attachment moved on.
                let waiting = matches!(
                    a.state,
                    AttachmentState::Attached
                        | AttachmentState::Unstaging
                        | AttachmentState::Blocked
                );
                if !claims_here && waiting {
                    event(
                        ctx,
                        "volume-unstaged",
                        Some(&volume),
                        Some(node),
                        None,
                        &actor,
                        "node unstaged the volume",
                    )?;
                    begin_detach(ctx, &v, node, false, limits)?;
                    touched_volumes.insert(volume);
                }
            }
            Report::ClaimError {
                volume,
                alloc,
                error,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                exec(
                    ctx.tx,
                    "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 WHERE volume = ?5 AND alloc = ?6",
                    params![
                        format_error(&error),
                        error.next_retry_at_ms.map(|t| t as i64),
                        ctx.now,
                        ctx.index as i64,
                        volume,
                        alloc
                    ],
                )?;
                touch_volume(ctx, &volume)?;
                if error.is_final
                    && !matches!(
                        c.state,
                        ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
                    )
                {
                    set_claim_state(ctx, &c, ClaimState::Failed)?;
                    event(
                        ctx,
                        "claim-failed",
                        Some(&volume),
                        Some(node),
                        Some(&alloc),
                        &actor,
                        format!("failed: {}", format_error(&error)),
                    )?;
                }
            }
            Report::VolumeError { volume, error } => {
                let changed = exec(
                    ctx.tx,
                    "UPDATE attachments SET error = ?1, next_retry_at = ?2, updated_at = ?3 \
                     WHERE volume = ?4 AND node = ?5",
                    params![
                        format!("NodeUnstageVolume failed: {}", format_error(&error)),
                        error.next_retry_at_ms.map(|t| t as i64),
                        ctx.now,
                        volume,
                        node
                    ],
                )?;
                if changed > 0 {
                    touch_volume(ctx, &volume)?;
                }
            }
            Report::ControllerPublished {
                op,
                attempt,
                publish_context,
            } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                delete_op(ctx, op)?;
                let updated = exec(
                    ctx.tx,
                    "UPDATE attachments SET state = 'attached', publish_context = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
                     WHERE volume = ?3 AND node = ?4 AND state = 'attaching'",
                    params![to_json(&publish_context), ctx.now, o.volume, o.node],
                )?;
                if updated > 0 {
                    let target = o.node.clone().unwrap_or_default();
                    ctx.touch(Key::Node(target.clone()));
                    event(
                        ctx,
                        "volume-attached",
                        Some(&o.volume),
                        Some(&target),
                        None,
                        &actor,
                        "ControllerPublishVolume succeeded",
                    )?;
                }
                touched_volumes.insert(o.volume);
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::ControllerUnpublished { op, attempt } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                finish_unpublish(ctx, &o, &actor)?;
                touched_volumes.insert(o.volume);
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::Created {
                op,
                attempt,
                external_id,
                capacity_bytes,
                context,
            } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                delete_op(ctx, op)?;
                exec(
                    ctx.tx,
                    "UPDATE volumes SET external_id = ?1, capacity_bytes = ?2, context = ?3, lifecycle = 'ready', error = NULL, \
                     updated_at = ?4, modify_index = ?5 WHERE name = ?6 AND lifecycle = 'creating'",
                    params![
                        external_id,
                        capacity_bytes as i64,
                        to_json(&context),
                        ctx.now,
                        ctx.index as i64,
                        o.volume
                    ],
                )?;
                ctx.touch(Key::Volume(o.volume.clone()));
                event(
                    ctx,
                    "volume-created",
                    Some(&o.volume),
                    None,
                    None,
                    &actor,
                    format!("created as {external_id}"),
                )?;
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::Deleted { op, attempt } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                finish_delete(ctx, &o, &actor)?;
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::OpError { op, attempt, error } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "error");
                op_failed(ctx, &o, &error, &actor)?;
                touched_volumes.insert(o.volume.clone());
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::Fenced { at_ms, volumes } => {
                exec(
                    ctx.tx,
                    "UPDATE nodes SET fenced_at = ?1 WHERE name = ?2",
                    params![at_ms as i64, node],
                )?;
                // The agent waits for a fresh desired state after a fence; wake it.
                ctx.touch(Key::Node(node.to_owned()));
                event(
                    ctx,
                    "node-fenced",
                    None,
                    Some(node),
                    None,
                    &actor,
                    format!(
                        "node fenced itself at {} after losing the server: took down {}",
                        time(at_ms as i64),
                        list_or(&volumes, "nothing")
                    ),
                )?;
            }
        }
    }
    for v in touched_volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}
