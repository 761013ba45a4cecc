//! Claims made from a pool: the server picks, in the transaction that records the claim,
//! a free member that the claim's rules allow (access mode, the node's eligibility,
//! topology and free slots, the member's own availability: paused and draining members
//! are skipped), preferring the warmest: the member last released with the job's cache
//! key, then one still staged on the claim's node, then one whose last key matches a
//! restore key (tried in order, like GitHub's restore-keys) or shares the longest prefix
//! with the cache key, then any. A member's key is recorded at its release, and only when
//! the job said it succeeded; a failed or killed job leaves the key the member had.

use csivol_api::limits::{CACHE_KEY_BYTES, MAX_RESTORE_KEYS};
use csivol_api::{self as api, PoolClaimRequest};

use super::admission::{ClaimDecision, evaluate_claim};
use super::claims::{Claimant, create_claim};
use super::pool_members::{by_warmth, candidate, record_choice};
use super::pools::{members, require_pool};
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::store::Txn;

fn check_keys(req: &PoolClaimRequest) -> ApiResult<()> {
    if req.restore_keys.len() > MAX_RESTORE_KEYS {
        return Err(ApiError::invalid(format!(
            "{} restore keys, more than the {MAX_RESTORE_KEYS} a claim tries",
            req.restore_keys.len()
        )));
    }
    for (what, k) in req
        .cache_key
        .iter()
        .map(|k| ("cache_key", k))
        .chain(req.restore_keys.iter().map(|k| ("restore_keys", k)))
    {
        api::check_text(what, k).map_err(ApiError::text)?;
        if k.is_empty() || k.len() > CACHE_KEY_BYTES {
            return Err(ApiError::invalid(format!(
                "`{what}` needs 1 to {CACHE_KEY_BYTES} bytes, `{}` has {}",
                k.escape_debug(),
                k.len()
            )));
        }
    }
    if req.cache_key.is_none() && !req.restore_keys.is_empty() {
        return Err(ApiError::invalid("restore keys need a cache key")
            .with_hint("give the job's own key with --cache-key"));
    }
    Ok(())
}

