//! The pool endpoints: list, show, create and delete pools, claim any free member of one,
//! and an operator's labels on a volume, by which pools choose their members.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use csivol_api as api;

use super::blocking::Hold;
use super::claims::Who;
use super::extract::{Body, Q, name};
use super::once::{Answer, Once, created_or_ok, ok};
use super::waits::waits_for_release;
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle;
use crate::store::sqlite::writer::WriteCtx;

/// `GET /v1/pools`: every pool with its members.
pub(super) async fn list_pools(State(app): State<App>) -> ApiResult<Json<Vec<api::Pool>>> {
    Ok(Json(app.db.read(lifecycle::pool_views).await?))
}

/// `GET /v1/pools/{name}`: one pool, its members, who holds each, their last cache keys
/// and the warm-hit ratio of its last claims.
pub(super) async fn get_pool(
    State(app): State<App>,
    Path(pool): Path<String>,
) -> ApiResult<Json<api::Pool>> {
    name("pool", &pool)?;
    Ok(Json(
        app.db.read(move |c| lifecycle::pool_view(c, &pool)).await?,
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
        Ok((lifecycle::pool_view(&*ctx, &pool)?, made))
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
    let (actor, _) = app.acting(&headers)?;
    name("pool", &pool)?;
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::delete_pool(ctx, &pool, &actor);
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
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::set_volume_labels(ctx, &volume, &req, &actor)?;
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
