//! Claims: recorded (once `admission` lets them), released, and shown in a dry run.

use std::time::Duration;

use csivol_api::{self as api, ClaimDryRun, ClaimRequest, ClaimState, ErrorCode};

use super::admission::{ClaimDecision, evaluate_claim, unblock_hint};
use super::attachments::{Recorded, advance_volume};
use super::changes::{delete_claim, set_claim_state, touch_volume};
use super::events::event;
use super::owners::Acting;
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::store::{NewClaim, Snapshot, Txn};
use csivol_rules::kinds::EventKind;
use csivol_rules::transitions;

/// The state a new claim of `volume` on `node` would start in at `now` (for dry runs), as
/// [`transitions`] would take it once recorded.
pub fn initial_state(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    node: &str,
    now: i64,
) -> ApiResult<ClaimState> {
    let v = conn.require_volume(volume)?;
    let recorded = Recorded::load(conn, &v, Some(node), now)?;
    Ok(transitions::first_state(&recorded.facts(), node))
}

/// Who asks for a claim, or to renew or release one: the actor its event names, the
/// token recorded as its claimer, whether that token's claims are bounded by `[limits]
/// claims_per_claimer` (a claimer's are; an operator's are not, as operators revoke the
/// tokens that misbehave), and whether it may renew and release claims other tokens made
/// (an operator may; a claimer only its own).
#[derive(Clone, Copy, Debug)]
pub struct Claimant<'a> {
    pub actor: &'a str,
    pub token: &'a str,
    pub bounded: bool,
    pub any_claim: bool,
}

impl Claimant<'_> {
    pub(super) fn acting(&self) -> Acting<'_> {
        Acting {
            token: self.token,
            any_claim: self.any_claim,
        }
    }
}

#[cfg(test)]
impl<'a> Claimant<'a> {
    /// The lifecycle's tests' claims: an operator's, its token named as its actor.
    pub fn operator(actor: &'a str) -> Self {
        Self {
            actor,
            token: actor,
            bounded: false,
            any_claim: true,
        }
    }
}

/// A claimer token that holds as many claims as this server allows refuses a new one,
/// with how many it holds and where the limit is set; what it holds stays.
pub(super) fn refuse_past_claims_limit(
    conn: &(impl Snapshot + ?Sized),
    who: &Claimant<'_>,
    limits: &Limits,
) -> ApiResult<()> {
    if !who.bounded {
        return Ok(());
    }
    // `None`: the schema does not record claimers yet (a rolling upgrade over etcd before
    // `upgrade finalize`); the bound applies from then on.
    let Some(held) = conn.claims_held_by(who.token)? else {
        return Ok(());
    };
    let max = limits.claims_per_claimer;
    if held < max {
        return Ok(());
    }
    let s = if held == 1 { "" } else { "s" };
    Err(ApiError::conflict(format!(
        "{} holds {held} claim{s} (queued ones included), as many as this server allows one \
         claimer token (`claims_per_claimer` in its [limits])",
        who.actor
    ))
    .with_hint(
        "release the claims it no longer needs (a claim with a lease, --ttl, is released when \
         it is not renewed), or ask an operator to raise [limits] claims_per_claimer",
    ))
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
    who: &Claimant<'_>,
    limits: &Limits,
    waits: bool,
    sent_at: Option<i64>,
) -> ApiResult<(api::Claim, bool)> {
    // A free pool member goes first to the claims in its pool's line, which came before.
    super::pool_line::serve_member(ctx, volume, limits, advance_volume)?;
    create_arrived(ctx, volume, req, who, limits, (waits, sent_at), None)
}

/// [`create_claim`] for a claim that `arrived` earlier (a claim from a pool's line):
/// see [`super::admission::evaluate_arrived`].
pub(super) fn create_arrived(
    ctx: &mut impl Txn,
    volume: &str,
    req: &ClaimRequest,
    who: &Claimant<'_>,
    limits: &Limits,
    (waits, sent_at): (bool, Option<i64>),
    arrived: Option<i64>,
) -> ApiResult<(api::Claim, bool)> {
    let actor = who.actor;
    match super::admission::evaluate_arrived(&*ctx, volume, req, waits, arrived)? {
        ClaimDecision::Existing(c) => {
            super::owners::refuse_unless_may_repeat(&*ctx, &c, who.acting())?;
            Ok((ctx.claim_to_api(&c)?, false))
        }
        decision => {
            super::retries::refuse_if_released(&*ctx, volume, &req.alloc, sent_at)?;
            refuse_past_claims_limit(&*ctx, who, limits)?;
            super::quotas::refuse_past(
                &*ctx,
                csivol_api::namespace_of(volume),
                crate::store::namespaces::Bound::Claims,
                1,
                &format!("a claim of volume `{}`", csivol_api::split_key(volume).1),
            )?;
            let state = match &decision {
                ClaimDecision::Queue(_) => ClaimState::Queued,
                _ => transitions::NEW_CLAIM,
            };
            let volume_row = ctx.require_volume(volume)?;
            let mount = super::mounts::claim_mount(&*ctx, &volume_row, req, &limits.mounts)?;
            let expires_at = req
                .ttl_ms
                .map(|t| super::changes::time_after(ctx.now(), "ttl_ms", t))
                .transpose()?;
            ctx.insert_claim(NewClaim {
                volume,
                request: req,
                state,
                expires_at,
                claimer: Some(who.token),
                mount: &mount,
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
            if let (Some(gid), Some(by)) = (mount.gid, mount.group_by) {
                message.push_str(&format!(" with group {gid} ({})", by.as_str()));
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
            let mut answer = ctx.claim_to_api(&c)?;
            // Why a best-effort group was not applied is the answer's, recorded or not.
            answer.mount.not_applied = mount.not_applied;
            Ok((answer, true))
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
    who: &Claimant<'_>,
) -> ApiResult<Result<api::Claim, ApiError>> {
    let actor = who.actor;
    let Some(c) = ctx.claim(volume, alloc)? else {
        let refusal = no_claim(ctx, volume, alloc)?;
        ctx.put_tombstone(volume, alloc)?;
        return Ok(Err(refusal));
    };
    super::owners::refuse_unless_may_change(&*ctx, &c, who.acting(), "release")?;
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
    limits: &Limits,
    now: i64,
) -> ApiResult<ClaimDryRun> {
    // A dry run asks for no wait: `claim --dry-run` takes no `--wait`. A new claim's group
    // is judged as its recording would judge it.
    let decided = evaluate_claim(conn, volume, req, false).and_then(|d| match d {
        ClaimDecision::Existing(_) => Ok(d),
        _ => {
            let v = conn.require_volume(volume)?;
            super::mounts::claim_mount(conn, &v, req, &limits.mounts).map(|_| d)
        }
    });
    let (existing, state) = match decided {
        Ok(ClaimDecision::Existing(claim)) => (true, claim.state),
        Ok(ClaimDecision::Queue(_)) => (false, ClaimState::Queued),
        Ok(ClaimDecision::New) => (false, initial_state(conn, volume, &req.node, now)?),
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
