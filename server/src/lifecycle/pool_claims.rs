//! Claims made from a pool: the server picks, in the transaction that records the claim,
//! a free member that the claim's rules allow (access mode, the node's eligibility,
//! topology and free slots, the member's own availability: paused and draining members
//! are skipped), preferring the warmest: the member last released with the job's cache
//! key, then one still staged on the claim's node, then one whose last key matches a
//! restore key (tried in order, like GitHub's restore-keys) or shares the longest prefix
//! with the cache key, then any. A member's key is recorded at its release, and only when
//! the job said it succeeded; a failed or killed job leaves the key the member had.

use std::cmp::Reverse;

use csivol_api::limits::{CACHE_KEY_BYTES, MAX_RESTORE_KEYS};
use csivol_api::{self as api, AttachmentState, PoolChoice, PoolClaimRequest};
use csivol_rules::kinds::EventKind;

use super::admission::{ClaimDecision, evaluate_claim};
use super::claims::{Claimant, create_claim};
use super::events::event;
use super::pools::{members, require_pool};
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::PoolClaimRow;
use crate::store::Txn;

/// A free member and how warm it is for the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    volume: String,
    choice: PoolChoice,
    /// Within `Prefix`: the restore key's place (0 first; the cache key's own prefix
    /// after every restore key), then the shared prefix's length (longest first).
    rank: (usize, Reverse<usize>),
    why: String,
}

/// The number of bytes two keys share at their start, on character boundaries.
fn shared_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, x), _)| i + x.len_utf8())
        .last()
        .unwrap_or(0)
}

/// How warm a free member is for a claim with `key` and `restore` keys on `node`.
fn warmth(
    volume: &str,
    last_key: Option<&str>,
    staged_here: bool,
    key: Option<&str>,
    restore: &[String],
) -> Candidate {
    let cold = |choice, why: String| Candidate {
        volume: volume.to_owned(),
        choice,
        rank: (0, Reverse(0)),
        why,
    };
    if let (Some(k), Some(last)) = (key, last_key)
        && k == last
    {
        return cold(PoolChoice::SameKey, format!("warm: same key `{k}`"));
    }
    if staged_here {
        return cold(PoolChoice::StagedHere, "staged here".to_owned());
    }
    if let Some(last) = last_key {
        let shared = key.map_or(0, |k| shared_prefix(k, last));
        if let Some((i, r)) = restore
            .iter()
            .enumerate()
            .find(|(_, r)| last.starts_with(r.as_str()))
        {
            return Candidate {
                volume: volume.to_owned(),
                choice: PoolChoice::Prefix,
                rank: (i, Reverse(shared)),
                why: format!("warm: prefix `{r}` (its key `{last}`)"),
            };
        }
        if shared > 0 {
            return Candidate {
                volume: volume.to_owned(),
                choice: PoolChoice::Prefix,
                rank: (restore.len(), Reverse(shared)),
                why: format!("warm: prefix `{}` (its key `{last}`)", &last[..shared]),
            };
        }
    }
    // Among cold members, one that holds no other key's cache goes first: a warm cache is
    // kept for its own key while a blank one is free.
    Candidate {
        rank: (usize::from(last_key.is_some()), Reverse(0)),
        ..cold(PoolChoice::Cold, "cold".to_owned())
    }
}

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
    let claim = &req.claim;
    if claim.queue {
        return Err(ApiError::invalid(
            "waiting in line for a pool (--queue with --pool) is not supported",
        )
        .with_hint("claim from the pool without --queue, and try again when a member is free"));
    }
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
    for volume in &all {
        super::retries::refuse_if_released(&*ctx, volume, &claim.alloc, sent_at)?;
    }
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
        let staged_here = ctx.attachment(volume, &claim.node)?.is_some_and(|a| {
            matches!(
                a.state,
                AttachmentState::Attached | AttachmentState::Unstaging
            )
        });
        let last = ctx.cache_key(volume)?;
        candidates.push(warmth(
            volume,
            last.as_deref(),
            staged_here,
            req.cache_key.as_deref(),
            &req.restore_keys,
        ));
    }
    candidates.sort_by(|a, b| {
        (a.choice as u8, a.rank, &a.volume).cmp(&(b.choice as u8, b.rank, &b.volume))
    });
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
        let row = PoolClaimRow {
            id: 0,
            pool: pool.to_owned(),
            volume: c.volume.clone(),
            alloc: claim.alloc.clone(),
            node: claim.node.clone(),
            cache_key: req.cache_key.clone(),
            choice: c.choice,
            why: c.why.clone(),
            at: ctx.now(),
            released_at: None,
        };
        ctx.close_pool_claims(&c.volume, &claim.alloc)?;
        ctx.insert_pool_claim(&row)?;
        let key = req
            .cache_key
            .as_deref()
            .map_or(String::new(), |k| format!(" for cache key `{k}`"));
        event(
            ctx,
            EventKind::PoolMemberChosen,
            Some(&c.volume),
            Some(&claim.node),
            Some(&claim.alloc),
            who.actor,
            format!("pool {pool}: member {}{key}: {}", c.volume, c.why),
        )?;
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
    Err(ApiError::conflict(format!(
        "no member of pool `{pool}` is free: of its {} member(s), {}",
        all.len(),
        why.join(", ")
    ))
    .with_hint(format!(
        "try again once a member is released (`csivol pool show {pool}` shows who holds each), \
         or add a volume to the pool: csivol volume label VOLUME {}",
        super::pools::selector_text(&p.selector).replace(',', " ")
    )))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_as_warm_as_its_last_key_and_its_staging_say() {
        let r = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let w = |last: Option<&str>, staged, key: Option<&str>, restore: &[&str]| {
            let c = warmth("m", last, staged, key, &r(restore));
            (c.choice, c.rank)
        };
        let k = Some("feature-x-abc");
        assert_eq!(
            w(Some("feature-x-abc"), true, k, &[]).0,
            PoolChoice::SameKey
        );
        assert_eq!(
            w(Some("main-1"), true, k, &["main"]).0,
            PoolChoice::StagedHere
        );
        assert_eq!(
            w(Some("main-1"), false, k, &["feature-", "main"]),
            (PoolChoice::Prefix, (1, Reverse(0)))
        );
        assert_eq!(
            w(Some("feature-y"), false, k, &["feature-", "main"]),
            (PoolChoice::Prefix, (0, Reverse(8)))
        );
        // No restore key matches: the cache key's own shared prefix, after every restore key.
        assert_eq!(
            w(Some("feature-y"), false, k, &["main"]),
            (PoolChoice::Prefix, (1, Reverse(8)))
        );
        assert_eq!(
            w(Some("zzz"), false, k, &["main"]),
            (PoolChoice::Cold, (1, Reverse(0)))
        );
        assert_eq!(w(None, false, k, &[]), (PoolChoice::Cold, (0, Reverse(0))));
        assert_eq!(w(Some("x"), false, None, &[]).0, PoolChoice::Cold);
        assert_eq!(shared_prefix("héllo", "hélp"), 4);
    }
}
