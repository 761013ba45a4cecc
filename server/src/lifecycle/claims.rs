//! Claims: the rules checked when one is recorded, the queue, release.

use std::time::Duration;

use csivol_api::{
    self as api, ClaimDryRun, ClaimRequest, ClaimState, ErrorCode, FreeText, NodeStatus,
    validate_name,
};

use super::attachments::{Recorded, advance_volume};
use super::{Limits, delete_claim, event, set_claim_state, touch_volume};
use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, Lifecycle, VolumeRow, time};
use crate::store::{NewClaim, Snapshot, Txn};
use csivol_rules::claims::{
    self as rules, Accept, ConflictRule, Held, NodeRefusal, Refusal, Wanted,
};
use csivol_rules::kinds::EventKind;
use csivol_rules::queue;
use csivol_rules::transitions;

/// What recording a claim would do.
#[derive(Debug)]
pub enum ClaimDecision {
    New,
    Existing(ClaimRow),
    /// Other claims are in the way and the claimant asked to wait: it is queued, with why.
    Queue(String),
}

pub(super) fn unblock_hint(volume: &str, node: &str) -> String {
    format!(
        "if node {node} is really gone or fenced, run: csivol unblock {volume} --reason \"...\" \
         (or wait for the node to come back)"
    )
}

/// The rules' refusal as the API error it becomes, and whether it may be waited out in
/// the volume's queue. `claims` are the volume's: a holder in the way that is being
/// released is said to be, and its release is never asked for again.
pub(super) fn refusal_error(
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
                "release it first: csivol release {volume} --alloc {}",
                req.alloc
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
                     `csivol claim {volume} --node {} --alloc {} --wait`",
                    req.node, req.alloc
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
                    "wait for it to be released (csivol release {volume} --alloc {holder_alloc}), \
                     or claim with --queue to wait in line"
                ))
            }
        }
    };
    (wait, e)
}

