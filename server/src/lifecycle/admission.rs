//! Admission: who may claim a volume, where, and who waits. A claim is checked against
//! the rules of `csivol_rules::claims` (access modes, single writer, blocked holders),
//! the node's (eligibility, status, the plugin, topology, free slots), the volume's queue,
//! and a release under way that a waiting claimant may queue behind; the queued claims
//! that may start are granted in arrival order; and a volume is held back after the state
//! went back in time until the nodes that may hold it have said what they hold. The pure
//! decisions are `csivol_rules`'; this file loads their facts and turns their refusals
//! into the API's errors. Claims and attachments both ask it; it asks neither.

use csivol_api::{self as api, ClaimRequest, ClaimState, FreeText, NodeStatus, validate_name};
use csivol_rules::claims::{
    self as rules, Accept, ConflictRule, Held, NodeRefusal, Refusal, Wanted,
};
use csivol_rules::kinds::EventKind;
use csivol_rules::settle::{self, Settling};
use csivol_rules::{queue, transitions};

use super::changes::set_claim_state;
use super::events::{event, show_segment};
use super::heard::Recorded;
use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, Lifecycle, PoolWaiterRow, VolumeRow, time};
use crate::store::{Snapshot, Txn};

/// What recording a claim would do.
#[derive(Debug)]
pub enum ClaimDecision {
    New,
    Existing(ClaimRow),
    /// Other claims are in the way and the claimant asked to wait: it is queued, with why.
    Queue(String),
}

/// The next step for a claim that a node lost holds: unblock it, or wait for the node.
pub(super) fn unblock_hint(volume: &str, node: &str) -> String {
    format!(
        "if node {node} is really gone or fenced, run: csivol unblock {volume_cli} --reason \"...\" \
         (or wait for the node to come back)",
        volume_cli = csivol_api::cli_name(volume)
    )
}

/// The rules' refusal as the API error it becomes, and whether it may be waited out in
/// the volume's queue. `claims` are the volume's: a holder in the way that is being
/// released is said to be, and its release is never asked for again.
fn refusal_error(
    volume: &str,
    v: &VolumeRow,
    req: &ClaimRequest,
    r: Refusal,
    claims: &[ClaimRow],
) -> (bool, ApiError) {
    let only_releases = rules::only_releases_in_the_way(
        v.access_mode,
        &held_of(claims),
        Wanted {
            alloc: &req.alloc,
            node: &req.node,
            mode: req.mode,
        },
    );
    let wait = queue::may_wait(&r);
    let e = match r {
        Refusal::ReadOnlyMode { access_mode } => ApiError::invalid(format!(
            "volume `{volume}` is {access_mode}: it takes read claims only"
        ))
        .with_hint("claim it with --read-only"),
        Refusal::AllocHoldsOther { node, mode, state } => ApiError::conflict(format!(
            "alloc `{}` already holds a {} claim on volume `{volume}` on node {node} ({state})",
            req.alloc,
            mode.as_str()
        ))
        .with_hint(match state {
            ClaimState::Releasing | ClaimState::Failed => {
                "wait for that claim to be gone, then claim again".to_owned()
            }
            _ => format!(
                "release it first: csivol release {volume_cli} --alloc {}",
                req.alloc,
                volume_cli = csivol_api::cli_name(volume)
            ),
        }),
        Refusal::Conflict {
            rule,
            holder_alloc,
            holder_node,
            blocked,
        } => {
            let why = match rule {
                ConflictRule::SingleNode => {
                    format!("is {} and is claimed on node {holder_node}", v.access_mode)
                }
                ConflictRule::SingleWriter => {
                    format!("is {} and already has a writer", v.access_mode)
                }
                ConflictRule::SingleClaim => format!("is {} and already claimed", v.access_mode),
            };
            let holder_leaving = claims.iter().any(|c| {
                c.alloc == holder_alloc
                    && matches!(c.state, ClaimState::Releasing | ClaimState::Failed)
            });
            if blocked {
                ApiError::blocked(format!(
                    "volume `{volume}` {why}: alloc {holder_alloc} on node {holder_node}, which was lost; \
                     the claim is blocked until that node comes back or is unblocked"
                ))
                .with_hint(unblock_hint(volume, &holder_node))
            } else if only_releases {
                ApiError::conflict(format!(
                    "volume `{volume}` is {}, and the claim of alloc {holder_alloc} on node \
                     {holder_node} is still being released",
                    v.access_mode
                ))
                .with_hint(format!(
                    "with --wait the claim waits in line for the release to finish, then is granted: \
                     `csivol claim {volume_cli} --node {} --alloc {} --wait`",
                    req.node, req.alloc,
                    volume_cli = csivol_api::cli_name(volume),
                ))
            } else if holder_leaving {
                ApiError::conflict(format!(
                    "volume `{volume}` {why}: alloc {holder_alloc} on node {holder_node}, whose claim is \
                     being released, and other claims"
                ))
                .with_hint(format!(
                    "claim with --queue to wait in line; `csivol claim list --volume {volume}` lists them"
                ))
            } else {
                ApiError::conflict(format!(
                    "volume `{volume}` {why}: held by alloc {holder_alloc} on node {holder_node}"
                ))
                .with_hint(format!(
                    "wait for it to be released (csivol release {volume_cli} --alloc {holder_alloc}), \
                     or claim with --queue to wait in line",
                    volume_cli = csivol_api::cli_name(volume),
                ))
            }
        }
    };
    (wait, e)
}

