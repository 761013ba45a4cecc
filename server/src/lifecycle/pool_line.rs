//! A pool's line: claims from a pool made with `--queue` that found no member free wait in
//! it, and a member that frees goes, in the transaction that freed it, to the first in line
//! that can take it now (access mode, its node's eligibility, topology and free slots), the
//! warmest free member for that claim when several are free. Warmth chooses among members,
//! never among claims. The line and a member's own queue of named claims keep one order, by
//! arrival: a member's queued claim that came before a claim in line is granted first, and
//! one that came after does not stand before it. Once the first in line has waited past the
//! server's `pool_hold_after`, a member that frees and that it can use (its node has no free
//! slot yet, say) is held for it: no later claim takes that member first.
//!
//! A claim in line has a lease as any claim; it leaves the line when released or when its
//! lease lapses, with a tombstone under `pool:NAME` so that a late copy of its request does
//! not join the line again. Granted, it is a claim on its member like any other, with the
//! pool and why that member in its answer.

use std::cell::Cell;
use std::time::Duration;

use csivol_api::{self as api, ClaimState, FreeText, PoolChoice, PoolClaimRequest, validate_name};
use csivol_rules::kinds::EventKind;

use super::admission::{ClaimDecision, evaluate_arrived};
use super::claims::{Claimant, create_arrived};
use super::events::event;
use super::pool_claims::{by_warmth, candidate};
use super::pools::{members, require_pool};
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{PoolRow, PoolWaiterRow, time};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;

/// The tombstone key of a pool's line: not a volume's name (names have no `:`).
fn line_key(pool: &str) -> String {
    format!("pool:{pool}")
}

fn waited(now: i64, since: i64) -> String {
    let secs = u64::try_from(now.saturating_sub(since) / 1000).unwrap_or(0);
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// A claim in line as the API answers it: queued, no volume yet, its place in line.
pub(super) fn waiter_claim(w: &PoolWaiterRow, position: usize, index: u64) -> api::Claim {
    let c = &w.request.claim;
    api::Claim {
        volume: String::new(),
        alloc: c.alloc.clone(),
        node: c.node.clone(),
        mode: c.mode,
        state: ClaimState::Queued,
        target_path: None,
        error: None,
        next_retry_at: None,
        created_at: time(w.at),
        updated_at: time(w.at),
        index,
        waiting: None,
        condition: None,
        drift: None,
        expires_at: w.expires_at.map(time),
        ttl_ms: c.ttl_ms,
        queue_position: Some(u32::try_from(position + 1).unwrap_or(u32::MAX)),
        labels: c.labels.clone(),
        mount: api::ClaimMount::default(),
        usage: None,
        pool: Some(api::ClaimPool {
            pool: w.pool.clone(),
            choice: PoolChoice::Waiting,
            why: match &w.held {
                Some(m) => format!(
                    "waits in line, number {}; member {m} is held for it",
                    position + 1
                ),
                None => format!("waits in line, number {}", position + 1),
            },
            cache_key: w.request.cache_key.clone(),
        }),
    }
}

/// The alloc's place in `pool`'s line, with its row.
fn find(
    conn: &(impl Snapshot + ?Sized),
    pool: &str,
    alloc: &str,
) -> ApiResult<Option<(usize, PoolWaiterRow)>> {
    Ok(conn
        .pool_line(Some(pool))?
        .into_iter()
        .enumerate()
        .find(|(_, w)| w.request.claim.alloc == alloc))
}

/// The alloc's claim in `pool`'s line asked for again: answered as it stands (`None`: not
/// in line). Another node or mode is refused: it is another claim.
pub(super) fn waiting(
    ctx: &mut impl Txn,
    pool: &str,
    claim: &api::ClaimRequest,
) -> ApiResult<Option<api::Claim>> {
    let Some((i, w)) = find(&*ctx, pool, &claim.alloc)? else {
        return Ok(None);
    };
    let c = &w.request.claim;
    if c.node != claim.node || c.mode != claim.mode {
        return Err(ApiError::conflict(format!(
            "alloc `{}` already waits in pool `{pool}`'s line for a {} claim on node {}",
            claim.alloc,
            c.mode.as_str(),
            c.node
        ))
        .with_hint(format!(
            "release it first: csivol release --pool {pool} --alloc {}",
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
            p.name
        )));
    }
    super::claims::refuse_past_claims_limit(&*ctx, who, limits)?;
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

fn is_internal(e: &ApiError) -> bool {
    matches!(
        e.code(),
        api::ErrorCode::Internal | api::ErrorCode::Unavailable
    )
}

/// Takes `w` out of its line without a member, saying why.
fn leave(ctx: &mut impl Txn, w: &PoolWaiterRow, why: &str, actor: &str) -> ApiResult<()> {
    let alloc = &w.request.claim.alloc;
    ctx.put_pool_waiter(&w.pool, alloc, None)?;
    ctx.put_tombstone(&line_key(&w.pool), alloc)?;
    let message = format!(
        "pool {}: left the line after waiting {}: {why}",
        w.pool,
        waited(ctx.now(), w.at)
    );
    event(
        ctx,
        EventKind::PoolLineLeft,
        None,
        Some(&w.request.claim.node),
        Some(alloc),
        actor,
        message,
    )?;
    ctx.touch(Key::Pool(w.pool.clone()));
    Ok(())
}

/// `DELETE /v1/pools/{name}/claims/{alloc}` of a claim still in line: it leaves the line
/// (`false`: the alloc is not in line). Its own token or one that may release any claim.
pub fn leave_line(
    ctx: &mut impl Txn,
    pool: &str,
    alloc: &str,
    who: &Claimant<'_>,
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
        "`csivol pool show {pool}` shows its line and holders; one that left the line or was \
         released is gone (`csivol events --node NODE` says)"
    )))
}

