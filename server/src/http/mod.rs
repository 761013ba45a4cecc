//! The HTTP API: routes, authentication, request parsing with JSON errors, blocking queries.

pub(crate) mod access;
mod admit;
mod backup;
mod blocking;
mod channel;
mod claim_endpoints;
pub(crate) mod error;
mod events;
pub(crate) mod listen;
mod node_endpoints;
pub(crate) mod once;
mod reads;
mod snapshot_endpoints;
mod waits;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use csivol_api::{
    self as api, ClaimRequest, ClaimState, CreateVolumeSpec, DetachRequest, GENERATION_HEADER,
    Health, HeartbeatResponse, INDEX_HEADER, NodeUnblockRequest, RegisterRequest, RegisterResponse,
    ReportBatch, UnblockRequest, VolumeSpec, VolumeState, validate_name,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use self::once::{Answer, Once};
use super::auth::{Caller, Tokens};
use super::db::{Db, WriteCtx, now_ms};
use super::error::{ApiError, ApiResult};
use super::fence::{self, Fencer};
use super::lifecycle::{self, Limits};
use super::liveness::Liveness;
use super::metrics::Metrics;
use super::model::VolumeChunk;
use super::store::Snapshot;
use super::views;
use super::watch::Key;
use blocking::{Blocking, Hold, checked_index, cursor_headers, follow, hold_claim, with_index};
use csivol_rules::fence::FenceConfig;
use waits::waits_for_release;

/// Largest request body accepted.
const BODY_LIMIT: usize = 1 << 20;
/// What every handler shares, behind one reference count: axum clones the state for each
/// request's handler and middleware, and a clone of the fields one by one took an atomic
/// increment (and a decrement at its drop) for each of them.
#[derive(Clone)]
pub struct App(Arc<AppState>);

impl App {
    pub fn new(state: AppState) -> Self {
        Self(Arc::new(state))
    }
}

impl std::ops::Deref for App {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.0
    }
}

pub struct AppState {
    pub db: Db,
    pub tokens: Arc<Tokens>,
    pub live: Arc<Liveness>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    pub fence: Arc<FenceConfig>,
    pub fencer: Arc<Fencer>,
    /// Long-polls in flight (`--max-long-polls`); an open node channel holds one too.
    pub long_polls: Arc<tokio::sync::Semaphore>,
    /// Whether agents are offered the node channel (`--no-node-channel` turns it off).
    pub node_channel: bool,
    /// A request's body must arrive within this after its headers (`--body-timeout`).
    pub body_timeout: Duration,
    /// With the etcd store: what makes a read consistent (`None`: SQLite, consistent as is).
    pub reads: Option<crate::etcd::Reads>,
    /// With the etcd store, this server's leadership (health shows it).
    pub leadership: Option<crate::etcd::Leadership>,
}

impl App {
    /// Authenticates an operator; returns how the event log names them and the limits a
    /// write needs.
    pub(super) fn operator(&self, headers: &HeaderMap) -> ApiResult<(String, Limits)> {
        let caller = self.caller(headers)?;
        caller.require_operator()?;
        Ok((caller.actor(), self.limits.clone()))
    }

    /// Claims: an operator's or a claimer's token.
    fn claimer(&self, headers: &HeaderMap) -> ApiResult<(String, Limits)> {
        let caller = self.caller(headers)?;
        caller.require_claimer()?;
        Ok((caller.actor(), self.limits.clone()))
    }

    /// A place in the long-poll budget for a blocking query (none needed otherwise).
    fn long_poll(&self, blocking: bool) -> ApiResult<Option<tokio::sync::OwnedSemaphorePermit>> {
        if !blocking {
            return Ok(None);
        }
        Arc::clone(&self.long_polls)
            .try_acquire_owned()
            .map(Some)
            .map_err(|_| {
                ApiError::unavailable(
                    "too many long-polls in flight: this server's --max-long-polls is reached",
                )
                .with_hint(
                    "retry shortly; an operator may raise --max-long-polls and --max-connections",
                )
            })
    }

    pub(super) fn caller(&self, headers: &HeaderMap) -> ApiResult<Caller> {
        let header = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        self.tokens.authenticate(header)
    }
}

