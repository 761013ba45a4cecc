//! The CLI's side of the shared API client (`csivol-client`): address and token
//! resolution, request deadlines, and the translation of every failure into a [`Failure`]
//! with its exit code.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use csivol_api::ErrorResponse;
pub use csivol_client::Answer;
use csivol_client::{Body, Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::GlobalArgs;
use crate::env;
use crate::failure::{Exit, Failure};

/// How long an ordinary request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Volumes per page of `GET /v1/volumes` (`csivol volume list`, name completion).
pub const VOLUME_PAGE: usize = 1000;
/// The longest single blocking query; longer waits are several of them.
pub const MAX_BLOCK: Duration = Duration::from_secs(30);
/// The longest a claim's POST or DELETE is held (`?wait=`) off a terminal: a step that
/// takes longer still gets its line in a CI job's log within this time.
pub const MAX_HOLD: Duration = Duration::from_secs(10);

/// Where the token came from, so an unauthorized answer can say which token was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenSource {
    Flag,
    Env,
    File(PathBuf),
    DefaultFile(PathBuf),
    None,
}

impl fmt::Display for TokenSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Flag => f.write_str("--token"),
            Self::Env => f.write_str(env::CSIVOL_TOKEN),
            Self::File(p) => write!(f, "{} ({})", env::CSIVOL_TOKEN_FILE, p.display()),
            Self::DefaultFile(p) => write!(f, "the default token file {}", p.display()),
            Self::None => f.write_str("nowhere"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Client {
    api: csivol_client::Client,
    /// The server's base URL, without a trailing slash.
    pub addr: String,
    token_source: TokenSource,
    /// The default CA file, when the CA came from there.
    default_ca: Option<PathBuf>,
}

impl Client {
    /// Resolves the address and the token: flags, then environment, then defaults.
    pub fn from_args(args: &GlobalArgs) -> anyhow::Result<Self> {
        let ca = args
            .ca_cert
            .clone()
            .or_else(|| env::var(env::CSIVOL_CACERT).map(PathBuf::from));
        // The default CA file, when it is the one used: a refusal then says where it came
        // from (a dev cluster may have put it there).
        let default_ca = ca.is_none().then(env::default_ca_file).flatten();
        let ca = ca.or_else(|| default_ca.clone());
        let addr = match args.addr.is_empty() {
            false => args.addr.join(","),
            true => env::var(env::CSIVOL_ADDR).unwrap_or_else(|| {
                if env::default_ca_file().is_some() {
                    env::DEFAULT_TLS_ADDR.to_owned()
                } else {
                    env::DEFAULT_ADDR.to_owned()
                }
            }),
        };
        // Several servers of one cluster (etcd store): comma-separated or `--addr` repeated;
        // a server that cannot be reached is passed over for the next.
        let mut addrs = csivol_client::addresses(&addr);
        if addrs.is_empty() {
            addrs.push(addr.clone());
        }
        // With a CA at hand, an address without a scheme means TLS.
        let scheme = if ca.is_some() { "https" } else { "http" };
        let addr = addrs
            .iter()
            .map(|a| normalise_addr(a, scheme))
            .collect::<anyhow::Result<Vec<_>>>()?
            .join(",");
        let (token, token_source) = resolve_token(args.token.as_deref())?;
        let mut api = csivol_client::Client::builder(&addr)
            .token(token)
            .connect_timeout(Duration::from_secs(5))
            .request_timeout(REQUEST_TIMEOUT)
            .stale_reads(args.stale)
            .user_agent(concat!("csivol/", env!("CARGO_PKG_VERSION")));
        if addr.starts_with("https://") {
            let tls = csivol_client::tls::client_config(ca.as_deref(), None).map_err(|e| {
                Failure::usage(e).hint(format!(
                    "pass the CA that signed the server's certificate with --ca-cert or {}",
                    env::CSIVOL_CACERT
                ))
            })?;
            api = api.tls(tls);
        }
        let api = api
            .build()
            .map_err(|e| anyhow::Error::new(e).context("failed to set up the HTTP client"))?;
        Ok(Self {
            api,
            addr,
            token_source,
            default_ca,
        })
    }

    /// `GET /v1/volumes` with `query` (filters, `k=v` each), page by page: the server
    /// answers at most [`VOLUME_PAGE`] volumes at a time, and a shorter page is the last.
    pub async fn volumes(&self, query: &[String]) -> anyhow::Result<Vec<csivol_api::Volume>> {
        let mut all: Vec<csivol_api::Volume> = Vec::new();
        loop {
            let mut q = query.to_vec();
            q.push(format!("limit={VOLUME_PAGE}"));
            if let Some(last) = all.last() {
                q.push(format!("after={}", last.name));
            }
            let page: Vec<csivol_api::Volume> =
                self.get(&format!("/v1/volumes?{}", q.join("&"))).await?;
            let done = page.len() < VOLUME_PAGE;
            all.extend(page);
            if done {
                return Ok(all);
            }
        }
    }

    /// `GET path`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Ok(self.call::<(), T>(Method::GET, path, None).await?.body)
    }

    /// A blocking query: answers once the resource changed past `index`, or after `wait`.
    /// `None` when the resource is gone (404).
    pub async fn watch<T: DeserializeOwned>(
        &self,
        path: &str,
        index: u64,
        wait: Duration,
    ) -> anyhow::Result<Option<Answer<T>>> {
        let answer = self.api.watch(path, index, wait).await;
        not_found_as_none(answer.map_err(|e| self.failure(e)))
    }

    /// [`Client::watch`], with an answer of 503 (the server cannot serve it now: its
    /// long-poll slots are all taken, say) told apart as `Ok(Err(failure))`: worth asking
    /// again shortly.
    pub async fn watch_or_busy<T: DeserializeOwned>(
        &self,
        path: &str,
        index: u64,
        wait: Duration,
    ) -> anyhow::Result<Result<Option<Answer<T>>, Failure>> {
        match self.api.watch(path, index, wait).await {
            Err(csivol_client::Error::Refused { status, text, .. })
                if status == StatusCode::SERVICE_UNAVAILABLE =>
            {
                Ok(Err(self.api_failure(status, &text)))
            }
            answer => not_found_as_none(answer.map_err(|e| self.failure(e))).map(Ok),
        }
    }

    /// `GET path` for a blocking query that may take up to `wait` to answer.
    pub async fn get_blocking<T: DeserializeOwned>(
        &self,
        path: &str,
        wait: Duration,
    ) -> anyhow::Result<Answer<T>> {
        self.request::<(), T>(Method::GET, path, None, wait + REQUEST_TIMEOUT)
            .await
    }

    pub async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<Answer<T>> {
        self.request(method, path, body, REQUEST_TIMEOUT).await
    }

    /// [`Client::call`] for an action the server runs before it answers, which may take up
    /// to `runs_for` beyond an ordinary request (a fence method).
    pub async fn call_running<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        runs_for: Duration,
    ) -> anyhow::Result<Answer<T>> {
        self.request(method, path, body, REQUEST_TIMEOUT + runs_for)
            .await
    }

    /// A request whose answer has no body worth reading (e.g. 204).
    pub async fn call_empty(&self, method: Method, path: &str) -> anyhow::Result<StatusCode> {
        let raw = (self.api.send::<()>(method, path, Body::None, None).await)
            .map_err(|e| self.failure(e))?;
        if raw.status.is_success() {
            return Ok(raw.status);
        }
        let text = String::from_utf8_lossy(&raw.body);
        Err(self.api_failure(raw.status, &text).into())
    }

    async fn request<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> anyhow::Result<Answer<T>> {
        (self.api.request(method, path, body, Some(timeout)).await).map_err(|e| self.failure(e))
    }

    /// What a failed request means to the CLI user.
    fn failure(&self, e: csivol_client::Error) -> anyhow::Error {
        match e {
            csivol_client::Error::Unreachable { source, .. } => self.transport(source).into(),
            csivol_client::Error::Refused { status, text, .. } => {
                self.api_failure(status, &text).into()
            }
            csivol_client::Error::Invalid { status, source } => {
                anyhow::Error::new(source).context(format!(
                    "the server at {} sent an answer this csivol does not understand (HTTP \
                     {status}); is it a csivol server of the same version?",
                    self.addr
                ))
            }
        }
    }

    /// A request that got no HTTP answer.
    fn transport(&self, e: csivol_client::TransportError) -> Failure {
        let hint = format!(
            "start the server (`csivol-server serve --data-dir DIR`, or `csivol-server dev`), or \
             point --addr or {} at it",
            env::CSIVOL_ADDR
        );
        if e.is_timeout() {
            return Failure::new(
                Exit::Unreachable,
                format!("the csivol server at {} did not answer in time", self.addr),
            )
            .hint(hint);
        }
        // The innermost cause says it best ("Connection refused (os error 111)").
        let mut cause: &dyn std::error::Error = &e;
        while let Some(next) = cause.source() {
            cause = next;
        }
        let text = cause.to_string();
        // A TLS server answers a plain request with a TLS record, which HTTP/1 parsing
        // calls an invalid version; a plain server answers a TLS hello with HTTP, which
        // rustls calls a message of an invalid content type.
        let swapped = if text.contains("invalid HTTP version") && self.addr.contains("http://") {
            Some(("TLS", self.addr.replace("http://", "https://")))
        } else if text.contains("InvalidContentType") && self.addr.contains("https://") {
            Some(("plain HTTP", self.addr.replace("https://", "http://")))
        } else {
            None
        };
        if let Some((speaks, to)) = swapped {
            return Failure::new(
                Exit::Unreachable,
                format!(
                    "the csivol server at {} speaks {speaks}: use {to}",
                    self.addr
                ),
            )
            .hint(format!(
                "pass --addr {to} (or set {} to it)",
                env::CSIVOL_ADDR
            ));
        }
        let hint = if text.contains("certificate") || text.contains("UnknownIssuer") {
            self.ca_hint()
        } else {
            hint
        };
        Failure::new(
            Exit::Unreachable,
            format!("cannot reach the csivol server at {}: {text}", self.addr),
        )
        .hint(hint)
    }

    /// An HTTP error answer, from the API's error body when there is one.
    fn api_failure(&self, status: StatusCode, text: &str) -> Failure {
        let Ok(ErrorResponse { error }) = serde_json::from_str::<ErrorResponse>(text) else {
            let exit = match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Exit::Unauthorized,
                StatusCode::NOT_FOUND => Exit::NotFound,
                StatusCode::SERVICE_UNAVAILABLE
                | StatusCode::BAD_GATEWAY
                | StatusCode::GATEWAY_TIMEOUT => Exit::Unreachable,
                _ => Exit::Error,
            };
            let first = text.lines().next().unwrap_or("").trim();
            return Failure::new(
                exit,
                format!(
                    "the server at {} answered HTTP {status}{}",
                    self.addr,
                    if first.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", truncate(first, 200))
                    }
                ),
            );
        };
        let exit = Exit::from_api(error.code);
        let mut message = error.message;
        let mut hint = error.hint;
        if status == StatusCode::UNAUTHORIZED {
            // Say which token was refused, and where csivol looked for one.
            if self.token_source == TokenSource::None {
                hint = Some(format!(
                    "pass a token with --token, {} or {}, or put it in {}; a new server writes its \
                     first operator token to <data-dir>/operator.token",
                    env::CSIVOL_TOKEN,
                    env::CSIVOL_TOKEN_FILE,
                    env::default_token_file().map_or_else(
                        || "~/.config/csivol/token".into(),
                        |p| p.display().to_string()
                    )
                ));
            } else {
                message = format!("{message} (token from {})", self.token_source);
                hint = Some(self.token_hint());
            }
        }
        Failure {
            exit,
            message,
            hint,
        }
    }
}