/// The line as `pool show` lists it.
pub(super) fn line_view(
    conn: &(impl Snapshot + ?Sized),
    pool: &str,
    now: i64,
) -> ApiResult<Vec<api::PoolWaiter>> {
    Ok(conn
        .pool_line(Some(pool))?
        .into_iter()
        .enumerate()
        .map(|(i, w)| api::PoolWaiter {
            alloc: w.request.claim.alloc.clone(),
            node: w.request.claim.node.clone(),
            mode: w.request.claim.mode,
            position: u32::try_from(i + 1).unwrap_or(u32::MAX),
            since: time(w.at),
            waited_ms: u64::try_from(now.saturating_sub(w.at)).unwrap_or(0),
            expires_at: w.expires_at.map(time),
            held: w.held,
        })
        .collect())
}

/// Takes every claim out of `pool`'s line: the pool is being deleted.
pub(super) fn empty_line(ctx: &mut impl Txn, pool: &str, actor: &str) -> ApiResult<()> {
    for w in ctx.pool_line(Some(pool))? {
        leave(ctx, &w, "its pool was deleted", actor)?;
    }
    Ok(())
}

/// Takes out of every line the claims whose lease lapsed; how many.
pub(super) fn expire(ctx: &mut impl Txn) -> ApiResult<usize> {
    let now = ctx.now();
    let due: Vec<PoolWaiterRow> = ctx
        .pool_line(None)?
        .into_iter()
        .filter(|w| w.expires_at.is_some_and(|t| t <= now))
        .collect();
    for w in &due {
        leave(ctx, w, "its lease lapsed", "server")?;
    }
    Ok(due.len())
}

thread_local! {
    /// Set while a line is served: granting a member records a claim, whose volume's
    /// advance serves lines again; the serving already under way goes on instead.
    static SERVING: Cell<bool> = const { Cell::new(false) };
}

struct Serving;

impl Serving {
    fn start() -> Option<Self> {
        (!SERVING.replace(true)).then_some(Self)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        SERVING.set(false);
    }
}

/// Serves the line of the pool `volume` belongs to (called whenever a volume's claims may
/// have changed, before its own queue is granted).
pub(super) fn serve_member(ctx: &mut impl Txn, volume: &str, limits: &Limits) -> ApiResult<()> {
    let line = ctx.pool_line(None)?;
    if line.is_empty() {
        return Ok(());
    }
    let labels = ctx.volume_labels(volume)?;
    if labels.is_empty() {
        return Ok(());
    }
    let mut pools: Vec<String> = line.into_iter().map(|w| w.pool).collect();
    pools.sort_unstable();
    pools.dedup();
    for pool in pools {
        if ctx.pool(&pool)?.is_some_and(|p| p.selects(&labels)) {
            return serve(ctx, &pool, limits);
        }
    }
    Ok(())
}

/// Serves every pool's line (the leader's periodic pass: a slot freed on a waiting claim's
/// node, or its wait passing the bound, changes no member).
pub fn serve_lines(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<usize> {
    let lapsed = expire(ctx)?;
    let mut pools: Vec<String> = ctx.pool_line(None)?.into_iter().map(|w| w.pool).collect();
    pools.sort_unstable();
    pools.dedup();
    for pool in pools {
        serve(ctx, &pool, limits)?;
    }
    Ok(lapsed)
}

/// How a claim in line stands with a free member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fit {
    /// It may start there now.
    Now,
    /// Not now, and a release may change that (its node has no free slot, say).
    Later,
    /// Not while nothing but releases change.
    Never,
}

fn fit(conn: &(impl Snapshot + ?Sized), member: &str, w: &PoolWaiterRow) -> ApiResult<Fit> {
    let mut req = w.request.claim.clone();
    req.queue = true;
    match evaluate_arrived(conn, member, &req, false, Some(w.at)) {
        Ok(ClaimDecision::New) => Ok(Fit::Now),
        Ok(ClaimDecision::Queue(_)) => Ok(Fit::Later),
        Ok(ClaimDecision::Existing(_)) => Ok(Fit::Never),
        Err(e) if is_internal(&e) => Err(e),
        Err(_) => Ok(Fit::Never),
    }
}

