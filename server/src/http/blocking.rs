//! Blocking queries and the cursors they follow from: `?index=N&wait=30s` on a key of the
//! watch hub, the generation of the state an index belongs to (`X-Csivol-Generation`:
//! another generation's index is answered at once), a claim's answer held until it
//! changes (`?wait=` on its POST or DELETE), and the event log followed.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, GENERATION_HEADER, INDEX_HEADER};
use serde::Deserialize;

use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::Snapshot;
use crate::watch::{Cursor, Generation, Key};

/// Longest a blocking query may wait.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// `?index=N&wait=30s`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Blocking {
    pub(super) index: Option<u64>,
    pub(super) wait: Option<String>,
}

/// Change indexes are SQLite integers: anything above `i64::MAX` is refused, never wrapped
/// (a wrapped `?index=` would page through the whole log again).
pub(super) fn checked_index(index: Option<u64>) -> ApiResult<Option<u64>> {
    if let Some(i) = index {
        api::limits::index("index", i).map_err(|e| {
            ApiError::out_of_range(e).with_hint(
                "pass an index the server returned (the X-Csivol-Index header or `index` fields)",
            )
        })?;
    }
    Ok(index)
}

/// The generation a client named with the index it follows from (`X-Csivol-Generation`),
/// if it named one (an older client does not).
pub(super) fn sent_generation(headers: &HeaderMap) -> Option<Generation> {
    headers
        .get(GENERATION_HEADER)
        .map(|v| Generation::parse(v.to_str().unwrap_or_default()))
}

impl App {
    /// Whether a blocking query from index `after` is answered at once, whatever changed:
    /// the client's index is of another generation of the state (it went back in time, or
    /// this is another history), or ahead of every index this server gave, so that waiting
    /// for the state to pass it could leave the client unaware of a change for as long. A
    /// client that names no generation (an older one) and holds an index ahead of the
    /// state is answered as before, when the state passes it: such a client keeps the
    /// greater of its indexes, and answering it at once would have it ask again at once,
    /// without end (the agents' desired state, whose clients take the index they are
    /// given, is answered at once all the same: `nodes::desired`).
    pub(super) fn answer_at_once(&self, headers: &HeaderMap, after: u64) -> bool {
        let cursor = Cursor {
            generation: sent_generation(headers),
            index: after,
        };
        match cursor.generation {
            Some(_) => self.db.hub.outdated(&cursor),
            None => false,
        }
    }
}

impl Blocking {
    pub(super) fn wait(&self) -> ApiResult<Option<(u64, Duration)>> {
        let Some(index) = checked_index(self.index)? else {
            return Ok(None);
        };
        let wait = match &self.wait {
            Some(w) => parse_wait(w)?,
            None => Duration::from_secs(30),
        };
        Ok(Some((index, wait)))
    }
}

/// A `wait` duration (`30s`, `500ms`), at most [`MAX_WAIT`].
fn parse_wait(w: &str) -> ApiResult<Duration> {
    let wait = humantime::parse_duration(w).map_err(|e| {
        ApiError::bad_request(format!("invalid `wait` `{w}`: {e}")).with_hint("use e.g. wait=30s")
    })?;
    Ok(wait.min(MAX_WAIT))
}

/// `?wait=30s` on a claim's POST or DELETE: once the request has committed, its answer
/// waits as a blocking query at the commit's index would, until the claim changes again
/// (or is gone), or the wait passes. A client following a claim makes one request where
/// it made a write and a blocking query. Without `wait`, the answer leaves at the commit.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Hold {
    wait: Option<String>,
}

impl Hold {
    /// The hold a query with other fields of its own asked for (`?wait=`).
    pub(super) fn of(wait: Option<String>) -> Self {
        Self { wait }
    }

    pub(super) fn wait(&self) -> ApiResult<Option<Duration>> {
        self.wait.as_deref().map(parse_wait).transpose()
    }
}

/// What a held answer carries: the claim as it is after the wait (`None` once gone) and
/// the index to follow it from; the committed claim and its index when nothing changed in
/// time, or when this server's long-poll slots are all taken (the request has committed:
/// it is answered, not refused).
pub(super) async fn hold_claim(
    app: &App,
    committed: &api::Claim,
    began: Generation,
    wait: Duration,
) -> ApiResult<(Option<api::Claim>, u64)> {
    let unchanged = || Ok((Some(committed.clone()), committed.index));
    let Ok(_permit) = Arc::clone(&app.long_polls).try_acquire_owned() else {
        return unchanged();
    };
    // The answer names the volume within its namespace; the state keys it whole.
    let volume = api::volume_key(&committed.namespace, &committed.volume);
    let key = Key::Volume(volume.clone());
    let index = app.db.hub.wait(&key, committed.index, wait).await;
    // The state went back in time under the request (its commit may be in no state any
    // more): the claim as it is now, and an index of the new generation.
    let other = app.db.hub.generation() != began;
    if index <= committed.index && !other {
        return unchanged();
    }
    let index = if other { app.db.hub.index(&key) } else { index };
    let alloc = committed.alloc.clone();
    let now = app
        .db
        .read_small(move |c| match c.claim(&volume, &alloc)? {
            Some(row) => c.claim_to_api(&row).map(Some),
            None => Ok(None),
        })
        .await?;
    Ok((now, index))
}

/// An answer with the index to follow from, and the generation it belongs to.
pub(super) fn with_index<T: serde::Serialize>(
    status: StatusCode,
    (index, generation): (u64, Generation),
    body: T,
) -> Response {
    let mut r = (status, Json(body)).into_response();
    cursor_headers(&mut r, index, generation);
    r
}

pub(super) fn cursor_headers(r: &mut Response, index: u64, generation: Generation) {
    r.headers_mut()
        .insert(INDEX_HEADER, HeaderValue::from(index));
    if let Ok(v) = HeaderValue::from_str(&generation.text()) {
        r.headers_mut().insert(GENERATION_HEADER, v);
    }
}

/// A blocking query on `key` (`?index=N&wait=30s`): waits until the key changes past the
/// client's index, or its wait passes; answers at once when the client's index is of
/// another generation ([`App::answer_at_once`]). The cursor to answer with; a place in the
/// long-poll budget is held while it waits.
pub(super) async fn follow(
    app: &App,
    headers: &HeaderMap,
    key: &Key,
    b: &Blocking,
) -> ApiResult<(u64, Generation)> {
    let blocking = b
        .wait()?
        .filter(|(after, _)| !app.answer_at_once(headers, *after));
    let _permit = app.long_poll(blocking.is_some())?;
    let began = app.db.hub.generation();
    let index = match blocking {
        Some((after, wait)) => app.db.hub.wait(key, after, wait).await,
        None => app.db.hub.index(key),
    };
    Ok(cursor(app, key, index, began))
}

/// The cursor an answer read at `index` in generation `began` carries: the key's index in
/// the generation served now, when the state went back in time while the answer was made.
pub(super) fn cursor(app: &App, key: &Key, index: u64, began: Generation) -> (u64, Generation) {
    let now = app.db.hub.generation();
    if now == began {
        (index, began)
    } else {
        (app.db.hub.index(key), now)
    }
}

impl App {
    /// A place in the long-poll budget for a blocking query (none needed otherwise).
    pub(super) fn long_poll(
        &self,
        blocking: bool,
    ) -> ApiResult<Option<tokio::sync::OwnedSemaphorePermit>> {
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
}
