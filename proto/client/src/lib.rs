//! The one client of csivol's HTTP API, used by the CLI, the node agent, dev mode, the tests
//! and the benchmark: bearer token, JSON bodies, the blocking-query index, the API's error
//! body, TLS through rustls with ring ([`tls`]). Each caller keeps its own idea of what a
//! failure means (the CLI's exit codes, the agent's retry or give up) by matching on
//! [`Error`]; the wire details live here once.
//!
//! Two levels: [`Client::send`] answers with whatever the server said ([`Raw`], for callers
//! that look at statuses and bodies themselves: tests of malformed requests, the
//! benchmark's accounting); [`Client::request`] and the typed endpoint calls turn an answer
//! into the API type or an [`Error`].

pub mod address;
mod agent;
pub mod channel;
pub mod once;
pub mod tls;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use csivol_api::{
    ErrorBody, ErrorResponse, GENERATION_HEADER, IDEMPOTENCY_KEY_HEADER, INDEX_HEADER, Node,
    SENT_AT_HEADER, TokenRequest, TokenResponse, WAIT_FOR_RELEASE, WAIT_HEADER,
};
use once::Once;
/// A failure below HTTP: no connection, a broken one, a deadline passed, or a client that
/// could not be set up.
pub use reqwest::Error as TransportError;
pub use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A client of one server, or of several serving one cluster (etcd store), with one
/// token (or none). Cheap to clone: clones share the connection pool and the server they
/// last reached.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    /// The servers' base URLs, without a trailing slash.
    bases: Arc<[String]>,
    /// The one last reached: requests go there first.
    current: Arc<AtomicUsize>,
    token: Option<String>,
    /// Deadline of a request that does not block on the server; `None`: no deadline.
    request_timeout: Option<Duration>,
    /// Every `GET` asks for `stale=true`.
    stale_reads: bool,
    /// Every request names this namespace (`?namespace=`); `None`: none, which the server
    /// takes for `default`.
    namespace: Option<String>,
    /// Every request that changes something says the caller follows its outcome
    /// ([`WAIT_HEADER`]).
    waits_for_release: bool,
}

/// How to build a [`Client`]; every setting but the address is optional.
#[derive(Debug)]
pub struct Builder {
    base: String,
    token: Option<String>,
    tls: Option<rustls::ClientConfig>,
    connect_timeout: Option<Duration>,
    request_timeout: Option<Duration>,
    user_agent: Option<String>,
    no_proxy: bool,
    stale_reads: bool,
    namespace: Option<String>,
}

impl Builder {
    /// The namespace every request names (`?namespace=NS`; `*` for every namespace, which
    /// only listings take); `None` names none, which the server takes for `default`.
    pub fn namespace(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// The bearer token sent with every request.
    pub fn token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The TLS configuration for `https://` servers (see [`tls::client_config`]); without
    /// one, the system's trust roots.
    pub fn tls(mut self, tls: rustls::ClientConfig) -> Self {
        self.tls = Some(tls);
        self
    }

    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Deadline of a request that does not block on the server; a blocking query gets its
    /// `wait` on top of it.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = Some(agent.into());
        self
    }

    /// Asks for possibly stale reads (`?stale=true` on every `GET`): with several servers
    /// over etcd, a server then answers from its own copy of the state without first
    /// catching up with the writes other servers acknowledged last.
    pub fn stale_reads(mut self, stale: bool) -> Self {
        self.stale_reads = stale;
        self
    }

    /// Ignores the `HTTP(S)_PROXY` environment.
    pub fn no_proxy(mut self) -> Self {
        self.no_proxy = true;
        self
    }

