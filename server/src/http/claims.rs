//! The claim endpoints: show a claim (a blocking query), list claims, and the claim writes:
//! record a claim, release it, renew its lease. Each write may carry an `Idempotency-Key`
//! and its send time (`once`): a repeat is answered the first answer, and a claim request
//! sent before its alloc's last release is refused.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, ClaimRequest, ClaimState};

use super::blocking::{Blocking, Hold, cursor_headers, follow, hold_claim, with_index};
use super::extract::{Body, Q, name};
use super::listing;
use super::once::{Answer, Once, Outcome};
use super::waits::waits_for_release;
use crate::app::App;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::store::Snapshot;
use crate::store::sqlite::writer::WriteCtx;
use crate::watch::Key;
use crate::{lifecycle, views};

pub(super) async fn post_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    Q(hold): Q<Hold>,
    once: Once,
    Body(req): Body<ClaimRequest>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    let limits = app.limits.clone();
    let who = Who::of(caller);
    let hold = hold.wait()?;
    let waits = waits_for_release(&headers)?;
    let began = app.db.hub.generation();
    // Labels are held to this server's limits, which the lifecycle does not know.
    api::check_claim_labels(&req.labels, &limits.text).map_err(ApiError::text)?;
    if req.dry_run {
        let now = app.clock.now_ms();
        let answer = app
            .db
            .read(move |c| lifecycle::claim_dry_run(c, &volume, &req, &limits, now))
            .await?;
        return Ok(Json(answer).into_response());
    }
    let sent_at = once.sent_at();
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::create_claim(ctx, &volume, &req, &who.claimant(), &limits, waits, sent_at)
    };
    answer_claim(&app, &once, &body, hold, began, write).await
}

/// Carries out a claim write once (`once`) and answers it as a claim: 201 with a new claim,
/// 200 with the one a repeated request made; with `hold` (`?wait=`), a claim on its way to
/// ready is held until it moves on. Claims on a named volume, from a pool and of a
/// per-job volume are all answered so.
pub(super) async fn answer_claim<F>(
    app: &App,
    once: &Once,
    body: &impl serde::Serialize,
    hold: Option<std::time::Duration>,
    began: crate::watch::Generation,
    write: F,
) -> ApiResult<Response>
where
    F: FnMut(&mut WriteCtx<'_>) -> ApiResult<(api::Claim, bool)> + Send + 'static,
{
    let answer = move |(claim, new): &(api::Claim, bool)| {
        let status = if *new {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Answer::indexed(status, (claim.index, began), claim)
    };
    let ((claim, _), answer) = match once.write(app, body, write, answer).await? {
        Outcome::Done(t, answer) => (t, answer),
        // A repeat is answered at once with the first answer as it was committed; its
        // index is where to follow the claim from.
        Outcome::Replayed(r) => return Ok(r),
    };
    // A claim on its way to ready is held; one that got where it goes (ready, failed,
    // blocked, releasing) is answered at once.
    // A claim in a pool's line has no volume to follow yet: its client follows the line.
    let on_its_way = !claim.volume.is_empty()
        && matches!(
            claim.state,
            ClaimState::Queued
                | ClaimState::Pending
                | ClaimState::Attaching
                | ClaimState::Publishing
        );
    if let Some(wait) = hold
        && on_its_way
    {
        // Gone before the answer (failed and cleaned up): the committed claim is the
        // answer, and a blocking query from its index finds it gone at once.
        return Ok(match hold_claim(app, &claim, began, wait).await? {
            (Some(now), index) => with_index(answer.status, (index, app.db.hub.generation()), now),
            (None, _) => answer.into_response(),
        });
    }
    Ok(answer.into_response())
}

/// `POST /v1/fresh-claims`: a per-job volume made and claimed in one transaction (or,
/// with `dry_run`, whether it can be), in the namespace the request names (`?namespace=`,
/// read by the namespaces' layer), copied from what lives there. Answered like a claim:
/// 201 with the new claim, 200 with the claim a retried request already made.
pub(super) async fn post_fresh_claim(
    State(app): State<App>,
    headers: HeaderMap,
    axum::Extension(asked): axum::Extension<super::namespaces::Asked>,
    once: Once,
    Body(req): Body<api::FreshClaimRequest>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    let namespace = asked.one()?.to_owned();
    let limits = app.limits.clone();
    let who = Who::of(caller);
    let began = app.db.hub.generation();
    api::check_claim_labels(&req.claim.labels, &limits.text).map_err(ApiError::text)?;
    let capacity = Arc::clone(&app.capacity);
    if req.claim.dry_run {
        let now = app.clock.now_ms();
        let node = req.claim.node.clone();
        let fit = move |name: &str, spec| capacity.fit(name, spec, now, Some(&node));
        let answer = app
            .db
            .read(move |c| lifecycle::fresh_dry_run(c, &namespace, &req, &fit))
            .await?;
        return Ok(Json(answer).into_response());
    }
    let sent_at = once.sent_at();
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        let now = ctx.now;
        let fit = |name: &str, spec| capacity.fit(name, spec, now, Some(&req.claim.node));
        let who = who.claimant();
        lifecycle::create_fresh_claim(ctx, &namespace, &req, &who, &limits, sent_at, &fit)
    };
    answer_claim(&app, &once, &body, None, began, write).await
}

/// `?wait=` holds the answer as for any claim write; `?keep_ms=` keeps a failed job's
/// per-job volume that long after the release; `?succeeded=true` says the job that held
/// the claim succeeded, so that a claim made from a pool records its cache key as the
/// member's.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseQuery {
    wait: Option<String>,
    keep_ms: Option<u64>,
    #[serde(default)]
    succeeded: bool,
}

