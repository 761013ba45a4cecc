//! Volume expansion: ControllerExpandVolume as a controller operation, then NodeExpandVolume
//! on every node where the volume is attached, run by those nodes' agents. The volume
//! records what it has (`capacity_bytes`) and the expansion under way (`expansion`).

use std::collections::BTreeSet;

use csivol_api::domain::ErrorClass;
use csivol_api::{
    self as api, AttachmentState, ClaimState, Expansion, ExpansionPhase, NodeExpansion,
    NodeExpansionState, PluginError, format_size,
};

use super::after_release::{Use, why_held};
use super::ops::{backoff, schedule_ops};
use super::volumes::volume_view;
use super::{Limits, event, format_error};
use crate::error::{ApiError, ApiResult};
use crate::model::{Lifecycle, OpRow, VolumeRow, time};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::expansion::{Decision, Facts, decide};
use csivol_rules::kinds::{EventKind, OpKind};

/// `POST /v1/volumes/{name}/expand`: checks the rule and queues ControllerExpandVolume, or
/// lowers or cancels an expansion that failed or keeps failing. Returns the volume and
/// whether the request started or changed something.
///
/// With `waits` (the caller follows the outcome), an offline expansion that only the
/// volume's release stands in the way of is accepted and held until the release has
/// finished (`after_release`).
pub fn expand_volume(
    ctx: &mut impl Txn,
    name: &str,
    req: &api::ExpandRequest,
    actor: &str,
    limits: &Limits,
    waits: bool,
) -> ApiResult<(api::Volume, bool)> {
    let capacity_bytes = req.capacity_bytes;
    if req.cancel && capacity_bytes != 0 {
        return Err(ApiError::invalid(
            "`cancel` takes no `capacity_bytes`: it keeps the capacity the volume has",
        ));
    }
    if !req.cancel && capacity_bytes == 0 {
        return Err(ApiError::invalid(
            "`capacity_bytes` must be at least 1: the capacity to reach, in bytes",
        ));
    }
    api::limits::size_bytes("capacity_bytes", capacity_bytes).map_err(ApiError::out_of_range)?;
    let v = ctx.require_volume(name)?;
    // A controller call that failed and waits for its retry: none running now.
    let op = ctx.key_op(OpKind::Expand, name)?;
    let retrying = v
        .expansion
        .as_ref()
        .is_some_and(|e| e.phase == ExpansionPhase::Controller && e.error.is_some())
        && op
            .as_ref()
            .is_some_and(|o| o.host.is_none() && o.attempt > 0);
    let regs = ctx.plugin_registrations(&v.plugin)?;
    let controllers: Vec<_> = regs.iter().filter_map(|(_, _, r)| r.controller).collect();
    let controller_expand =
        (!controllers.is_empty()).then(|| controllers.iter().any(|c| c.expand_volume));
    let mode = regs
        .iter()
        .find(|(_, _, r)| r.controller.is_some())
        .or(regs.first())
        .and_then(|(_, _, r)| r.capabilities.volume_expansion);
    let mut in_use = BTreeSet::new();
    for c in ctx.claims_of_volume(name)? {
        if c.state != ClaimState::Queued {
            in_use.insert(c.node);
        }
    }
    for a in ctx.attachments_of_volume(name)? {
        in_use.insert(a.node);
    }
    let in_use: Vec<String> = in_use.into_iter().collect();
    let used = Use::load(&*ctx, name)?;
    let standing = used.standing();
    let facts = Facts {
        volume: name,
        plugin: &v.plugin,
        ready: v.lifecycle == Lifecycle::Ready,
        current: v.capacity_bytes,
        requested: capacity_bytes,
        // One waiting for a node to stage the volume is not in the way of a new request.
        under_way: v
            .expansion
            .as_ref()
            .filter(|e| !(e.when_staged && e.nodes.is_empty()))
            .map(|e| (e.capacity_bytes, e.phase)),
        retrying,
        held: op.as_ref().is_some_and(|o| o.held()),
        cancel: req.cancel,
        controller_expand,
        node_expand: regs.iter().any(|(_, _, r)| {
            r.node
                .as_ref()
                .is_some_and(|n| n.capabilities.expand_volume)
        }),
        controller_service: regs
            .iter()
            .any(|(_, _, r)| r.capabilities.controller_service),
        mode,
        in_use: &in_use,
        standing: &standing,
        waits,
    };
    let held = match decide(&facts) {
        Ok(Decision::Nothing) => return Ok((volume_view(ctx, name)?, false)),
        Ok(Decision::Cancel) => {
            cancel(ctx, &v, op.as_ref(), actor)?;
            return Ok((volume_view(ctx, name)?, true));
        }
        Ok(Decision::Lower) => {
            let op = op.expect("a retried expansion has its operation");
            lower(ctx, &v, &op, capacity_bytes, actor, limits)?;
            return Ok((volume_view(ctx, name)?, true));
        }
        Ok(Decision::StartOnNodes) => {
            start_on_nodes(ctx, &v, capacity_bytes, actor)?;
            return Ok((volume_view(ctx, name)?, true));
        }
        Ok(Decision::StartOnNextStage) => {
            start_on_next_stage(ctx, &v, capacity_bytes, actor)?;
            return Ok((volume_view(ctx, name)?, true));
        }
        Ok(Decision::Start) => false,
        Ok(Decision::StartAfterRelease) => true,
        Err(r) => {
            let e = if r.invalid {
                ApiError::invalid(r.message)
            } else {
                ApiError::conflict(r.message)
            };
            return Err(e.with_hint(r.hint));
        }
    };
    let mut expansion =
        Expansion::started(capacity_bytes, ExpansionPhase::Controller, time(ctx.now()));
    expansion.after_release = held;
    ctx.set_volume_expansion(name, None, Some(&expansion))?;
    ctx.touch(Key::Volume(name.to_owned()));
    let payload = serde_json::json!({ "capacity_bytes": capacity_bytes }).to_string();
    let mut said = format!(
        "ControllerExpandVolume to {} requested from plugin {}",
        format_size(capacity_bytes),
        v.plugin
    );
    if held {
        ctx.queue_held_op(OpKind::Expand, &v.plugin, name, &payload, &why_held(name))?;
        said.push_str(", to be sent once the volume's release has finished");
    } else {
        ctx.queue_op(OpKind::Expand, &v.plugin, name, None, &payload)?;
    }
    event(
        ctx,
        EventKind::VolumeExpanding,
        Some(name),
        None,
        None,
        actor,
        said,
    )?;
    schedule_ops(ctx, &v.plugin, limits)?;
    Ok((volume_view(ctx, name)?, true))
}