    /// The client, once every server address passed [`address::check`]: plain HTTP only
    /// to a loopback address, no `USER@`. A client with a plain HTTP address uses no proxy
    /// (`HTTP_PROXY` would be sent the token in clear), and `localhost` is never looked up.
    pub fn build(self) -> Result<Client, BuildError> {
        tls::install_provider();
        let list = addresses(&self.base);
        if list.is_empty() {
            return Err(BuildError::Address(address::AddressError::Invalid {
                addr: self.base.clone(),
                why: "no server address".to_owned(),
            }));
        }
        let urls = list
            .iter()
            .map(|a| address::check(a))
            .collect::<Result<Vec<_>, _>>()?;
        let mut http = reqwest::Client::builder()
            .pool_idle_timeout(tls::POOL_IDLE_TIMEOUT)
            .resolve_to_addrs("localhost", &address::LOCALHOST);
        if urls.iter().any(|u| u.scheme() == "http") {
            http = http.no_proxy();
        }
        if let Some(tls) = self.tls {
            http = http.tls_backend_preconfigured(tls);
        }
        if let Some(t) = self.connect_timeout {
            http = http.connect_timeout(t);
        }
        if let Some(ua) = self.user_agent {
            http = http.user_agent(ua);
        }
        if self.no_proxy {
            http = http.no_proxy();
        }
        Ok(Client {
            http: http.build()?,
            bases: urls.iter().map(address::base).collect::<Vec<_>>().into(),
            current: Arc::new(AtomicUsize::new(0)),
            token: self.token,
            request_timeout: self.request_timeout,
            stale_reads: self.stale_reads,
            namespace: self.namespace,
            waits_for_release: false,
        })
    }
}

/// What a request says beside its body: a mutating request's key and send time (exact
/// retries), or the generation of the state a read follows from.
#[derive(Clone, Copy, Debug, Default)]
struct Said<'a> {
    once: Option<&'a Once>,
    generation: Option<&'a str>,
}

impl<'a> Said<'a> {
    fn once(once: &'a Once) -> Self {
        Self {
            once: Some(once),
            generation: None,
        }
    }

    fn following(generation: Option<&'a str>) -> Self {
        Self {
            once: None,
            generation,
        }
    }
}

/// Why a client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A server address the rule refuses ([`address::check`]); its `hint` says what to
    /// write instead.
    #[error(transparent)]
    Address(#[from] address::AddressError),
    #[error("failed to set up the HTTP client: {0}")]
    Transport(#[from] TransportError),
}

/// An answer as the server sent it.
#[derive(Debug)]
pub struct Raw {
    pub status: StatusCode,
    /// The blocking-query index (`x-csivol-index`), if the answer carried one.
    pub index: Option<u64>,
    /// The generation of the state the index belongs to (`x-csivol-generation`), if the
    /// answer carried one (an older server's does not).
    pub generation: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

/// A successful answer: its status, body and blocking-query index.
#[derive(Debug)]
pub struct Answer<T> {
    pub status: StatusCode,
    pub body: T,
    pub index: Option<u64>,
    /// The generation `index` belongs to ([`Cursor`]).
    pub generation: Option<String>,
}

impl<T> Answer<T> {
    /// Where to follow on from after this answer: its index (`index` when it carried
    /// none) and generation. Taken as it is, never kept at the greater of two indexes:
    /// the state can go back in time, and its indexes with it.
    pub fn cursor(&self, index: u64) -> Cursor {
        Cursor {
            index: self.index.unwrap_or(index),
            generation: self.generation.clone(),
        }
    }
}

/// Where a blocking query follows from: the index of the last answer, and the generation
/// of the state it belongs to. A server of another generation (its state went back in
/// time, or it is another history) answers at once with the state as it is and a cursor
/// of its own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    pub index: u64,
    pub generation: Option<String>,
}

/// Why a request got no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No HTTP answer: no connection, a broken one, or the deadline passed
    /// (`source.is_timeout()`).
    #[error("failed to reach the server at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: TransportError,
    },
    /// An HTTP error status, with the API's error body when there was one and the text of
    /// the answer either way.
    #[error("the server answered {status}: {}", match error { Some(e) => &e.message, None => text })]
    Refused {
        status: StatusCode,
        error: Option<ErrorBody>,
        text: String,
    },
    /// A success status with a body that is not the expected type.
    #[error("the server sent an answer that is not the expected JSON (HTTP {status}): {source}")]
    Invalid {
        status: StatusCode,
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// The server answered 404 (the resource, or the node, is unknown to it).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Refused { status, .. } if *status == StatusCode::NOT_FOUND)
    }

    /// The HTTP status the server refused with, if it answered.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Refused { status, .. } | Self::Invalid { status, .. } => Some(*status),
            Self::Unreachable { .. } => None,
        }
    }
}

/// What a request carries.
#[derive(Debug)]
pub enum Body<'a, B: ?Sized> {
    None,
    Json(&'a B),
    /// Bytes sent as `application/json` whatever they are (tests of malformed bodies).
    Bytes(Vec<u8>),
}

