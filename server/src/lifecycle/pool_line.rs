//! A pool's line: claims from a pool made with `--queue` that found no member free wait in
//! it, and a member that frees goes, in the transaction that freed it, to the first in line
//! that can take it now (access mode, its node's eligibility, topology and free slots), the
//! warmest free member for that claim when several are free. Warmth chooses among members,
//! never among claims. The line and a member's own queue of named claims keep one order, by
//! arrival: a member's queued claim that came before a claim in line is granted first, and
//! one that came after does not stand before it. Once the first in line has waited past the
//! server's `pool_hold_after`, a member that frees and that it can use (its node has no free
//! slot yet, say) is held for it: no later claim, from the line or by the member's name,
//! takes that member first. One that holds a member already leaves the next member to the
//! next claim past the bound. A hold its claim can never use, or on a volume that left the
//! pool or service, is let go.
//!
//! A claim in line has a lease as any claim; it leaves the line when released or when its
//! lease lapses, with a tombstone under `pool:NAME` so that a late copy of its request does
//! not join the line again. Granted, it is a claim on its member like any other, with the
//! pool and why that member in its answer.

use std::time::Duration;

use csivol_api::{self as api, ClaimState, PoolChoice};
use csivol_rules::kinds::EventKind;
use csivol_rules::transitions;

use super::admission::{ClaimDecision, evaluate_arrived};
use super::events::event;
use super::pool_members::{Candidate, candidate, members, record_choice};
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{PoolRow, PoolWaiterRow, time};
use crate::store::{NewClaim, Snapshot, Txn};
use crate::watch::Key;

/// The tombstone key of a pool's line: not a volume's name (names have no `:`).
pub(super) fn line_key(pool: &str) -> String {
    format!("pool:{pool}")
}

pub(super) fn waited(now: i64, since: i64) -> String {
    let secs = u64::try_from(now.saturating_sub(since) / 1000).unwrap_or(0);
    humantime::format_duration(Duration::from_secs(secs)).to_string()
}

/// A claim in line as the API answers it: queued, no volume yet, its place in line.
pub(super) fn waiter_claim(w: &PoolWaiterRow, position: usize, index: u64) -> api::Claim {
    let c = &w.request.claim;
    api::Claim {
        volume: String::new(),
        namespace: api::namespace_of(&w.pool).to_owned(),
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
        // The pool and the member held are named within their namespace, the claim's own.
        pool: Some(api::ClaimPool {
            pool: api::split_key(&w.pool).1.to_owned(),
            choice: PoolChoice::Waiting,
            why: match &w.held {
                Some(m) => format!(
                    "waits in line, number {}; member {} is held for it",
                    position + 1,
                    api::split_key(m).1
                ),
                None => format!("waits in line, number {}", position + 1),
            },
            cache_key: w.request.cache_key.clone(),
        }),
    }
}