/// A JSON body; malformed, unknown-field and oversize bodies become API errors.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    /// An API error with the status axum gives the rejection (400, 413, 415, 422).
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(Self(v)),
            Err(rejection) => {
                let e = ApiError::bad_request(format!(
                    "invalid request body: {}",
                    rejection.body_text()
                ));
                Err(error::with_status(&e, rejection.status()))
            }
        }
    }
}

/// Query parameters; unknown or malformed ones become API errors.
pub struct Q<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Q<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| Self(v))
            .map_err(|r| ApiError::bad_request(format!("invalid query: {}", r.body_text())))
    }
}

pub(super) fn name(kind: &str, value: &str) -> ApiResult<()> {
    validate_name(kind, value).map_err(ApiError::invalid)
}

pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/metrics", get(metrics))
        .route(
            "/v1/tokens",
            post(access::create_token).get(access::list_tokens),
        )
        .route("/v1/tokens/{id}", delete(access::revoke_token))
        .route("/v1/volumes", get(list_volumes))
        .route(
            "/v1/volumes/{name}",
            get(get_volume).put(put_volume).delete(delete_volume),
        )
        .route("/v1/volumes/{name}/create", post(create_volume))
        .route("/v1/volumes/{name}/expand", post(expand_volume))
        .route("/v1/volumes/{name}/modify", post(modify_volume))
        .route(
            "/v1/volumes/{name}/claims",
            post(claim_endpoints::post_claim),
        )
        .route(
            "/v1/volumes/{name}/claims/{alloc}",
            get(get_claim).delete(claim_endpoints::delete_claim),
        )
        .route(
            "/v1/volumes/{name}/claims/{alloc}/renew",
            post(claim_endpoints::renew_claim),
        )
        .route("/v1/claims", get(list_claims))
        .route("/v1/volumes/{name}/unblock", post(unblock_volume))
        .route("/v1/volumes/{name}/detach", post(detach))
        .route("/v1/nodes", get(node_endpoints::list_nodes))
        .route(
            "/v1/nodes/{node}",
            get(node_endpoints::get_node).delete(node_endpoints::remove_node),
        )
        .route(
            "/v1/nodes/{node}/eligibility",
            post(node_endpoints::node_eligibility),
        )
        .route("/v1/nodes/{node}/labels", post(node_endpoints::node_labels))
        .route(
            "/v1/nodes/{node}/unblock",
            post(node_endpoints::unblock_node),
        )
        .route("/v1/nodes/{node}/fence", post(node_endpoints::fence_node))
        .route("/v1/nodes/{node}/register", post(node_endpoints::register))
        .route(
            "/v1/nodes/{node}/heartbeat",
            post(node_endpoints::heartbeat),
        )
        .route("/v1/nodes/{node}/desired", get(node_endpoints::desired))
        .route("/v1/nodes/{node}/channel", get(channel::open))
        .route("/v1/nodes/{node}/reports", post(node_endpoints::reports))
        .route("/v1/nodes/{node}/stopping", post(node_endpoints::stopping))
        .route("/v1/plugins", get(node_endpoints::list_plugins))
        .route("/v1/plugins/{id}", get(node_endpoints::get_plugin))
        .route(
            "/v1/plugins/{id}/controllers",
            get(access::get_controller_hosts).post(access::change_controller_hosts),
        )
        .route("/v1/snapshots", get(snapshot_endpoints::list_snapshots))
        .route(
            "/v1/snapshots/{name}",
            get(snapshot_endpoints::get_snapshot)
                .put(snapshot_endpoints::put_snapshot)
                .delete(snapshot_endpoints::delete_snapshot),
        )
        .route(
            "/v1/group-snapshots",
            get(snapshot_endpoints::list_group_snapshots),
        )
        .route(
            "/v1/group-snapshots/{name}",
            get(snapshot_endpoints::get_group_snapshot)
                .put(snapshot_endpoints::put_group_snapshot)
                .delete(snapshot_endpoints::delete_group_snapshot),
        )
        .route("/v1/events", get(events::events))
        .route("/v1/controller-findings", get(controller_findings))
        .route("/v1/backup", get(backup::download))
        .fallback(|| async {
            ApiError::not_found("no such endpoint").with_hint("the API lives under /v1/")
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            reads::consistent,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            access::client_cert_names_the_node,
        ))
        // Outermost: nothing reads a body before its caller showed a token.
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            admit::admit,
        ))
        .with_state(app)
}

