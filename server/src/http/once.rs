//! Exact retries at the HTTP edge. A mutating request may carry an `Idempotency-Key` and
//! the time its client first sent it (`X-Csivol-Sent-At`), the same on each of its retries
//! ([`Once`]). The write that carries it out keeps its first answer (status, body, index)
//! under the token and key in the same transaction as what it does: the write transaction
//! is where two copies of one request meet, whether the second comes late, while the first
//! is still in flight (the two then run one after the other in the writer, in one group
//! commit or in two), or through another server over etcd (whose commit compares the
//! state it read, so the second runs again on the first one's rows). The second finds the
//! key kept and answers what the first answered, without acting again.
//!
//! The answers kept, and why, are `csivol_rules::retries::keeps`: every success, and every
//! refusal the state decided; never `unavailable` (nothing was decided) or `internal`.

use axum::extract::FromRequestParts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, request::Parts};
use axum::response::{IntoResponse, Response};
use csivol_api::{
    ErrorResponse, IDEMPOTENCY_KEY_HEADER, INDEX_HEADER, MAX_IDEMPOTENCY_KEY, REPLAYED_HEADER,
    SENT_AT_HEADER,
};
use csivol_rules::retries::{self, Request};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::writer::WriteCtx;
use crate::store::{KeptAnswer, Snapshot, Txn};
use crate::watch::Generation;

/// What a mutating request says about itself: its key (with the id of the token that
/// scopes it), when its client first sent it, and its route.
#[derive(Debug, Clone)]
pub(crate) struct Once {
    /// `(token id, key)`.
    key: Option<(String, String)>,
    sent_at: Option<i64>,
    /// Method, path and the query that changes what it does (not `wait`, which only says
    /// how long the answer may be held).
    route: String,
}

impl FromRequestParts<App> for Once {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Self::Rejection> {
        let key = match key(&parts.headers)? {
            // A key is scoped to the token that sent it: another token's same key is another
            // request. The handler authenticates again for its own rights.
            Some(key) => Some((app.caller(&parts.headers)?.token_id, key)),
            None => None,
        };
        let mut route = route(&parts.method, &parts.uri);
        if let Some(RouteNamespace(ns)) = parts.extensions.get::<RouteNamespace>() {
            route.push_str(&format!(" in namespace {ns}"));
        }
        Ok(Self {
            key,
            sent_at: sent_at(&parts.headers)?,
            route,
        })
    }
}

/// The namespace a request names where its path does not hold it in a key (a per-job
/// claim's), put by the namespaces' layer, which took it out of the query: it still tells
/// two requests apart under one key.
#[derive(Clone, Debug)]
pub(super) struct RouteNamespace(pub String);

fn key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    let bad = || {
        ApiError::bad_request(format!(
            "invalid Idempotency-Key header: 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"
        ))
        .with_hint("send a random key (e.g. a UUID) made once per request and kept for its retries")
    };
    let key = value.to_str().map_err(|_| bad())?;
    let visible = key.bytes().all(|b| b.is_ascii_graphic());
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY || !visible {
        return Err(bad());
    }
    Ok(Some(key.to_owned()))
}

fn sent_at(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(value) = headers.get(SENT_AT_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|ms| *ms > 0)
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid X-Csivol-Sent-At header: the time the request was first sent, in unix \
                 milliseconds",
            )
        })
}

fn route(method: &Method, uri: &Uri) -> String {
    let query: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("wait="))
        .collect();
    match query.is_empty() {
        true => format!("{method} {}", uri.path()),
        false => format!("{method} {}?{}", uri.path(), query.join("&")),
    }
}

/// An answer as the client gets it, and as it is kept under a key.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub status: StatusCode,
    /// JSON, or empty.
    pub body: String,
    pub index: Option<u64>,
    /// The generation of the state `index` belongs to (`X-Csivol-Generation`): not kept
    /// with the answer; a replay names the generation of the state it is read from, which
    /// holds the kept answer.
    pub generation: Option<Generation>,
}

impl Answer {
    pub fn json(status: StatusCode, body: &impl Serialize) -> Self {
        Self {
            status,
            body: serde_json::to_string(body).unwrap_or_else(|_| "null".to_owned()),
            index: None,
            generation: None,
        }
    }

    /// With the cursor a client follows the resource from: the change index
    /// (`X-Csivol-Index`) and the generation of the state it belongs to.
    pub fn indexed(
        status: StatusCode,
        (index, generation): (u64, Generation),
        body: &impl Serialize,
    ) -> Self {
        Self {
            index: Some(index),
            generation: Some(generation),
            ..Self::json(status, body)
        }
    }