/// A node-only plugin's offline expansion asked for while the volume is being released:
/// none of the nodes it is leaving grows it; the next node to stage it does.
fn start_on_next_stage(
    ctx: &mut impl Txn,
    v: &VolumeRow,
    capacity_bytes: u64,
    actor: &str,
) -> ApiResult<()> {
    let expansion = Expansion::started(capacity_bytes, ExpansionPhase::Node, time(ctx.now()));
    let (to, plugin) = (format_size(capacity_bytes), &v.plugin);
    node_phase(ctx, &v.name, None, expansion, &[], actor, |on| {
        format!(
            "NodeExpandVolume to {to} requested on {on}, once the volume's release has finished \
             (plugin {plugin} expands on its nodes only, and offline)"
        )
    })
}

/// Drops the expansion that failed, waits for its retry, or waits for the volume's release;
/// the volume keeps its capacity.
fn cancel(ctx: &mut impl Txn, v: &VolumeRow, op: Option<&OpRow>, actor: &str) -> ApiResult<()> {
    let e = v
        .expansion
        .as_ref()
        .expect("the rule cancels a recorded expansion");
    if let Some(o) = op {
        ctx.delete_op(o.id)?;
    }
    ctx.set_volume_expansion(&v.name, None, None)?;
    ctx.touch(Key::Volume(v.name.clone()));
    let keeps = v
        .capacity_bytes
        .map_or_else(|| "its capacity".to_owned(), format_size);
    event(
        ctx,
        EventKind::VolumeExpansionCancelled,
        Some(&v.name),
        None,
        None,
        actor,
        format!(
            "the expansion to {} is cancelled ({}); the volume keeps {keeps}",
            format_size(e.capacity_bytes),
            match (&e.error, e.after_release) {
                (Some(error), _) => error.as_str(),
                (None, true) => "it waited for the volume's release to finish; nothing was sent",
                (None, false) => "it failed",
            }
        ),
    )
}