/// `GET /v1/health`, no token needed: `ok`, or `degraded` with the reasons while the
/// database refuses writes or a decided transition waits to be recorded.
async fn health(State(app): State<App>) -> Json<Health> {
    let mut reasons = Vec::new();
    if let Some(e) = app.db.write_error() {
        reasons.push(format!(
            "the state database {} refuses writes: {e}",
            app.db.path().display()
        ));
    }
    let unrecorded = app.live.unrecorded();
    if !unrecorded.is_empty() {
        reasons.push(format!(
            "lost node(s) {} not recorded yet (retrying): their volumes are not blocked until then",
            unrecorded.join(", ")
        ));
    }
    Json(Health {
        status: if reasons.is_empty() { "ok" } else { "degraded" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        reasons,
        leader: app
            .leadership
            .as_ref()
            .map(crate::etcd::Leadership::is_leader),
        schema: Some(api::SchemaVersions {
            running: app.db.schema(),
            known: crate::db::schema_version(),
        }),
    })
}

async fn metrics(State(app): State<App>, headers: HeaderMap) -> ApiResult<Response> {
    app.caller(&headers)?.require_reader()?;
    let m = Arc::clone(&app.metrics);
    let now = now_ms();
    let (counts, waiting) = app
        .db
        .read(move |c| Ok((c.state_counts()?, c.waiting_ops(None, now)?)))
        .await?;
    let text = m.render(&counts, &waiting, now)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeFilter {
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

/// `GET /v1/controller-findings`: what controller-side reconciliation found and a second
/// listing confirmed (leaked and missing attachments, abnormal volumes).
async fn controller_findings(
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

/// `GET /v1/volumes`: one page (`?limit=&after=`), or every volume streamed as one JSON
/// array from one read transaction, a chunk of volumes at a time, so that memory stays
/// flat whatever the inventory.
async fn list_volumes(
    State(app): State<App>,
    headers: HeaderMap,
    Q(f): Q<VolumeFilter>,
) -> ApiResult<Response> {
    app.caller(&headers)?.require_reader()?;
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
    };
    if let Some(limit) = f.limit {
        let limit = api::limits::count("limit", limit, 1, MAX_PAGE as u64)
            .map_err(ApiError::out_of_range)?;
        let after = f.after;
        let page = app
            .db
            .read(move |c| views::list_volumes(c, &filter, after.as_deref(), limit))
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
    Ok(stream_volumes(&app.db, filter))
}

/// Every volume as a JSON array from one read transaction, sent through a short channel:
/// at most a few chunks are in memory at once. Two threads share the work, so that a long
/// listing takes the time of the larger half rather than of both: the one holding the read
/// transaction copies chunks of rows as stored, the other reads the volumes in place and
/// writes their JSON (allocating, and freeing, almost nothing for a volume on either).
/// An error after the first byte ends the body with an error, so the client sees a broken
/// answer, never a short list.
fn stream_volumes(db: &Db, filter: views::VolumeFilter) -> Response {
    use axum::body::Bytes;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let db = db.clone();
    tokio::spawn(async move {
        let sender = tx.clone();
        // `None` marks the end of a complete read: a channel that closes without it means
        // the read failed, and the list must not be closed as if whole.
        let (rows_tx, rows_rx) = std::sync::mpsc::sync_channel::<Option<VolumeChunk>>(4);
        let shaping_filter = filter.clone();
        let shaping = tokio::task::spawn_blocking(move || {
            let gone = || ApiError::unavailable("the client stopped reading the list");
            tx.blocking_send(Ok(Bytes::from_static(b"[")))
                .map_err(|_| gone())?;
            let mut first = true;
            loop {
                let Ok(next) = rows_rx.recv() else {
                    return Err(ApiError::internal("the read of the list ended early"));
                };
                let Some(chunk) = next else {
                    break;
                };
                let mut buf = Vec::with_capacity(chunk.volumes.len() * 512);
                for v in views::shape(&chunk, &shaping_filter) {
                    views::write_listed(&mut buf, std::mem::take(&mut first), &v?)?;
                }
                tx.blocking_send(Ok(buf.into())).map_err(|_| gone())?;
            }
            tx.blocking_send(Ok(Bytes::from_static(b"]")))
                .map_err(|_| gone())
        });
        let read = db
            .read(move |c| {
                let gone = || ApiError::unavailable("the client stopped reading the list");
                views::each_volume_chunk(c, &filter, |chunk| {
                    rows_tx.send(Some(chunk)).map_err(|_| gone())
                })?;
                rows_tx.send(None).map_err(|_| gone())
            })
            .await;
        let shaped = shaping
            .await
            .unwrap_or_else(|e| Err(ApiError::internal(format!("shaping the list: {e}"))));
        // The read's own error says more than the shaper's "ended early".
        if let Err(e) = read.and(shaped) {
            tracing::warn!("listing volumes failed part way: {}", e.message);
            let _ = sender.send(Err(std::io::Error::other(e.message))).await;
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn get_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    app.caller(&headers)?.require_reader()?;
    name("volume", &volume)?;
    let key = Key::Volume(volume.clone());
    let at = follow(&app, &headers, &key, &b).await?;
    let v = app
        .db
        .read_small(|c| lifecycle::volume_view(c, &volume))
        .await?;
    Ok(with_index(StatusCode::OK, at, v))
}

/// 201 when recorded or changed, 200 when the same spec was there already.
fn created_or_ok<T: serde::Serialize>((v, changed): &(T, bool)) -> Answer {
    let status = if *changed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Answer::json(status, v)
}

/// 202 when an operation started, 200 when there was nothing to start.
fn accepted_or_ok<T: serde::Serialize>((v, started): &(T, bool)) -> Answer {
    let status = if *started {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Answer::json(status, v)
}

async fn put_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(spec): Body<VolumeSpec>,
) -> ApiResult<Response> {
    let (actor, _) = app.operator(&headers)?;
    let body = spec.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::register_volume(ctx, &volume, spec.clone(), &actor)
    };
    once.respond(&app, &body, write, created_or_ok).await
}

async fn create_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(spec): Body<CreateVolumeSpec>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    let body = spec.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::create_volume(ctx, &volume, spec.clone(), &actor, &limits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

async fn expand_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<csivol_api::ExpandRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    let waits = waits_for_release(&headers)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::expand_volume(ctx, &volume, &req, &actor, &limits, waits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

async fn modify_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<csivol_api::ModifyRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    let waits = waits_for_release(&headers)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::modify_volume(ctx, &volume, &req, &actor, &limits, waits)
    };
    once.respond(&app, &body, write, accepted_or_ok).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteVolumeQuery {
    #[serde(default)]
    delete: bool,
}

/// 202 with what is still being done, 204 when it is done.
fn accepted_or_gone<T: serde::Serialize>(v: &Option<T>) -> Answer {
    match v {
        Some(v) => Answer::json(StatusCode::ACCEPTED, v),
        None => Answer::empty(StatusCode::NO_CONTENT),
    }
}

async fn delete_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    Q(q): Q<DeleteVolumeQuery>,
    once: Once,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    name("volume", &volume)?;
    let waits = waits_for_release(&headers)?;
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::deregister_volume(ctx, &volume, q.delete, &actor, &limits, waits)
    };
    once.respond(&app, &(), write, accepted_or_gone).await
}

async fn get_claim(
    State(app): State<App>,
    headers: HeaderMap,
    Path((volume, alloc)): Path<(String, String)>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    app.caller(&headers)?.require_reader()?;
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
    Ok(with_index(StatusCode::OK, at, claim))
}

/// `GET /v1/claims?volume=&node=&state=&label=k=v&older_than_ms=`; `label` repeatable.
async fn list_claims(
    State(app): State<App>,
    headers: HeaderMap,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Response> {
    app.caller(&headers)?.require_reader()?;
    let filter = views::ClaimFilter::from_query(&pairs)?;
    let claims = app
        .db
        .read(move |c| views::list_claims(c, &filter, now_ms()))
        .await?;
    Ok(Json(claims).into_response())
}

/// 200 with the answer.
pub(super) fn ok<T: serde::Serialize>(v: &T) -> Answer {
    Answer::json(StatusCode::OK, v)
}

async fn unblock_volume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<UnblockRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
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

async fn detach(
    State(app): State<App>,
    headers: HeaderMap,
    Path(volume): Path<String>,
    once: Once,
    Body(req): Body<DetachRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    name("volume", &volume)?;
    name("node", &req.node)?;
    let body = req.clone();
    let write =
        move |ctx: &mut WriteCtx<'_>| lifecycle::detach(ctx, &volume, &req, &actor, &limits);
    once.respond(&app, &body, write, ok).await
}
