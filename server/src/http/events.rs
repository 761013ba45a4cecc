//! `GET /v1/events`: the event log, a page at a time, or as a blocking query. A page is
//! streamed: read and written out a chunk at a time, so that a reader of a long page holds
//! a few chunks in memory and a read connection only while it reads one, however slowly it
//! takes the answer.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api as api;
use serde::Deserialize;

use super::blocking::{Blocking, checked_index, cursor_headers, sent_generation, with_index};
use super::extract::Q;
use super::namespaces::Asked;
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::namespaces::NamespaceFilter;
use crate::store::sqlite::db::Db;
use crate::views;
use crate::watch::{Generation, Key};

/// Events in a page without `limit`.
const DEFAULT_PAGE: u32 = 1_000;
/// The largest page `limit` may ask for.
const MAX_PAGE: u64 = 10_000;
/// Events read, and written out, at a time while a page streams: with two chunks queued
/// and one being read, a reader holds a few hundred KiB of the server's memory at most
/// (events of a few KiB each), at the cost of a read every 64 events.
const CHUNK: u32 = 64;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    volume: Option<String>,
    alloc: Option<String>,
    node: Option<String>,
    index: Option<u64>,
    wait: Option<String>,
    limit: Option<u64>,
}

pub(super) async fn events(
    State(app): State<App>,
    headers: HeaderMap,
    axum::Extension(asked): axum::Extension<Asked>,
    Q(q): Q<EventsQuery>,
) -> ApiResult<Response> {
    let namespaces = namespace_filter(&asked, &app.caller(&headers)?.scope);
    let mut after = checked_index(q.index)?.unwrap_or(0);
    let limit = match q.limit {
        None => DEFAULT_PAGE,
        Some(l) => api::limits::count("limit", l, 1, MAX_PAGE).map_err(|e| {
            ApiError::out_of_range(e)
                .with_hint("page with ?index=N&limit=1000, N the last event's index")
        })? as u32,
    };
    // `index` alone pages through the log; `wait` makes it a blocking query.
    let mut blocking = match &q.wait {
        Some(_) => Blocking {
            index: Some(after),
            wait: q.wait.clone(),
        }
        .wait()?,
        None => None,
    };
    let mut generation = app.db.hub.generation();
    // A place in the log of another generation: the log went back in time, and its
    // entries are numbered again from where the backup left it. What was logged since
    // this generation began is sent at once (from the client's place, if that is earlier:
    // up to there the two logs are one).
    if sent_generation(&headers).is_some_and(|g| g != generation) {
        after = after.min(app.db.hub.events_from());
        blocking = None;
    }
    let _permit = app.long_poll(blocking.is_some())?;
    let deadline = tokio::time::Instant::now() + blocking.map_or(Duration::ZERO, |(_, w)| w);
    let filter = views::EventFilter {
        volume: q.volume,
        node: q.node,
        alloc: q.alloc,
        until: None,
        namespaces,
    };
    loop {
        let seen = app.db.hub.index(&Key::Events);
        let f = filter.clone();
        let last = app
            .db
            .read(move |c| views::event_page_end(c, after, &f, limit))
            .await?;
        let now = tokio::time::Instant::now();
        if last.is_some() || blocking.is_none() || now >= deadline {
            return Ok(match last {
                None => with_index(
                    StatusCode::OK,
                    (after, generation),
                    Vec::<api::Event>::new(),
                ),
                Some(last) => stream(&app.db, after, (last, generation), filter),
            });
        }
        app.db.hub.wait(&Key::Events, seen, deadline - now).await;
        if app.db.hub.generation() != generation {
            // The log went back in time while the client waited.
            generation = app.db.hub.generation();
            after = after.min(app.db.hub.events_from());
            blocking = None;
        }
    }
}

/// Which namespaces' events a request reads: the one it names, or with `*` every one the
/// caller's token holds. Events of no volume (a node's, a token's) are the cluster's: read
/// with `default` (as before namespaces) or `*`, by a token not narrowed.
fn namespace_filter(asked: &Asked, scope: &api::TokenScope) -> NamespaceFilter {
    let only = match &asked.namespace {
        Some(ns) => Some(vec![ns.clone()]),
        None if scope.namespaces.is_empty() => None,
        None => Some(scope.namespaces.clone()),
    };
    let cluster_wide = asked
        .namespace
        .as_deref()
        .is_none_or(|ns| ns == api::DEFAULT_NAMESPACE);
    NamespaceFilter {
        only,
        volumeless: cluster_wide && !scope.narrowed(),
    }
}

/// The events after `after` up to `last` that pass `filter`, as a JSON array written out a
/// chunk at a time, each chunk its own read. The page's end was fixed before the answer
/// began (its index is the header's), so events that come meanwhile wait for the next
/// page. An error after the first byte ends the body with an error: the client sees a
/// broken answer, never a short page.
fn stream(
    db: &Db,
    after: u64,
    (last, generation): (u64, Generation),
    filter: views::EventFilter,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    let db = db.clone();
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from_static(b"["))).await.is_err() {
            return;
        }
        let mut cursor = after;
        let mut first = true;
        loop {
            let f = views::EventFilter {
                until: Some(last),
                ..filter.clone()
            };
            let chunk = match db.read(move |c| views::events(c, cursor, &f, CHUNK)).await {
                Ok(chunk) => chunk,
                Err(e) => {
                    tracing::warn!("listing events failed part way: {}", e.message);
                    let _ = tx.send(Err(std::io::Error::other(e.message))).await;
                    return;
                }
            };
            let mut buf = Vec::with_capacity(chunk.len() * 256);
            for e in &chunk {
                if !std::mem::take(&mut first) {
                    buf.push(b',');
                }
                if let Err(e) = serde_json::to_writer(&mut buf, e) {
                    let _ = tx.send(Err(std::io::Error::other(e))).await;
                    return;
                }
            }
            // A client that stopped reading stops the reads.
            if tx.send(Ok(buf.into())).await.is_err() {
                return;
            }
            match chunk.last() {
                Some(e) if chunk.len() == CHUNK as usize && e.index < last => cursor = e.index,
                _ => break,
            }
        }
        let _ = tx.send(Ok(Bytes::from_static(b"]"))).await;
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
    cursor_headers(&mut r, last, generation);
    r
}
