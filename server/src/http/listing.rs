//! The listings that can hold the whole inventory (`GET /v1/volumes`, `GET /v1/claims`,
//! `GET /v1/snapshots`), streamed as one JSON array a page at a time, as the event log's
//! pages are (`events`): each page is its own read, shaped into JSON on a blocking thread
//! while the next page is read, and sent through a short channel. A listing of any size
//! holds a few pages in the server's memory, and a read connection only while one page is
//! read, however slowly its client takes the answer (a read transaction held for the whole
//! answer would hold one of the few read connections, and keep SQLite from checkpointing its
//! write-ahead log, for as long as the slowest reader liked).
//!
//! Pages are read by key (a volume's or snapshot's name), each after the last one's key, so
//! a row is listed at most once and in order. Pages are read at successive states: a row
//! written while the listing is sent shows as it was when its page was read, or not at all
//! when it was written into a page already sent; as the CLI's own paging (`?limit=&after=`)
//! sees them.
//!
//! Headers: a listing carries the generation of the state its rows were read from
//! (`X-Csivol-Generation`), so that a client may follow a listed row from the `index` it
//! carries, and no `X-Csivol-Index`: the headers leave before the last page is read, so any
//! index they could carry would be older than the rows read after it, and a client
//! following the listing from there would be told of changes it was already shown. Every
//! row carries its own index instead. Should the state go back in time while a listing is
//! sent (a backup restored), the rows still to come are of another history than those
//! sent: the answer ends with an error (a broken body, never a short or mixed list), and
//! the client lists again.

use std::future::Future;
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, GENERATION_HEADER};

use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::model::listing::VolumeChunk;
use crate::store::Snapshot;
use crate::watch::Generation;
use crate::{lifecycle, views};

/// Pages queued for a client: with one being shaped and one being read, a listing holds
/// four pages in memory at most.
const QUEUED: usize = 2;

