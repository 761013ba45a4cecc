//! The token endpoints: `POST /v1/tokens`, `GET /v1/tokens`, `DELETE /v1/tokens/{id}`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, TokenInfo, TokenRequest, TokenScope};

use super::extract::Body;
use super::once::{Answer, Once, Outcome};
use crate::app::App;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::writer::WriteCtx;
use crate::{auth, lifecycle};

pub(super) async fn create_token(
    State(app): State<App>,
    headers: HeaderMap,
    Body(req): Body<TokenRequest>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    let (actor, own) = (caller.actor(), caller.scope);
    api::FreeText::check_text(&req).map_err(ApiError::text)?;
    let (resp, expires_at) = app
        .db
        .write(move |ctx| {
            let t = lifecycle::NewToken {
                role: req.role,
                node: req.node.clone(),
                name: req.name.clone(),
                ttl_ms: req.ttl_ms,
                controllers: req.controllers.clone(),
                capabilities: req.capabilities.clone(),
                volumes: req.volumes.clone(),
                namespaces: req.namespaces.clone(),
            };
            lifecycle::create_token(ctx, t, &actor, &own)
        })
        .await?;
    app.tokens.remember(
        &resp.token,
        Caller {
            token_id: resp.id.clone(),
            role: resp.role,
            node: resp.node.clone(),
            name: resp.name.clone(),
            controllers: resp.controllers.clone(),
            scope: TokenScope {
                capabilities: resp.capabilities.iter().copied().collect(),
                volumes: resp.volumes.clone(),
                namespaces: resp.namespaces.clone(),
            },
        },
        expires_at,
    );
    Ok((StatusCode::CREATED, Json(resp)).into_response())
}

/// `GET /v1/tokens`: operators only (a token list tells who may do what).
pub(super) async fn list_tokens(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<TokenInfo>>> {
    app.acting(&headers)?;
    app.tokens.persist_last_used(&app.db).await?;
    let now = app.clock.now_ms();
    Ok(Json(app.db.read(move |c| auth::list_tokens(c, now)).await?))
}

/// `DELETE /v1/tokens/{id}`: revokes a token; requests with it get 401 from then on.
pub(super) async fn revoke_token(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
    once: Once,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    let (actor, own) = (caller.actor(), caller.scope);
    let revoked_id = id.clone();
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::revoke_token(ctx, &id, &actor, &own);
    let revoked = |_: &i64| Answer::empty(StatusCode::NO_CONTENT);
    match once.write(&app, &(), write, revoked).await? {
        Outcome::Done(at, answer) => {
            app.tokens.revoke(&revoked_id, at);
            Ok(answer.into_response())
        }
        Outcome::Replayed(r) => Ok(r),
    }
}
