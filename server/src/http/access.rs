//! The API's access endpoints: tokens (create, list, revoke), who may host a plugin's
//! controller, and the mutual-TLS check that a node token comes with its node's
//! certificate.

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, Role, TokenInfo, TokenRequest};

use super::once::{Answer, Once, Outcome};
use super::{Body, name, ok};
use crate::app::App;
use crate::auth::{self, Caller};
use crate::error::{ApiError, ApiResult};
use crate::lifecycle;
use crate::store::sqlite::writer::WriteCtx;
use crate::views;

/// Mutual TLS: a node token presented over a connection with a client certificate is
/// accepted only when the certificate names the token's node (a DNS name in its subject
/// alternative names), so a stolen token is useless without that node's key.
pub(super) async fn client_cert_names_the_node(
    State(app): State<App>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(super::listen::PeerCert(cert)) = req.extensions().get()
        && let Ok(caller) = app.caller(req.headers())
        && let (Role::Node, Some(node)) = (caller.role, caller.node.as_deref())
        && !cert_names(cert, node)
    {
        return ApiError::forbidden(format!(
            "the client certificate is not for node `{node}`, the node this token acts for"
        ))
        .with_hint(format!(
            "give the agent node {node}'s certificate (csivol-server tls init --node {node})"
        ))
        .into_response();
    }
    next.run(req).await
}

fn cert_names(cert: &rustls::pki_types::CertificateDer<'_>, node: &str) -> bool {
    let Ok(name) = rustls::pki_types::ServerName::try_from(node) else {
        return false;
    };
    webpki::EndEntityCert::try_from(cert)
        .is_ok_and(|c| c.verify_is_valid_for_subject_name(&name).is_ok())
}

pub(super) async fn create_token(
    State(app): State<App>,
    headers: HeaderMap,
    Body(req): Body<TokenRequest>,
) -> ApiResult<Response> {
    let (actor, _) = app.operator(&headers)?;
    let (resp, expires_at) = app
        .db
        .write(move |ctx| {
            let t = lifecycle::NewToken {
                role: req.role,
                node: req.node.clone(),
                name: req.name.clone(),
                ttl_ms: req.ttl_ms,
                controllers: req.controllers.clone(),
            };
            lifecycle::create_token(ctx, t, &actor)
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
        },
        expires_at,
    );
    Ok((StatusCode::CREATED, Json(resp)).into_response())
}

/// `GET /v1/plugins/{id}/controllers`.
pub(super) async fn get_controller_hosts(
    State(app): State<App>,
    headers: HeaderMap,
    Path(plugin): Path<String>,
) -> ApiResult<Json<api::ControllerHosts>> {
    app.caller(&headers)?.require_reader()?;
    name("plugin", &plugin)?;
    Ok(Json(
        app.db
            .read(move |c| views::controller_hosts(c, &plugin))
            .await?,
    ))
}

/// `POST /v1/plugins/{id}/controllers`: operators allow or disallow controller hosts.
pub(super) async fn change_controller_hosts(
    State(app): State<App>,
    headers: HeaderMap,
    Path(plugin): Path<String>,
    once: Once,
    Body(req): Body<api::ControllerHostsChange>,
) -> ApiResult<Response> {
    let (actor, _) = app.operator(&headers)?;
    let body = req.clone();
    // The hosts as the change left them, read in its own transaction.
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::change_controller_hosts(ctx, &actor, &plugin, &req.allow, &req.disallow)?;
        views::controller_hosts(ctx, &plugin)
    };
    once.respond(&app, &body, write, ok).await
}

/// `GET /v1/tokens`: operators only (a token list tells who may do what).
pub(super) async fn list_tokens(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<TokenInfo>>> {
    app.operator(&headers)?;
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
    let (actor, _) = app.operator(&headers)?;
    let revoked_id = id.clone();
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::revoke_token(ctx, &id, &actor);
    let revoked = |_: &i64| Answer::empty(StatusCode::NO_CONTENT);
    match once.write(&app, &(), write, revoked).await? {
        Outcome::Done(at, answer) => {
            app.tokens.revoke(&revoked_id, at);
            Ok(answer.into_response())
        }
        Outcome::Replayed(r) => Ok(r),
    }
}
