//! A small HTTP client for the csivol API, as the CLI and the agents use it: bearer token,
//! JSON bodies, the blocking-query index header. Unlike the test support's `Api`, it never
//! panics: a benchmark counts errors instead of dying on the first one.

use std::time::Duration;

use anyhow::Context;
use csivol_proto::api::INDEX_HEADER;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Requests this process has sent (clients and simulated nodes together).
static REQUESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many requests this process has sent so far.
pub fn requests_sent() -> u64 {
    REQUESTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// An answer: status, the `x-csivol-index` header (if any) and the raw body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub index: Option<u64>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The body as `T`; the error names the status and shows the body.
    pub fn json<T: DeserializeOwned>(&self) -> anyhow::Result<T> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "unexpected answer (HTTP {}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Fails unless the status is one of `ok`.
    pub fn expect(self, what: &str, ok: &[u16]) -> anyhow::Result<Self> {
        if ok.contains(&self.status) {
            Ok(self)
        } else {
            anyhow::bail!(
                "{what}: HTTP {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        }
    }
}

/// The server's URL and one token; cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Http {
    client: reqwest::Client,
    pub base: String,
    token: String,
}

/// Longest a blocking query is asked to wait; the request timeout adds a margin to it.
pub const BLOCK_WAIT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

impl Http {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        csivol_proto::tls::install_provider();
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true)
            .pool_idle_timeout(csivol_proto::tls::POOL_IDLE_TIMEOUT)
            .no_proxy()
            .build()
            .context("failed to build the HTTP client")?;
        Ok(Self {
            client,
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
        })
    }

    /// The same connection pool with another token (a node's).
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            token: token.to_owned(),
            ..self.clone()
        }
    }

    pub async fn send<B: Serialize + ?Sized>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<Resp> {
        REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut req = self
            .client
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("{method} {path}: no answer from the server"))?;
        let status = resp.status().as_u16();
        let index = resp
            .headers()
            .get(INDEX_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let body = resp
            .bytes()
            .await
            .with_context(|| format!("{method} {path}: the answer broke off"))?
            .to_vec();
        Ok(Resp {
            status,
            index,
            body,
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Resp> {
        self.send::<()>(reqwest::Method::GET, path, None).await
    }

    pub async fn post<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> anyhow::Result<Resp> {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn put<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> anyhow::Result<Resp> {
        self.send(reqwest::Method::PUT, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Resp> {
        self.send::<()>(reqwest::Method::DELETE, path, None).await
    }

    /// A blocking query: answers once the resource changed past `index`, or after `wait`.
    pub async fn get_blocking(&self, path: &str, index: u64) -> anyhow::Result<Resp> {
        let sep = if path.contains('?') { '&' } else { '?' };
        self.get(&format!(
            "{path}{sep}index={index}&wait={}s",
            BLOCK_WAIT.as_secs()
        ))
        .await
    }
}