/// Whether a claim of `v` on `node` may start there: the node is not lost, runs the
/// plugin, reaches the volume's topology, and has room. `Err((true, _))` when only room is
/// missing (worth waiting for).
fn node_may_start(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    claims: &[ClaimRow],
    node: &str,
) -> ApiResult<Result<(), (bool, ApiError)>> {
    let n = conn.require_node(node)?;
    let plugin = conn
        .node_plugin(node, &v.plugin)?
        .filter(|p| p.node_service);
    let plugin_slots = plugin.as_ref().map(|p| p.max_volumes);
    let reachable = plugin
        .as_ref()
        .is_none_or(|p| rules::reachable(&v.accessible_topology, &p.topology));
    // Counted only when the node runs the plugin and the volume needs a new slot there,
    // as the rules look at it only then.
    let holds_slot = || -> ApiResult<bool> {
        Ok(claims
            .iter()
            .any(|c| c.node == node && c.state != ClaimState::Queued)
            || conn
                .attachments_of_volume(&v.name)?
                .iter()
                .any(|a| a.node == node))
    };
    // Counting the slots in use reads every claim and attachment of the node: only where
    // the plugin sets a limit (`max_volumes_per_node` 0 is none).
    let limited = plugin_slots.is_some_and(|max| max > 0);
    let new_slot_among = if n.status == NodeStatus::Ready && limited && !holds_slot()? {
        let used = conn.slots_used(node, &v.plugin)?;
        let max = plugin_slots.unwrap_or(0);
        // Stagings kept after a release give way: the claim is admitted when ending them
        // makes room (they end once it is recorded, `slots::make_room`, and it is attached
        // only once their detach freed the slot), and refused only for what they cannot.
        let yielding = if rules::has_room(used, max) {
            0
        } else {
            super::slots::yieldable(conn, node, &v.plugin, &v.name)?.len()
        };
        let freed = used.saturating_sub(u32::try_from(yielding).unwrap_or(u32::MAX));
        Some(if rules::has_room(freed, max) {
            freed
        } else {
            used
        })
    } else {
        None
    };
    let placement = rules::Placement {
        status: n.status,
        lost_at: n.lost_at,
        plugin_slots,
        new_slot_among,
        reachable,
    };
    match rules::check_placement(placement) {
        Ok(()) => Ok(Ok(())),
        Err(r) => Ok(Err((r.may_wait(), node_refusal_error(conn, v, node, r)?))),
    }
}

