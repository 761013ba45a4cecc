//! A claim belongs to the token that made it. A claimer token (a CI job's) may renew and
//! release only the claims it made, and a repeated claim request for an alloc's claim
//! must come from the token that made it: one pipeline, or one leaked CI secret, cannot
//! release another team's claim in the middle of its job, nor take it over by asking for
//! it again. A token with `release-any` (an operator's) may renew and release any claim,
//! its name in the event.
//!
//! Claims recorded before the schema recorded claimers belong to no token: only tokens
//! with `release-any` may release or renew them. With the etcd store a server may run on the
//! schema before until `upgrade finalize`; then no claim records its claimer, and claims
//! are not told apart by token (as before), until the cluster is finalized.

use crate::error::{ApiError, ApiResult};
use crate::model::ClaimRow;
use crate::store::{Claimer, Snapshot};

/// Whom a request acts for, as far as claims' owners go.
#[derive(Clone, Copy, Debug)]
pub struct Acting<'a> {
    /// The token's id, as recorded with the claims it makes.
    pub token: &'a str,
    /// May renew and release any token's claims (`release-any`: operators).
    pub any_claim: bool,
}

/// Refuses to renew or release (`doing`) the claim `c` for a token that did not make it
/// and may not act on any claim.
pub fn refuse_unless_may_change(
    conn: &(impl Snapshot + ?Sized),
    c: &ClaimRow,
    who: Acting<'_>,
    doing: &str,
) -> ApiResult<()> {
    if who.any_claim {
        return Ok(());
    }
    let (volume, alloc) = (&c.volume, &c.alloc);
    match conn.claimer_of(volume, alloc)? {
        Claimer::NotRecorded => Ok(()),
        Claimer::Token(t) if t == who.token => Ok(()),
        Claimer::Token(_) => Err(ApiError::forbidden(format!(
            "the claim of alloc `{alloc}` on volume `{volume}` was made by another token: this \
             token may {doing} only the claims it made"
        ))
        .with_hint(format!(
            "{doing} it with the token that made it, or with a token that holds `release-any` \
             (an operator token does), which may {doing} any claim"
        ))),
        Claimer::Nobody => Err(ApiError::forbidden(format!(
            "the claim of alloc `{alloc}` on volume `{volume}` was recorded before claims \
             recorded the token that made them, so it belongs to no token: only a token that \
             holds `release-any` may {doing} it"
        ))
        .with_hint(format!(
            "{doing} it with an operator token, or another that holds `release-any`"
        ))),
    }
}

/// Refuses a repeated claim request for the existing claim `c` from a token other than
/// the one that made it: the claim is not merged into another token's. A claim that
/// belongs to no token is answered as before (a job's retry across the upgrade); what
/// may release it does not change by asking.
pub fn refuse_unless_may_repeat(
    conn: &(impl Snapshot + ?Sized),
    c: &ClaimRow,
    who: Acting<'_>,
) -> ApiResult<()> {
    let (volume, alloc) = (&c.volume, &c.alloc);
    match conn.claimer_of(volume, alloc)? {
        Claimer::Token(t) if t != who.token => Err(ApiError::conflict(format!(
            "alloc `{alloc}` already holds a claim on volume `{volume}`, made by another token: \
             a repeated claim request must come from the token that made the claim"
        ))
        .with_hint(
            "give this job its own alloc (`--alloc`), or ask with the token that made the claim",
        )),
        _ => Ok(()),
    }
}
