//! The pool endpoints: list, show, create and delete pools, claim any free member of one,
//! follow, renew and release a claim from one (in the pool's line or on its member), and
//! an operator's labels on a volume, by which pools choose their members.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api as api;

use super::blocking::{Blocking, Hold, follow, with_index};
use super::claims::Who;
use super::extract::{Body, Q, name};
use super::once::{Answer, Once, Outcome, created_or_ok, ok};
use super::waits::waits_for_release;
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle;
use crate::store::sqlite::writer::WriteCtx;
use crate::watch::Key;

/// `GET /v1/pools`: every pool of the namespace asked for (`*`: of every one the token
/// holds), with its members.
pub(super) async fn list_pools(
    State(app): State<App>,
    headers: HeaderMap,
    axum::Extension(asked): axum::Extension<super::namespaces::Asked>,
) -> ApiResult<Json<Vec<api::Pool>>> {
    let scope = app.caller(&headers)?.scope;
    let now = app.clock.now_ms();
    let of = move |ns: &str| {
        asked.namespace.as_deref().is_none_or(|a| a == ns) && scope.covers_namespace(ns)
    };
    Ok(Json(
        app.db
            .read(move |c| lifecycle::pool_views(c, now, &of))
            .await?,
    ))
}

/// `GET /v1/pools/{name}`: one pool, its members, who holds each, their last cache keys
/// and the warm-hit ratio of its last claims.
pub(super) async fn get_pool(
    State(app): State<App>,
    Path(pool): Path<String>,
) -> ApiResult<Json<api::Pool>> {
    name("pool", &pool)?;
    let now = app.clock.now_ms();
    Ok(Json(
        app.db
            .read(move |c| lifecycle::pool_view(c, &pool, now))
            .await?,
    ))
}

/// `PUT /v1/pools/{name}`: makes a pool (201), or finds it made with this spec (200).
pub(super) async fn put_pool(
    State(app): State<App>,
    headers: HeaderMap,
    Path(pool): Path<String>,
    once: Once,
    Body(spec): Body<api::PoolSpec>,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    name("pool", &pool)?;
    let body = spec.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        let made = lifecycle::create_pool(ctx, &pool, &spec, &actor)?;
        let now = ctx.now;
        Ok((lifecycle::pool_view(&*ctx, &pool, now)?, made))
    };
    once.respond(&app, &body, write, created_or_ok).await
}

/// `DELETE /v1/pools/{name}`: forgets a pool; its members stay as they are.
pub(super) async fn delete_pool(
    State(app): State<App>,
    headers: HeaderMap,
    Path(pool): Path<String>,
    once: Once,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("pool", &pool)?;
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::delete_pool(ctx, &pool, &actor, &limits);
    let gone = |_: &()| Answer::empty(StatusCode::NO_CONTENT);
    once.respond(&app, &(), write, gone).await
}

/// `POST /v1/volumes/{name}/labels`: an operator sets and removes a volume's labels;
/// answered with the volume.
pub(super) async fn volume_labels(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<api::VolumeLabelRequest>,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    name("volume", &volume)?;
    let body = req.clone();
    let limits = app.limits.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::set_volume_labels(ctx, &volume, &req, &actor, &limits)?;
        // A new member goes to the claims waiting in its pool's line.
        lifecycle::serve_lines(ctx, &limits)?;
        lifecycle::volume_view(&*ctx, &volume)
    };
    once.respond(&app, &body, write, ok).await
}

/// `POST /v1/pools/{name}/claims`: claims the warmest free member of the pool; answered
/// like a claim on a named volume (and held the same way with `?wait=`), its `pool`
/// saying which pool and why this member.
pub(super) async fn post_pool_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path(pool): Path<String>,
    Q(hold): Q<Hold>,
    once: Once,
    Body(req): Body<api::PoolClaimRequest>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    let limits = app.limits.clone();
    let who = Who::of(caller);
    let hold = hold.wait()?;
    let waits = waits_for_release(&headers)?;
    let began = app.db.hub.generation();
    name("pool", &pool)?;
    api::check_claim_labels(&req.claim.labels, &limits.text).map_err(ApiError::text)?;
    if req.claim.dry_run {
        return Err(
            ApiError::invalid("a dry run of a pool claim is not supported")
                .with_hint("`csivol pool show POOL` shows which members are free"),
        );
    }
    let sent_at = once.sent_at();
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::claim_from_pool(ctx, &pool, &req, &who.claimant(), &limits, waits, sent_at)
    };
    super::claims::answer_claim(&app, &once, &body, hold, began, write).await
}

