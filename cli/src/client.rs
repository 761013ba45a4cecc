//! The CLI's side of the shared API client (`csivol-client`): address and token
//! resolution, request deadlines, and the translation of every failure into a [`Failure`]
//! with its exit code.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use csivol_api::ErrorResponse;
use csivol_client::address::AddressError;
pub use csivol_client::{Answer, Cursor};
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
    /// The namespace every request names (`-n`, `CSIVOL_NAMESPACE`, else `default`), or
    /// `*` with `--all-namespaces`.
    pub namespace: String,
    /// The server's base URL, without a trailing slash.
    pub addr: String,
    token_source: TokenSource,
    /// The default CA file, when the CA came from there.
    default_ca: Option<PathBuf>,
}

impl Client {
    /// Resolves the address and the token: flags, then environment, then defaults.
    pub fn from_args(args: &GlobalArgs) -> anyhow::Result<Self> {
        let ca = match &args.ca_cert {
            Some(ca) => Some(ca.clone()),
            None => env::setting(env::CSIVOL_CACERT)
                .map_err(empty_setting)?
                .map(PathBuf::from),
        };
        // The default CA file, when it is the one used: a refusal then says where it came
        // from (a dev cluster may have put it there).
        let default_ca = ca.is_none().then(env::default_ca_file).flatten();
        let ca = ca.or_else(|| default_ca.clone());
        let addr = match args.addr.is_empty() {
            false => args.addr.join(","),
            true => env::setting(env::CSIVOL_ADDR)
                .map_err(empty_setting)?
                .unwrap_or_else(|| {
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
        // With a CA at hand, an address without a scheme means TLS; without one, plain
        // HTTP on loopback, and nothing elsewhere (`csivol_client::address`).
        let addr = addrs
            .iter()
            .map(|a| normalise_addr(a, ca.is_some()))
            .collect::<anyhow::Result<Vec<_>>>()?
            .join(",");
        let (token, token_source) = resolve_token(args.token.as_deref())?;
        let namespace = resolve_namespace(args)?;
        let mut api = csivol_client::Client::builder(&addr)
            .token(token)
            .connect_timeout(Duration::from_secs(5))
            .request_timeout(REQUEST_TIMEOUT)
            .stale_reads(args.stale)
            .namespace((namespace != csivol_api::DEFAULT_NAMESPACE).then(|| namespace.clone()))
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
        let api = api.build().map_err(|e| match e {
            csivol_client::BuildError::Address(e) => {
                anyhow::Error::from(Failure::usage(e.to_string()).hint(e.hint()))
            }
            e => anyhow::Error::new(e),
        })?;
        Ok(Self {
            api,
            namespace,
            addr,
            token_source,
            default_ca,
        })
    }

    /// The same client, saying with every request that changes something that the
    /// command follows its outcome (`--wait`): the server then holds what only a release
    /// under way stands in the way of until that release has finished, instead of refusing
    /// it. A server that predates this ignores it and answers as before.
    pub fn waiting_for_release(&self) -> Self {
        Self {
            api: self.api.waiting_for_release(),
            ..self.clone()
        }
    }

    /// `GET /v1/volumes` with `query` (filters, `k=v` each), page by page: the server
    /// answers at most [`VOLUME_PAGE`] volumes at a time, and a shorter page is the last.
    pub async fn volumes(&self, query: &[String]) -> anyhow::Result<Vec<csivol_api::Volume>> {
        let mut all: Vec<csivol_api::Volume> = Vec::new();
        loop {
            let mut q = query.to_vec();
            q.push(format!("limit={VOLUME_PAGE}"));
            if let Some(last) = all.last() {
                // Across namespaces a page starts after a volume's key.
                let after = match self.all_namespaces() {
                    true => csivol_api::volume_key(&last.namespace, &last.name),
                    false => last.name.clone(),
                };
                q.push(format!("after={after}"));
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

    /// Whether the command lists every namespace (`-A`).
    pub fn all_namespaces(&self) -> bool {
        self.namespace == csivol_api::ALL_NAMESPACES
    }

    /// `GET path`.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> anyhow::Result<T> {
        Ok(self.call::<(), T>(Method::GET, path, None).await?.body)
    }

    /// A blocking query: answers once the resource changed past the cursor, or after
    /// `wait` (at once when the server's state is of another generation). `None` when the
    /// resource is gone (404).
    pub async fn watch<T: DeserializeOwned>(
        &self,
        path: &str,
        cursor: &Cursor,
        wait: Duration,
    ) -> anyhow::Result<Option<Answer<T>>> {
        let answer = self.api.watch(path, cursor, wait).await;
        not_found_as_none(answer.map_err(|e| self.failure(e)))
    }

    /// [`Client::watch`], with an answer of 503 (the server cannot serve it now: its
    /// long-poll slots are all taken, say) told apart as `Ok(Err(failure))`: worth asking
    /// again shortly.
    pub async fn watch_or_busy<T: DeserializeOwned>(
        &self,
        path: &str,
        cursor: &Cursor,
        wait: Duration,
    ) -> anyhow::Result<Result<Option<Answer<T>>, Failure>> {
        match self.api.watch(path, cursor, wait).await {
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

    /// [`Client::get_blocking`] whose `path` carries the cursor's index, naming its
    /// generation too (a server of another generation answers at once).
    pub async fn get_blocking_from<T: DeserializeOwned>(
        &self,
        path: &str,
        cursor: &Cursor,
        wait: Duration,
    ) -> anyhow::Result<Answer<T>> {
        (self
            .api
            .get_in(path, cursor.generation.as_deref(), wait + REQUEST_TIMEOUT)
            .await)
            .map_err(|e| self.failure(e))
    }

    /// [`Client::get_blocking_from`], with an answer of 503 told apart as
    /// `Ok(Err(failure))`, as [`Client::watch_or_busy`] does.
    pub async fn get_blocking_from_or_busy<T: DeserializeOwned>(
        &self,
        path: &str,
        cursor: &Cursor,
        wait: Duration,
    ) -> anyhow::Result<Result<Answer<T>, Failure>> {
        let timeout = wait + REQUEST_TIMEOUT;
        match (self.api)
            .get_in(path, cursor.generation.as_deref(), timeout)
            .await
        {
            Err(csivol_client::Error::Refused { status, text, .. })
                if status == StatusCode::SERVICE_UNAVAILABLE =>
            {
                Ok(Err(self.api_failure(status, &text)))
            }
            answer => answer.map(Ok).map_err(|e| self.failure(e)),
        }
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

    /// A mutating request sent once, without an `Idempotency-Key`, for the calls whose
    /// answer the server keeps under no key: a token's creation (its answer is the token's
    /// secret, which the server keeps only as a hash) and a fence (its method runs outside
    /// the write transaction). Sent again when an answer is lost, such a call would be
    /// carried out again, so it is not; it may run `runs_for` beyond an ordinary request.
    pub async fn call_unkeyed<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        runs_for: Duration,
    ) -> anyhow::Result<Answer<T>> {
        let timeout = Some(REQUEST_TIMEOUT + runs_for);
        (self.api.request(method, path, body, timeout).await).map_err(|e| self.failure(e))
    }

    /// A request whose answer has no body worth reading (e.g. 204).
    pub async fn call_empty(&self, method: Method, path: &str) -> anyhow::Result<StatusCode> {
        let sent = match method == Method::GET {
            true => self.api.send::<()>(method, path, Body::None, None).await,
            false => {
                let once = new_request();
                (self.api)
                    .send_once::<()>(method, path, Body::None, None, &once)
                    .await
            }
        };
        let raw = sent.map_err(|e| self.failure(e))?;
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
        let answer = match method == Method::GET {
            true => self.api.request(method, path, body, Some(timeout)).await,
            false => {
                let once = new_request();
                (self.api)
                    .request_once(method, path, body, Some(timeout), &once)
                    .await
            }
        };
        answer.map_err(|e| self.failure(e))
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

/// A new mutating request's identity: a random `Idempotency-Key` and its send time, sent
/// unchanged on the client's own retries, so that a request whose answer was lost is sent
/// again (to another server too) without being carried out twice, and a claim that a
/// release overtook is not recorded after it.
fn new_request() -> csivol_client::once::Once {
    csivol_client::once::Once::new(format!("{:032x}", rand::random::<u128>()))
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

/// A server address as given (`--addr`, `CSIVOL_ADDR`) as `SCHEME://host:port`, by the
/// rule every csivol client follows (`csivol_client::address`): a bare `host:port` is
/// https when a CA is given, else plain HTTP on a loopback address only; plain HTTP goes
/// nowhere else, and an address naming a user (`USER@host`) is refused.
fn normalise_addr(addr: &str, ca_given: bool) -> anyhow::Result<String> {
    let addr = addr.trim();
    let example = || {
        format!(
            "use e.g. --addr {} (or set {})",
            env::DEFAULT_ADDR,
            env::CSIVOL_ADDR
        )
    };
    let url = csivol_client::address::resolve(addr, ca_given).map_err(|e| {
        let hint = match &e {
            AddressError::Invalid { .. } => example(),
            refused => refused.hint(),
        };
        Failure::usage(e.to_string()).hint(hint)
    })?;
    if url.path() != "/" {
        return Err(Failure::usage(format!(
            "invalid server address `{addr}`: give only the scheme, host and port"
        ))
        .hint(example())
        .into());
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

/// A setting the environment gives as nothing: a usage error naming the variable.
fn empty_setting(e: env::SetButEmpty) -> Failure {
    Failure::usage(e.to_string()).hint(format!(
        "give {} a value, or unset it to use the default",
        e.0
    ))
}

/// The token from the first place that gives one: `--token`, `CSIVOL_TOKEN`, the file named
/// by `CSIVOL_TOKEN_FILE`, the default token file. A place that is set but empty stops the
/// search with exit 7: an empty secret is a mistake (a CI secret that did not expand), and
/// going on would use a token the caller did not choose, perhaps a stronger one.
/// The namespace: `-A` (every one), `-n`, `CSIVOL_NAMESPACE`, else `default`.
fn resolve_namespace(args: &GlobalArgs) -> anyhow::Result<String> {
    if args.all_namespaces {
        return Ok(csivol_api::ALL_NAMESPACES.to_owned());
    }
    match args.namespace.as_slice() {
        [] => {}
        [one] => return Ok(one.clone()),
        several => {
            return Err(Failure::usage(format!(
                "-n/--namespace is given {} times; a command names one namespace",
                several.len()
            ))
            .hint("name one, or list every namespace with -A (several only with `token create`)")
            .into());
        }
    }
    match env::setting(env::CSIVOL_NAMESPACE).map_err(empty_setting)? {
        None => Ok(csivol_api::DEFAULT_NAMESPACE.to_owned()),
        Some(ns) => {
            csivol_api::validate_namespace(&ns).map_err(|e| {
                Failure::usage(format!("{}: {e}", env::CSIVOL_NAMESPACE))
                    .hint("set it to a namespace `csivol namespace list` lists, or unset it")
            })?;
            Ok(ns)
        }
    }
}

fn resolve_token(flag: Option<&str>) -> anyhow::Result<(Option<String>, TokenSource)> {
    let empty = |source: &str| {
        let (what, value) = match source {
            "--token" => ("--token is empty", "the token"),
            s if s == env::CSIVOL_TOKEN_FILE => (
                "CSIVOL_TOKEN_FILE is set but empty",
                "the path of a token file",
            ),
            _ => ("CSIVOL_TOKEN is set but empty", "the token"),
        };
        Failure::new(Exit::Unauthorized, format!("{what}: no token was sent")).hint(format!(
            "give {source} {value} (a CI secret that did not expand leaves it empty); an empty \
             one is never passed over for another token"
        ))
    };
    if let Some(t) = flag {
        if t.trim().is_empty() {
            return Err(empty("--token").into());
        }
        return Ok((Some(t.trim().to_owned()), TokenSource::Flag));
    }
    let from_env = env::setting(env::CSIVOL_TOKEN).map_err(|e| empty(e.0))?;
    if let Some(t) = from_env {
        return Ok((Some(t.trim().to_owned()), TokenSource::Env));
    }
    let file = env::setting(env::CSIVOL_TOKEN_FILE).map_err(|e| empty(e.0))?;
    if let Some(path) = file {
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
            normalise_addr("127.0.0.1:7420", false).unwrap(),
            "http://127.0.0.1:7420"
        );
        assert_eq!(
            normalise_addr("127.0.0.1:7420", true).unwrap(),
            "https://127.0.0.1:7420"
        );
        assert_eq!(
            normalise_addr("https://h:1/", false).unwrap(),
            "https://h:1"
        );
        assert_eq!(
            normalise_addr("http://[::1]:1/", true).unwrap(),
            "http://[::1]:1"
        );
        for bad in [
            "https://h:1/v1",
            "ftp://x",
            "http://",
            "http://h:1",
            "h:1",
            "http://[::1]@h:1",
        ] {
            let e = normalise_addr(bad, false).unwrap_err();
            assert_eq!(
                e.downcast_ref::<Failure>().unwrap().exit,
                Exit::Usage,
                "{bad}"
            );
        }
    }
}