fn not_found_as_none<T>(r: anyhow::Result<T>) -> anyhow::Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e)
            if e.downcast_ref::<Failure>()
                .is_some_and(|f| f.exit == Exit::NotFound) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

/// `host:port` becomes `SCHEME://host:port`; a trailing slash is dropped.
fn normalise_addr(addr: &str, scheme: &str) -> anyhow::Result<String> {
    let addr = addr.trim();
    let full = if addr.contains("://") {
        addr.to_owned()
    } else {
        format!("{scheme}://{addr}")
    };
    let bad = |why: &str| {
        Failure::usage(format!("invalid server address `{addr}`: {why}")).hint(format!(
            "use e.g. --addr {} (or set {})",
            env::DEFAULT_ADDR,
            env::CSIVOL_ADDR
        ))
    };
    let url = csivol_client::Url::parse(&full).map_err(|e| bad(&e.to_string()))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(bad("only http:// and https:// are supported").into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host").into());
    }
    if url.path() != "/" || url.query().is_some() {
        return Err(bad("give only the scheme, host and port").into());
    }
    Ok(url.origin().ascii_serialization())
}

impl Client {
    /// Why the server's certificate may not be trusted, and which CA to pass.
    fn ca_hint(&self) -> String {
        let right = format!(
            "pass the CA that signed it with --ca-cert or {} (csivol-server tls init wrote it as \
             ca.pem)",
            env::CSIVOL_CACERT
        );
        if let Some(path) = &self.default_ca
            && let Some(dir) = dev_record(&path.with_file_name(env::DEV_CA_RECORD))
        {
            return format!(
                "the server's certificate is not signed by the CA in {}, which the dev cluster in \
                 {dir} wrote; if that is not the server at {}, run `source DIR/env` with the dev \
                 dir of the running cluster, or {right}",
                path.display(),
                self.addr
            );
        }
        format!("the server's certificate is not trusted: {right}")
    }

