//! The volume endpoints: register, list, show, create, expand, modify, deregister, and the
//! operators' unblock and detach of a volume.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api::{
    self as api, CreateVolumeSpec, DetachRequest, UnblockRequest, VolumeSpec, VolumeState,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::blocking::{Blocking, follow, with_index};
use super::extract::{Body, Q, name};
use super::listing;
use super::namespaces::Asked;
use super::once::{Once, accepted_or_gone, accepted_or_ok, created_or_ok, ok};
use super::waits::waits_for_release;
use crate::app::App;
use crate::capacity::Capacity;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle::Limits;
use crate::store::sqlite::writer::WriteCtx;
use crate::watch::Key;
use crate::{lifecycle, views};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct VolumeFilter {
    state: Option<String>,
    node: Option<String>,
    plugin: Option<String>,
    /// One page of at most this many volumes; the next page starts `after` the last one's
    /// name, and a page shorter than `limit` is the last.
    limit: Option<u64>,
    after: Option<String>,
}

/// The largest page of `GET /v1/volumes?limit=`.
const MAX_PAGE: usize = 10_000;

/// `GET /v1/volumes`: one page (`?limit=&after=`), or every volume streamed as one JSON
/// array from one read transaction, a chunk of volumes at a time, so that memory stays
/// flat whatever the inventory.
pub(super) async fn list_volumes(
    State(app): State<App>,
    headers: HeaderMap,
    axum::Extension(asked): axum::Extension<Asked>,
    Q(f): Q<VolumeFilter>,
) -> ApiResult<Response> {
    // A token narrowed to volume patterns lists only the volumes they match.
    let scope = app.caller(&headers)?.scope;
    let state = match &f.state {
        Some(s) => Some(s.parse::<VolumeState>().map_err(|_| {
            let all: Vec<_> = VolumeState::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!("invalid state filter `{s}`"))
                .with_hint(format!("use one of: {}", all.join(", ")))
        })?),
        None => None,
    };
    let filter = views::VolumeFilter {
        state,
        node: f.node,
        plugin: f.plugin,
        names: scope.volumes,
        namespaces: scope.namespaces,
        namespace: asked.namespace.clone(),
    };
    if let Some(limit) = f.limit {
        let limit = api::limits::count("limit", limit, 1, MAX_PAGE as u64)
            .map_err(ApiError::out_of_range)?;
        // A page of one namespace starts after its volume's key.
        let after = match &asked.namespace {
            Some(ns) => f.after.map(|a| api::volume_key(ns, &a)),
            None => f.after,
        };
        let usage = Arc::clone(&app.usage);
        let page = app
            .db
            .read(move |c| views::list_volumes(c, &filter, after.as_deref(), limit, &usage))
            .await?;
        return Ok((
            [(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            page,
        )
            .into_response());
    }
    if f.after.is_some() {
        return Err(ApiError::bad_request("`after` needs `limit`")
            .with_hint("page with ?limit=1000&after=NAME, NAME the last volume of a page"));
    }
    listing::volumes(&app, filter).await
}

pub(super) async fn get_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    name("volume", &volume)?;
    let key = Key::Volume(volume.clone());
    let at = follow(&app, &headers, &key, &b).await?;
    let mut v = app
        .db
        .read_small(|c| lifecycle::volume_view(c, &volume))
        .await?;
    app.usage.fill(&mut v.claims);
    Ok(with_index(StatusCode::OK, at, v))
}

pub(super) async fn put_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(spec): Body<VolumeSpec>,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    let body = spec.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::register_volume(ctx, &volume, spec.clone(), &actor)
    };
    once.respond(&app, &body, write, created_or_ok).await
}

