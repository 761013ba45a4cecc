//! Agents' reports: the facts a node reports, one function per kind of report; the answers
//! of controller operations go to the queue (`ops`), which hands each to its operation's
//! kind. A report about a claim counts only for the reporting node's own claim, one about
//! a controller operation only from its host and for its current attempt; anything else
//! is ignored.

use std::collections::BTreeSet;

use csivol_api::{
    AttachmentState, ClaimState, DriftFound, GroupBy, ObservedShape, OwnershipChange, PluginError,
    Report,
};

use super::attachments::{advance_volume, begin_detach, slot_freed};
use super::changes::{delete_claim, set_claim_state, touch_volume};
use super::events::{event, format_error, list_or};
use super::node_expansion::{node_expand_error, node_expanded};
use super::nodes::record_drift;
use super::ops;
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, StoredObservation, time};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};

/// One batch of a node's reports, and the volumes to move forward once it is applied.
struct Batch<'a> {
    node: &'a str,
    actor: String,
    limits: &'a Limits,
    advance: BTreeSet<String>,
    /// The nodes (with the volume) whose attachment a controller operation took away.
    freed: BTreeSet<(String, String)>,
}

/// `POST /v1/nodes/{node}/reports`, applied to the state of `generation` (the text the
/// server gives agents; `None`: not known, and a late CreateVolume answer is not acted on).
pub fn apply_reports(
    ctx: &mut impl Txn,
    node: &str,
    reports: Vec<Report>,
    limits: &Limits,
    generation: Option<&str>,
) -> ApiResult<()> {
    // Numbers are checked before anything is applied: a batch is applied whole or not at all.
    for r in &reports {
        r.check_numbers().map_err(ApiError::out_of_range)?;
    }
    let mut b = Batch {
        node,
        actor: format!("node:{node}"),
        limits,
        advance: BTreeSet::new(),
        freed: BTreeSet::new(),
    };
    for report in reports {
        match report {
            Report::Published {
                volume,
                alloc,
                target_path,
                observed,
                ownership,
            } => {
                published(ctx, &b, &volume, &alloc, &target_path, observed)?;
                if let Some(change) = ownership {
                    ownership_changed(ctx, &b, &volume, &alloc, change)?;
                }
            }
            Report::Drift {
                volume,
                alloc,
                reason,
            } => drift(ctx, &b, &volume, &alloc, &reason)?,
            Report::Waiting {
                volume,
                alloc,
                reason,
                since_ms,
                timeout_ms,
            } => waiting(ctx, &b, &volume, &alloc, &reason, since_ms, timeout_ms)?,
            Report::Condition {
                volume,
                alloc,
                abnormal,
                message,
            } => condition(ctx, &b, &volume, &alloc, abnormal, &message)?,
            Report::Unpublished { volume, alloc } => unpublished(ctx, &mut b, &volume, &alloc)?,
            Report::Unstaged { volume } => unstaged(ctx, &mut b, &volume)?,
            Report::ClaimError {
                volume,
                alloc,
                error,
            } => claim_error(ctx, &b, &volume, &alloc, &error)?,
            Report::VolumeError { volume, error } => volume_error(ctx, &b, &volume, &error)?,
            Report::NodeExpanded {
                volume, attempt, ..
            } => node_expanded(ctx, node, &b.actor, &volume, attempt)?,
            Report::NodeExpandError {
                volume,
                attempt,
                error,
            } => node_expand_error(ctx, node, &b.actor, &volume, attempt, &error)?,
            Report::Fenced { at_ms, volumes } => fenced(ctx, &b, at_ms, &volumes)?,
            Report::ControllerVolumes {
                plugin,
                started_ms,
                volumes,
            } => super::reconcile::controller_volumes(ctx, node, &plugin, started_ms, &volumes)?,
            Report::NodeLimits {
                plugin,
                max_volumes_per_node,
                reason,
            } => node_limits(ctx, &mut b, &plugin, max_volumes_per_node, &reason)?,
            // The answers of controller operations (`Report::controller_op`), each taken
            // by its operation's kind.
            answer => {
                // An attach that failed for good or a detach that finished frees a slot
                // of the node it was for.
                let slot = match answer.controller_op() {
                    Some((id, _)) => ctx
                        .op(i64::try_from(id).unwrap_or(i64::MAX))?
                        .filter(|o| matches!(o.kind, OpKind::Publish | OpKind::Unpublish))
                        .and_then(|o| o.node.map(|n| (o.volume, n))),
                    None => None,
                };
                if let Some(volume) = ops::answered(ctx, node, &answer, limits, generation)? {
                    b.advance.insert(volume);
                }
                if let Some((volume, n)) = slot
                    && ctx.attachment(&volume, &n)?.is_none()
                {
                    b.freed.insert((n, volume));
                }
            }
        }
    }
    for v in b.advance {
        advance_volume(ctx, &v, limits)?;
    }
    for (n, volume) in b.freed {
        slot_freed(ctx, &n, &volume, limits)?;
    }
    Ok(())
}