/// The server addresses in `list`: comma-separated (`--addr a,b`, `CSIVOL_ADDR=a,b`),
/// without trailing slashes.
pub fn addresses(list: &str) -> Vec<String> {
    list.split(',')
        .map(|a| a.trim().trim_end_matches('/').to_owned())
        .filter(|a| !a.is_empty())
        .collect()
}

impl Client {
    /// A builder for a client of the server at `base` (`http(s)://host:port`), or of the
    /// servers of one cluster, comma-separated: a request that cannot connect to one is
    /// sent to the next (it never reached a server, so sending it again is safe).
    pub fn builder(base: &str) -> Builder {
        Builder {
            base: base.to_owned(),
            token: None,
            tls: None,
            connect_timeout: None,
            request_timeout: None,
            user_agent: None,
            no_proxy: false,
            stale_reads: false,
            namespace: None,
        }
    }

    /// The base URL of the server last reached (or first named), without a trailing slash.
    pub fn base(&self) -> &str {
        &self.bases[self.current.load(Ordering::Relaxed) % self.bases.len().max(1)]
    }

    /// Every server this client may use.
    pub fn bases(&self) -> &[String] {
        &self.bases
    }

    /// The same client (and connection pool) with another token.
    pub fn with_token(&self, token: Option<String>) -> Self {
        Self {
            token,
            ..self.clone()
        }
    }

    /// The same client (and connection pool), saying with every request that changes
    /// something that the caller follows its outcome (`--wait`): the server holds what only
    /// a release under way stands in the way of until that release has finished, instead
    /// of refusing it ([`WAIT_HEADER`]).
    pub fn waiting_for_release(&self) -> Self {
        Self {
            waits_for_release: true,
            ..self.clone()
        }
    }

    /// Deadline of a blocking query that may wait `wait` on the server.
    pub fn blocking_timeout(&self, wait: Duration) -> Option<Duration> {
        self.request_timeout.map(|t| t + wait)
    }

