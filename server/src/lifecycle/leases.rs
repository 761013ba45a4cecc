//! Claim leases (a pool's line keeps its own: `pool_line`): a claim made with a TTL is released the normal way (through its node:
//! unpublish, unstage, then detach) unless renewed in time, so that a CI job killed between
//! claim and release does not hold its volume forever. Expiry never force-detaches: the
//! claim of a lost node stays blocked until the node returns or an operator unblocks it.

use std::time::Duration;

use csivol_api::{self as api, ClaimState};

use super::attachments::advance_volume;
use super::changes::{begin_release, remove_claim};
use super::events::event;
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, time};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

/// Whether a lease that ran out at `expires_at` is due at `now`, and what expiry does to a
/// claim in `state`: the states a lease cannot touch are left alone.
pub fn expires(state: ClaimState, expires_at: Option<i64>, now: i64) -> bool {
    let due = expires_at.is_some_and(|t| t <= now);
    due && !matches!(
        state,
        ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
    )
}

/// `POST /v1/volumes/{name}/claims/{alloc}/renew`: the lease runs `ttl_ms` (else the
/// claim's own TTL) from now.
pub fn renew_lease(
    ctx: &mut impl Txn,
    volume: &str,
    alloc: &str,
    ttl_ms: Option<u64>,
    who: &super::claims::Claimant<'_>,
) -> ApiResult<api::Claim> {
    let actor = who.actor;
    let Some(c) = ctx.claim(volume, alloc)? else {
        return Err(super::claims::no_claim(&*ctx, volume, alloc)?);
    };
    super::owners::refuse_unless_may_change(&*ctx, &c, who.acting(), "renew")?;
    if matches!(c.state, ClaimState::Releasing | ClaimState::Failed) {
        return Err(ApiError::conflict(format!(
            "the claim of alloc `{alloc}` on volume `{volume}` is {}: there is nothing to renew",
            c.state
        )));
    }
    let ttl = match ttl_ms.or(c.ttl_ms.map(|t| t.max(0) as u64)) {
        Some(0) => return Err(ApiError::invalid("`ttl_ms` must be longer than zero")),
        Some(t) => t,
        None => {
            return Err(ApiError::invalid(format!(
                "the claim of alloc `{alloc}` on volume `{volume}` has no lease to renew"
            ))
            .with_hint("give one: csivol claim renew VOLUME --alloc ALLOC --ttl 10m"));
        }
    };
    let expires_at = super::changes::time_after(ctx.now(), "ttl_ms", ttl)?;
    ctx.set_claim_lease(volume, alloc, ttl as i64, expires_at)?;
    ctx.touch(Key::Volume(volume.to_owned()));
    tracing::debug!(volume, alloc, actor, expires_at = %time(expires_at), "lease renewed");
    let c = ctx.claim(volume, alloc)?.expect("still there");
    ctx.claim_to_api(&c)
}

/// Releases every claim whose lease ran out: a queued one leaves the queue, any other is
/// released through its node. Returns how many.
pub fn expire_leases(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<usize> {
    let due = ctx.expired_claims(ctx.now())?;
    for c in &due {
        release_expired(ctx, c)?;
    }
    let mut volumes: Vec<&str> = due.iter().map(|c| c.volume.as_str()).collect();
    volumes.sort_unstable();
    volumes.dedup();
    for v in volumes {
        advance_volume(ctx, v, limits)?;
    }
    // The pools' lines: their claims whose lease lapsed leave, and the rest are served.
    Ok(due.len() + super::pool_waits::serve_lines(ctx, limits)?)
}

/// Releases one claim whose lease ran out, with the event that says so.
pub fn release_expired(ctx: &mut impl Txn, c: &ClaimRow) -> ApiResult<()> {
    let ttl = c
        .ttl_ms
        .map(|t| humantime::format_duration(Duration::from_millis(t.max(0) as u64)).to_string())
        .unwrap_or_default();
    let at = c.expires_at.map(time).unwrap_or_default();
    let message = if c.state == ClaimState::Queued {
        format!("lease of {ttl} ran out at {at} while queued (its waiter is gone): left the queue")
    } else {
        format!("lease of {ttl} ran out at {at} without renewal: released through its node")
    };
    if c.state == ClaimState::Queued {
        remove_claim(ctx, c)?;
    } else {
        begin_release(ctx, c)?;
    }
    event(
        ctx,
        EventKind::ClaimExpired,
        Some(&c.volume),
        Some(&c.node),
        Some(&c.alloc),
        "server",
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_expires_only_when_due_and_never_for_a_lost_node() {
        use ClaimState::*;
        let cases = [
            (Ready, Some(100), 100, true),
            (Ready, Some(101), 100, false),
            (Ready, None, 100, false),
            (Queued, Some(50), 100, true),
            (Pending, Some(50), 100, true),
            (Publishing, Some(50), 100, true),
            (Blocked, Some(50), 100, false),
            (Releasing, Some(50), 100, false),
            (Failed, Some(50), 100, false),
        ];
        for (state, at, now, want) in cases {
            assert_eq!(expires(state, at, now), want, "{state} {at:?} {now}");
        }
    }
}
