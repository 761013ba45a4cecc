//! Operators' actions: unblock (of a volume or a whole node) and detach, each with a dry
//! run.

use std::collections::BTreeSet;

use csivol_api::{
    self as api, ActionPlan, AttachmentState, ClaimState, FindingKind, NodeStatus, PlannedAction,
};

use super::attachments::{advance_volume, begin_detach};
use super::changes::{delete_claim, set_claim_state};
use super::events::event;
use super::heard::unreported;
use super::settings::Limits;
use super::settle::accounted;
use crate::error::{ApiError, ApiResult};
use crate::model::{AttachmentRow, ClaimRow, VolumeRow, time};
use crate::store::{Snapshot, Txn};
use csivol_rules::kinds::EventKind;

/// An operator's action goes into the event log with why; a dry run records nothing, so
/// it needs no reason.
pub fn require_reason(
    reason: &str,
    dry_run: bool,
    limits: &csivol_api::limits::TextLimits,
) -> ApiResult<()> {
    csivol_api::check_reason(reason, limits).map_err(ApiError::text)?;
    if !dry_run && reason.trim().is_empty() {
        return Err(
            ApiError::invalid("`reason` is required: say why, it goes into the event log")
                .with_hint("e.g. --reason \"node-2 powered off in rack 4\""),
        );
    }
    Ok(())
}

pub(super) fn lost_since(conn: &(impl Snapshot + ?Sized), node: &str) -> ApiResult<Option<String>> {
    Ok(conn.node(node)?.and_then(|n| n.lost_at).map(time))
}

/// Plans (and unless `dry_run`, carries out) the unblock of `volume`, on `node` or on every
/// node holding it blocked.
pub fn unblock_volume(
    ctx: &mut impl Txn,
    volume: &str,
    node: Option<&str>,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    require_reason(reason, dry_run, &limits.text)?;
    let v = ctx.require_volume(volume)?;
    if let Some(n) = node {
        ctx.require_node(n)?;
    }
    let on_node = |n: &str| node.is_none_or(|want| want == n);
    let claims: Vec<ClaimRow> = ctx
        .claims_of_volume(volume)?
        .into_iter()
        .filter(|c| c.state == ClaimState::Blocked && on_node(&c.node))
        .collect();
    let atts: Vec<AttachmentRow> = ctx
        .attachments_of_volume(volume)?
        .into_iter()
        .filter(|a| a.state == AttachmentState::Blocked && on_node(&a.node))
        .collect();
    if claims.is_empty() && atts.is_empty() {
        return Err(ApiError::conflict(format!(
            "volume `{volume}` is not blocked{}",
            node.map(|n| format!(" on node {n}")).unwrap_or_default()
        ))
        .with_hint("`csivol status --blocked` lists blocked volumes"));
    }
    let mut actions = Vec::new();
    for c in &claims {
        actions.push(PlannedAction {
            action: "force-release".into(),
            volume: volume.to_owned(),
            node: c.node.clone(),
            alloc: Some(c.alloc.clone()),
            lost_since: lost_since(&*ctx, &c.node)?,
        });
    }
    for a in &atts {
        actions.push(PlannedAction {
            action: "force-detach".into(),
            volume: volume.to_owned(),
            node: a.node.clone(),
            alloc: None,
            lost_since: lost_since(&*ctx, &a.node)?,
        });
    }
    if dry_run {
        return Ok(ActionPlan { dry_run, actions });
    }
    for c in &claims {
        delete_claim(ctx, c)?;
        event(
            ctx,
            EventKind::ClaimForceReleased,
            Some(volume),
            Some(&c.node),
            Some(&c.alloc),
            actor,
            format!("force-released by unblock: {reason}"),
        )?;
    }
    for a in &atts {
        begin_detach(ctx, &v, &a.node, true, limits)?;
        event(
            ctx,
            EventKind::VolumeForceDetaching,
            Some(volume),
            Some(&a.node),
            None,
            actor,
            format!("force-detach by unblock: {reason}"),
        )?;
    }
    event(
        ctx,
        EventKind::VolumeUnblocked,
        Some(volume),
        node,
        None,
        actor,
        format!("unblocked: {reason}"),
    )?;
    advance_volume(ctx, volume, limits)?;
    Ok(ActionPlan { dry_run, actions })
}

/// Unblocks every volume blocked on `node`.
pub fn unblock_node(
    ctx: &mut impl Txn,
    node: &str,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    require_reason(reason, dry_run, &limits.text)?;
    ctx.require_node(node)?;
    let claims = ctx.claims_of_node(node, Some(ClaimState::Blocked))?;
    let atts = ctx.attachments_of_node(node)?;
    let volumes: BTreeSet<String> = claims
        .into_iter()
        .map(|c| c.volume)
        .chain(
            atts.into_iter()
                .filter(|a| a.state == AttachmentState::Blocked)
                .map(|a| a.volume),
        )
        .collect();
    // After a restore the server waits for the node to say what it holds: the unblock is
    // the operator's word that it is gone, holding nothing, as for its blocked volumes.
    let waited_for = unreported(ctx, node)?;
    if volumes.is_empty() && !waited_for {
        return Err(
            ApiError::conflict(format!("node `{node}` holds no blocked volume"))
                .with_hint("`csivol status --blocked` lists blocked volumes"),
        );
    }
    let mut actions = Vec::new();
    for v in volumes {
        actions
            .extend(unblock_volume(ctx, &v, Some(node), reason, dry_run, actor, limits)?.actions);
    }
    if waited_for {
        actions.push(PlannedAction {
            action: "stop-waiting".into(),
            volume: String::new(),
            node: node.to_owned(),
            alloc: None,
            lost_since: lost_since(&*ctx, node)?,
        });
        if !dry_run {
            accounted(ctx, node, actor)?;
        }
    }
    Ok(ActionPlan { dry_run, actions })
}