/// The alloc's place in `pool`'s line, with its row.
pub(super) fn find(
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

pub(super) fn is_internal(e: &ApiError) -> bool {
    matches!(
        e.code(),
        api::ErrorCode::Internal | api::ErrorCode::Unavailable
    )
}

/// Takes `w` out of its line without a member, saying why.
pub(super) fn leave(
    ctx: &mut impl Txn,
    w: &PoolWaiterRow,
    why: &str,
    actor: &str,
) -> ApiResult<()> {
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
            // Named as the pool's members are, within its namespace.
            held: w.held.as_deref().map(|m| api::split_key(m).1.to_owned()),
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

/// Takes out of every line the claims whose lease lapsed; which.
pub(super) fn expire(ctx: &mut impl Txn) -> ApiResult<Vec<PoolWaiterRow>> {
    let now = ctx.now();
    let due: Vec<PoolWaiterRow> = ctx
        .pool_line(None)?
        .into_iter()
        .filter(|w| w.expires_at.is_some_and(|t| t <= now))
        .collect();
    for w in &due {
        leave(ctx, w, "its lease lapsed", "server")?;
    }
    Ok(due)
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

/// Offers free member `volume` (called whenever a volume's claims may have changed, before
/// its own queue is granted) to the claims in its pool's line, first in line first: the
/// first that may start on it now takes the warmest free member it may start on (this one
/// or another), unless it is held for the first in line, or the first in line waited past
/// the bound and can use it later (its node has no free slot yet): it is then held for
/// that one. A member the claim in line took instead is moved forward, and this one is
/// offered again, to the line as it is then.
/// `advance` moves a member forward (`attachments::advance_volume`, which calls this:
/// given, not imported, so that the line stays below a volume's advance).
pub(super) fn serve_member<T: Txn>(
    ctx: &mut T,
    volume: &str,
    limits: &Limits,
    advance: Advance<T>,
) -> ApiResult<()> {
    while let Some(other) = offer(ctx, volume, limits, advance)? {
        advance(ctx, &other, limits)?;
    }
    Ok(())
}

/// How a member is moved forward as far as its recorded facts allow.
pub(super) type Advance<T> = fn(&mut T, &str, &Limits) -> ApiResult<()>;

/// One offer of `volume` to its pool's line: the other member granted instead, if any.
fn offer<T: Txn>(
    ctx: &mut T,
    volume: &str,
    limits: &Limits,
    advance: Advance<T>,
) -> ApiResult<Option<String>> {
    let line = ctx.pool_line(None)?;
    if line.is_empty() {
        return Ok(None);
    }
    let labels = ctx.volume_labels(volume)?;
    let mut pools: Vec<&str> = line.iter().map(|w| w.pool.as_str()).collect();
    pools.sort_unstable();
    pools.dedup();
    let mut pool = None;
    for name in pools {
        if let Some(p) = ctx.pool(name)?.filter(|p| p.selects(volume, &labels)) {
            pool = Some(p);
        }
    }
    let Some(p) = pool else {
        return Ok(None);
    };
    if !free(&*ctx, volume)? {
        return Ok(None);
    }
    let now = ctx.now();
    let mut live = Vec::new();
    for w in line.into_iter().filter(|w| w.pool == p.name) {
        // A claim whose lease lapsed is gone, whether or not the leader's pass took it out
        // of the line yet: it leaves now, and is granted nothing.
        if w.expires_at.is_some_and(|t| t <= now) {
            leave(ctx, &w, "its lease lapsed", "server")?;
            if let Some(m) = w.held.as_deref().filter(|m| *m != volume) {
                advance(ctx, m, limits)?;
            }
        } else {
            live.push(w);
        }
    }
    let mut line = live;
    let_go_stale_holds(ctx, &p, &mut line)?;
    // A hold for a claim that can never start on the member (its node out of service or
    // gone) would keep the member from everyone: it is let go.
    if let Some(h) = line.iter_mut().find(|w| w.held.as_deref() == Some(volume))
        && fit(&*ctx, volume, h)? == Fit::Never
    {
        unhold(ctx, h, "it cannot start there")?;
    }
    let others: Vec<String> = members(&*ctx, &p)?
        .into_iter()
        .filter(|m| m != volume)
        .collect();
    match decide(&*ctx, volume, &others, &line, now, limits)? {
        Some(Step::Grant(i, best)) => {
            let elsewhere = (best.volume != volume).then(|| best.volume.clone());
            grant(ctx, &line[i], &best, limits)?;
            Ok(elsewhere)
        }
        Some(Step::Hold(i)) => {
            hold(ctx, &line[i], volume, limits)?;
            Ok(None)
        }
        None => Ok(None),
    }
}

/// What an offer of a free member does with the line.
enum Step {
    /// The claim at this place in line takes this member.
    Grant(usize, Candidate),
    /// The offered member is held for the claim at this place in line.
    Hold(usize),
}

/// What offering free member `volume` (the pool's `others` beside it) to `line` does.
fn decide(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    others: &[String],
    line: &[PoolWaiterRow],
    now: i64,
    limits: &Limits,
) -> ApiResult<Option<Step>> {
    let held_for = |m: &str| line.iter().find(|w| w.held.as_deref() == Some(m));
    let bound = i64::try_from(limits.pool_hold_after.as_millis()).unwrap_or(i64::MAX);
    for (i, w) in line.iter().enumerate() {
        let alloc = &w.request.claim.alloc;
        if held_for(volume).is_some_and(|h| &h.request.claim.alloc != alloc) {
            continue;
        }
        match fit(conn, volume, w)? {
            Fit::Now => {
                // The first in line that may start on it takes the warmest free member it
                // may start on now, this one or another, whose mount rules take it: warmth
                // chooses its member, and the offer of this one goes no further down the
                // line in this pass (a claim after it must not take the slot or member it
                // would have had). The member it leaves is offered again once it is taken
                // (`serve_member`).
                let mut best = None::<Candidate>;
                for m in std::iter::once(volume).chain(others.iter().map(String::as_str)) {
                    let fits = m == volume
                        || (held_for(m).is_none_or(|h| &h.request.claim.alloc == alloc)
                            && free(conn, m)?
                            && fit(conn, m, w)? == Fit::Now);
                    if !fits || mounts_refuse(conn, m, &w.request.claim, limits)?.is_some() {
                        continue;
                    }
                    let c = candidate(conn, m, &w.request)?;
                    if best.as_ref().is_none_or(|b| c.order() < b.order()) {
                        best = Some(c);
                    }
                }
                if let Some(best) = best {
                    return Ok(Some(Step::Grant(i, best)));
                }
            }
            // The first claim past the bound that can use it later is held it: the first
            // in line, or, that one held a member already or never able to use this one,
            // the next past the bound, so that none of them starves.
            Fit::Later if w.held.is_none() && now.saturating_sub(w.at) >= bound => {
                return Ok(Some(Step::Hold(i)));
            }
            Fit::Later | Fit::Never => {}
        }
    }
    Ok(None)
}

/// Whether the leader's pass has anything to do in the pools' lines (read only, so that
/// the pass writes only when due): a claim in line whose lease lapsed, a hold to let go,
/// or a free member that an offer to its line would grant or hold, at `now`.
pub fn lines_due(conn: &(impl Snapshot + ?Sized), now: i64, limits: &Limits) -> ApiResult<bool> {
    let all = conn.pool_line(None)?;
    if all.iter().any(|w| w.expires_at.is_some_and(|t| t <= now)) {
        return Ok(true);
    }
    let mut pools: Vec<&str> = all.iter().map(|w| w.pool.as_str()).collect();
    pools.sort_unstable();
    pools.dedup();
    for name in pools {
        let Some(p) = conn.pool(name)? else {
            continue;
        };
        let line: Vec<PoolWaiterRow> = all.iter().filter(|w| w.pool == name).cloned().collect();
        let members = members(conn, &p)?;
        for w in &line {
            if let Some(m) = &w.held
                && (!members.contains(m) || conn.volume_availability(m)?.is_some())
            {
                return Ok(true);
            }
        }
        for m in &members {
            if !free(conn, m)? {
                continue;
            }
            if let Some(h) = line.iter().find(|w| w.held.as_deref() == Some(m))
                && fit(conn, m, h)? == Fit::Never
            {
                return Ok(true);
            }
            let others: Vec<String> = members.iter().filter(|o| *o != m).cloned().collect();
            if decide(conn, m, &others, &line, now, limits)?.is_some() {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// Why member `volume`'s mount rules refuse `claim` (its group, its flags), if they do.
pub(super) fn mounts_refuse(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    claim: &api::ClaimRequest,
    limits: &Limits,
) -> ApiResult<Option<ApiError>> {
    let v = conn.require_volume(volume)?;
    match super::mounts::claim_mount(conn, &v, claim, &limits.mounts) {
        Ok(_) => Ok(None),
        Err(e) if is_internal(&e) => Err(e),
        Err(e) => Ok(Some(e)),
    }
}

/// Whether `volume` is free for a claim from the line: nobody holds it (its own queued
/// claims aside) and it is in service.
fn free(conn: &(impl Snapshot + ?Sized), volume: &str) -> ApiResult<bool> {
    Ok(conn
        .claims_of_volume(volume)?
        .iter()
        .all(|c| c.state == ClaimState::Queued)
        && conn.volume_availability(volume)?.is_none())
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

/// Lets go the holds of `p`'s `line` on volumes that left the pool or are out of service
/// (paused, draining): such a hold keeps the first in line waiting on a member no release
/// gives it, and the next member that frees may be held for it instead.
pub(super) fn let_go_stale_holds(
    ctx: &mut impl Txn,
    p: &PoolRow,
    line: &mut [PoolWaiterRow],
) -> ApiResult<()> {
    if line.iter().all(|w| w.held.is_none()) {
        return Ok(());
    }
    let all = members(&*ctx, p)?;
    for w in line.iter_mut() {
        let Some(m) = w.held.clone() else {
            continue;
        };
        if !all.contains(&m) {
            unhold(ctx, w, "it left the pool")?;
        } else if ctx.volume_availability(&m)?.is_some() {
            unhold(ctx, w, "it is out of service")?;
        }
    }
    Ok(())
}

/// Lets go the member held for `w` (`why`), with its event.
fn unhold(ctx: &mut impl Txn, w: &mut PoolWaiterRow, why: &str) -> ApiResult<()> {
    let Some(member) = w.held.take() else {
        return Ok(());
    };
    ctx.put_pool_waiter(&w.pool, &w.request.claim.alloc, Some(w))?;
    event(
        ctx,
        EventKind::PoolMemberHeld,
        Some(&member),
        Some(&w.request.claim.node),
        Some(&w.request.claim.alloc),
        "server",
        format!(
            "pool {}: member {member} no longer held for the first in line: {why}",
            w.pool
        ),
    )?;
    ctx.touch(Key::Pool(w.pool.clone()));
    Ok(())
}

/// Gives member `c` to `w`: it leaves the line and its claim is recorded on the member as
/// asked, for the token that asked (its claims were counted when it joined), with the
/// choice and why; the volume's advance, under way, takes it on.
fn grant(ctx: &mut impl Txn, w: &PoolWaiterRow, c: &Candidate, limits: &Limits) -> ApiResult<()> {
    let mut req = w.request.claim.clone();
    req.queue = false;
    let volume = ctx.require_volume(&c.volume)?;
    let mount = match super::mounts::claim_mount(&*ctx, &volume, &req, &limits.mounts) {
        Ok(m) => m,
        Err(e) if is_internal(&e) => return Err(e),
        // Refused when its turn came (the member's mount rules refuse its group, say).
        Err(e) => {
            return leave(
                ctx,
                w,
                &format!("refused at its turn: {}", e.message),
                "server",
            );
        }
    };
    ctx.put_pool_waiter(&w.pool, &req.alloc, None)?;
    ctx.touch(Key::Pool(w.pool.clone()));
    let expires_at = req
        .ttl_ms
        .map(|t| super::changes::time_after(ctx.now(), "ttl_ms", t))
        .transpose()?;
    ctx.insert_claim(NewClaim {
        volume: &c.volume,
        request: &req,
        state: transitions::NEW_CLAIM,
        expires_at,
        claimer: Some(&w.claimer),
        mount: &mount,
    })?;
    event(
        ctx,
        EventKind::ClaimCreated,
        Some(&c.volume),
        Some(&req.node),
        Some(&req.alloc),
        &w.actor,
        format!(
            "{} claim recorded from pool {}'s line",
            req.mode.as_str(),
            w.pool
        ),
    )?;
    super::changes::touch_volume(ctx, &c.volume)?;
    let more = format!(", from the line after waiting {}", waited(ctx.now(), w.at));
    record_choice(ctx, &w.pool, c, &w.request, "server", &more).map(|_| ())
}