    pub fn empty(status: StatusCode) -> Self {
        Self {
            status,
            body: String::new(),
            index: None,
            generation: None,
        }
    }

    /// A refusal, as its error body.
    pub fn refused(e: &ApiError) -> Self {
        Self::json(
            super::error::status(e.kind),
            &ErrorResponse { error: e.body() },
        )
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut r = if self.body.is_empty() {
            self.status.into_response()
        } else {
            (
                self.status,
                [(
                    axum::http::header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                self.body,
            )
                .into_response()
        };
        match (self.index, self.generation) {
            (Some(index), Some(generation)) => {
                super::blocking::cursor_headers(&mut r, index, generation);
            }
            (Some(index), None) => {
                r.headers_mut()
                    .insert(INDEX_HEADER, HeaderValue::from(index));
            }
            (None, _) => {}
        }
        r
    }
}

/// How a keyed write went.
pub(crate) enum Outcome<T> {
    /// Carried out now: its result, and its answer as kept.
    Done(T, Answer),
    /// A repeat: the first answer, as it was sent.
    Replayed(Response),
}

/// What one run of the write decided.
enum Step<T> {
    Done(T, Answer),
    Refused(ApiError),
    Replayed(KeptAnswer),
}

impl Once {
    /// When the client first sent the request (its clock), if it said.
    pub fn sent_at(&self) -> Option<i64> {
        self.sent_at
    }

    /// [`Once::write`], answered with the answer it made or kept.
    pub async fn respond<T, F, A>(
        &self,
        app: &App,
        body: &impl Serialize,
        f: F,
        answer: A,
    ) -> ApiResult<Response>
    where
        T: Send + 'static,
        F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send + 'static,
        A: Fn(&T) -> Answer + Send + 'static,
    {
        Ok(match self.write(app, body, f, answer).await? {
            Outcome::Done(_, a) => a.into_response(),
            Outcome::Replayed(r) => r,
        })
    }

    /// Runs `f` as the request's write transaction. Without a key that is all (a send time
    /// older than the server's request memory is refused first). With one, a repeat of a
    /// request whose answer is kept is answered that answer, and `f` does not run; else `f`
    /// runs in a savepoint of its own, and its answer (`answer` of its result, or its
    /// refusal when `retries::keeps` it) is kept under the key in the same transaction.
    pub async fn write<T, F, A>(
        &self,
        app: &App,
        body: &impl Serialize,
        mut f: F,
        answer: A,
    ) -> ApiResult<Outcome<T>>
    where
        T: Send + 'static,
        F: FnMut(&mut WriteCtx<'_>) -> ApiResult<T> + Send + 'static,
        A: Fn(&T) -> Answer + Send + 'static,
    {
        let memory = app.limits.request_memory;
        let sent_at = self.sent_at;
        let Some((token, key)) = self.key.clone() else {
            let run = app.db.write(move |ctx| {
                refuse_too_old(ctx, sent_at, memory)?;
                let t = f(ctx)?;
                let a = answer(&t);
                Ok((t, a))
            });
            let (t, a) = run.await?;
            return Ok(Outcome::Done(t, a));
        };
        let route = self.route.clone();
        let digest = digest(body);
        let this = Request {
            route: &route,
            digest: &digest,
        };
        // A repeat of a request committed before is answered from a read; one whose first
        // copy is still in flight finds it in the write below.
        let (t, k) = (token.clone(), key.clone());
        let kept = app.db.read_small(move |c| c.kept_answer(&t, &k)).await?;
        if let Some(kept) = live(kept, app.clock.now_ms(), memory) {
            return replay(&kept, this, app.db.hub.generation()).map(Outcome::Replayed);
        }
        let (r, d) = (route.clone(), digest.clone());
        let step = app
            .db
            .write(move |ctx| {
                if let Some(kept) = live(ctx.kept_answer(&token, &key)?, ctx.now, memory) {
                    return Ok(Step::Replayed(kept));
                }
                let result = ctx.attempt(|ctx| {
                    refuse_too_old(ctx, sent_at, memory)?;
                    f(ctx)
                });
                let (kept, step) = match result {
                    Ok(t) => {
                        let a = answer(&t);
                        (a.clone(), Step::Done(t, a))
                    }
                    // Kept only where keys are (the schema gate): a refusal that keeps
                    // nothing rolls back as one without a key does.
                    Err(e) if retries::keeps(e.code()) && ctx.retries_kept()? => {
                        (Answer::refused(&e), Step::Refused(e))
                    }
                    Err(e) => return Err(e),
                };
                ctx.keep_answer(&KeptAnswer {
                    token: token.clone(),
                    key: key.clone(),
                    request: r.clone(),
                    digest: d.clone(),
                    status: kept.status.as_u16(),
                    answer: kept.body,
                    index: kept.index,
                    at: ctx.now,
                })?;
                Ok(step)
            })
            .await?;
        match step {
            Step::Done(t, a) => Ok(Outcome::Done(t, a)),
            Step::Refused(e) => Err(e),
            Step::Replayed(kept) => {
                replay(&kept, this, app.db.hub.generation()).map(Outcome::Replayed)
            }
        }
    }
}

/// A kept answer younger than the request memory; an older one counts as forgotten, pruned
/// or not (the leader prunes them in batches, a while later).
fn live(kept: Option<KeptAnswer>, now: i64, memory: std::time::Duration) -> Option<KeptAnswer> {
    let memory_ms = i64::try_from(memory.as_millis()).unwrap_or(i64::MAX);
    kept.filter(|k| k.at >= now.saturating_sub(memory_ms))
}

/// A request whose send time is older than what the server remembers is refused: a key or
/// a release it could repeat or come after may be forgotten already.
fn refuse_too_old(
    ctx: &WriteCtx<'_>,
    sent_at: Option<i64>,
    memory: std::time::Duration,
) -> ApiResult<()> {
    let Some(sent_at) = sent_at else {
        return Ok(());
    };
    if !ctx.retries_kept()? {
        return Ok(());
    }
    match retries::too_old(sent_at, ctx.now, memory) {
        None => Ok(()),
        Some(r) => Err(ApiError::conflict(r.message).with_hint(r.hint)),
    }
}

/// The kept answer, when `this` repeats the request it answered; else a refusal (not
/// kept: a mistaken key must not hide the first answer).
fn replay(kept: &KeptAnswer, this: Request<'_>, generation: Generation) -> ApiResult<Response> {
    let first = Request {
        route: &kept.request,
        digest: &kept.digest,
    };
    retries::same_request(&kept.key, first, this)
        .map_err(|r| ApiError::invalid(r.message).with_hint(r.hint))?;
    let answer = Answer {
        status: StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK),
        body: kept.answer.clone(),
        index: kept.index,
        generation: Some(generation),
    };
    let mut r = answer.into_response();
    r.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    Ok(r)
}

/// SHA-256 of the body as the server parsed it: the same request sent with its fields in
/// another order or spacing is the same request.
fn digest(body: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// 201 when recorded or changed, 200 when the same spec was there already.
pub(super) fn created_or_ok<T: Serialize>((v, changed): &(T, bool)) -> Answer {
    let status = if *changed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Answer::json(status, v)
}

/// 202 when an operation started, 200 when there was nothing to start.
pub(super) fn accepted_or_ok<T: Serialize>((v, started): &(T, bool)) -> Answer {
    let status = if *started {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Answer::json(status, v)
}

/// 202 with what is still being done, 204 when it is done.
pub(super) fn accepted_or_gone<T: Serialize>(v: &Option<T>) -> Answer {
    match v {
        Some(v) => Answer::json(StatusCode::ACCEPTED, v),
        None => Answer::empty(StatusCode::NO_CONTENT),
    }
}

/// 200 with the answer.
pub(super) fn ok<T: Serialize>(v: &T) -> Answer {
    Answer::json(StatusCode::OK, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_keeps_the_query_that_changes_what_it_does() {
        let check = |method: Method, uri: &str, want: &str| {
            assert_eq!(route(&method, &uri.parse().unwrap()), want, "{uri}");
        };
        check(
            Method::POST,
            "/v1/volumes/v/claims",
            "POST /v1/volumes/v/claims",
        );
        check(
            Method::POST,
            "/v1/volumes/v/claims?wait=10000ms",
            "POST /v1/volumes/v/claims",
        );
        check(
            Method::DELETE,
            "/v1/volumes/v?delete=true",
            "DELETE /v1/volumes/v?delete=true",
        );
    }

    #[test]
    fn keys_are_bounded_visible_ascii() {
        let check = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                IDEMPOTENCY_KEY_HEADER,
                HeaderValue::from_str(value).unwrap(),
            );
            key(&h)
        };
        assert_eq!(check("a-1_B").unwrap().as_deref(), Some("a-1_B"));
        assert!(check("").is_err());
        assert!(check("a b").is_err());
        assert!(check(&"k".repeat(MAX_IDEMPOTENCY_KEY + 1)).is_err());
        assert_eq!(key(&HeaderMap::new()).unwrap(), None);
    }
}