/// Refuses at once a claim on a node outside the volume's accessible topology: no queue
/// and no release can ever make room for it there. `None` when the node reaches the volume
/// (or does not run its plugin, which [`node_may_start`] says).
fn out_of_topology(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    node: &str,
) -> ApiResult<Option<ApiError>> {
    if v.accessible_topology.is_empty() {
        return Ok(None);
    }
    match conn
        .node_plugin(node, &v.plugin)?
        .filter(|p| p.node_service)
    {
        Some(p) if !rules::reachable(&v.accessible_topology, &p.topology) => Ok(Some(
            node_refusal_error(conn, v, node, NodeRefusal::OutOfTopology)?,
        )),
        _ => Ok(None),
    }
}

/// The node rules' refusal as the API error it becomes.
fn node_refusal_error(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    node: &str,
    r: NodeRefusal,
) -> ApiResult<ApiError> {
    Ok(match r {
        NodeRefusal::Fenced => ApiError::blocked(format!(
            "node `{node}` was fenced (powered off); no claim can be placed on it until its agent registers again"
        ))
        .with_hint(format!(
            "choose another node, or power {node} on again (`csivol node show {node}` shows its fence)"
        )),
        NodeRefusal::Lost { since } => ApiError::blocked(format!(
            "node `{node}` is lost{}; no claim can be placed on it",
            since.map(|t| format!(" since {}", time(t))).unwrap_or_default()
        ))
        .with_hint(format!("choose another node, or bring {node}'s agent back")),
        NodeRefusal::Stopped => ApiError::blocked(format!(
            "node `{node}` is stopped: its agent stopped in order, and no claim can be placed on it until the agent starts again"
        ))
        .with_hint(format!("choose another node, or start {node}'s agent again")),
        NodeRefusal::NoPlugin => ApiError::invalid(format!(
            "node `{node}` does not run plugin `{}` (needed by volume `{}`)",
            v.plugin, v.name
        ))
        .with_hint("`csivol plugin show` lists the nodes that run it"),
        NodeRefusal::NoRoom { used, max } => ApiError::conflict(format!(
            "node `{node}` has no free slot for plugin `{}`: {used} of {max} volumes in use \
             (attachments still detaching count){}",
            v.plugin,
            conn.node_plugin(node, &v.plugin)?
                .and_then(|p| p.limit_change)
                .filter(|c| c.to == max)
                .map(|c| format!("; {}", c.describe()))
                .unwrap_or_default()
        ))
        .with_hint("release a claim on that node, choose another node, or claim with --queue"),
        NodeRefusal::OutOfTopology => {
            let theirs = conn
                .node_plugin(node, &v.plugin)?
                .map(|p| show_segment(&p.topology))
                .unwrap_or_else(|| "{}".to_owned());
            let accessible: Vec<_> = v.accessible_topology.iter().map(show_segment).collect();
            let eligible: Vec<String> = conn
                .ready_plugin_nodes(&v.plugin)?
                .into_iter()
                .filter(|(n, t)| n != node && rules::reachable(&v.accessible_topology, t))
                .map(|(n, _)| n)
                .collect();
            let hint = if eligible.is_empty() {
                format!(
                    "no ready node of plugin `{}` lies in {}; `csivol plugin show {}` lists \
                     its nodes and their topology",
                    v.plugin,
                    accessible.join(" or "),
                    v.plugin
                )
            } else {
                format!(
                    "claim it on a node in that topology: {} (e.g. --node {})",
                    eligible.join(", "),
                    eligible[0]
                )
            };
            ApiError::topology(format!(
                "node `{node}` is outside the topology of volume `{}`: the volume is accessible \
                 from {}, and plugin `{}` reports {theirs} there",
                v.name,
                accessible.join(" or "),
                v.plugin
            ))
            .with_hint(hint)
        }
    })
}

fn held_of(claims: &[ClaimRow]) -> Vec<Held<'_>> {
    claims
        .iter()
        .filter(|c| c.state != ClaimState::Queued)
        .map(|c| Held {
            alloc: &c.alloc,
            node: &c.node,
            mode: c.mode,
            state: c.state,
        })
        .collect()
}

/// Checks a claim against every rule, without changing anything.
///
/// With `waits` (the claimant follows the outcome), a claim that only claims being
/// released stand in the way of is queued behind them rather than refused.
pub fn evaluate_claim(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    req: &ClaimRequest,
    waits: bool,
) -> ApiResult<ClaimDecision> {
    evaluate_arrived(conn, volume, req, waits, None)
}