    /// Sends a request and returns the answer as it came, whatever its status. `timeout`
    /// `None` uses the client's request timeout.
    pub async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        timeout: Option<Duration>,
    ) -> Result<Raw, Error> {
        self.in_turn(Retry::Unconnected, |base| {
            self.send_to(base, method.clone(), path, &body, timeout, Said::default())
        })
        .await
    }

    /// [`Client::send`] for a request that may be carried out twice (a heartbeat, a
    /// registration, a read): it also moves on to the next server when one did not
    /// answer within `timeout` (a server cut off from the network accepts nothing and
    /// answers nothing) or answered 503 (it cannot serve now, e.g. it cannot reach its
    /// store), since sending it again elsewhere changes nothing that it did not.
    pub async fn send_idempotent<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        timeout: Option<Duration>,
    ) -> Result<Raw, Error> {
        self.send_idempotent_in(method, path, body, timeout, None)
            .await
    }

    /// [`Client::send_idempotent`] that names the `generation` of the state the caller
    /// follows ([`Cursor`]): a blocking query whose index came from another generation
    /// is answered at once.
    pub async fn send_idempotent_in<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        timeout: Option<Duration>,
        generation: Option<&str>,
    ) -> Result<Raw, Error> {
        self.in_turn(Retry::Unanswered, |base| {
            self.send_to(
                base,
                method.clone(),
                path,
                &body,
                timeout,
                Said::following(generation),
            )
        })
        .await
    }

    /// The server answered last is to be asked last next time: a caller learned it does
    /// not serve (its node channel went silent).
    pub fn avoid_current(&self) {
        let n = self.bases.len().max(1);
        let at = self.current.load(Ordering::Relaxed) % n;
        let _ =
            self.current
                .compare_exchange(at, (at + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Runs `attempt` against the server that answered last, then each other one in
    /// order while a server cannot be connected to (the request never reached it), or
    /// with [`Retry::Unanswered`] while one does not answer or answers 503; the first
    /// server that answers becomes the one asked first next time.
    async fn in_turn<'a, T: Answered, Fut>(
        &'a self,
        retry: Retry,
        mut attempt: impl FnMut(&'a str) -> Fut,
    ) -> Result<T, Error>
    where
        Fut: Future<Output = Result<T, Error>>,
    {
        let n = self.bases.len().max(1);
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut i = 0;
        loop {
            let at = (first + i) % n;
            let base = self.bases.get(at).map_or("", String::as_str);
            match attempt(base).await {
                result if i + 1 < n && retry.moves_on(&result) => {
                    i += 1;
                }
                result => {
                    if result.is_ok() && at != first {
                        self.current.store(at, Ordering::Relaxed);
                    }
                    return result;
                }
            }
        }
    }

    async fn send_to<B: Serialize + ?Sized>(
        &self,
        base: &str,
        method: Method,
        path: &str,
        body: &Body<'_, B>,
        timeout: Option<Duration>,
        said: Said<'_>,
    ) -> Result<Raw, Error> {
        let mut url = format!("{base}{path}");
        let mut add = |pair: &str| {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str(pair);
        };
        if self.stale_reads && method == Method::GET {
            add("stale=true");
        }
        if let Some(ns) = &self.namespace {
            // A namespace is a name or `*`: nothing in it needs escaping but `*`, which a
            // query takes as it is.
            add(&format!("namespace={ns}"));
        }
        let changes = method != Method::GET;
        let mut req = self.http.request(method, &url);
        if let Some(t) = timeout.or(self.request_timeout) {
            req = req.timeout(t);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if self.waits_for_release && changes {
            req = req.header(WAIT_HEADER, WAIT_FOR_RELEASE);
        }
        if let Some(once) = said.once {
            if let Some(key) = once.key() {
                req = req.header(IDEMPOTENCY_KEY_HEADER, key);
            }
            req = req.header(SENT_AT_HEADER, once.sent_at_ms().to_string());
        }
        if let Some(g) = said.generation {
            req = req.header(GENERATION_HEADER, g);
        }
        req = match body {
            Body::None => req,
            Body::Json(b) => req.json(*b),
            Body::Bytes(bytes) => req
                .header("content-type", "application/json")
                .body(bytes.clone()),
        };
        let unreachable = |source| Error::Unreachable {
            url: url.clone(),
            source,
        };
        let mut resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        let index = resp
            .headers()
            .get(INDEX_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let generation = resp
            .headers()
            .get(GENERATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        // Taken, not copied: the body is all that is read from the response after this.
        // `Vec::from` keeps the collected body's buffer, which is the only owner of it; a
        // copy would be a second buffer of the body's size (35 MiB for a listing of
        // 100,000 volumes), its pages faulted in afresh.
        let headers = std::mem::take(resp.headers_mut());
        let body = Vec::from(resp.bytes().await.map_err(unreachable)?);
        Ok(Raw {
            status,
            index,
            generation,
            headers,
            body,
        })
    }

    /// A request whose successful answer is a `T`; an error status is [`Error::Refused`].
    /// An empty successful answer reads as JSON `null`.
    pub async fn request<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Option<Duration>,
    ) -> Result<Answer<T>, Error> {
        let body = body.map_or(Body::None, Body::Json);
        let raw = self.send(method, path, body, timeout).await?;
        raw.into_answer()
    }

    /// `GET path`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        Ok(self
            .request::<(), T>(Method::GET, path, None, None)
            .await?
            .body)
    }

    /// A blocking query: answers once the resource changed past the cursor's index, or
    /// after `wait`; at once when the server's state is of another generation than the
    /// cursor's. Follow on from [`Answer::cursor`].
    pub async fn watch<T: DeserializeOwned>(
        &self,
        path: &str,
        cursor: &Cursor,
        wait: Duration,
    ) -> Result<Answer<T>, Error> {
        let path = blocking_path(path, cursor.index, wait);
        let timeout = self.blocking_timeout(wait);
        let raw = self
            .in_turn(Retry::Unconnected, |base| {
                self.send_to::<()>(
                    base,
                    Method::GET,
                    &path,
                    &Body::None,
                    timeout,
                    Said::following(cursor.generation.as_deref()),
                )
            })
            .await?;
        raw.into_answer()
    }

    /// `GET path` (a path that carries its own blocking query's `index` and `wait`), naming
    /// the `generation` of the state the caller follows, within `timeout`.
    pub async fn get_in<T: DeserializeOwned>(
        &self,
        path: &str,
        generation: Option<&str>,
        timeout: Duration,
    ) -> Result<Answer<T>, Error> {
        let raw = self
            .in_turn(Retry::Unconnected, |base| {
                self.send_to::<()>(
                    base,
                    Method::GET,
                    path,
                    &Body::None,
                    Some(timeout),
                    Said::following(generation),
                )
            })
            .await?;
        raw.into_answer()
    }

    // ---- operator calls ----

    pub async fn create_token(&self, req: &TokenRequest) -> Result<TokenResponse, Error> {
        self.post("/v1/tokens", req).await
    }

    pub async fn nodes(&self) -> Result<Vec<Node>, Error> {
        self.get("/v1/nodes").await
    }

    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, Error> {
        Ok(self
            .request(Method::POST, path, Some(body), None)
            .await?
            .body)
    }
}

/// When a request moves on to the next server.
#[derive(Clone, Copy, Debug)]
enum Retry {
    /// Only when it could not connect: the request never reached the server.
    Unconnected,
    /// Also when no answer came (a timeout, a broken connection) or the server answered
    /// 503: for requests that may be carried out twice.
    Unanswered,
}

impl Retry {
    fn moves_on<T: Answered>(self, result: &Result<T, Error>) -> bool {
        match (self, result) {
            (_, Err(Error::Unreachable { source, .. })) if source.is_connect() => true,
            (Self::Unconnected, _) => false,
            (Self::Unanswered, Err(Error::Unreachable { .. })) => true,
            (Self::Unanswered, Err(Error::Refused { status, .. })) => {
                *status == StatusCode::SERVICE_UNAVAILABLE
            }
            (Self::Unanswered, Ok(answer)) => answer.status() == StatusCode::SERVICE_UNAVAILABLE,
            (Self::Unanswered, Err(Error::Invalid { .. })) => false,
        }
    }
}

/// What a server answered, as far as moving on is concerned.
trait Answered {
    fn status(&self) -> StatusCode;
}

impl Answered for Raw {
    fn status(&self) -> StatusCode {
        self.status
    }
}

impl Answered for channel::Channel {
    fn status(&self) -> StatusCode {
        StatusCode::SWITCHING_PROTOCOLS
    }
}

impl Raw {
    /// The answer as a `T` when its status is a success, else [`Error::Refused`].
    pub fn into_answer<T: DeserializeOwned>(self) -> Result<Answer<T>, Error> {
        let status = self.status;
        if !status.is_success() {
            let error = serde_json::from_slice::<ErrorResponse>(&self.body)
                .ok()
                .map(|e| e.error);
            return Err(Error::Refused {
                status,
                error,
                text: String::from_utf8_lossy(&self.body).into_owned(),
            });
        }
        let bytes = if self.body.is_empty() {
            &b"null"[..]
        } else {
            &self.body[..]
        };
        let body =
            serde_json::from_slice(bytes).map_err(|source| Error::Invalid { status, source })?;
        Ok(Answer {
            status,
            body,
            index: self.index,
            generation: self.generation,
        })
    }
}

/// `path` with a blocking query's `index` and `wait`.
pub fn blocking_path(path: &str, index: u64, wait: Duration) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}index={index}&wait={}ms", wait.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_paths() {
        let wait = Duration::from_secs(30);
        assert_eq!(
            blocking_path("/v1/events", 7, wait),
            "/v1/events?index=7&wait=30000ms"
        );
        assert_eq!(
            blocking_path("/v1/events?volume=v", 0, wait),
            "/v1/events?volume=v&index=0&wait=30000ms"
        );
    }

    #[test]
    fn answers_become_types_or_errors() {
        let raw = |status: u16, body: &str| Raw {
            status: StatusCode::from_u16(status).unwrap(),
            index: Some(3),
            generation: None,
            headers: Default::default(),
            body: body.as_bytes().to_vec(),
        };
        let a: Answer<Vec<u32>> = raw(200, "[1,2]").into_answer().unwrap();
        assert_eq!((a.body, a.index), (vec![1, 2], Some(3)));
        let a: Answer<Option<u32>> = raw(200, "").into_answer().unwrap();
        assert_eq!(a.body, None);

        let e = raw(
            404,
            r#"{"error":{"code":"not_found","message":"no volume `v`"}}"#,
        )
        .into_answer::<u32>()
        .unwrap_err();
        assert!(e.is_not_found());
        match e {
            Error::Refused {
                error: Some(body), ..
            } => assert_eq!(body.code, csivol_api::ErrorCode::NotFound),
            other => panic!("{other:?}"),
        }
        let e = raw(502, "bad gateway").into_answer::<u32>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "the server answered 502 Bad Gateway: bad gateway"
        );
        let e = raw(200, "{").into_answer::<u32>().unwrap_err();
        assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
    }
}