/// Asks the retried ControllerExpandVolume for a smaller capacity instead, at once.
fn lower(
    ctx: &mut impl Txn,
    v: &VolumeRow,
    op: &OpRow,
    capacity_bytes: u64,
    actor: &str,
    limits: &Limits,
) -> ApiResult<()> {
    let mut e = v
        .expansion
        .clone()
        .expect("the rule lowers a recorded expansion");
    let (from, why) = (e.capacity_bytes, e.error.take().unwrap_or_default());
    e.capacity_bytes = capacity_bytes;
    ctx.set_volume_expansion(&v.name, None, Some(&e))?;
    ctx.touch(Key::Volume(v.name.clone()));
    let payload = serde_json::json!({ "capacity_bytes": capacity_bytes });
    ctx.retarget_op(op.id, &payload.to_string())?;
    event(
        ctx,
        EventKind::VolumeExpanding,
        Some(&v.name),
        None,
        None,
        actor,
        format!(
            "expansion lowered from {} to {} after: {why}",
            format_size(from),
            format_size(capacity_bytes)
        ),
    )?;
    schedule_ops(ctx, &v.plugin, limits)
}

/// A node-only plugin's expansion: no controller step; NodeExpandVolume on every node
/// where the volume is attached, or on the next node to stage it. The capacity is recorded
/// when the nodes are done.
fn start_on_nodes(
    ctx: &mut impl Txn,
    v: &VolumeRow,
    capacity_bytes: u64,
    actor: &str,
) -> ApiResult<()> {
    let (nodes, _) = attached_that_grow(ctx, v)?;
    let expansion = Expansion::started(capacity_bytes, ExpansionPhase::Node, time(ctx.now()));
    let (to, plugin) = (format_size(capacity_bytes), &v.plugin);
    node_phase(ctx, &v.name, None, expansion, &nodes, actor, |on| {
        format!(
            "NodeExpandVolume to {to} requested on {on} (plugin {plugin} expands on its nodes only)"
        )
    })
}

/// Moves expansion `e` of `volume` to its node phase on `nodes` (with none, on the next node
/// to stage it: `when_staged`), records it with the volume's new `capacity` if known, wakes
/// the nodes and writes the event `said` gives for where it runs.
fn node_phase(
    ctx: &mut impl Txn,
    volume: &str,
    capacity: Option<u64>,
    mut e: Expansion,
    nodes: &[String],
    actor: &str,
    said: impl FnOnce(&str) -> String,
) -> ApiResult<()> {
    e.phase = ExpansionPhase::Node;
    e.error = None;
    e.nodes = nodes.iter().map(|n| NodeExpansion::pending(n)).collect();
    e.when_staged = nodes.is_empty();
    ctx.set_volume_expansion(volume, capacity, Some(&e))?;
    ctx.touch(Key::Volume(volume.to_owned()));
    for n in nodes {
        ctx.touch(super::node_volume(n, volume));
    }
    let on = if nodes.is_empty() {
        "the next node to stage it".to_owned()
    } else {
        nodes.join(", ")
    };
    event(
        ctx,
        EventKind::VolumeExpanding,
        Some(volume),
        None,
        None,
        actor,
        said(&on),
    )
}

/// ControllerExpandVolume succeeded: the volume has `capacity_bytes` in its storage; the
/// nodes where it is attached grow it too when the plugin says so and can.
pub(super) fn controller_expanded(
    ctx: &mut impl Txn,
    o: &OpRow,
    capacity_bytes: u64,
    node_expansion_required: bool,
    actor: &str,
) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let Some(v) = ctx.volume(&o.volume)? else {
        return Ok(());
    };
    let Some(e) = v.expansion.clone() else {
        return Ok(());
    };
    // The spec: 0 means the plugin did not say; take what was asked for.
    let capacity = if capacity_bytes == 0 {
        e.capacity_bytes
    } else {
        capacity_bytes
    };
    let (nodes, any_can_grow) = if node_expansion_required {
        attached_that_grow(ctx, &v)?
    } else {
        (Vec::new(), false)
    };
    if nodes.is_empty() && !any_can_grow {
        ctx.set_volume_expansion(&o.volume, Some(capacity), None)?;
        ctx.touch(Key::Volume(o.volume.clone()));
        return event(
            ctx,
            EventKind::VolumeExpanded,
            Some(&o.volume),
            None,
            None,
            actor,
            format!("expanded to {}", format_size(capacity)),
        );
    }
    // Where it is staged nowhere now (an offline expansion), the next node to stage it
    // grows it.
    let grew = format_size(capacity);
    node_phase(ctx, &o.volume, Some(capacity), e, &nodes, actor, |on| {
        format!("ControllerExpandVolume grew it to {grew}; NodeExpandVolume on {on}")
    })
}