/// Gives `pool`'s free members to the claims in its line, first in line first, each the
/// warmest member it may start on now; holds a member for the first once it waited past
/// the bound.
pub fn serve(ctx: &mut impl Txn, pool: &str, limits: &Limits) -> ApiResult<()> {
    let Some(_serving) = Serving::start() else {
        return Ok(());
    };
    // One grant a turn: each changes what is free and who is in line.
    while let Some((w, c)) = next_grant(ctx, pool, limits)? {
        grant(ctx, &w, &c, limits)?;
    }
    Ok(())
}

/// The first claim in line that a free member may take now, with the warmest such member.
fn next_grant(
    ctx: &mut impl Txn,
    pool: &str,
    limits: &Limits,
) -> ApiResult<Option<(PoolWaiterRow, super::pool_claims::Candidate)>> {
    let line = ctx.pool_line(Some(pool))?;
    let Some(p) = ctx.pool(pool)? else {
        return Ok(None);
    };
    if line.is_empty() {
        return Ok(None);
    }
    let mut free = Vec::new();
    for m in members(&*ctx, &p)? {
        let claims = ctx.claims_of_volume(&m)?;
        if claims.iter().all(|c| c.state == ClaimState::Queued)
            && ctx.volume_availability(&m)?.is_none()
        {
            free.push(m);
        }
    }
    if free.is_empty() {
        return Ok(None);
    }
    let now = ctx.now();
    let bound = i64::try_from(limits.pool_hold_after.as_millis()).unwrap_or(i64::MAX);
    for (i, w) in line.iter().enumerate() {
        let alloc = &w.request.claim.alloc;
        let mut now_fits = Vec::new();
        let mut later = Vec::new();
        for m in &free {
            let held_for_other = line
                .iter()
                .any(|o| o.held.as_deref() == Some(m) && &o.request.claim.alloc != alloc);
            if held_for_other {
                continue;
            }
            match fit(&*ctx, m, w)? {
                Fit::Now => now_fits.push(candidate(&*ctx, m, &w.request)?),
                Fit::Later => later.push(candidate(&*ctx, m, &w.request)?),
                Fit::Never => {}
            }
        }
        if !now_fits.is_empty() {
            by_warmth(&mut now_fits);
            return Ok(Some((w.clone(), now_fits.swap_remove(0))));
        }
        let holds = w.held.as_ref().is_some_and(|h| free.contains(h));
        if i == 0 && !holds && now.saturating_sub(w.at) >= bound && !later.is_empty() {
            by_warmth(&mut later);
            let m = later.swap_remove(0).volume;
            hold(ctx, w, &m, limits)?;
            // The held member is out of the others' reach: look again.
            return next_grant(ctx, pool, limits);
        }
    }
    Ok(None)
}

fn hold(ctx: &mut impl Txn, w: &PoolWaiterRow, member: &str, limits: &Limits) -> ApiResult<()> {
    let held = PoolWaiterRow {
        held: Some(member.to_owned()),
        ..w.clone()
    };
    ctx.put_pool_waiter(&w.pool, &w.request.claim.alloc, Some(&held))?;
    let message = format!(
        "pool {}: member {member} held for the first in line, which waited {} (past {}) and \
         cannot start on it yet",
        w.pool,
        waited(ctx.now(), w.at),
        humantime::format_duration(limits.pool_hold_after)
    );
    event(
        ctx,
        EventKind::PoolMemberHeld,
        Some(member),
        Some(&w.request.claim.node),
        Some(&w.request.claim.alloc),
        "server",
        message,
    )?;
    ctx.touch(Key::Pool(w.pool.clone()));
    Ok(())
}

/// Gives member `c` to `w`: it leaves the line, its claim is recorded on the member as
/// asked, from the token that asked, and the pool records the choice.
fn grant(
    ctx: &mut impl Txn,
    w: &PoolWaiterRow,
    c: &super::pool_claims::Candidate,
    limits: &Limits,
) -> ApiResult<()> {
    let mut req = w.request.claim.clone();
    req.queue = false;
    ctx.put_pool_waiter(&w.pool, &req.alloc, None)?;
    ctx.touch(Key::Pool(w.pool.clone()));
    let who = Claimant {
        actor: &w.actor,
        token: &w.claimer,
        bounded: w.bounded,
        any_claim: false,
    };
    match create_arrived(
        ctx,
        &c.volume,
        &req,
        &who,
        limits,
        (false, None),
        Some(w.at),
    ) {
        Ok(_) => {}
        Err(e) if is_internal(&e) => return Err(e),
        // Refused when its turn came (its token holds as many claims as allowed, say).
        Err(e) => {
            ctx.put_pool_waiter(&w.pool, &req.alloc, Some(w))?;
            return leave(
                ctx,
                w,
                &format!("refused at its turn: {}", e.message),
                "server",
            );
        }
    }
    let more = format!(", from the line after waiting {}", waited(ctx.now(), w.at));
    super::pool_claims::record_choice(ctx, &w.pool, c, &w.request, "server", &more).map(|_| ())
}