pub(super) async fn delete_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((volume, alloc)): Path<(String, String)>,
    Q(query): Q<ReleaseQuery>,
    once: Once,
) -> ApiResult<Response> {
    let who = Who::of(app.caller(&headers)?);
    name("volume", &volume)?;
    name("alloc", &alloc)?;
    let hold = Hold::of(query.wait).wait()?;
    let keep_ms = query.keep_ms;
    let succeeded = query.succeeded;
    let began = app.db.hub.generation();
    let write = move |ctx: &mut WriteCtx<'_>| {
        let released = lifecycle::release_claim(ctx, &volume, &alloc, &who.claimant())?;
        if released.is_ok() {
            lifecycle::released_from_pool(ctx, &volume, &alloc, succeeded)?;
        }
        // Recorded with the release itself, so that the volume is never deleted between.
        if let (Some(ms), Ok(_)) = (keep_ms, &released) {
            lifecycle::keep_after_release(ctx, &volume, &alloc, ms)?;
        }
        Ok(released)
    };
    // An alloc that holds no claim is refused with the tombstone its release left.
    let answer = move |released: &Result<api::Claim, ApiError>| match released {
        Ok(claim) => Answer::indexed(StatusCode::ACCEPTED, (claim.index, began), claim),
        Err(e) => Answer::refused(e),
    };
    let claim = match once.write(&app, &(), write, answer).await? {
        Outcome::Done(released, _) => released?,
        Outcome::Replayed(r) => return Ok(r),
    };
    if let Some(wait) = hold
        && claim.state == ClaimState::Releasing
    {
        // 204 once the claim is gone; 202 with the claim while it is still there.
        return Ok(match hold_claim(&app, &claim, began, wait).await? {
            (Some(now), index) => {
                with_index(StatusCode::ACCEPTED, (index, app.db.hub.generation()), now)
            }
            (None, index) => {
                let mut r = StatusCode::NO_CONTENT.into_response();
                cursor_headers(&mut r, index, app.db.hub.generation());
                r
            }
        });
    }
    Ok(with_index(
        StatusCode::ACCEPTED,
        (claim.index, began),
        claim,
    ))
}

pub(super) async fn renew_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((volume, alloc)): Path<(String, String)>,
    once: Once,
    Body(req): Body<api::RenewRequest>,
) -> ApiResult<Response> {
    let who = Who::of(app.caller(&headers)?);
    name("volume", &volume)?;
    name("alloc", &alloc)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::renew_lease(ctx, &volume, &alloc, req.ttl_ms, &who.claimant())
    };
    let began = app.db.hub.generation();
    let answer =
        move |claim: &api::Claim| Answer::indexed(StatusCode::OK, (claim.index, began), claim);
    once.respond(&app, &body, write, answer).await
}

pub(super) async fn get_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((volume, alloc)): Path<(String, String)>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    name("volume", &volume)?;
    name("alloc", &alloc)?;
    let key = Key::Volume(volume.clone());
    let at = follow(&app, &headers, &key, &b).await?;
    // One claim, or one volume's claims when it is gone: a small read, on this thread.
    let claim = app
        .db
        .read_small(|c| match c.claim(&volume, &alloc)? {
            Some(row) => c.claim_to_api(&row),
            None => Err(lifecycle::no_claim(c, &volume, &alloc)?),
        })
        .await?;
    let mut claim = [claim];
    app.usage.fill(&mut claim);
    let [claim] = claim;
    Ok(with_index(StatusCode::OK, at, claim))
}

/// `GET /v1/claims?volume=&node=&state=&label=k=v&older_than_ms=`; `label` repeatable.
pub(super) async fn list_claims(
    State(app): State<App>,
    headers: HeaderMap,
    axum::Extension(asked): axum::Extension<super::namespaces::Asked>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    let mut filter = views::ClaimFilter::from_query(&pairs)?;
    filter.namespace = asked.namespace;
    // A token narrowed to volume patterns lists only the claims of the volumes they match.
    let scope = app.caller(&headers)?.scope;
    filter.names = scope.volumes;
    filter.namespaces = scope.namespaces;
    listing::claims(&app, filter).await
}

/// The caller of a claim write, owned so that the write can move it to the writer.
pub(super) struct Who {
    actor: String,
    token: String,
    any_claim: bool,
}

impl Who {
    pub(super) fn of(caller: Caller) -> Self {
        Self {
            actor: caller.actor(),
            any_claim: caller.has(api::Capability::ReleaseAny),
            token: caller.token_id,
        }
    }

    pub(super) fn claimant(&self) -> lifecycle::Claimant<'_> {
        lifecycle::Claimant {
            actor: &self.actor,
            token: &self.token,
            // The claims of a token that may act only on its own (a claimer's) count
            // against this server's `claims_per_claimer`.
            bounded: !self.any_claim,
            // A token with `release-any` (an operator's) may renew and release any claim;
            // others only their own.
            any_claim: self.any_claim,
        }
    }
}