/// `POST /v1/volumes/{name}/adopt`: registers a volume the plugin's storage holds, checked
/// against the plugin's last listing in the same write as the registration, and then by
/// the plugin itself (ValidateVolumeCapabilities on a controller host) before it is used.
pub(super) async fn adopt_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<api::AdoptRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("volume", &volume)?;
    // Bounded like every list a client sends.
    if req.published_to.len() > api::limits::MAX_NODE_HOLDINGS {
        return Err(ApiError::invalid(format!(
            "`published_to` names {} nodes, at most {} are taken",
            req.published_to.len(),
            api::limits::MAX_NODE_HOLDINGS
        )));
    }
    let body = req.clone();
    let inventory = Arc::clone(&app.inventory);
    let write = move |ctx: &mut WriteCtx<'_>| {
        let listing = inventory.listing(&req.spec.plugin);
        let skip = req.skip_validation;
        let spec = crate::inventory::adoption(ctx, listing, &volume, req.clone())?;
        lifecycle::adopt_volume(ctx, &volume, spec, skip, &actor, &limits)
    };
    // Checked by the plugin first: accepted while ValidateVolumeCapabilities runs.
    let answer = |a: &(api::Volume, bool)| {
        if a.0.state == VolumeState::Creating {
            accepted_or_ok(a)
        } else {
            created_or_ok(a)
        }
    };
    once.respond(&app, &body, write, answer).await
}

/// An operation on a volume that an operator starts with a body, answered 202 when it
/// started and 200 when there was nothing to start: create, expand, modify. Each kind is
/// one impl below; the handler, [`start_operation`], is one for all of them.
pub(super) trait VolumeOperation:
    DeserializeOwned + Serialize + Clone + Send + Sync + 'static
{
    /// Whether it may wait for a release under way (the wait header): one that needs the
    /// volume detached or at rest is held until the release has finished.
    const WAITS_FOR_RELEASE: bool;

    /// The snapshot or volume whose data it reads, which a token narrowed to volume
    /// patterns must match as well: `("snapshot" | "volume", key)`.
    fn source(&self) -> Option<(&'static str, &str)> {
        None
    }

    /// The request with the names its body gives (a source) made keys of `namespace`,
    /// the namespace of the volume it is for: a body names what lives beside that volume.
    fn in_namespace(self, _namespace: &str) -> ApiResult<Self> {
        Ok(self)
    }

    /// Starts it in the write's transaction: the volume, and whether anything started.
    fn start(
        &self,
        ctx: &mut WriteCtx<'_>,
        volume: &str,
        actor: &str,
        limits: &Limits,
        waits: bool,
    ) -> ApiResult<(api::Volume, bool)>;

    /// What the request becomes once the plugin's capacity samples judged it, for a
    /// request that starts something new; `Err` when they say it cannot be done.
    fn fit(&self, _volume: &str, _capacity: &Capacity, _now_ms: i64) -> ApiResult<Self> {
        Ok(self.clone())
    }
}

/// `POST /v1/volumes/{name}/create`.
impl VolumeOperation for CreateVolumeSpec {
    const WAITS_FOR_RELEASE: bool = false;

    fn source(&self) -> Option<(&'static str, &str)> {
        match self.source.as_ref()? {
            api::ContentSource::Snapshot(s) => Some(("snapshot", s)),
            api::ContentSource::Volume(v) => Some(("volume", v)),
        }
    }

    fn in_namespace(mut self, namespace: &str) -> ApiResult<Self> {
        self.source = match self.source {
            Some(api::ContentSource::Snapshot(s)) => {
                api::validate_name("snapshot", &s).map_err(ApiError::invalid)?;
                Some(api::ContentSource::Snapshot(api::volume_key(namespace, &s)))
            }
            Some(api::ContentSource::Volume(v)) => {
                api::validate_name("volume", &v).map_err(ApiError::invalid)?;
                Some(api::ContentSource::Volume(api::volume_key(namespace, &v)))
            }
            None => None,
        };
        Ok(self)
    }

    fn start(
        &self,
        ctx: &mut WriteCtx<'_>,
        volume: &str,
        actor: &str,
        limits: &Limits,
        _: bool,
    ) -> ApiResult<(api::Volume, bool)> {
        lifecycle::create_volume(ctx, volume, self.clone(), actor, limits)
    }

    fn fit(&self, volume: &str, capacity: &Capacity, now_ms: i64) -> ApiResult<Self> {
        capacity.fit(volume, self.clone(), now_ms, None)
    }
}

/// `POST /v1/volumes/{name}/expand`.
impl VolumeOperation for api::ExpandRequest {
    const WAITS_FOR_RELEASE: bool = true;