/// [`evaluate_claim`] for a claim that `arrived` (unix ms) before it was asked for here: a
/// claim from a pool's line, which the volume's queued claims that came after it do not
/// stand before (the line and a volume's queue keep one order, by arrival).
pub(super) fn evaluate_arrived(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    req: &ClaimRequest,
    waits: bool,
    arrived: Option<i64>,
) -> ApiResult<ClaimDecision> {
    csivol_api::validate_key("volume", volume).map_err(ApiError::invalid)?;
    validate_name("alloc", &req.alloc).map_err(ApiError::invalid)?;
    validate_name("node", &req.node).map_err(ApiError::invalid)?;
    req.check_text().map_err(ApiError::text)?;
    for k in req.labels.keys() {
        if k.is_empty() || k.len() > 63 || k.contains(['=', ',']) {
            return Err(ApiError::invalid(format!(
                "invalid label key `{k}`: 1 to 63 characters, without `=` or `,`"
            )));
        }
    }
    if req.ttl_ms == Some(0) {
        return Err(ApiError::invalid("`ttl_ms` must be longer than zero"));
    }
    if let Some(t) = req.ttl_ms {
        api::limits::duration_ms("ttl_ms", t).map_err(ApiError::out_of_range)?;
    }
    let v = conn.require_volume(volume)?;
    match v.lifecycle {
        Lifecycle::Ready => {}
        // Only an adopted volume has the plugin's id before it is ready (a created one
        // learns it from CreateVolume's answer).
        Lifecycle::Creating if !v.external_id.is_empty() => {
            return Err(ApiError::conflict(format!(
                "volume `{volume}` is being adopted: its plugin has not confirmed it yet \
                 (ValidateVolumeCapabilities)"
            ))
            .with_hint("wait for `csivol volume show` to say it is free"));
        }
        Lifecycle::Failed if !v.external_id.is_empty() => {
            return Err(ApiError::conflict(format!(
                "volume `{volume}` was not adopted: {}",
                v.error.as_deref().unwrap_or("unknown error")
            ))
            .with_hint(format!(
                "adopt it again with what the plugin supports, or `csivol volume deregister \
                 {volume}`"
            )));
        }
        Lifecycle::Creating => {
            return Err(
                ApiError::conflict(format!("volume `{volume}` is still being created"))
                    .with_hint("wait for `csivol volume show` to say it is free"),
            );
        }
        Lifecycle::Deleting => {
            return Err(ApiError::conflict(format!(
                "volume `{volume}` is being deleted"
            )));
        }
        Lifecycle::Failed => {
            return Err(ApiError::conflict(format!(
                "volume `{volume}` failed to be created: {}",
                v.error.as_deref().unwrap_or("unknown error")
            )));
        }
    }
    // A per-job volume is its job's alone: no other alloc sees its data.
    if let Some(j) = conn.job_volume(volume)?
        && j.alloc != req.alloc
    {
        return Err(ApiError::conflict(format!(
            "volume `{volume}` is the per-job volume `{}` of alloc {}: no other alloc may claim it",
            j.name, j.alloc
        ))
        .with_hint("give the job a volume of its own with `--fresh NAME=...`"));
    }
    let claims = conn.claims_of_volume(volume)?;
    // The alloc's own claim, queued or not: asking for the same claim again is a no-op.
    if let Some(own) = claims.iter().find(|c| c.alloc == req.alloc) {
        let same = own.node == req.node
            && own.mode == req.mode
            && !matches!(own.state, ClaimState::Releasing | ClaimState::Failed);
        if same {
            return Ok(ClaimDecision::Existing(own.clone()));
        }
    }
    // Nor does a volume the operator took out of service (ineligible, draining).
    if let Some(a) = conn.volume_availability(volume)?
        && let Some(r) = csivol_rules::nodes::volume_claim_refusal(
            volume,
            a.eligibility,
            &a.actor,
            a.reason.as_deref(),
        )
    {
        return Err(refused(r));
    }
    // A node the operator took out of service (ineligible, draining) takes no new claims.
    if let Some(n) = conn.node(&req.node)?
        && let Some(r) = csivol_rules::nodes::claim_refusal(&req.node, n.eligibility)
    {
        return Err(refused(r));
    }
    // Nor does a node the volume cannot reach, whatever else holds the volume: checked
    // before the claims in the way, so that `--queue` never waits for what cannot fit.
    if let Some(e) = out_of_topology(conn, &v, &req.node)? {
        return Err(e);
    }
    let wanted = Wanted {
        alloc: &req.alloc,
        node: &req.node,
        mode: req.mode,
    };
    let own_holds = claims
        .iter()
        .any(|c| c.alloc == req.alloc && c.state == ClaimState::Queued);
    let held = held_of(&claims);
    match rules::check_claim(v.access_mode, &held, wanted) {
        // The alloc's own claim was answered above; should the rules find it all the same,
        // it is that claim.
        Ok(Accept::Existing) => {
            if let Some(own) = claims.iter().find(|c| c.alloc == req.alloc) {
                return Ok(ClaimDecision::Existing(own.clone()));
            }
        }
        Ok(Accept::New) if own_holds => {
            let (_, e) = refusal_error(
                volume,
                &v,
                req,
                Refusal::AllocHoldsOther {
                    node: req.node.clone(),
                    mode: req.mode,
                    state: ClaimState::Queued,
                },
                &claims,
            );
            return Err(e);
        }
        Ok(Accept::New) => {}
        Err(_) if waits && rules::only_releases_in_the_way(v.access_mode, &held, wanted) => {
            // Granted from the queue the moment the last of them is gone; a single-node
            // volume then waits, `pending`, for its detach from their node.
            let leaving: Vec<String> = claims
                .iter()
                .filter(|c| matches!(c.state, ClaimState::Releasing | ClaimState::Failed))
                .map(|c| format!("alloc {} on node {}", c.alloc, c.node))
                .collect();
            return Ok(ClaimDecision::Queue(format!(
                "waits for the release of {} to finish",
                leaving.join(", ")
            )));
        }
        Err(r) => {
            let (wait, e) = refusal_error(volume, &v, req, r, &claims);
            if wait && req.queue {
                return Ok(ClaimDecision::Queue(e.message));
            }
            return Err(e);
        }
    }
    // A staging kept on a node that was lost holds a single-node volume as a claim would.
    if v.access_mode.is_single_node() {
        for l in conn.lingers(Some(volume), None)? {
            let lost = conn
                .attachment(volume, &l.node)?
                .is_some_and(|a| a.state == api::AttachmentState::Blocked);
            if lost && l.node != req.node {
                return Err(ApiError::blocked(format!(
                    "volume `{volume}` is {} and is staged on lost node {}, lingering after alloc \
                     {}'s release; the claim is blocked until that node comes back or is unblocked",
                    v.access_mode, l.node, l.alloc
                ))
                .with_hint(unblock_hint(volume, &l.node)));
            }
        }
    }
    // A pool member held for the first claim in its pool's line (it waited past the
    // server's `pool_hold_after`) is that claim's: it stands in the way as a claim would.
    if let Some(h) = held_for(conn, volume)?
        && h.request.claim.alloc != req.alloc
    {
        let why = format!(
            "volume `{volume}` is held for the first claim in pool `{}`'s line, which waited \
             past the server's pool_hold_after",
            h.pool
        );
        if req.queue {
            return Ok(ClaimDecision::Queue(why));
        }
        return Err(ApiError::conflict(why).with_hint(format!(
            "claim with --queue to wait for it, or claim from the pool: csivol claim --pool {} \
             --queue",
            csivol_api::cli_name(&h.pool)
        )));
    }
    // Nobody overtakes the queue.
    let ahead = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued && arrived.is_none_or(|t| c.created_at <= t))
        .count();
    if ahead > 0 {
        let why = format!("{ahead} claim(s) are queued for volume `{volume}` ahead of it");
        if req.queue {
            return Ok(ClaimDecision::Queue(why));
        }
        return Err(ApiError::conflict(why).with_hint("claim with --queue to wait in line"));
    }
    match node_may_start(conn, &v, &claims, &req.node)? {
        Ok(()) => Ok(ClaimDecision::New),
        Err((true, e)) if req.queue => Ok(ClaimDecision::Queue(e.message)),
        Err((_, e)) => Err(e),
    }
}