/// ControllerExpandVolume failed: the last error is shown while it is retried, and a
/// final one ends the expansion as failed (the capacity stays as it was).
pub(super) fn controller_expand_failed(
    ctx: &mut impl Txn,
    volume: &str,
    message: &str,
    is_final: bool,
) -> ApiResult<()> {
    let Some(mut e) = ctx.volume(volume)?.and_then(|v| v.expansion) else {
        return Ok(());
    };
    e.error = Some(message.to_owned());
    if is_final {
        e.phase = ExpansionPhase::Failed;
    }
    ctx.set_volume_expansion(volume, None, Some(&e))?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}

/// The nodes whose plugin of `plugin` has the node's EXPAND_VOLUME.
fn nodes_that_grow(ctx: &impl Txn, plugin: &str) -> ApiResult<BTreeSet<String>> {
    Ok(ctx
        .plugin_registrations(plugin)?
        .into_iter()
        .filter(|(_, _, r)| {
            r.node
                .as_ref()
                .is_some_and(|n| n.capabilities.expand_volume)
        })
        .map(|(n, _, _)| n)
        .collect())
}

/// The nodes where `v` is attached whose plugin can grow it, and whether any node of the
/// plugin can.
fn attached_that_grow(ctx: &impl Txn, v: &VolumeRow) -> ApiResult<(Vec<String>, bool)> {
    let can_grow = nodes_that_grow(ctx, &v.plugin)?;
    let nodes = ctx
        .attachments_of_volume(&v.name)?
        .into_iter()
        .filter(|a| a.state == AttachmentState::Attached && can_grow.contains(&a.node))
        .map(|a| a.node)
        .collect();
    Ok((nodes, !can_grow.is_empty()))
}

/// `volume` was just published on `node`: an expansion waiting for the next node to stage
/// it (`when_staged`) becomes that node's NodeExpandVolume.
pub(super) fn staged_on(ctx: &mut impl Txn, volume: &str, node: &str) -> ApiResult<()> {
    let Some(v) = ctx.volume(volume)? else {
        return Ok(());
    };
    let Some(mut e) = v.expansion else {
        return Ok(());
    };
    if !(e.when_staged && e.phase == ExpansionPhase::Node && e.nodes.is_empty()) {
        return Ok(());
    }
    if !nodes_that_grow(ctx, &v.plugin)?.contains(node) {
        return Ok(());
    }
    e.nodes.push(NodeExpansion::pending(node));
    ctx.set_volume_expansion(volume, None, Some(&e))?;
    ctx.touch(Key::Volume(volume.to_owned()));
    ctx.touch(super::node_volume(node, volume));
    Ok(())
}

/// The node's part of an expansion, if the report answers its current attempt.
fn node_part(
    ctx: &impl Txn,
    node: &str,
    volume: &str,
    attempt: u32,
) -> ApiResult<Option<(Expansion, usize)>> {
    let Some(e) = ctx.volume(volume)?.and_then(|v| v.expansion) else {
        return Ok(None);
    };
    if e.phase != ExpansionPhase::Node {
        return Ok(None);
    }
    let Some(i) = e.nodes.iter().position(|n| {
        n.node == node && n.state == NodeExpansionState::Pending && n.attempt == attempt
    }) else {
        return Ok(None);
    };
    Ok(Some((e, i)))
}

