//! The snapshot endpoints: `PUT/GET/DELETE /v1/snapshots/{name}`, `GET /v1/snapshots`,
//! and the group snapshots' alike under `/v1/group-snapshots`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api as api;
use serde::Deserialize;

use super::blocking::{Blocking, follow, with_index};
use super::extract::{Body, Q, name};
use super::listing;
use super::once::{Once, accepted_or_gone, accepted_or_ok};
use super::waits::waits_for_release;
use crate::app::App;
use crate::error::ApiResult;
use crate::store::sqlite::writer::WriteCtx;
use crate::watch::Key;
use crate::{lifecycle, views};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SnapshotFilter {
    volume: Option<String>,
    /// Only the members of this group snapshot.
    group: Option<String>,
}

/// Every snapshot (of a volume) streamed a page at a time (`listing`); a group's members
/// (as many as its volumes) in one read.
pub(super) async fn list_snapshots(
    State(app): State<App>,
    headers: HeaderMap,
    axum::Extension(asked): axum::Extension<super::namespaces::Asked>,
    Q(f): Q<SnapshotFilter>,
) -> ApiResult<Response> {
    // A token narrowed to volume patterns lists only the snapshots whose own names and
    // whose volumes' names they match; of the namespace asked for (or of every one).
    let mut scope = app.caller(&headers)?.scope;
    if let Some(ns) = &asked.namespace {
        scope.namespaces = vec![ns.clone()];
    }
    if let Some(v) = &f.volume {
        name("volume", v)?;
    }
    if let Some(g) = &f.group {
        name("group snapshot", g)?;
    }
    let Some(group) = f.group else {
        return listing::snapshots(&app, f.volume, scope).await;
    };
    let mut members = app
        .db
        .read(move |c| lifecycle::list_group_members(c, &group, f.volume.as_deref()))
        .await?;
    members.retain(|s| views::snapshot_in_scope(&scope, s));
    Ok(Json(members).into_response())
}

pub(super) async fn get_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    name("snapshot", &snapshot)?;
    let key = Key::Snapshot(snapshot.clone());
    let index = follow(&app, &headers, &key, &b).await?;
    let caller = app.caller(&headers)?;
    let s = app
        .db
        .read(move |c| lifecycle::snapshot_view(c, &snapshot))
        .await?;
    // The route checked the snapshot's own name against a narrowed token's patterns;
    // its volume's must match too.
    caller.require_touches(
        "the snapshot's volume",
        &api::volume_key(&s.namespace, &s.volume),
    )?;
    Ok(with_index(StatusCode::OK, index, s))
}

pub(super) async fn put_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
    once: Once,
    Body(mut req): Body<api::SnapshotRequest>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    // The body names a volume of the snapshot's namespace, by its name there.
    api::validate_name("volume", &req.volume).map_err(crate::error::ApiError::invalid)?;
    req.volume = api::volume_key(api::namespace_of(&snapshot), &req.volume);
    // The route checked the snapshot's name; the volume it is taken of must match too.
    caller.require_touches("volume", &req.volume)?;
    let (actor, limits) = (caller.actor(), app.limits.clone());
    let waits = waits_for_release(&headers)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::create_snapshot(ctx, &snapshot, req.clone(), &actor, &limits, waits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

/// `POST /v1/snapshots/{name}/adopt`: registers a snapshot the plugin's storage holds,
/// once a controller host found it with ListSnapshots.
pub(super) async fn adopt_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
    once: Once,
    Body(req): Body<api::SnapshotAdoptRequest>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    // Which volume the snapshot is of is known only once the plugin's listing finds it,
    // so a token narrowed to volume names cannot adopt one; a token narrowed to
    // namespaces adopts it into one it holds (the layer checked the namespace).
    caller.require_no_volume_patterns(
        "a snapshot adopted is of a volume known only once its plugin lists it",
    )?;
    let (actor, limits) = (caller.actor(), app.limits.clone());
    name("snapshot", &snapshot)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::adopt_snapshot(ctx, &snapshot, req.clone(), &actor, &limits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

pub(super) async fn delete_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
    once: Once,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    name("snapshot", &snapshot)?;
    if caller.scope.narrowed() {
        // The route checked the snapshot's name; its volume's must match too (a snapshot
        // already gone is answered as gone by the write).
        let of = snapshot.clone();
        // Only a snapshot not found passes: any other failure to read it must not let a
        // narrowed token through unchecked.
        match app.db.read(move |c| lifecycle::snapshot_view(c, &of)).await {
            Ok(s) => caller.require_touches(
                "the snapshot's volume",
                &api::volume_key(&s.namespace, &s.volume),
            )?,
            Err(e) if e.code() == api::ErrorCode::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let (actor, limits) = (caller.actor(), app.limits.clone());
    let write =
        move |ctx: &mut WriteCtx<'_>| lifecycle::delete_snapshot(ctx, &snapshot, &actor, &limits);
    once.respond(&app, &(), write, accepted_or_gone).await
}

/// `GET /v1/group-snapshots`: the groups of the namespace asked for (or of every one).
pub(super) async fn list_group_snapshots(
    State(app): State<App>,
    axum::Extension(asked): axum::Extension<super::namespaces::Asked>,
) -> ApiResult<Json<Vec<api::GroupSnapshot>>> {
    let mut groups = app.db.read(lifecycle::list_group_snapshots).await?;
    groups.retain(|g| asked.namespace.as_ref().is_none_or(|ns| *ns == g.namespace));
    Ok(Json(groups))
}

pub(super) async fn get_group_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(group): Path<String>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    name("group snapshot", &group)?;
    // Groups and snapshots share names, and so the key that wakes their followers.
    let key = Key::Snapshot(group.clone());
    let index = follow(&app, &headers, &key, &b).await?;
    let g = app
        .db
        .read(move |c| lifecycle::group_snapshot_view(c, &group))
        .await?;
    Ok(with_index(StatusCode::OK, index, g))
}

pub(super) async fn put_group_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(group): Path<String>,
    once: Once,
    Body(mut req): Body<api::GroupSnapshotRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    // The body names volumes of the group's namespace, by their names there.
    for v in &mut req.volumes {
        api::validate_name("volume", v).map_err(crate::error::ApiError::invalid)?;
        *v = api::volume_key(api::namespace_of(&group), v);
    }
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::create_group_snapshot(ctx, &group, req.clone(), &actor, &limits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

pub(super) async fn delete_group_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(group): Path<String>,
    once: Once,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("group snapshot", &group)?;
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::delete_group_snapshot(ctx, &group, &actor, &limits)
    };
    once.respond(&app, &(), write, accepted_or_gone).await
}