/// The claim a report is about, if it is the reporting node's.
fn own_claim(
    ctx: &impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
) -> ApiResult<Option<ClaimRow>> {
    Ok(ctx.claim(volume, alloc)?.filter(|c| c.node == b.node))
}

/// The claim is mounted from its volume at `target_path`: ready (or repaired, after a
/// drift).
fn published(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
    target_path: &str,
    observed: Option<ObservedShape>,
) -> ApiResult<()> {
    let Some(c) = own_claim(ctx, b, volume, alloc)? else {
        return Ok(());
    };
    ctx.set_claim_target(volume, alloc, target_path)?;
    // What the plugin made for it, for `plugin show`.
    if let (Some(shape), Some(v)) = (observed, ctx.volume(volume)?) {
        let seen = StoredObservation {
            volume: volume.to_owned(),
            alloc: alloc.to_owned(),
            at_ms: ctx.now(),
            shape,
        };
        let json = serde_json::to_string(&seen).map_err(|e| ApiError::internal(e.to_string()))?;
        ctx.set_plugin_observed(b.node, &v.plugin, &json)?;
    }
    touch_volume(ctx, volume)?;
    if !matches!(
        c.state,
        ClaimState::Publishing | ClaimState::Attaching | ClaimState::Pending
    ) {
        return Ok(());
    }
    let drift = c.drift.as_ref().map(|d| d.reason.as_str());
    set_claim_state(ctx, &c, ClaimState::Ready)?;
    // A volume condition the plugin reported was about the mount this publish replaced
    // (after a drift, "not mounted"): it does not hold for the new one, and the agent asks
    // the plugin again and reports what it says then.
    if c.condition.is_some() {
        ctx.set_claim_condition(volume, alloc, None)?;
    }
    super::node_expansion::staged_on(ctx, volume, b.node)?;
    let (kind, message) = match drift {
        Some(why) => (
            EventKind::ClaimRepaired,
            format!("repaired after drift ({why}): mounted from the volume again at {target_path}"),
        ),
        None => {
            b.limits
                .metrics
                .claim_ready_seconds
                .observe((ctx.now() - c.created_at).max(0) as f64 / 1000.0);
            (EventKind::ClaimReady, format!("published at {target_path}"))
        }
    };
    event(
        ctx,
        kind,
        Some(volume),
        Some(b.node),
        Some(alloc),
        &b.actor,
        message,
    )
}

/// What csivol's ownership change did for a claim whose group it applies itself, as the
/// node recorded it: kept with the claim's mount (a report of the same change again, after
/// the agent's restart, changes nothing), and an event where the agent's bound stopped a
/// `recursive` change.
fn ownership_changed(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
    change: OwnershipChange,
) -> ApiResult<()> {
    let Some(c) = own_claim(ctx, b, volume, alloc)? else {
        return Ok(());
    };
    let (Some(gid), Some(by)) = (c.mount.gid, c.mount.group_by) else {
        return Ok(());
    };
    if by == GroupBy::Plugin || c.mount.ownership_change == Some(change) {
        return Ok(());
    }
    let mount = csivol_api::ClaimMount {
        ownership_change: Some(change),
        ..c.mount.clone()
    };
    ctx.set_claim_ownership_change(volume, alloc, &mount)?;
    touch_volume(ctx, volume)?;
    if !change.bounded {
        return Ok(());
    }
    event(
        ctx,
        EventKind::ClaimOwnershipBounded,
        Some(volume),
        Some(b.node),
        Some(alloc),
        &b.actor,
        format!(
            "gave group {gid} to the first {} entries of the volume and stopped at the agent's \
             bound: entries past it keep their group (the root has it, so the workload can \
             write there)",
            change.entries
        ),
    )
}

