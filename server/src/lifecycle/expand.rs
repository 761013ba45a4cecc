//! Volume expansion: the request, checked by `csivol_rules::expansion`, then
//! ControllerExpandVolume as a controller operation (`ops::kinds::expand`) and
//! NodeExpandVolume on every node where the volume is attached, run by those nodes' agents
//! (`node_expansion`). The volume records what it has (`capacity_bytes`) and the expansion
//! under way (`expansion`).

use std::collections::BTreeSet;

use csivol_api::{self as api, ClaimState, Expansion, ExpansionPhase, format_size};

use super::after_release::{Use, why_held};
use super::events::event;
use super::node_expansion::{attached_that_grow, node_phase};
use super::ops::kinds::expand::payload;
use super::ops::schedule_ops;
use super::settings::Limits;
use super::volumes::volume_view;
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
    if !req.cancel {
        // Within the namespace's quota: what it grows by over what it has or already grows
        // to.
        let reached = v
            .capacity_bytes
            .unwrap_or(0)
            .max(v.expansion.as_ref().map_or(0, |e| e.capacity_bytes));
        super::quotas::refuse_past(
            &*ctx,
            api::namespace_of(name),
            crate::store::namespaces::Bound::CapacityBytes,
            capacity_bytes.saturating_sub(reached),
            &format!("growing volume `{}`", api::split_key(name).1),
        )?;
    }
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
    let payload = payload(capacity_bytes);
    let mut said = format!(
        "ControllerExpandVolume to {} requested from plugin {}",
        format_size(capacity_bytes),
        v.plugin
    );
    if held {
        ctx.queue_held_op(OpKind::Expand, &v.plugin, name, &payload, &why_held(name))?;
        // What waits for the release waits for no linger.
        super::pools::end_lingers_for(ctx, name, limits)?;
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
    ctx.retarget_op(op.id, &payload(capacity_bytes))?;
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