/// `POST /v1/pools/{name}/claims`: claims the warmest free member the rules allow, with
/// the choice and why in the answer (`pool`) and in a `pool-member-chosen` event. The
/// alloc's claim on a member already is answered again. With `waits`, a member that only
/// its release under way stands in the way of may be chosen, its claim queued behind it.
pub fn claim_from_pool(
    ctx: &mut impl Txn,
    pool: &str,
    req: &PoolClaimRequest,
    who: &Claimant<'_>,
    limits: &Limits,
    waits: bool,
    sent_at: Option<i64>,
) -> ApiResult<(api::Claim, bool)> {
    let p = require_pool(&*ctx, pool)?;
    check_keys(req)?;
    // A claim from a pool waits in the pool's line (`pool_line`), never in one member's
    // queue: a member is chosen only where the claim may start.
    let queue = req.claim.queue;
    let claim = &api::ClaimRequest {
        queue: false,
        ..req.claim.clone()
    };
    // Nobody overtakes the line: the claims in it are served first.
    super::pool_waits::serve(ctx, pool, limits)?;
    let all = members(&*ctx, &p)?;
    // The alloc's claim on a member already: the same request again.
    for volume in &all {
        if let Some(c) = ctx.claim(volume, &claim.alloc)? {
            let (mut answer, new) = create_claim(ctx, volume, claim, who, limits, waits, sent_at)?;
            answer.pool = ctx.open_pool_claim(volume, &c.alloc)?.map(|r| r.to_api());
            return Ok((answer, new));
        }
    }
    // A late copy of a request sent before the alloc released a member is refused, whichever
    // member that was: it must not land on another member that is free now.
    // The alloc in the pool's line already: the same request again.
    if let Some(answer) = super::pool_waits::waiting(ctx, pool, claim, who)? {
        return Ok((answer, false));
    }
    for volume in &all {
        super::retries::refuse_if_released(&*ctx, volume, &claim.alloc, sent_at)?;
    }
    super::pool_waits::refuse_if_left(&*ctx, pool, &claim.alloc, sent_at)?;
    if all.is_empty() {
        return Err(ApiError::not_found(format!(
            "pool `{pool}` has no members: no volume's labels match its selector {}",
            super::pools::selector_text(&p.selector)
        ))
        .with_hint(format!(
            "label volumes for it: csivol volume label VOLUME {}",
            super::pools::selector_text(&p.selector).replace(',', " ")
        )));
    }
    let line = ctx.pool_line(Some(pool))?;
    let mut candidates = Vec::new();
    let (mut held, mut out_of_service, mut refused) = (0, 0, Vec::new());
    for volume in &all {
        if !ctx.claims_of_volume(volume)?.is_empty() {
            held += 1;
            continue;
        }
        if ctx.volume_availability(volume)?.is_some() {
            out_of_service += 1;
            continue;
        }
        // A member held for the first in the pool's line is that claim's alone.
        if line
            .iter()
            .any(|w| w.held.as_deref() == Some(volume) && w.request.claim.alloc != claim.alloc)
        {
            held += 1;
            continue;
        }
        candidates.push(candidate(&*ctx, volume, req)?);
    }
    by_warmth(&mut candidates);
    for c in candidates {
        match evaluate_claim(&*ctx, &c.volume, claim, waits) {
            Ok(ClaimDecision::New | ClaimDecision::Queue(_)) => {}
            Ok(ClaimDecision::Existing(_)) => continue,
            Err(e)
                if matches!(
                    e.code(),
                    api::ErrorCode::Internal | api::ErrorCode::Unavailable
                ) =>
            {
                return Err(e);
            }
            Err(e) => {
                refused.push(format!("{}: {}", c.volume, e.message));
                continue;
            }
        }
        let (mut answer, new) = create_claim(ctx, &c.volume, claim, who, limits, waits, sent_at)?;
        let row = record_choice(ctx, pool, &c, req, who.actor, "")?;
        answer.pool = Some(row.to_api());
        return Ok((answer, new));
    }
    let mut why = vec![format!("{held} held")];
    if out_of_service > 0 {
        why.push(format!("{out_of_service} out of service"));
    }
    if !refused.is_empty() {
        why.push(format!(
            "{} refused for this claim ({})",
            refused.len(),
            refused.join("; ")
        ));
    }
    let why = format!("of its {} member(s), {}", all.len(), why.join(", "));
    if queue {
        return super::pool_waits::join(ctx, &p, req, who, limits, &why);
    }
    Err(
        ApiError::conflict(format!("no member of pool `{pool}` is free: {why}")).with_hint(
            format!(
                "claim with --queue to wait in the pool's line, or try again once a member is \
                 released (`csivol pool show {}` shows who holds each), or add a volume to \
                 the pool: csivol volume label VOLUME {}",
                csivol_api::cli_name(pool),
                super::pools::selector_text(&p.selector).replace(',', " ")
            ),
        ),
    )
}

/// At a claim's release: its claim from a pool is closed, and, when its job `succeeded`,
/// the member's cache key becomes the claim's. Without a word of success (a failed job,
/// a plain release) the member keeps the key it had.
pub fn released_from_pool(
    ctx: &mut impl Txn,
    volume: &str,
    alloc: &str,
    succeeded: bool,
) -> ApiResult<()> {
    // A row older than the claim is an earlier claim's of the alloc (released without a
    // word to its pool, as a lease that ran out is): it records nothing.
    let since = ctx.claim(volume, alloc)?.map(|c| c.created_at);
    let Some(open) = ctx.open_pool_claim(volume, alloc)? else {
        return Ok(());
    };
    if since.is_some_and(|t| open.at < t) {
        ctx.close_pool_claims(volume, alloc)?;
        return Ok(());
    }
    ctx.close_pool_claims(volume, alloc)?;
    if succeeded && let Some(k) = &open.cache_key {
        ctx.set_cache_key(volume, k)?;
    }
    Ok(())
}