/// A ready claim is not mounted from its volume any more.
fn drift(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
    reason: &str,
) -> ApiResult<()> {
    match own_claim(ctx, b, volume, alloc)? {
        Some(c) if c.state == ClaimState::Ready => {
            record_drift(ctx, &c, DriftFound::Check, reason, b.limits)
        }
        _ => Ok(()),
    }
}

/// What a publishing claim waits for on its node.
fn waiting(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
    reason: &str,
    since_ms: u64,
    timeout_ms: u64,
) -> ApiResult<()> {
    if own_claim(ctx, b, volume, alloc)?.is_some_and(|c| c.state == ClaimState::Publishing) {
        ctx.set_claim_waiting(volume, alloc, reason, since_ms as i64, timeout_ms as i64)?;
        touch_volume(ctx, volume)?;
    }
    Ok(())
}

/// The plugin's volume condition changed (abnormal, or normal again).
fn condition(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
    abnormal: bool,
    message: &str,
) -> ApiResult<()> {
    let Some(c) = own_claim(ctx, b, volume, alloc)? else {
        return Ok(());
    };
    let condition = abnormal.then_some(message);
    if c.condition.as_deref() == condition {
        return Ok(());
    }
    ctx.set_claim_condition(volume, alloc, condition)?;
    touch_volume(ctx, volume)?;
    let text = if abnormal {
        format!("the plugin reports the volume abnormal: {message}")
    } else {
        format!("the plugin reports the volume normal again: {message}")
    };
    event(
        ctx,
        EventKind::VolumeCondition,
        Some(volume),
        Some(b.node),
        Some(alloc),
        &b.actor,
        text,
    )
}

/// The node took a claim down: a released (or failed, or blocked) claim is gone.
fn unpublished(ctx: &mut impl Txn, b: &mut Batch<'_>, volume: &str, alloc: &str) -> ApiResult<()> {
    let Some(c) = own_claim(ctx, b, volume, alloc)? else {
        return Ok(());
    };
    if !matches!(
        c.state,
        ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
    ) {
        return Ok(());
    }
    if let Some(v) = ctx.volume(volume)? {
        // Its pool may ask the node to keep the staging (asked before the unpublish too:
        // the desired state listed it as kept, so the node did not unstage).
        super::lingers::start(ctx, &v, &c)?;
    }
    delete_claim(ctx, &c)?;
    let how = if c.state == ClaimState::Blocked {
        "blocked claim released by its returning node"
    } else {
        "released"
    };
    event(
        ctx,
        EventKind::ClaimReleased,
        Some(volume),
        Some(b.node),
        Some(alloc),
        &b.actor,
        how,
    )?;
    b.advance.insert(volume.to_owned());
    Ok(())
}

