//! Nodes and liveness: registration, a lost or fenced node's return, drift found at
//! registration, loss; and operators' actions on a node as a whole (eligibility, removal), decided by
//! `csivol_rules::nodes`.

use std::collections::BTreeSet;

use csivol_api::{
    AttachmentState, ClaimRef, ClaimState, DriftFound, Eligibility, NodeStatus, RegisterRequest,
    validate_name,
};
use csivol_rules::nodes::{Holdings, removal};

use super::admission::refused;
use super::attachments::advance_volume;
use super::changes::{set_attachment_state, set_claim_state};
use super::events::{event, list_or};
use super::heard::unreported;
use super::ops::schedule_ops;
use super::settings::Limits;
use super::settle::reported;
use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, Drift};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};

/// A registration that names, for one of its plugins, the CSI node id another node
/// registered: refused, with an event. The id is what ControllerPublishVolume and
/// ControllerUnpublishVolume are told, so a node holding another's id would have the
/// storage attach its claims' volumes to that machine and detach that machine's when its
/// own are released. CSI's NodeGetInfoResponse `node_id`: "This field MUST contain enough
/// information to uniquely identify this specific node vs all other nodes supported by
/// this plugin. This field SHALL be used by the CO in subsequent calls, including
/// `ControllerPublishVolume`, to refer to this node." The first node to register an id
/// keeps it until it is removed (`csivol node remove`).
pub fn node_id_refused(
    ctx: &mut impl Txn,
    node: &str,
    req: &RegisterRequest,
) -> ApiResult<Option<ApiError>> {
    for p in &req.plugins {
        let Some(n) = &p.node else { continue };
        let id = &n.info.node_id;
        let Some(holder) = ctx
            .nodes_with_plugin_id(&p.id, id)?
            .into_iter()
            .find(|other| other != node)
        else {
            continue;
        };
        let shown = id.escape_debug();
        let message = format!(
            "plugin `{}` on node `{node}` reports the CSI node id `{shown}`, which node `{holder}` registered: csivol would attach volumes to, and detach them from, the machine of `{holder}` for this node's claims",
            p.id
        );
        event(
            ctx,
            EventKind::NodeIdRefused,
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            format!("registration refused: {message}"),
        )?;
        return Ok(Some(ApiError::conflict(message).with_hint(format!(
            "each node's plugin must report its own node id (NodeGetInfo); if node `{holder}` is gone for good, remove it first: csivol node remove {holder}"
        ))));
    }
    Ok(None)
}

/// `POST /v1/nodes/{node}/register`. Returns whether the node had been lost.
pub fn register_node(
    ctx: &mut impl Txn,
    node: &str,
    req: &RegisterRequest,
    limits: &Limits,
) -> ApiResult<bool> {
    validate_name("node", node).map_err(ApiError::invalid)?;
    csivol_api::FreeText::check_text(req).map_err(ApiError::text)?;
    if let Some(f) = req.fence_after_ms {
        csivol_api::limits::duration_ms("fence_after_ms", f).map_err(ApiError::out_of_range)?;
    }
    let mut ids = BTreeSet::new();
    for p in &req.plugins {
        validate_name("plugin", &p.id).map_err(ApiError::invalid)?;
        if !ids.insert(&p.id) {
            return Err(ApiError::invalid(format!(
                "plugin `{}` is listed twice",
                p.id
            )));
        }
    }
    // What the node holds names csivol's volumes and allocs: the naming rule bounds each.
    for c in &req.published {
        csivol_api::validate_key("volume", &c.volume).map_err(ApiError::invalid)?;
        validate_name("alloc", &c.alloc).map_err(ApiError::invalid)?;
    }
    for v in &req.staged {
        csivol_api::validate_key("volume", v).map_err(ApiError::invalid)?;
    }
    let existing = ctx.node(node)?;
    // While the state settles after a restore, a node still to say what it holds, or one
    // the restored state does not know, says it now.
    let reports_holdings = existing.is_none() || unreported(ctx, node)?;
    let was_lost = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Lost);
    let was_fenced = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Fenced);
    let was_stopped = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Stopped);
    let old_plugins: BTreeSet<String> = ctx
        .node_plugins(node)?
        .into_iter()
        .map(|p| p.plugin)
        .collect();
    let new_segments = new_capacity_segments(ctx, node, req)?;
    ctx.register_node(node, req.fence_after_ms, &req.labels, &req.plugins)?;
    ctx.touch(Key::Node(node.to_owned()));
    // The plugins' controller hosts ask GetCapacity per segment of the plugin's nodes
    // (`desired::capacity_queries`): a segment no node had before is theirs to ask about.
    for plugin in new_segments {
        for host in ctx.controller_hosts(&plugin)? {
            ctx.touch(Key::NodeOps(host));
        }
    }
    if was_fenced {
        // Its claims were force-released by the fence's unblock: nothing is resumed.
        fenced_node_returned(ctx, node, req)?;
    } else if was_lost {
        return_from_loss(ctx, node, &req.published, &req.staged, limits)?;
        event(
            ctx,
            EventKind::NodeReturned,
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            "lost node registered again",
        )?;
    } else {
        not_mounted_any_more(ctx, node, &req.published, limits)?;
        if was_stopped {
            back_from_stop(ctx, node, limits)?;
        }
        let verb = if was_stopped {
            "registered again after a planned stop"
        } else if existing.is_some() {
            "re-registered"
        } else {
            "registered"
        };
        let names: Vec<_> = req.plugins.iter().map(|p| p.id.as_str()).collect();
        event(
            ctx,
            EventKind::NodeRegistered,
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            format!("node {verb} with plugins {}", names.join(", ")),
        )?;
    }
    let plugins: BTreeSet<String> = req
        .plugins
        .iter()
        .map(|p| p.id.clone())
        .chain(old_plugins)
        .collect();
    if reports_holdings {
        reported(ctx, node, req, limits)?;
    }
    for p in plugins {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(was_lost)
}