    fn start(
        &self,
        ctx: &mut WriteCtx<'_>,
        volume: &str,
        actor: &str,
        limits: &Limits,
        waits: bool,
    ) -> ApiResult<(api::Volume, bool)> {
        lifecycle::expand_volume(ctx, volume, self, actor, limits, waits)
    }
}

/// `POST /v1/volumes/{name}/modify`.
impl VolumeOperation for api::ModifyRequest {
    const WAITS_FOR_RELEASE: bool = true;

    fn start(
        &self,
        ctx: &mut WriteCtx<'_>,
        volume: &str,
        actor: &str,
        limits: &Limits,
        waits: bool,
    ) -> ApiResult<(api::Volume, bool)> {
        lifecycle::modify_volume(ctx, volume, self, actor, limits, waits)
    }
}

/// Starts a [`VolumeOperation`]: an operator's token, the wait header where the kind may
/// wait, and the operation started in one write kept for exact retries.
pub(super) async fn start_operation<O: VolumeOperation>(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<O>,
) -> ApiResult<Response> {
    let caller = app.caller(&headers)?;
    let req = req.in_namespace(api::namespace_of(&volume))?;
    if let Some((kind, source)) = req.source() {
        caller.require_touches(kind, source)?;
        if kind == "snapshot" && caller.scope.narrowed() {
            // A snapshot's volume must match as well: its data is that volume's.
            let of = source.to_owned();
            // Only a snapshot not found passes (the write refuses it): any other failure to
            // read it must not let a narrowed token through unchecked.
            match app.db.read(move |c| lifecycle::snapshot_view(c, &of)).await {
                Ok(s) => caller.require_touches(
                    "the snapshot's volume",
                    &api::volume_key(&s.namespace, &s.volume),
                )?,
                Err(e) if e.code() == api::ErrorCode::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    let (actor, limits) = (caller.actor(), app.limits.clone());
    let waits = O::WAITS_FOR_RELEASE && waits_for_release(&headers)?;
    let body = req.clone();
    let capacity = Arc::clone(&app.capacity);
    // Judged in the write, so that a repeat of a request that went through is answered as
    // it was (the volume exists then, and `start` answers for it) rather than refused by
    // samples its own volume lowered.
    let write = move |ctx: &mut WriteCtx<'_>| {
        use crate::store::Snapshot;
        let req = if ctx.volume(&volume)?.is_none() {
            req.fit(&volume, &capacity, ctx.now)?
        } else {
            req.clone()
        };
        req.start(ctx, &volume, &actor, &limits, waits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeleteVolumeQuery {
    #[serde(default)]
    delete: bool,
}

pub(super) async fn delete_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    Q(q): Q<DeleteVolumeQuery>,
    once: Once,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("volume", &volume)?;
    let waits = waits_for_release(&headers)?;
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::deregister_volume(ctx, &volume, q.delete, &actor, &limits, waits)
    };
    once.respond(&app, &(), write, accepted_or_gone).await
}

pub(super) async fn unblock_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<UnblockRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("volume", &volume)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::unblock_volume(
            ctx,
            &volume,
            req.node.as_deref(),
            &req.reason,
            req.dry_run,
            &actor,
            &limits,
        )
    };
    once.respond(&app, &body, write, ok).await
}

pub(super) async fn detach(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<DetachRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("volume", &volume)?;
    name("node", &req.node)?;
    let body = req.clone();
    let write =
        move |ctx: &mut WriteCtx<'_>| lifecycle::detach(ctx, &volume, &req, &actor, &limits);
    once.respond(&app, &body, write, ok).await
}

/// `POST /v1/volumes/{name}/eligibility`: whether the volume takes new claims; answered
/// with the volume.
pub(super) async fn volume_eligibility(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<api::VolumeEligibilityRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("volume", &volume)?;
    if let Some(r) = &req.reason {
        api::check_reason(r, &limits.text).map_err(ApiError::text)?;
    }
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        let reason = req.reason.as_deref().filter(|r| !r.trim().is_empty());
        lifecycle::set_volume_eligibility(ctx, &volume, req.eligibility, reason, &actor, &limits)?;
        lifecycle::volume_view(&*ctx, &volume)
    };
    once.respond(&app, &body, write, ok).await
}