/// The node unstaged a volume none of its claims use: the attachment is taken down.
fn unstaged(ctx: &mut impl Txn, b: &mut Batch<'_>, volume: &str) -> ApiResult<()> {
    let Some(v) = ctx.volume(volume)? else {
        return Ok(());
    };
    let Some(a) = ctx.attachment(volume, b.node)? else {
        return Ok(());
    };
    let claims_here = ctx
        .claims_of_volume(volume)?
        .into_iter()
        .any(|c| c.node == b.node);
    // Attached counts too: a batch may carry the last claim's `unpublished` and the
    // `unstaged` together, before the attachment moved on.
    let waiting = matches!(
        a.state,
        AttachmentState::Attached | AttachmentState::Unstaging | AttachmentState::Blocked
    );
    if claims_here || !waiting {
        return Ok(());
    }
    // A staging kept after a release that the node took down after all (an agent that
    // keeps none, or a staging found gone) is kept no longer.
    for l in ctx.lingers(Some(volume), Some(b.node))? {
        ctx.delete_linger(volume, b.node)?;
        event(
            ctx,
            EventKind::StagingLingerEnded,
            Some(volume),
            Some(b.node),
            Some(&l.alloc),
            &b.actor,
            format!(
                "the staging kept after alloc {}'s release ends: the node unstaged the volume",
                l.alloc
            ),
        )?;
    }
    event(
        ctx,
        EventKind::VolumeUnstaged,
        Some(volume),
        Some(b.node),
        None,
        &b.actor,
        "node unstaged the volume",
    )?;
    begin_detach(ctx, &v, b.node, false, b.limits)?;
    b.advance.insert(volume.to_owned());
    Ok(())
}

/// A node call for a claim failed: retried at the error's time, or final (the claim fails).
fn claim_error(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    alloc: &str,
    error: &PluginError,
) -> ApiResult<()> {
    let Some(c) = own_claim(ctx, b, volume, alloc)? else {
        return Ok(());
    };
    let next = error.next_retry_at_ms.map(|t| t as i64);
    ctx.set_claim_error(volume, alloc, &format_error(error), next)?;
    touch_volume(ctx, volume)?;
    if !error.is_final
        || matches!(
            c.state,
            ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
        )
    {
        return Ok(());
    }
    set_claim_state(ctx, &c, ClaimState::Failed)?;
    event(
        ctx,
        EventKind::ClaimFailed,
        Some(volume),
        Some(b.node),
        Some(alloc),
        &b.actor,
        format!("failed: {}", format_error(error)),
    )
}

/// NodeUnstageVolume failed: the attachment says why and when it is retried.
fn volume_error(
    ctx: &mut impl Txn,
    b: &Batch<'_>,
    volume: &str,
    error: &PluginError,
) -> ApiResult<()> {
    let message = format!("NodeUnstageVolume failed: {}", format_error(error));
    let next = error.next_retry_at_ms.map(|t| t as i64);
    if ctx.set_attachment_error(volume, b.node, &message, next)? {
        touch_volume(ctx, volume)?;
    }
    Ok(())
}

/// A node plugin's attach limit, read again with NodeGetInfo: recorded, and counted by the
/// next claim decision on the node. A change is an event, and a raised limit may let
/// claims queued on the node start.
fn node_limits(
    ctx: &mut impl Txn,
    b: &mut Batch<'_>,
    plugin: &str,
    limit: u32,
    reason: &str,
) -> ApiResult<()> {
    let Some(from) = ctx.set_node_limit(b.node, plugin, limit, reason)? else {
        return Ok(());
    };
    ctx.touch(Key::Node(b.node.to_owned()));
    let show = csivol_api::limit_text;
    event(
        ctx,
        EventKind::NodeLimitChanged,
        None,
        Some(b.node),
        None,
        &b.actor,
        format!(
            "plugin `{plugin}`'s attach limit changed from {} to {} (NodeGetInfo read again: {reason})",
            show(from),
            show(limit)
        ),
    )?;
    for c in ctx.claims_of_node(b.node, Some(ClaimState::Queued))? {
        b.advance.insert(c.volume);
    }
    Ok(())
}

/// The node's agent fenced itself after losing the server.
fn fenced(ctx: &mut impl Txn, b: &Batch<'_>, at_ms: u64, volumes: &[String]) -> ApiResult<()> {
    ctx.set_node_fenced_at(b.node, at_ms as i64)?;
    // The agent waits for a fresh desired state after a fence; wake it.
    ctx.touch(Key::Node(b.node.to_owned()));
    event(
        ctx,
        EventKind::NodeFenced,
        None,
        Some(b.node),
        None,
        &b.actor,
        format!(
            "node fenced itself at {} after losing the server: took down {}",
            time(at_ms as i64),
            list_or(volumes, "nothing")
        ),
    )
}