/// `GET /v1/pools/{name}/claims/{alloc}`: the alloc's claim from the pool, waiting in its
/// line (queued, no volume yet) or on the member it got; a blocking query on the line.
pub(super) async fn get_pool_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((pool, alloc)): Path<(String, String)>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    name("pool", &pool)?;
    name("alloc", &alloc)?;
    let at = follow(&app, &headers, &Key::Pool(pool.clone()), &b).await?;
    let index = at.0;
    let claim = app
        .db
        .read_small(move |c| lifecycle::pool_claim(c, &pool, &alloc, index))
        .await?;
    Ok(with_index(StatusCode::OK, at, claim))
}

/// `?succeeded=true`: the job that held the member succeeded (its key becomes the member's).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PoolRelease {
    #[serde(default)]
    succeeded: bool,
}

/// `DELETE /v1/pools/{name}/claims/{alloc}`: a claim still in the pool's line leaves it
/// (204); one granted a member is released as a claim on that member is (202).
pub(super) async fn delete_pool_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((pool, alloc)): Path<(String, String)>,
    Q(query): Q<PoolRelease>,
    once: Once,
) -> ApiResult<Response> {
    let who = Who::of(app.caller(&headers)?);
    name("pool", &pool)?;
    name("alloc", &alloc)?;
    let began = app.db.hub.generation();
    let limits = app.limits.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        if lifecycle::leave_line(ctx, &pool, &alloc, &who.claimant(), &limits)? {
            return Ok(Ok(None));
        }
        let volume = match lifecycle::pool_claim(&*ctx, &pool, &alloc, 0) {
            Ok(c) => api::volume_key(&c.namespace, &c.volume),
            Err(e) if e.code() == api::ErrorCode::NotFound => return Ok(Err(e)),
            Err(e) => return Err(e),
        };
        let released = lifecycle::release_claim(ctx, &volume, &alloc, &who.claimant())?;
        if released.is_ok() {
            lifecycle::released_from_pool(ctx, &volume, &alloc, query.succeeded)?;
        }
        Ok(released.map(Some))
    };
    let answer = move |r: &Result<Option<api::Claim>, ApiError>| match r {
        Ok(None) => Answer::empty(StatusCode::NO_CONTENT),
        Ok(Some(c)) => Answer::indexed(StatusCode::ACCEPTED, (c.index, began), c),
        Err(e) => Answer::refused(e),
    };
    match once.write(&app, &(), write, answer).await? {
        Outcome::Done(Err(e), _) => Err(e),
        Outcome::Done(Ok(_), answer) => Ok(answer.into_response()),
        Outcome::Replayed(r) => Ok(r),
    }
}

/// `POST /v1/pools/{name}/claims/{alloc}/renew`: renews the lease of the alloc's claim from
/// the pool, in its line or on its member.
pub(super) async fn renew_pool_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((pool, alloc)): Path<(String, String)>,
    once: Once,
    Body(req): Body<api::RenewRequest>,
) -> ApiResult<Response> {
    let who = Who::of(app.caller(&headers)?);
    name("pool", &pool)?;
    name("alloc", &alloc)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        let who = who.claimant();
        if let Some(c) = lifecycle::renew_in_line(ctx, &pool, &alloc, req.ttl_ms, &who)? {
            return Ok(c);
        }
        let c = lifecycle::pool_claim(&*ctx, &pool, &alloc, 0)?;
        let volume = api::volume_key(&c.namespace, &c.volume);
        lifecycle::renew_lease(ctx, &volume, &alloc, req.ttl_ms, &who)
    };
    let began = app.db.hub.generation();
    let answer =
        move |claim: &api::Claim| Answer::indexed(StatusCode::OK, (claim.index, began), claim);
    once.respond(&app, &body, write, answer).await
}