/// NodeExpandVolume succeeded on the reporting node; the expansion ends with the last.
pub(super) fn node_expanded(
    ctx: &mut impl Txn,
    node: &str,
    actor: &str,
    volume: &str,
    attempt: u32,
) -> ApiResult<()> {
    let Some((mut e, i)) = node_part(ctx, node, volume, attempt)? else {
        return Ok(());
    };
    e.nodes[i].state = NodeExpansionState::Done;
    e.nodes[i].error = None;
    e.nodes[i].not_before_ms = None;
    ctx.touch(super::node_volume(node, volume));
    ctx.touch(Key::Volume(volume.to_owned()));
    if e.nodes.iter().all(|n| n.state == NodeExpansionState::Done) {
        // A node-only expansion grew the storage too: its capacity is recorded now.
        let has = ctx.volume(volume)?.and_then(|v| v.capacity_bytes);
        let grown = has.is_none_or(|c| c < e.capacity_bytes);
        ctx.set_volume_expansion(volume, grown.then_some(e.capacity_bytes), None)?;
        let capacity = ctx
            .volume(volume)?
            .and_then(|v| v.capacity_bytes)
            .unwrap_or(e.capacity_bytes);
        return event(
            ctx,
            EventKind::VolumeExpanded,
            Some(volume),
            None,
            None,
            actor,
            format!(
                "expanded to {} (NodeExpandVolume done on {})",
                format_size(capacity),
                e.nodes
                    .iter()
                    .map(|n| n.node.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    ctx.set_volume_expansion(volume, None, Some(&e))
}

/// The volume left `node` while it was to grow there: nothing is left on the node to grow,
/// so its part is done (the next stage there uses the new size).
pub(super) fn detached(ctx: &mut impl Txn, volume: &str, node: &str) -> ApiResult<()> {
    let Some(e) = ctx.volume(volume)?.and_then(|v| v.expansion) else {
        return Ok(());
    };
    let Some(part) = e
        .nodes
        .iter()
        .find(|n| n.node == node && n.state == NodeExpansionState::Pending)
    else {
        return Ok(());
    };
    let attempt = part.attempt;
    node_expanded(ctx, node, "server", volume, attempt)
}

/// NodeExpandVolume failed on the reporting node: retried with backoff when the error says
/// it may pass, otherwise the expansion fails with it.
pub(super) fn node_expand_error(
    ctx: &mut impl Txn,
    node: &str,
    actor: &str,
    volume: &str,
    attempt: u32,
    error: &PluginError,
) -> ApiResult<()> {
    let Some((mut e, i)) = node_part(ctx, node, volume, attempt)? else {
        return Ok(());
    };
    let message = format!("NodeExpandVolume on {node} failed: {}", format_error(error));
    ctx.touch(super::node_volume(node, volume));
    ctx.touch(Key::Volume(volume.to_owned()));
    if ErrorClass::of_name(&error.code) == ErrorClass::Retry {
        let next = ctx.now() + backoff(attempt).as_millis() as i64;
        let part = &mut e.nodes[i];
        part.attempt += 1;
        part.not_before_ms = Some(next as u64);
        part.error = Some(message.clone());
        e.error = Some(format!("{message}; retrying at {}", time(next)));
        return ctx.set_volume_expansion(volume, None, Some(&e));
    }
    e.nodes[i].state = NodeExpansionState::Failed;
    e.nodes[i].error = Some(message.clone());
    e.phase = ExpansionPhase::Failed;
    e.error = Some(message.clone());
    ctx.set_volume_expansion(volume, None, Some(&e))?;
    // The other nodes' parts leave their desired states with the failed expansion.
    for n in &e.nodes {
        ctx.touch(super::node_volume(&n.node, volume));
    }
    event(
        ctx,
        EventKind::OperationFailed,
        Some(volume),
        Some(node),
        None,
        actor,
        message,
    )
}

/// The node expansion `node` must run for a volume attached there, if any: the volume's
/// expansion is in its node phase and the node's part is pending.
pub(super) fn desired_expansion(v: &VolumeRow, node: &str) -> Option<api::DesiredExpand> {
    let e = v.expansion.as_ref()?;
    if e.phase != ExpansionPhase::Node {
        return None;
    }
    let n = e
        .nodes
        .iter()
        .find(|n| n.node == node && n.state == NodeExpansionState::Pending)?;
    Some(api::DesiredExpand {
        volume: v.name.clone(),
        plugin: v.plugin.clone(),
        external_id: v.external_id.clone(),
        // What the controller gave it, or for a node-only plugin what was asked for.
        capacity_bytes: v.capacity_bytes.unwrap_or(0).max(e.capacity_bytes),
        capability: v.capability(),
        attempt: n.attempt,
        not_before_ms: n.not_before_ms.unwrap_or(0),
        secrets: v.secrets.clone(),
    })
}