/// The claim in a pool's line that `volume` is held for, if any.
pub(super) fn held_for(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
) -> ApiResult<Option<PoolWaiterRow>> {
    Ok(conn
        .pool_line(None)?
        .into_iter()
        .find(|w| w.held.as_deref() == Some(volume)))
}

/// Grants the volume's queued claims that may start now, in arrival order, inside the
/// transaction that freed the room.
pub(super) fn grant_queued(ctx: &mut impl Txn, v: &VolumeRow) -> ApiResult<()> {
    // A volume still being created (a per-job volume's claim waits in its queue for
    // CreateVolume) grants nothing until it is.
    if v.lifecycle != Lifecycle::Ready {
        return Ok(());
    }
    let claims = ctx.claims_of_volume(&v.name)?;
    // A member held for the first claim in its pool's line grants only the claims queued
    // before that claim arrived: the line and the queue keep one order.
    let held_since = held_for(&*ctx, &v.name)?.map(|w| w.at);
    let queued: Vec<Wanted<'_>> = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued && held_since.is_none_or(|t| c.created_at < t))
        .map(|c| Wanted {
            alloc: &c.alloc,
            node: &c.node,
            mode: c.mode,
        })
        .collect();
    if queued.is_empty() {
        return Ok(());
    }
    // A volume out of service grants nothing: its queued claims wait until it is back.
    if ctx.volume_availability(&v.name)?.is_some() {
        return Ok(());
    }
    let conn = &*ctx;
    let mut error = None;
    let granted: Vec<String> =
        queue::grants(
            v.access_mode,
            &held_of(&claims),
            &queued,
            |w| match node_may_start(conn, v, &claims, w.node) {
                Ok(r) => r.is_ok(),
                Err(e) => {
                    error.get_or_insert(e);
                    false
                }
            },
        )
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Some(e) = error {
        return Err(e);
    }
    for alloc in granted {
        let c = claims
            .iter()
            .find(|c| c.alloc == alloc)
            .expect("granted from the queue");
        set_claim_state(ctx, c, transitions::NEW_CLAIM)?;
        event(
            ctx,
            EventKind::ClaimGranted,
            Some(&v.name),
            Some(&c.node),
            Some(&c.alloc),
            "server",
            format!("{} claim granted from the queue", c.mode.as_str()),
        )?;
    }
    Ok(())
}

