//! Operators' actions: unblock (of a volume or a whole node) and detach, each with a dry
//! run.

use csivol_proto::api::{self, ActionPlan, AttachmentState, ClaimState, NodeStatus, PlannedAction};
use rusqlite::Connection;

use super::attachments::{advance_volume, begin_detach};
use super::{Limits, delete_claim, event, set_claim_state};
use crate::server::db::WriteCtx;
use crate::server::error::{ApiError, ApiResult};
use crate::server::model::{AttachmentRow, ClaimRow, NodeRow, VolumeRow, time};

pub(super) fn lost_since(conn: &Connection, node: &str) -> ApiResult<Option<String>> {
    Ok(NodeRow::load(conn, node)?.and_then(|n| n.lost_at).map(time))
}

/// Plans (and unless `dry_run`, carries out) the unblock of `volume`, on `node` or on every
/// node holding it blocked.
pub fn unblock_volume(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    node: Option<&str>,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    let v = VolumeRow::require(ctx.tx, volume)?;
    if let Some(n) = node {
        NodeRow::require(ctx.tx, n)?;
    }
    let on_node = |n: &str| node.is_none_or(|want| want == n);
    let claims: Vec<ClaimRow> = ClaimRow::of_volume(ctx.tx, volume)?
        .into_iter()
        .filter(|c| c.state == ClaimState::Blocked && on_node(&c.node))
        .collect();
    let atts: Vec<AttachmentRow> = AttachmentRow::of_volume(ctx.tx, volume)?
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
            lost_since: lost_since(ctx.tx, &c.node)?,
        });
    }
    for a in &atts {
        actions.push(PlannedAction {
            action: "force-detach".into(),
            volume: volume.to_owned(),
            node: a.node.clone(),
            alloc: None,
            lost_since: lost_since(ctx.tx, &a.node)?,
        });
    }
    if dry_run {
        return Ok(ActionPlan { dry_run, actions });
    }
    for c in &claims {
        delete_claim(ctx, c)?;
        event(
            ctx,
            "claim-force-released",
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
            "volume-force-detaching",
            Some(volume),
            Some(&a.node),
            None,
            actor,
            format!("force-detach by unblock: {reason}"),
        )?;
    }
    event(
        ctx,
        "volume-unblocked",
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
    ctx: &mut WriteCtx<'_>,
    node: &str,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    NodeRow::require(ctx.tx, node)?;
    let volumes: Vec<String> = ctx
        .tx
        .prepare_cached(
            "SELECT volume FROM claims WHERE node = ?1 AND state = 'blocked' \
             UNION SELECT volume FROM attachments WHERE node = ?1 AND state = 'blocked' ORDER BY 1",
        )?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if volumes.is_empty() {
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
    Ok(ActionPlan { dry_run, actions })
}

/// `POST /v1/volumes/{name}/detach`: releases every claim of the volume on a live node
/// through the node; on a lost node, `force` is an unblock.
pub fn detach(
    ctx: &mut WriteCtx<'_>,
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
    VolumeRow::require(ctx.tx, volume)?;
    let n = NodeRow::require(ctx.tx, node)?;
    if n.status == NodeStatus::Lost {
        if !force {
            return Err(ApiError::blocked(format!(
                "node `{node}` is lost; its claims cannot be released through it"
            ))
            .with_hint(format!("to detach without the node, run: csivol detach {volume} --node {node} --force --reason \"...\"")));
        }
        return unblock_volume(ctx, volume, Some(node), reason, dry_run, actor, limits);
    }
    if force {
        return Err(ApiError::conflict(format!(
            "node `{node}` is ready; --force is only for a lost node"
        ))
        .with_hint(format!(
            "detach through the node: csivol detach {volume} --node {node} --reason \"...\""
        )));
    }
    let claims: Vec<ClaimRow> = ClaimRow::of_volume(ctx.tx, volume)?
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
            "claim-releasing",
            Some(volume),
            Some(node),
            Some(&c.alloc),
            actor,
            format!("released by detach: {reason}"),
        )?;
    }
    event(
        ctx,
        "volume-detach",
        Some(volume),
        Some(node),
        None,
        actor,
        format!("detach requested: {reason}"),
    )?;
    Ok(ActionPlan { dry_run, actions })
}