/// The plugins of `req` whose controller reports GET_CAPACITY and for which `node` brings
/// a topology segment none of the plugin's ready nodes has.
fn new_capacity_segments(
    ctx: &mut impl Txn,
    node: &str,
    req: &RegisterRequest,
) -> ApiResult<Vec<String>> {
    let mut out = Vec::new();
    for p in &req.plugins {
        let Some(segment) = p
            .node
            .as_ref()
            .and_then(|n| n.info.accessible_topology.as_ref())
            .filter(|t| !t.is_empty())
        else {
            continue;
        };
        if !ctx
            .controller_capabilities(&p.id)?
            .is_some_and(|c| c.get_capacity)
        {
            continue;
        }
        if !ctx
            .ready_plugin_nodes(&p.id)?
            .iter()
            .any(|(n, t)| n != node && t == segment)
        {
            out.push(p.id.clone());
        }
    }
    Ok(out)
}

/// A fenced node registers again. Its claims were force-released by the fence, so none
/// is resumed: what it still reports published is recorded as taken down (its desired
/// state lists nothing, so its agent takes it down). It stays `fenced` until it registers
/// holding nothing.
fn fenced_node_returned(ctx: &mut impl Txn, node: &str, req: &RegisterRequest) -> ApiResult<()> {
    let actor = format!("node:{node}");
    for p in &req.published {
        event(
            ctx,
            EventKind::ClaimTakenDown,
            Some(&p.volume),
            Some(node),
            Some(&p.alloc),
            &actor,
            "node came back after it was fenced; the fence released this claim: the node takes it down",
        )?;
    }
    if req.published.is_empty() && req.staged.is_empty() {
        return event(
            ctx,
            EventKind::NodeReturned,
            None,
            Some(node),
            None,
            &actor,
            "fenced node registered again holding nothing: ready",
        );
    }
    ctx.set_node_status(node, NodeStatus::Fenced)?;
    event(
        ctx,
        EventKind::NodeReturned,
        None,
        Some(node),
        None,
        &actor,
        format!(
            "fenced node registered again still holding {} publication(s) and {} staging(s); it stays fenced while it takes them down",
            req.published.len(),
            req.staged.len()
        ),
    )
}