    /// Where the refused token came from and how to use the right one.
    fn token_hint(&self) -> String {
        let right = format!(
            "pass the right token with --token or {}; a server writes its first operator token \
             to <data-dir>/operator.token",
            env::CSIVOL_TOKEN
        );
        if let TokenSource::DefaultFile(path) = &self.token_source
            && let Some(dir) = dev_record(&path.with_file_name(env::DEV_TOKEN_RECORD))
        {
            return format!(
                "that token was written by the dev cluster in {dir}; if that is not the server at \
                 {}, run `source DIR/env` with the dev dir of the running cluster, or {right}",
                self.addr
            );
        }
        right
    }
}

/// The dev dir a dev-mode record (`token.from-dev`, `ca.from-dev`) names: its second line.
fn dev_record(path: &std::path::Path) -> Option<String> {
    let record = std::fs::read_to_string(path).ok()?;
    record.lines().nth(1).map(str::to_owned)
}

fn resolve_token(flag: Option<&str>) -> anyhow::Result<(Option<String>, TokenSource)> {
    if let Some(t) = flag {
        return Ok((Some(t.trim().to_owned()), TokenSource::Flag));
    }
    if let Some(t) = env::var(env::CSIVOL_TOKEN) {
        return Ok((Some(t.trim().to_owned()), TokenSource::Env));
    }
    if let Some(path) = env::var(env::CSIVOL_TOKEN_FILE) {
        let path = PathBuf::from(path);
        let token = read_token_file(&path).map_err(|e| {
            Failure::usage(format!(
                "cannot read the token file {} named by {}: {e}",
                path.display(),
                env::CSIVOL_TOKEN_FILE
            ))
        })?;
        return Ok((Some(token), TokenSource::File(path)));
    }
    if let Some(path) = env::default_token_file()
        && let Ok(token) = read_token_file(&path)
    {
        return Ok((Some(token), TokenSource::DefaultFile(path)));
    }
    Ok((None, TokenSource::None))
}

fn read_token_file(path: &std::path::Path) -> std::io::Result<String> {
    let token = std::fs::read_to_string(path)?.trim().to_owned();
    if token.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the file is empty",
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            normalise_addr("127.0.0.1:7420", "http").unwrap(),
            "http://127.0.0.1:7420"
        );
        assert_eq!(
            normalise_addr("127.0.0.1:7420", "https").unwrap(),
            "https://127.0.0.1:7420"
        );
        assert_eq!(
            normalise_addr("http://h:1/", "https").unwrap(),
            "http://h:1"
        );
        assert_eq!(
            normalise_addr("https://h:1", "http").unwrap(),
            "https://h:1"
        );
        for bad in ["http://h:1/v1", "ftp://x", "http://"] {
            let e = normalise_addr(bad, "http").unwrap_err();
            assert_eq!(
                e.downcast_ref::<Failure>().unwrap().exit,
                Exit::Usage,
                "{bad}"
            );
        }
    }
}
