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

pub(super) async fn list_plugins(State(app): State<App>) -> ApiResult<Json<Vec<api::Plugin>>> {
    let (limits, now) = (app.limits.clone(), app.clock.now_ms());
    let mut plugins = app
        .db
        .read(move |c| views::list_plugins(c, None, &limits, now))
        .await?;
    for p in &mut plugins {
        with_capacity(&app, p, now);
    }
    Ok(Json(plugins))
}

/// The plugin's capacity samples, from this server's memory.
fn with_capacity(app: &App, p: &mut api::Plugin, now: i64) {
    if p.capacity.reported {
        p.capacity.samples = app.capacity.shown(&p.id, now);
    }
}

pub(super) async fn get_plugin(
    State(app): State<App>,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Plugin>> {
    name("plugin", &id)?;
    let (limits, now) = (app.limits.clone(), app.clock.now_ms());
    let mut p = app
        .db
        .read(move |c| {
            let found = views::list_plugins(c, Some(&id), &limits, now)?;
            match found.into_iter().next() {
                Some(p) => Ok(p),
                None => Err(lifecycle::unknown_plugin(&id, &c.plugin_ids()?)),
            }
        })
        .await?;
    with_capacity(&app, &mut p, now);
    p.calls = app.calls.of_plugin(&p.id);
    Ok(Json(p))
}

/// `GET /v1/plugins/{id}/controllers`.
pub(super) async fn get_controller_hosts(
    State(app): State<App>,
    Path(plugin): Path<String>,
) -> ApiResult<Json<api::ControllerHosts>> {
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
    let (actor, _) = app.acting(&headers)?;
    api::FreeText::check_text(&req).map_err(ApiError::text)?;
    let body = req.clone();
    // The hosts as the change left them, read in its own transaction.
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::change_controller_hosts(ctx, &actor, &plugin, &req.allow, &req.disallow)?;
        views::controller_hosts(ctx, &plugin)
    };
    once.respond(&app, &body, write, ok).await
}

/// `GET /v1/plugins/{id}/volumes`: the plugin's last ListVolumes beside csivol's records.
pub(super) async fn plugin_volumes(
    State(app): State<App>,
    Path(id): Path<String>,
) -> ApiResult<Json<api::PluginVolumes>> {
    name("plugin", &id)?;
    let now = app.clock.now_ms();
    let listing = app.inventory.listing(&id);
    let plugin = id.clone();
    app.db
        .read(move |c| {
            let Some(caps) = c.controller_capabilities(&id)? else {
                if c.plugin_ids()?.contains(&id) {
                    return Ok(Json(api::PluginVolumes {
                        plugin,
                        ..Default::default()
                    }));
                }
                return Err(lifecycle::unknown_plugin(&id, &c.plugin_ids()?));
            };
            let mut out = api::PluginVolumes {
                plugin,
                lists_volumes: caps.list_volumes,
                published_nodes: caps.list_volumes_published_nodes,
                condition: caps.volume_condition,
                age_ms: None,
                volumes: Vec::new(),
            };
            if let Some(l) = listing {
                out.age_ms = Some(u64::try_from(now - l.at_ms).unwrap_or(0));
                for listed in l.volumes {
                    let volume = c
                        .volumes_with_external_id(&id, &listed.external_id)?
                        .into_iter()
                        .next();
                    out.volumes.push(api::StorageVolume { listed, volume });
                }
            }
            Ok(Json(out))
        })
        .await
}

/// `GET /v1/plugins/{id}/snapshots`: the plugin's last ListSnapshots beside csivol's
/// snapshot records.
pub(super) async fn plugin_snapshots(
    State(app): State<App>,
    Path(id): Path<String>,
) -> ApiResult<Json<api::PluginSnapshots>> {
    name("plugin", &id)?;
    let now = app.clock.now_ms();
    let listing = app.inventory.snapshot_listing(&id);
    let plugin = id.clone();
    app.db
        .read(move |c| {
            let Some(caps) = c.controller_capabilities(&id)? else {
                if c.plugin_ids()?.contains(&id) {
                    return Ok(Json(api::PluginSnapshots {
                        plugin,
                        ..Default::default()
                    }));
                }
                return Err(lifecycle::unknown_plugin(&id, &c.plugin_ids()?));
            };
            let mut out = api::PluginSnapshots {
                plugin,
                lists_snapshots: caps.list_snapshots,
                age_ms: None,
                snapshots: Vec::new(),
            };
            if let Some(l) = listing {
                out.age_ms = Some(u64::try_from(now - l.at_ms).unwrap_or(0));
                let records: std::collections::HashMap<String, String> = c
                    .snapshots(None)?
                    .into_iter()
                    .filter(|s| s.plugin == id && !s.snapshot_id.is_empty())
                    .map(|s| (s.snapshot_id, s.name))
                    .collect();
                for listed in l.snapshots {
                    let volume = if listed.source_volume_id.is_empty() {
                        None
                    } else {
                        c.volumes_with_external_id(&id, &listed.source_volume_id)?
                            .into_iter()
                            .next()
                    };
                    out.snapshots.push(api::StorageSnapshot {
                        snapshot: records.get(&listed.snapshot_id).cloned(),
                        volume,
                        listed,
                    });
                }
            }
            Ok(Json(out))
        })
        .await
}

/// `GET /v1/controller-findings`: what controller-side reconciliation found and a second
/// listing confirmed (leaked and missing attachments, abnormal volumes).
pub(super) async fn controller_findings(
    State(app): State<App>,
) -> ApiResult<Json<Vec<api::ControllerFinding>>> {
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
