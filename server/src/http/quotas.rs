//! `PUT /v1/namespaces/{name}/quota`: a namespace's quota, set by a token of the whole
//! cluster (a team's own token never raises its own bound).

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use csivol_api as api;

use super::once::{Answer, Once};
use crate::app::App;
use crate::error::ApiResult;
use crate::lifecycle;
use crate::store::sqlite::writer::WriteCtx;

/// Sets the namespace's quota (replacing the one it had; `{}` removes it); answers the
/// namespace with what it uses against it.
pub(super) async fn put_quota(
    State(app): State<App>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    once: Once,
    super::extract::Body(quota): super::extract::Body<api::Quota>,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    let sent = quota.clone();
    let write =
        move |ctx: &mut WriteCtx<'_>| lifecycle::set_namespace_quota(ctx, &ns, &quota, &actor);
    let answer = |n: &api::Namespace| Answer::json(StatusCode::OK, n);
    once.respond(&app, &sent, write, answer).await
}