/// Streams a listing: `read(after)` reads the page after key `after` (the first after "")
/// and says after which key the next one begins (`None`: it was the last); `shape` writes
/// a page's entries as JSON, comma separated. The first page is read before the answer
/// begins, so that its errors (a filter naming nothing, a store that cannot be read) are
/// answered with their status.
pub(super) async fn stream<T, R, F, S>(
    app: &App,
    what: &'static str,
    read: R,
    shape: S,
) -> ApiResult<Response>
where
    T: Send + 'static,
    R: Fn(String) -> F + Send + Sync + 'static,
    F: Future<Output = ApiResult<(T, Option<String>)>> + Send + 'static,
    S: Fn(T) -> ApiResult<Vec<u8>> + Send + Sync + 'static,
{
    let began = app.db.hub.generation();
    let hub = Arc::clone(&app.db.hub);
    let first = read(String::new()).await?;
    if hub.generation() != began {
        return Err(went_back(what));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(QUEUED);
    tokio::spawn(async move {
        let sent = send_pages(&tx, first, read, Arc::new(shape), || {
            (hub.generation() != began).then(|| went_back(what))
        })
        .await;
        if let Err(Some(e)) = sent {
            tracing::warn!("listing {what} failed part way: {}", e.message);
            let _ = tx.send(Err(std::io::Error::other(e.message))).await;
        }
    });
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut r = (
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    generation_header(&mut r, began);
    Ok(r)
}

fn generation_header(r: &mut Response, generation: Generation) {
    if let Ok(v) = HeaderValue::from_str(&generation.text()) {
        r.headers_mut().insert(GENERATION_HEADER, v);
    }
}

fn went_back(what: &str) -> ApiError {
    ApiError::unavailable(format!(
        "the state went back in time (a backup was restored) while the {what} were listed"
    ))
    .with_hint("list again")
}

/// The array, page by page; `Err(None)` when the client stopped reading (nothing to tell
/// it), `Err(Some(e))` when a page could not be read or shaped, or `moved` says the state
/// is not the one the listing began in.
async fn send_pages<T, R, F, S>(
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    first: (T, Option<String>),
    read: R,
    shape: Arc<S>,
    moved: impl Fn() -> Option<ApiError>,
) -> Result<(), Option<ApiError>>
where
    T: Send + 'static,
    R: Fn(String) -> F,
    F: Future<Output = ApiResult<(T, Option<String>)>> + Send + 'static,
    S: Fn(T) -> ApiResult<Vec<u8>> + Send + Sync + 'static,
{
    let send = |b: Bytes| async { tx.send(Ok(b)).await.map_err(|_| None) };
    send(Bytes::from_static(b"[")).await?;
    let mut written = false;
    let mut page = first;
    loop {
        let (rows, next) = page;
        // The next page is read while this one is shaped.
        let pending = next.map(|after| tokio::spawn(read(after)));
        let shape = Arc::clone(&shape);
        let json = tokio::task::spawn_blocking(move || shape(rows))
            .await
            .map_err(|e| Some(ApiError::internal(format!("shaping a page: {e}"))))?
            .map_err(Some)?;
        if !json.is_empty() {
            if std::mem::replace(&mut written, true) {
                send(Bytes::from_static(b",")).await?;
            }
            send(json.into()).await?;
        }
        let Some(pending) = pending else {
            break;
        };
        page = pending
            .await
            .map_err(|e| Some(ApiError::internal(format!("reading a page: {e}"))))?
            .map_err(Some)?;
        if let Some(e) = moved() {
            return Err(Some(e));
        }
    }
    send(Bytes::from_static(b"]")).await
}

/// `GET /v1/volumes` without `limit`: every volume, [`views::LIST_CHUNK`] at a time, read
/// as stored and decoded where it is shaped.
pub(super) async fn volumes(app: &App, filter: views::VolumeFilter) -> ApiResult<Response> {
    let db = app.db.clone();
    let plugin = filter.plugin.clone();
    let read = move |after: String| {
        let (db, plugin) = (db.clone(), plugin.clone());
        async move {
            let chunk = db
                .read(move |c| c.volume_chunk(&after, plugin.as_deref(), views::LIST_CHUNK))
                .await?;
            let next = chunk.last.clone();
            Ok((chunk, next))
        }
    };
    let usage = Arc::clone(&app.usage);
    let shape = move |chunk: VolumeChunk| {
        let mut buf = Vec::with_capacity(chunk.volumes.len() * 512);
        for v in views::shape(&chunk, &filter, &usage) {
            let first = buf.is_empty();
            views::write_listed(&mut buf, first, &v?)?;
        }
        Ok(buf)
    };
    stream(app, "volumes", read, shape).await
}

/// `GET /v1/claims`: the claims of [`views::CLAIM_PAGE_VOLUMES`] volumes at a time, shaped
/// as they are read (a page's queue positions need its rows together).
pub(super) async fn claims(app: &App, filter: views::ClaimFilter) -> ApiResult<Response> {
    let db = app.db.clone();
    // One clock for the whole listing: `older_than_ms` selects alike in every page.
    let now = app.clock.now_ms();
    let usage = Arc::clone(&app.usage);
    let read = move |after: String| {
        let (db, filter, usage) = (db.clone(), filter.clone(), Arc::clone(&usage));
        async move {
            db.read(move |c| views::claim_page(c, &filter, now, &after, &usage))
                .await
        }
    };
    stream(app, "claims", read, Ok).await
}

/// `GET /v1/snapshots` (of a volume, when given): 500 at a time.
pub(super) async fn snapshots(
    app: &App,
    volume: Option<String>,
    scope: api::TokenScope,
) -> ApiResult<Response> {
    let db = app.db.clone();
    let read = move |after: String| {
        let (db, volume) = (db.clone(), volume.clone());
        async move {
            db.read(move |c| lifecycle::snapshot_page(c, volume.as_deref(), &after))
                .await
        }
    };
    let shape = move |page: Vec<api::Snapshot>| {
        let mut buf = Vec::with_capacity(page.len() * 512);
        for s in page.iter().filter(|s| views::snapshot_in_scope(&scope, s)) {
            if !buf.is_empty() {
                buf.push(b',');
            }
            serde_json::to_writer(&mut buf, s).map_err(|e| ApiError::internal(e.to_string()))?;
        }
        Ok(buf)
    };
    stream(app, "snapshots", read, shape).await
}