/// Whether a claim of `v` on `node` may start there: the node is not lost, runs the
/// plugin, reaches the volume's topology, and has room. `Err((true, _))` when only room is
/// missing (worth waiting for).
pub(super) fn node_may_start(
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
        Some(conn.slots_used(node, &v.plugin)?)
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

/// `{zone=a,rack=1}`; `{}` for no segments.
pub(crate) fn show_segment(s: &csivol_api::Topology) -> String {
    let pairs: Vec<_> = s.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{{{}}}", pairs.join(","))
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

pub(super) fn held_of(claims: &[ClaimRow]) -> Vec<Held<'_>> {
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
    validate_name("volume", volume).map_err(ApiError::invalid)?;
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
    // A node the operator took out of service (ineligible, draining) takes no new claims.
    if let Some(n) = conn.node(&req.node)?
        && let Some(r) = csivol_rules::nodes::claim_refusal(&req.node, n.eligibility)
    {
        return Err(super::nodes::refused(r));
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
    // Nobody overtakes the queue.
    let ahead = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued)
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

/// Grants the volume's queued claims that may start now, in arrival order, inside the
/// transaction that freed the room.
pub(super) fn grant_queued(ctx: &mut impl Txn, v: &VolumeRow) -> ApiResult<()> {
    let claims = ctx.claims_of_volume(&v.name)?;
    let queued: Vec<Wanted<'_>> = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued)
        .map(|c| Wanted {
            alloc: &c.alloc,
            node: &c.node,
            mode: c.mode,
        })
        .collect();
    if queued.is_empty() {
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

/// The state a new claim of `volume` on `node` would start in (for dry runs), as
/// [`transitions`] would take it once recorded.
pub fn initial_state(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    node: &str,
) -> ApiResult<ClaimState> {
    let v = conn.require_volume(volume)?;
    let recorded = Recorded::load(conn, &v, Some(node), crate::db::now_ms())?;
    Ok(transitions::first_state(&recorded.facts(), node))
}

/// `POST /v1/volumes/{name}/claims`: returns the claim and whether it is new.
///
/// With `waits` (the claimant follows the outcome), a claim that only claims being
/// released stand in the way of is queued behind them ([`evaluate_claim`]). `sent_at`:
/// when the client first sent the request (its clock, `X-Csivol-Sent-At`); a new claim
/// whose request was sent before its alloc's last release is refused.
pub fn create_claim(
    ctx: &mut impl Txn,
    volume: &str,
    req: &ClaimRequest,
    actor: &str,
    limits: &Limits,
    waits: bool,
    sent_at: Option<i64>,
) -> ApiResult<(api::Claim, bool)> {
    match evaluate_claim(&*ctx, volume, req, waits)? {
        ClaimDecision::Existing(c) => Ok((ctx.claim_to_api(&c)?, false)),
        decision => {
            super::retries::refuse_if_released(&*ctx, volume, &req.alloc, sent_at)?;
            let state = match &decision {
                ClaimDecision::Queue(_) => ClaimState::Queued,
                _ => transitions::NEW_CLAIM,
            };
            let expires_at = req
                .ttl_ms
                .map(|t| super::time_after(ctx.now(), "ttl_ms", t))
                .transpose()?;
            ctx.insert_claim(NewClaim {
                volume,
                request: req,
                state,
                expires_at,
            })?;
            let mut message = format!("{} claim recorded", req.mode.as_str());
            if let Some(t) = req.ttl_ms {
                message.push_str(&format!(
                    " with a lease of {}",
                    humantime::format_duration(Duration::from_millis(t))
                ));
            }
            if !req.labels.is_empty() {
                let labels: Vec<String> =
                    req.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                message.push_str(&format!(" (labels: {})", labels.join(", ")));
            }
            if let ClaimDecision::Queue(why) = &decision {
                message.push_str(&format!("; queued: {why}"));
            }
            let kind = if state == ClaimState::Queued {
                EventKind::ClaimQueued
            } else {
                EventKind::ClaimCreated
            };
            event(
                ctx,
                kind,
                Some(volume),
                Some(&req.node),
                Some(&req.alloc),
                actor,
                message,
            )?;
            if state == ClaimState::Queued {
                touch_volume(ctx, volume)?;
            } else {
                advance_volume(ctx, volume, limits)?;
            }
            let c = ctx.claim(volume, &req.alloc)?.expect("just inserted");
            Ok((ctx.claim_to_api(&c)?, true))
        }
    }
}

/// The error for an alloc that holds no claim on `volume`: the volume's own absence when
/// it is not registered, else the alloc, with the closest of its claims' allocs (a typo)
/// and where to list them.
pub fn no_claim(conn: &(impl Snapshot + ?Sized), volume: &str, alloc: &str) -> ApiResult<ApiError> {
    conn.require_volume(volume)?;
    let allocs: Vec<String> = conn
        .claims_of_volume(volume)?
        .into_iter()
        .map(|c| c.alloc)
        .collect();
    let guess = api::closest(alloc, &allocs)
        .map(|g| format!("did you mean alloc `{g}`? "))
        .unwrap_or_default();
    Ok(ApiError::not_found(format!(
        "alloc `{alloc}` holds no claim on volume `{volume}`"
    ))
    .with_hint(format!(
        "{guess}`csivol claim list --volume {volume}` lists its claims; one released or expired \
         is gone (`csivol events --volume {volume}` says)"
    )))
}

/// `DELETE /v1/volumes/{name}/claims/{alloc}`: starts the release; idempotent. An alloc
/// that holds no claim on a registered volume is refused (`Ok(Err(..))`, committed) with a
/// tombstone left all the same: a claim request of that alloc still on its way, sent
/// before this release and unanswered, is not recorded when it lands.
pub fn release_claim(
    ctx: &mut impl Txn,
    volume: &str,
    alloc: &str,
    actor: &str,
) -> ApiResult<Result<api::Claim, ApiError>> {
    let Some(c) = ctx.claim(volume, alloc)? else {
        let refusal = no_claim(ctx, volume, alloc)?;
        ctx.put_tombstone(volume, alloc)?;
        return Ok(Err(refusal));
    };
    match c.state {
        ClaimState::Releasing | ClaimState::Failed => {}
        ClaimState::Queued => {
            delete_claim(ctx, &c)?;
            event(
                ctx,
                EventKind::ClaimDequeued,
                Some(volume),
                Some(&c.node),
                Some(alloc),
                actor,
                "left the queue: release requested",
            )?;
            return Ok(Ok(c.to_api()));
        }
        ClaimState::Blocked => {
            return Err(ApiError::blocked(format!(
                "the claim of alloc `{alloc}` on volume `{volume}` is blocked: its node {} was lost, so it \
                 cannot be released through the node",
                c.node
            ))
            .with_hint(unblock_hint(volume, &c.node)));
        }
        _ => {
            set_claim_state(ctx, &c, ClaimState::Releasing)?;
            event(
                ctx,
                EventKind::ClaimReleasing,
                Some(volume),
                Some(&c.node),
                Some(alloc),
                actor,
                "release requested",
            )?;
        }
    }
    Ok(Ok(ctx.claim(volume, alloc)?.expect("still there").to_api()))
}

/// `POST /v1/volumes/{name}/claims` with `dry_run`: what recording the claim would do,
/// changing nothing. A refusal is the answer, not an error; only a failure to read the
/// state is an error.
pub fn claim_dry_run(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    req: &ClaimRequest,
) -> ApiResult<ClaimDryRun> {
    // A dry run asks for no wait: `claim --dry-run` takes no `--wait`.
    let (existing, state) = match evaluate_claim(conn, volume, req, false) {
        Ok(ClaimDecision::Existing(claim)) => (true, claim.state),
        Ok(ClaimDecision::Queue(_)) => (false, ClaimState::Queued),
        Ok(ClaimDecision::New) => (false, initial_state(conn, volume, &req.node)?),
        Err(e) if matches!(e.code(), ErrorCode::Internal | ErrorCode::Unavailable) => {
            return Err(e);
        }
        Err(e) => {
            return Ok(ClaimDryRun {
                accepted: false,
                existing: false,
                state: None,
                error: Some(e.body()),
            });
        }
    };
    Ok(ClaimDryRun {
        accepted: true,
        existing,
        state: Some(state),
        error: None,
    })
}
