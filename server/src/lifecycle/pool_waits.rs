//! Claims from a pool that wait in its line (`pool_line` keeps the line and gives a member
//! that frees to the first in it that may take it): joining the line when no member is free,
//! following, renewing and releasing a claim from the pool wherever it stands, and serving
//! every free member of a pool to its line (a claim about to take a member, a member
//! labelled in, the leader's periodic pass).

use csivol_api::{self as api, FreeText, PoolClaimRequest, validate_name};
use csivol_rules::kinds::EventKind;

use super::admission::evaluate_arrived;
use super::attachments::advance_volume;
use super::claims::Claimant;
use super::events::event;
use super::pool_line::{
    expire, find, is_internal, leave, let_go_stale_holds, line_key, waiter_claim,
};
use super::pools::{members, require_pool};
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{PoolRow, PoolWaiterRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;

/// The alloc's claim in `pool`'s line asked for again: answered as it stands (`None`: not
/// in line). Another node or mode is refused: it is another claim. So is another token's
/// request, as a repeated claim on a volume is (`owners::refuse_unless_may_repeat`): the
/// claim in line is the token's that made it.
pub(super) fn waiting(
    ctx: &mut impl Txn,
    pool: &str,
    claim: &api::ClaimRequest,
    who: &Claimant<'_>,
) -> ApiResult<Option<api::Claim>> {
    let Some((i, w)) = find(&*ctx, pool, &claim.alloc)? else {
        return Ok(None);
    };
    if w.claimer != who.token {
        return Err(ApiError::conflict(format!(
            "alloc `{}` already waits in pool `{pool}`'s line, for another token: a repeated \
             claim request must come from the token that made the claim",
            claim.alloc
        ))
        .with_hint(
            "give this job its own alloc (`--alloc`), or ask with the token that made the claim",
        ));
    }
    let c = &w.request.claim;
    if c.node != claim.node || c.mode != claim.mode {
        return Err(ApiError::conflict(format!(
            "alloc `{}` already waits in pool `{pool}`'s line for a {} claim on node {}",
            claim.alloc,
            c.mode.as_str(),
            c.node
        ))
        .with_hint(format!(
            "release it first: csivol release --pool {} --alloc {}",
            csivol_api::cli_name(pool),
            claim.alloc
        )));
    }
    Ok(Some(waiter_claim(&w, i, ctx.index())))
}

/// Refuses a request sent before the alloc left `pool`'s line (released, lapsed): a late
/// copy of it does not join the line again.
pub(super) fn refuse_if_left(
    conn: &(impl Snapshot + ?Sized),
    pool: &str,
    alloc: &str,
    sent_at: Option<i64>,
) -> ApiResult<()> {
    super::retries::refuse_if_released(conn, &line_key(pool), alloc, sent_at).map_err(|e| {
        let from = format!("volume `{}`", line_key(pool));
        ApiError::conflict(e.message.replace(&from, &format!("pool `{pool}`'s line")))
            .with_hint(e.hint.unwrap_or_default())
    })
}

/// Puts the claim in `p`'s line, none of its members being free for it (`why`); refused
/// when no member could ever take it (each refuses it for a reason no release removes).
pub(super) fn join(
    ctx: &mut impl Txn,
    p: &PoolRow,
    req: &PoolClaimRequest,
    who: &Claimant<'_>,
    limits: &Limits,
    why: &str,
) -> ApiResult<(api::Claim, bool)> {
    let claim = &req.claim;
    validate_name("alloc", &claim.alloc).map_err(ApiError::invalid)?;
    validate_name("node", &claim.node).map_err(ApiError::invalid)?;
    claim.check_text().map_err(ApiError::text)?;
    if claim.ttl_ms == Some(0) {
        return Err(ApiError::invalid("`ttl_ms` must be longer than zero"));
    }
    if let Some(t) = claim.ttl_ms {
        api::limits::duration_ms("ttl_ms", t).map_err(ApiError::out_of_range)?;
    }
    ctx.require_node(&claim.node)?;
    // A member that refuses the claim whatever is released (a read-only mode for a write,
    // a node outside its topology, out of service) will not take it from the line either.
    let mut never = Vec::new();
    let all = members(&*ctx, p)?;
    for m in &all {
        match evaluate_arrived(&*ctx, m, claim, false, None) {
            Ok(_) => {}
            Err(e) if is_internal(&e) => return Err(e),
            Err(e) => never.push(format!("{m}: {}", e.message)),
        }
    }
    if never.len() == all.len() {
        return Err(ApiError::conflict(format!(
            "no member of pool `{}` can ever take this claim, so it does not wait in line: {}",
            p.name,
            never.join("; ")
        ))
        .with_hint(format!(
            "`csivol pool show {}` shows its members; claim on a node they reach",
            csivol_api::cli_name(&p.name)
        )));
    }
    super::claims::refuse_past_claims_limit(&*ctx, who, limits)?;
    super::quotas::refuse_past(
        &*ctx,
        csivol_api::namespace_of(&p.name),
        crate::store::namespaces::Bound::Claims,
        1,
        &format!("a claim waiting in pool `{}`'s line", p.name),
    )?;
    let now = ctx.now();
    let expires_at = claim
        .ttl_ms
        .map(|t| super::changes::time_after(now, "ttl_ms", t))
        .transpose()?;
    let row = PoolWaiterRow {
        pool: p.name.clone(),
        request: req.clone(),
        claimer: who.token.to_owned(),
        actor: who.actor.to_owned(),
        bounded: who.bounded,
        at: now,
        expires_at,
        held: None,
    };
    ctx.put_pool_waiter(&p.name, &claim.alloc, Some(&row))?;
    let position = ctx.pool_line(Some(&p.name))?.len();
    event(
        ctx,
        EventKind::PoolLineJoined,
        None,
        Some(&claim.node),
        Some(&claim.alloc),
        who.actor,
        format!(
            "pool {}: {} claim waits in line, number {position}: {why}",
            p.name,
            claim.mode.as_str()
        ),
    )?;
    ctx.touch(Key::Pool(p.name.clone()));
    Ok((waiter_claim(&row, position - 1, ctx.index()), true))
}

/// `DELETE /v1/pools/{name}/claims/{alloc}` of a claim still in line: it leaves the line
/// (`false`: the alloc is not in line). Its own token or one that may release any claim.
/// A member held for it goes to whoever may take it now.
pub fn leave_line(
    ctx: &mut impl Txn,
    pool: &str,
    alloc: &str,
    who: &Claimant<'_>,
    limits: &Limits,
) -> ApiResult<bool> {
    require_pool(&*ctx, pool)?;
    let Some((_, w)) = find(&*ctx, pool, alloc)? else {
        return Ok(false);
    };
    if !who.any_claim && w.claimer != who.token {
        return Err(ApiError::forbidden(format!(
            "alloc `{alloc}` waits in pool `{pool}`'s line for another token: only it, or a \
             token that may release any claim, may release it"
        )));
    }
    leave(ctx, &w, "released", who.actor)?;
    if let Some(m) = &w.held {
        advance_volume(ctx, m, limits)?;
    }
    Ok(true)
}

/// `POST /v1/pools/{name}/claims/{alloc}/renew` of a claim still in line: its lease runs
/// `ttl_ms` (else its own TTL) from now. `None`: the alloc is not in line.
pub fn renew_in_line(
    ctx: &mut impl Txn,
    pool: &str,
    alloc: &str,
    ttl_ms: Option<u64>,
    who: &Claimant<'_>,
) -> ApiResult<Option<api::Claim>> {
    let Some((i, mut w)) = find(&*ctx, pool, alloc)? else {
        return Ok(None);
    };
    if !who.any_claim && w.claimer != who.token {
        return Err(ApiError::forbidden(format!(
            "alloc `{alloc}` waits in pool `{pool}`'s line for another token: only it may renew it"
        )));
    }
    let Some(ttl) = ttl_ms.or(w.request.claim.ttl_ms).filter(|t| *t > 0) else {
        return Err(ApiError::invalid(format!(
            "the claim of alloc `{alloc}` in pool `{pool}`'s line has no lease to renew"
        )));
    };
    w.expires_at = Some(super::changes::time_after(ctx.now(), "ttl_ms", ttl)?);
    ctx.put_pool_waiter(pool, alloc, Some(&w))?;
    ctx.touch(Key::Pool(pool.to_owned()));
    Ok(Some(waiter_claim(&w, i, ctx.index())))
}

/// The alloc's claim from `pool`: in line, or on the member it was granted.
pub fn pool_claim(
    conn: &(impl Snapshot + ?Sized),
    pool: &str,
    alloc: &str,
    index: u64,
) -> ApiResult<api::Claim> {
    let p = require_pool(conn, pool)?;
    if let Some((i, w)) = find(conn, pool, alloc)? {
        return Ok(waiter_claim(&w, i, index));
    }
    for m in members(conn, &p)? {
        if let Some(c) = conn.claim(&m, alloc)? {
            return conn.claim_to_api(&c);
        }
    }
    Err(ApiError::not_found(format!(
        "alloc `{alloc}` neither waits in pool `{pool}`'s line nor holds a member of it"
    ))
    .with_hint(format!(
        "`csivol pool show {}` shows its line and holders; one that left the line or was \
         released is gone (`csivol events --node NODE` says)",
        csivol_api::cli_name(pool)
    )))
}

/// Offers every free member of `pool` to its line, again while one is taken: a member
/// passed over by a claim for a warmer one is offered again once that one is taken.
pub(super) fn serve(ctx: &mut impl Txn, pool: &str, limits: &Limits) -> ApiResult<()> {
    let Some(p) = ctx.pool(pool)? else {
        return Ok(());
    };
    let mut line = ctx.pool_line(Some(pool))?;
    let_go_stale_holds(ctx, &p, &mut line)?;
    loop {
        let waiting = ctx.pool_line(Some(pool))?.len();
        if waiting == 0 {
            return Ok(());
        }
        for m in members(&*ctx, &p)? {
            advance_volume(ctx, &m, limits)?;
        }
        if ctx.pool_line(Some(pool))?.len() == waiting {
            return Ok(());
        }
    }
}

/// Serves every pool's line, its claims whose lease lapsed leaving it first (the leader's
/// periodic pass: a slot freed on a waiting claim's node, or its wait passing the bound,
/// changes no member). How many left.
pub fn serve_lines(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<usize> {
    let lapsed = expire(ctx)?;
    // A member held for one of them goes to whoever may take it now.
    for m in lapsed.iter().filter_map(|w| w.held.as_deref()) {
        advance_volume(ctx, m, limits)?;
    }
    let mut pools: Vec<String> = ctx.pool_line(None)?.into_iter().map(|w| w.pool).collect();
    pools.sort_unstable();
    pools.dedup();
    for pool in pools {
        serve(ctx, &pool, limits)?;
    }
    Ok(lapsed.len())
}