/// Whether csivol holds nothing of `v` on `node` while a confirmed `leaked` finding says the
/// plugin has it published there.
fn leaked_here(ctx: &impl Txn, v: &VolumeRow, node: &str) -> ApiResult<bool> {
    if ctx.attachment(&v.name, node)?.is_some()
        || ctx
            .claims_of_volume(&v.name)?
            .iter()
            .any(|c| c.node == node && c.state != ClaimState::Queued)
    {
        return Ok(false);
    }
    Ok(ctx
        .controller_findings(Some(&v.plugin))?
        .iter()
        .any(|(_, k)| {
            k.confirmed
                && k.found.kind == FindingKind::Leaked
                && k.found.volume.as_deref() == Some(v.name.as_str())
                && k.found.node.as_deref() == Some(node)
        }))
}

/// Detaches a leaked publication: recorded as an attachment being detached, so that the
/// ControllerUnpublishVolume runs as any other (throttled, retried, shown, with events)
/// and the next listing resolves the finding. `forced` when the node is lost.
#[allow(clippy::too_many_arguments)]
fn detach_leaked(
    ctx: &mut impl Txn,
    v: &VolumeRow,
    node: &str,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
    forced: bool,
) -> ApiResult<ActionPlan> {
    let actions = vec![PlannedAction {
        action: "unpublish-leaked".into(),
        volume: v.name.clone(),
        node: node.to_owned(),
        alloc: None,
        lost_since: lost_since(&*ctx, node)?,
    }];
    if dry_run {
        return Ok(ActionPlan { dry_run, actions });
    }
    ctx.insert_attachment(&v.name, node, AttachmentState::Attached)?;
    begin_detach(ctx, v, node, forced, limits)?;
    event(
        ctx,
        EventKind::VolumeDetach,
        Some(&v.name),
        Some(node),
        None,
        actor,
        format!("detach of the leaked publication requested (ControllerUnpublishVolume): {reason}"),
    )?;
    Ok(ActionPlan { dry_run, actions })
}

/// `POST /v1/volumes/{name}/detach`: releases every claim of the volume on a live node
/// through the node; on a lost node, `force` is an unblock. Where csivol has nothing of the
/// volume on the node but its plugin's controller listing confirmed it published there (a
/// `leaked` finding), the detach is ControllerUnpublishVolume of that publication.
pub fn detach(
    ctx: &mut impl Txn,
    volume: &str,
    req: &api::DetachRequest,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    let (node, reason, force, dry_run) = (
        req.node.as_str(),
        req.reason.as_str(),
        req.force,
        req.dry_run,
    );
    require_reason(reason, dry_run, &limits.text)?;
    let v = ctx.require_volume(volume)?;
    let n = ctx.require_node(node)?;
    let lost = n.status == NodeStatus::Lost;
    if force == lost && leaked_here(ctx, &v, node)? {
        return detach_leaked(ctx, &v, node, reason, dry_run, actor, limits, lost);
    }
    if lost {
        if !force {
            return Err(ApiError::blocked(format!(
                "node `{node}` is lost; its claims cannot be released through it"
            ))
            .with_hint(format!(
                "to detach without the node, run: csivol detach {volume_cli} --node {node} \
                 --force --reason \"...\"",
                volume_cli = csivol_api::cli_name(volume)
            )));
        }
        return unblock_volume(ctx, volume, Some(node), reason, dry_run, actor, limits);
    }
    if force {
        return Err(ApiError::conflict(format!(
            "node `{node}` is ready; --force is only for a lost node"
        ))
        .with_hint(format!(
            "detach through the node: csivol detach {volume_cli} --node {node} --reason \"...\"",
            volume_cli = csivol_api::cli_name(volume)
        )));
    }
    let claims: Vec<ClaimRow> = ctx
        .claims_of_volume(volume)?
        .into_iter()
        .filter(|c| {
            c.node == node && !matches!(c.state, ClaimState::Releasing | ClaimState::Failed)
        })
        .collect();
    let actions: Vec<PlannedAction> = claims
        .iter()
        .map(|c| PlannedAction {
            action: "release".into(),
            volume: volume.to_owned(),
            node: node.to_owned(),
            alloc: Some(c.alloc.clone()),
            lost_since: None,
        })
        .collect();
    if dry_run {
        return Ok(ActionPlan { dry_run, actions });
    }
    for c in &claims {
        set_claim_state(ctx, c, ClaimState::Releasing)?;
        event(
            ctx,
            EventKind::ClaimReleasing,
            Some(volume),
            Some(node),
            Some(&c.alloc),
            actor,
            format!("released by detach: {reason}"),
        )?;
    }
    event(
        ctx,
        EventKind::VolumeDetach,
        Some(volume),
        Some(node),
        None,
        actor,
        format!("detach requested: {reason}"),
    )?;
    Ok(ActionPlan { dry_run, actions })
}