/// A node rule's refusal as the API's: a conflict, with its next step.
pub(super) fn refused(r: csivol_rules::nodes::Refusal) -> ApiError {
    ApiError::conflict(r.message).with_hint(r.hint)
}

/// Whether volume `v` is held back now, after the state went back in time: it goes to no
/// node until every node that may hold it has said what it holds (`csivol_rules::settle`
/// decides; `settle` keeps where settling stands).
pub(super) fn held_back(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    now: i64,
) -> ApiResult<bool> {
    // Most volumes are not held whatever happened, and most of the time nothing happened:
    // neither asks more of the store than this.
    if !settle::restricted(v.access_mode) {
        return Ok(false);
    }
    let r = Recorded::load(conn)?;
    if !r.settling() {
        return Ok(false);
    }
    // One node not heard from that runs the plugin is as much as the rules need.
    let mut waited_for = None;
    if now >= r.after {
        let heard = r.heard(conn)?;
        waited_for = conn
            .plugin_registrations(&v.plugin)?
            .into_iter()
            .map(|(node, _, _)| node)
            .find(|node| !heard.contains(node));
    }
    let s = Settling {
        window_open: now < r.after,
        unreported: waited_for
            .iter()
            .map(|n| (n.as_str(), vec![v.plugin.as_str()]))
            .collect(),
    };
    Ok(settle::held(v.access_mode, &v.plugin, &s))
}