/// A lost node is back. csivol runs no workloads, so those of its claims may still be
/// running, and a claim nobody released is still wanted: a blocked claim that nobody
/// released meanwhile and whose lease did not run out is ready again if the node reports
/// it still published (checked against its mount table), and published again if not (its
/// mounts went while it was away, or it fenced itself): it waits for its node to stage and
/// publish it, as after drift. A claim it still has that an operator released meanwhile
/// is not in its desired state any more, so the node takes it down; that is recorded here.
/// Blocked attachments resume their normal lifecycle ([`resume_attachment`]).
pub(super) fn return_from_loss(
    ctx: &mut impl Txn,
    node: &str,
    published: &[ClaimRef],
    staged: &[String],
    limits: &Limits,
) -> ApiResult<()> {
    let blocked = ctx.claims_of_node(node, Some(ClaimState::Blocked))?;
    let still_published = |c: &ClaimRow| {
        published
            .iter()
            .any(|p| p.volume == c.volume && p.alloc == c.alloc)
    };
    let mut volumes = BTreeSet::new();
    for c in &blocked {
        if c.release_pending {
            set_claim_state(ctx, c, ClaimState::Releasing)?;
            event(
                ctx,
                EventKind::ClaimReleasing,
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                "node came back: releasing the claim whose release was under way when the node was lost",
            )?;
        } else if super::leases::expires(ClaimState::Ready, c.expires_at, ctx.now()) {
            // Its lease ran out while the node was away: released the normal way, through
            // the node (which takes down whatever it still has).
            super::leases::release_expired(ctx, c)?;
        } else if still_published(c) {
            // A claim whose `published` report never reached the server before the loss
            // has no target path yet: it is publishing until the node's report (queued or
            // made again) says where, so that nobody sees it ready without its path.
            let (state, message) = if c.target_path.is_some() {
                (
                    ClaimState::Ready,
                    "node came back with the volume still mounted from it: the claim is ready again",
                )
            } else {
                (
                    ClaimState::Publishing,
                    "node came back with the volume mounted from it: the claim is ready again once the node reports where",
                )
            };
            set_claim_state(ctx, c, state)?;
            event(
                ctx,
                EventKind::ClaimResumed,
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                message,
            )?;
        } else {
            // Nobody released it: the node publishes it again (stage, publish, verified);
            // its `published` report makes it ready, recorded as a repair.
            let why = format!("node {node} came back without it mounted");
            set_claim_state(ctx, c, ClaimState::Publishing)?;
            let drift = Drift {
                found: DriftFound::Return,
                at: ctx.now(),
                reason: why.clone(),
            };
            ctx.set_claim_drift(&c.volume, &c.alloc, &drift)?;
            event(
                ctx,
                EventKind::ClaimRepublished,
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                format!("{why}: nobody released the claim, so the node publishes it again"),
            )?;
        }
        volumes.insert(c.volume.clone());
    }
    for p in published {
        let kept = ctx
            .claim(&p.volume, &p.alloc)?
            .is_some_and(|c| c.node == node);
        if !kept && ctx.volume(&p.volume)?.is_some() {
            event(
                ctx,
                EventKind::ClaimTakenDown,
                Some(&p.volume),
                Some(node),
                Some(&p.alloc),
                &format!("node:{node}"),
                "node came back with a claim that was released while it was lost: the node takes it down",
            )?;
        }
    }
    // A queued claim held nothing while its node was lost, and its queue granted it
    // nothing then (a lost node may start nothing): it may start now.
    for c in ctx.claims_of_node(node, Some(ClaimState::Queued))? {
        volumes.insert(c.volume);
    }
    let blocked_atts = attachments_in(ctx, node, &[AttachmentState::Blocked])?;
    for v in blocked_atts {
        let holds = staged.contains(&v) || published.iter().any(|p| p.volume == v);
        resume_attachment(ctx, &v, node, holds)?;
        volumes.insert(v);
    }
    for v in volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// A blocked attachment of a node that came back. One that the node still has a claim
/// on, that it does not report staged or published (`holds`), and of which no
/// ControllerPublishVolume answer is recorded (no publish context: the loss dropped the
/// request before its answer, or the plugin answers none) is published again: a CO that
/// does not know whether the call succeeded "MAY choose to call `ControllerPublishVolume`
/// again", which "MUST be idempotent" (CSI spec, ControllerPublishVolume). Taken as
/// attached, the node would stage a volume that may not be published to it. Any other
/// is attached again, and moves on from there.
fn resume_attachment(ctx: &mut impl Txn, volume: &str, node: &str, holds: bool) -> ApiResult<()> {
    let unanswered = ctx
        .attachment(volume, node)?
        .is_some_and(|a| a.publish_context.is_empty());
    let claimed = ctx
        .claims_of_volume(volume)?
        .iter()
        .any(|c| c.node == node && matches!(c.state, ClaimState::Publishing | ClaimState::Ready));
    let plugin = ctx.volume(volume)?.map(|v| v.plugin);
    if let Some(plugin) = plugin
        && unanswered
        && claimed
        && !holds
        && ctx.needs_controller_publish(&plugin)?
    {
        set_attachment_state(ctx, volume, node, AttachmentState::Attaching)?;
        ctx.queue_op(OpKind::Publish, &plugin, volume, Some(node), "{}")?;
        return Ok(());
    }
    set_attachment_state(ctx, volume, node, AttachmentState::Attached)
}

/// A node stopped in order registered again: nothing of its volumes moved while it was
/// stopped (`transitions::next` leaves the claims of a node that is not ready where they
/// are), so what waited for it moves on now: a claim whose attachment was made while the
/// node stopped is published, one whose attachment went waits for a new one.
fn back_from_stop(ctx: &mut impl Txn, node: &str, limits: &Limits) -> ApiResult<()> {
    let volumes: BTreeSet<String> = ctx
        .claims_of_node(node, None)?
        .into_iter()
        .map(|c| c.volume)
        .chain(ctx.attachments_of_node(node)?.into_iter().map(|a| a.volume))
        .collect();
    for v in volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// A node registers with what is really mounted on it. A claim recorded ready there that
/// it does not report is not ready any more (its agent restarted without the mount, or the
/// node was taken down): it is publishing again, and its drift is recorded.
pub(super) fn not_mounted_any_more(
    ctx: &mut impl Txn,
    node: &str,
    published: &[ClaimRef],
    limits: &Limits,
) -> ApiResult<()> {
    for c in ctx.claims_of_node(node, Some(ClaimState::Ready))? {
        if published
            .iter()
            .any(|p| p.volume == c.volume && p.alloc == c.alloc)
        {
            continue;
        }
        let reason = format!("node {node} registered without it mounted");
        record_drift(ctx, &c, DriftFound::Registration, &reason, limits)?;
    }
    Ok(())
}

/// A ready claim is not mounted from its volume any more (`found` says what found it,
/// `reason` why): it is publishing again with its drift recorded, and the drift is an
/// event.
pub(super) fn record_drift(
    ctx: &mut impl Txn,
    c: &ClaimRow,
    found: DriftFound,
    reason: &str,
    limits: &Limits,
) -> ApiResult<()> {
    // Counted once it is committed: a write request may run more than once.
    let drifts = limits.metrics.claim_drifts.clone();
    ctx.after_commit(Box::new(move || {
        drifts.inc();
    }));
    set_claim_state(ctx, c, ClaimState::Publishing)?;
    let drift = Drift {
        found,
        at: ctx.now(),
        reason: reason.to_owned(),
    };
    ctx.set_claim_drift(&c.volume, &c.alloc, &drift)?;
    event(
        ctx,
        EventKind::ClaimDrift,
        Some(&c.volume),
        Some(&c.node),
        Some(&c.alloc),
        &format!("node:{}", c.node),
        format!(
            "{}; the claim waits for its node to publish it again",
            drift.said()
        ),
    )
}

/// Takes the controller operations `node` hosts from it, for another host: the plugins
/// whose operations are to be handed out again.
fn unassign_hosted_ops(ctx: &mut impl Txn, node: &str) -> ApiResult<BTreeSet<String>> {
    let hosted = ctx
        .ops_of_host(node)?
        .into_iter()
        .map(|o| o.plugin)
        .collect();
    ctx.unassign_ops_of(node)?;
    Ok(hosted)
}

/// The volumes attached to `node` in one of `states`.
fn attachments_in(
    ctx: &impl Snapshot,
    node: &str,
    states: &[AttachmentState],
) -> ApiResult<Vec<String>> {
    Ok(ctx
        .attachments_of_node(node)?
        .into_iter()
        .filter(|a| states.contains(&a.state))
        .map(|a| a.volume)
        .collect())
}

/// The node missed its heartbeats: its claims and attachments are blocked, and controller
/// operations it hosted go to another host.
/// `why` opens the event (`no heartbeat for 30s`).
pub fn mark_lost(ctx: &mut impl Txn, node: &str, why: &str, limits: &Limits) -> ApiResult<()> {
    let Some(n) = ctx.node(node)? else {
        return Ok(());
    };
    // A fenced node is off already: its volumes were unblocked, nothing is left to block.
    // A stopped node whose grace ran out is lost like any silent node.
    if !matches!(n.status, NodeStatus::Ready | NodeStatus::Stopped) {
        return Ok(());
    }
    ctx.set_node_status(node, NodeStatus::Lost)?;
    ctx.touch(Key::Node(node.to_owned()));
    let claims = ctx.claims_of_node(node, None)?;
    // A queued claim holds nothing: it stays in the queue (its lease, if any, runs on). A
    // claim being released (or cleaned up) when its node was lost stays released: when the
    // node returns it is taken down, not resumed.
    for c in &claims {
        if matches!(c.state, ClaimState::Releasing | ClaimState::Failed) {
            ctx.set_claim_release_pending(&c.volume, &c.alloc)?;
        }
        if !matches!(c.state, ClaimState::Blocked | ClaimState::Queued) {
            set_claim_state(ctx, c, ClaimState::Blocked)?;
        }
    }
    let atts = attachments_in(
        ctx,
        node,
        &[
            AttachmentState::Attaching,
            AttachmentState::Attached,
            AttachmentState::Unstaging,
        ],
    )?;
    for v in &atts {
        set_attachment_state(ctx, v, node, AttachmentState::Blocked)?;
        // A publish to a lost node is pointless; an unblock will unpublish whatever it did.
        ctx.delete_op_for(OpKind::Publish, v, node)?;
    }
    let hosted = unassign_hosted_ops(ctx, node)?;
    // The volumes the node held: a queued claim holds nothing, so its volume is blocked
    // only if the node holds it otherwise.
    let holding: Vec<&ClaimRow> = claims
        .iter()
        .filter(|c| c.state != ClaimState::Queued)
        .collect();
    let volumes: BTreeSet<&str> = holding
        .iter()
        .map(|c| c.volume.as_str())
        .chain(atts.iter().map(String::as_str))
        .collect();
    event(
        ctx,
        EventKind::NodeLost,
        None,
        Some(node),
        None,
        "server",
        format!(
            "{why}: node lost; {} claim(s) and {} attachment(s) blocked until it returns or is unblocked",
            holding.len(),
            atts.len()
        ),
    )?;
    for v in volumes {
        let allocs: Vec<_> = holding
            .iter()
            .filter(|c| c.volume == v)
            .map(|c| c.alloc.as_str())
            .collect();
        event(
            ctx,
            EventKind::VolumeBlocked,
            Some(v),
            Some(node),
            None,
            "server",
            format!(
                "blocked: node {node} lost (claims: {})",
                list_or(&allocs, "none")
            ),
        )?;
    }
    for p in hosted {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(())
}

/// What the liveness check's verdict on a silent node comes to in the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Marked lost (or nothing to mark: not ready, or gone).
    Done,
    /// Its agent stopped in order and its grace runs until this time (unix ms): not lost
    /// before then.
    StoppedUntil(i64),
}

/// A node silent past its TTL is lost, unless its agent said it stopped in order
/// (`node-stopping`) less than `planned_stop_grace` ago: a planned stop is not a death, and
/// neither its claims nor auto-fence move before the grace is out. Every server of a
/// cluster decides this from the database, whichever one heard the stop.
pub fn expire_node(
    ctx: &mut impl Txn,
    node: &str,
    ttl: std::time::Duration,
    planned_stop_grace: std::time::Duration,
    limits: &Limits,
) -> ApiResult<Expiry> {
    if let Some(n) = ctx.node(node)?
        && n.status == NodeStatus::Stopped
        && let Some(at) = n.stopped_at
    {
        let until = at + planned_stop_grace.as_millis() as i64;
        if until > ctx.now() {
            return Ok(Expiry::StoppedUntil(until));
        }
        let why = format!(
            "stopped in order and silent for {} (planned_stop_grace)",
            humantime::format_duration(planned_stop_grace)
        );
        mark_lost(ctx, node, &why, limits)?;
        return Ok(Expiry::Done);
    }
    let why = format!("no heartbeat for {}", humantime::format_duration(ttl));
    mark_lost(ctx, node, &why, limits)?;
    Ok(Expiry::Done)
}

/// `POST /v1/nodes/{node}/stopping`: the node's agent stops in order. A ready node becomes
/// `stopped`: its claims stay as they are (ready, or publishing again after the drift its
/// agent reported when it took its volumes down), nothing moves, and the controller
/// operations it hosted go to another host. A node lost or fenced meanwhile stays so.
pub fn node_stopping(
    ctx: &mut impl Txn,
    node: &str,
    took_down: bool,
    planned_stop_grace: std::time::Duration,
    limits: &Limits,
) -> ApiResult<()> {
    let n = ctx.require_node(node)?;
    if n.status != NodeStatus::Ready {
        return Ok(());
    }
    ctx.set_node_stopped(node, took_down)?;
    ctx.touch(Key::Node(node.to_owned()));
    let hosted = unassign_hosted_ops(ctx, node)?;
    let held = ctx.claims_of_node(node, None)?.len();
    let volumes = if took_down {
        "took its volumes down first"
    } else {
        "left its volumes mounted"
    };
    event(
        ctx,
        EventKind::NodeStopping,
        None,
        Some(node),
        None,
        &format!("node:{node}"),
        format!(
            "the agent stopped in order and {volumes}; its {held} claim(s) stay held until it \
             starts again (lost if silent for {}, planned_stop_grace)",
            humantime::format_duration(planned_stop_grace)
        ),
    )?;
    for p in hosted {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(())
}

/// `POST /v1/nodes/{node}/eligibility`: records the operator's choice, with an event.
pub fn set_eligibility(
    ctx: &mut impl Txn,
    node: &str,
    eligibility: Eligibility,
    actor: &str,
    limits: &Limits,
) -> ApiResult<()> {
    let n = ctx.require_node(node)?;
    if n.eligibility == eligibility {
        return Ok(());
    }
    ctx.set_node_eligibility(node, eligibility)?;
    let (kind, message) = match eligibility {
        Eligibility::Eligible => (EventKind::NodeEligible, "node takes new claims again"),
        Eligibility::Ineligible => (EventKind::NodeIneligible, "node takes no new claims"),
        Eligibility::Draining => (
            EventKind::NodeDraining,
            "node is being drained: no new claims; its claims are left to their owners to release",
        ),
    };
    event(ctx, kind, None, Some(node), None, actor, message)?;
    // A node that takes no new claims has no next job to keep a staging for.
    let lingering: BTreeSet<String> = ctx
        .lingers(None, Some(node))?
        .into_iter()
        .map(|l| l.volume)
        .collect();
    for v in lingering {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// `DELETE /v1/nodes/{node}`: forgets a node that holds nothing (see [`removal`]).
pub fn remove_node(ctx: &mut impl Txn, node: &str, actor: &str) -> ApiResult<()> {
    let n = ctx.require_node(node)?;
    let h = Holdings {
        claims: ctx
            .claims_of_node(node, None)?
            .into_iter()
            .map(|c| (c.volume, c.alloc, c.state))
            .collect(),
        attachments: ctx
            .attachments_of_node(node)?
            .into_iter()
            .map(|a| (a.volume, a.state))
            .collect(),
        ops: ctx.ops_of_host(node)?.len(),
    };
    removal(node, &h).map_err(refused)?;
    // A claim waiting in a pool's line for the node is a claim on it, as a queued one is:
    // its owner releases it (a drain), the removal does not.
    let waiting: Vec<(String, String)> = ctx
        .pool_line(None)?
        .into_iter()
        .filter(|w| w.request.claim.node == node)
        .map(|w| (w.pool, w.request.claim.alloc))
        .collect();
    if let Some((pool, alloc)) = waiting.first() {
        let (s, wait) = if waiting.len() == 1 {
            ("", "waits")
        } else {
            ("s", "wait")
        };
        let named: Vec<String> = waiting
            .iter()
            .map(|(p, a)| format!("alloc {a} in pool {p}"))
            .collect();
        return Err(ApiError::conflict(format!(
            "refusing to remove node `{node}`: {} claim{s} for it {wait} in pools' lines ({})",
            waiting.len(),
            named.join(", ")
        ))
        .with_hint(format!(
            "drain it and wait for the owners to release them, or release one: csivol release \
             --pool {pool} --alloc {alloc}"
        )));
    }
    ctx.delete_node(node)?;
    event(
        ctx,
        EventKind::NodeRemoved,
        None,
        Some(node),
        None,
        actor,
        format!(
            "node removed (it was {}); an agent that registers it again brings it back",
            n.status.as_str()
        ),
    )
}
