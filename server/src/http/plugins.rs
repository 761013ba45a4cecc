//! The plugin endpoints: the plugins the nodes registered (`GET /v1/plugins`, `GET
//! /v1/plugins/{id}`), who may host a plugin's controller (`/v1/plugins/{id}/controllers`),
//! and what controller-side reconciliation found (`GET /v1/controller-findings`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use csivol_api as api;

use super::extract::{Body, name};
use super::once::{Once, ok};
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::Snapshot;
use crate::store::sqlite::writer::WriteCtx;
use crate::{lifecycle, views};

pub(super) async fn list_plugins(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<api::Plugin>>> {
    app.caller(&headers)?.require_reader()?;
    let (limits, now) = (app.limits.clone(), app.clock.now_ms());
    Ok(Json(
        app.db
            .read(move |c| views::list_plugins(c, None, &limits, now))
            .await?,
    ))
}

pub(super) async fn get_plugin(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Plugin>> {
    app.caller(&headers)?.require_reader()?;
    name("plugin", &id)?;
    let (limits, now) = (app.limits.clone(), app.clock.now_ms());
    let mut plugin = app
        .db
        .read(move |c| {
            let found = views::list_plugins(c, Some(&id), &limits, now)?;
            match found.into_iter().next() {
                Some(p) => Ok(p),
                None => Err(lifecycle::unknown_plugin(&id, &c.plugin_ids()?)),
            }
        })
        .await?;
    plugin.calls = app.calls.of_plugin(&plugin.id);
    Ok(Json(plugin))
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
    api::FreeText::check_text(&req).map_err(ApiError::text)?;
    let body = req.clone();
    // The hosts as the change left them, read in its own transaction.
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::change_controller_hosts(ctx, &actor, &plugin, &req.allow, &req.disallow)?;
        views::controller_hosts(ctx, &plugin)
    };
    once.respond(&app, &body, write, ok).await
}

/// `GET /v1/controller-findings`: what controller-side reconciliation found and a second
/// listing confirmed (leaked and missing attachments, abnormal volumes).
pub(super) async fn controller_findings(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<api::ControllerFinding>>> {
    app.caller(&headers)?.require_reader()?;
    let found = app
        .db
        .read(|c| {
            use crate::store::Snapshot;
            c.controller_findings(None)
        })
        .await?;
    Ok(Json(
        found
            .into_iter()
            .filter(|(_, k)| k.confirmed)
            .map(|(plugin, k)| api::ControllerFinding {
                plugin,
                kind: k.found.kind,
                volume: k.found.volume,
                external_id: k.found.external_id,
                node: k.found.node,
                node_id: k.found.node_id,
                message: k.found.message,
                since: crate::model::time(k.since),
            })
            .collect(),
    ))
}
