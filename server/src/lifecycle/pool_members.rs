//! A pool's members and how warm each free one is for a claim: the member last released
//! with the claim's cache key first, then one still staged on its node, then one whose last
//! key matches a restore key or shares the longest prefix with the key, then any; among
//! members as warm, the one whose cache was used longest ago. And the record of the member
//! a claim got, and why.

use std::cmp::Reverse;

use csivol_api::{AttachmentState, PoolChoice, PoolClaimRequest};
use csivol_rules::kinds::EventKind;

use super::events::event;
use crate::error::ApiResult;
use crate::model::{PoolClaimRow, PoolRow};
use crate::store::{Snapshot, Txn};

/// A pool's members: the volumes its selector takes, by name.
pub(super) fn members(conn: &(impl Snapshot + ?Sized), pool: &PoolRow) -> ApiResult<Vec<String>> {
    Ok(conn
        .all_volume_labels()?
        .into_iter()
        .filter(|(v, l)| pool.selects(v, l))
        .map(|(v, _)| v)
        .collect())
}

/// A free member and how warm it is for the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Candidate {
    pub(super) volume: String,
    pub(super) choice: PoolChoice,
    /// Within `Prefix`: the restore key's place (0 first; the cache key's own prefix
    /// after every restore key), then the shared prefix's length (longest first).
    rank: (usize, Reverse<usize>),
    pub(super) why: String,
    /// A single-node member still on another node (kept staged there, its pool lingering,
    /// or being detached): taking it waits for that node to let it go, so it comes after
    /// the members as warm that wait for nothing.
    elsewhere: bool,
    /// When its last key was recorded (none: it holds no key). Among members as warm, the
    /// one whose cache was used longest ago goes first, as a cache gives up its least
    /// recently used entry: the caches of the keys jobs come back to often stay theirs.
    key_at: Option<i64>,
}

/// How warm free member `volume` is for `req`, by its last key and whether it is still
/// staged on the claim's node.
pub(super) fn candidate(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    req: &PoolClaimRequest,
) -> ApiResult<Candidate> {
    let node = &req.claim.node;
    let atts = conn.attachments_of_volume(volume)?;
    let staged_here = atts.iter().any(|a| {
        a.node == *node
            && matches!(
                a.state,
                AttachmentState::Attached | AttachmentState::Unstaging
            )
    });
    let single = conn
        .volume(volume)?
        .is_some_and(|v| v.access_mode.is_single_node());
    let last = conn.cache_key(volume)?;
    Ok(Candidate {
        elsewhere: single && atts.iter().any(|a| a.node != *node),
        key_at: last.as_ref().map(|(_, at)| *at),
        ..warmth(
            volume,
            last.as_ref().map(|(k, _)| k.as_str()),
            staged_here,
            req.cache_key.as_deref(),
            &req.restore_keys,
        )
    })
}

impl Candidate {
    /// The order of warmth, warmest least; then the cache used longest ago; the name
    /// breaks ties.
    pub(super) fn order(&self) -> (u8, bool, (usize, Reverse<usize>), Option<i64>, &str) {
        (
            self.choice as u8,
            self.elsewhere,
            self.rank,
            self.key_at,
            &self.volume,
        )
    }
}

/// Warmest first; among as warm, the cache used longest ago; the name breaks ties.
pub(super) fn by_warmth(candidates: &mut [Candidate]) {
    candidates.sort_by(|a, b| a.order().cmp(&b.order()));
}

/// Records that the claim `req` got member `c` of `pool` and why, with its
/// `pool-member-chosen` event (`more` ends its message).
pub(super) fn record_choice(
    ctx: &mut impl Txn,
    pool: &str,
    c: &Candidate,
    req: &PoolClaimRequest,
    actor: &str,
    more: &str,
) -> ApiResult<PoolClaimRow> {
    let claim = &req.claim;
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
        actor,
        format!("pool {pool}: member {}{key}: {}{more}", c.volume, c.why),
    )?;
    Ok(row)
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
        elsewhere: false,
        key_at: None,
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
                rank: (i, Reverse(shared)),
                ..cold(
                    PoolChoice::Prefix,
                    format!("warm: prefix `{r}` (its key `{last}`)"),
                )
            };
        }
        if shared > 0 {
            return Candidate {
                rank: (restore.len(), Reverse(shared)),
                ..cold(
                    PoolChoice::Prefix,
                    format!("warm: prefix `{}` (its key `{last}`)", &last[..shared]),
                )
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
