//! The node phase of a volume's expansion: NodeExpandVolume on every node where the volume
//! is attached (or on the next node to stage it), run by those nodes' agents. What a node
//! is to run, its reports, and a detach that leaves it nothing to grow.

use std::collections::BTreeSet;

use csivol_api::domain::ErrorClass;
use csivol_api::{
    self as api, AttachmentState, Expansion, ExpansionPhase, NodeExpansion, NodeExpansionState,
    PluginError, format_size,
};

use super::backoff::backoff;
use super::events::{event, format_error};
use crate::error::ApiResult;
use crate::model::{VolumeRow, time};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

/// Moves expansion `e` of `volume` to its node phase on `nodes` (with none, on the next node
/// to stage it: `when_staged`), records it with the volume's new `capacity` if known, wakes
/// the nodes and writes the event `said` gives for where it runs.
pub(super) fn node_phase(
    ctx: &mut (impl Txn + ?Sized),
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
        ctx.touch(Key::node_volume(n, volume));
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

/// The nodes whose plugin of `plugin` has the node's EXPAND_VOLUME.
fn nodes_that_grow(ctx: &(impl Txn + ?Sized), plugin: &str) -> ApiResult<BTreeSet<String>> {
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
pub(super) fn attached_that_grow(
    ctx: &(impl Txn + ?Sized),
    v: &VolumeRow,
) -> ApiResult<(Vec<String>, bool)> {
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
    ctx.touch(Key::node_volume(node, volume));
    Ok(())
}

/// The node's part of an expansion, if the report answers its current attempt.
fn node_part(
    ctx: &(impl Txn + ?Sized),
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
    ctx: &mut (impl Txn + ?Sized),
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
    ctx.touch(Key::node_volume(node, volume));
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
pub(super) fn detached(ctx: &mut (impl Txn + ?Sized), volume: &str, node: &str) -> ApiResult<()> {
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
    ctx.touch(Key::node_volume(node, volume));
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
        ctx.touch(Key::node_volume(&n.node, volume));
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
