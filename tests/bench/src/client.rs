//! The benchmark's view of the shared API client (`csivol-client`): every request counted,
//! answers kept raw (status, index, body) so the load can judge them itself. Unlike the
//! test support's `Api`, it never panics: a benchmark counts errors instead of dying on the
//! first one.

use std::time::Duration;

use anyhow::Context;
use csivol_client::once::Once;
use csivol_client::{Body, Client, Cursor};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Requests this process has sent (clients and simulated nodes together).
static REQUESTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many requests this process has sent so far.
pub fn requests_sent() -> u64 {
    REQUESTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether `e` says the request reached no server: no connection could be made to any,
/// so nothing was sent and it had no effect.
pub fn never_sent(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<csivol_client::Error>(),
        Some(csivol_client::Error::Unreachable { source, .. }) if source.is_connect()
    )
}

/// An answer: status, the `x-csivol-index` header (if any) and the raw body.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub index: Option<u64>,
    pub body: Vec<u8>,
    /// The generation of the state `index` belongs to (`x-csivol-generation`).
    pub generation: Option<String>,
    /// The server answered a repeat of a keyed request with its first answer
    /// (`Idempotent-Replayed`), without acting again.
    pub replayed: bool,
}

impl From<csivol_client::Raw> for Resp {
    fn from(raw: csivol_client::Raw) -> Self {
        let replayed = raw
            .headers
            .get(csivol_api::REPLAYED_HEADER)
            .is_some_and(|v| v.as_bytes() == b"true");
        Self {
            status: raw.status.as_u16(),
            index: raw.index,
            generation: raw.generation,
            body: raw.body,
            replayed,
        }
    }
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

    /// Where a blocking query follows on from after this answer: its index and
    /// generation, taken as they are (the state may have gone back in time); `held` when
    /// it carried no index.
    pub fn cursor(&self, held: &Cursor) -> Cursor {
        match self.index {
            Some(index) => Cursor {
                index,
                generation: self.generation.clone(),
            },
            None => held.clone(),
        }
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
    client: Client,
    pub base: String,
    /// Every request may go to another server of the cluster when one does not answer
    /// in time (see [`Http::cluster`]).
    idempotent: bool,
    /// How long a blocking query asks the server to wait.
    block_wait: Duration,
}

/// Longest a blocking query is asked to wait; the request timeout adds a margin to it.
pub const BLOCK_WAIT: Duration = Duration::from_secs(30);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

impl Http {
    pub fn new(base: &str, token: &str) -> anyhow::Result<Self> {
        let client = Client::builder(base)
            .token(Some(token.to_owned()))
            .request_timeout(REQUEST_TIMEOUT)
            .no_proxy()
            .build()
            .context("failed to build the HTTP client")?;
        Ok(Self {
            base: client.base().to_owned(),
            client,
            idempotent: false,
            block_wait: BLOCK_WAIT,
        })
    }

    /// A client of the `https://` servers of one cluster (`bases`, comma-separated), whose
    /// certificates `ca` signed, for a caller whose every request may be carried out twice
    /// (a claim is idempotent per volume and alloc, a release per claim): a request that
    /// gets no answer from one server within `timeout` (it is stopped, or cut off from the
    /// network) or a 503 goes to the next.
    pub fn cluster(
        bases: &str,
        token: &str,
        ca: &std::path::Path,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let tls = csivol_client::tls::client_config(Some(ca), None)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("failed to load the cluster's CA")?;
        let client = Client::builder(bases)
            .token(Some(token.to_owned()))
            .tls(tls)
            .request_timeout(timeout)
            .no_proxy()
            .build()
            .context("failed to build the HTTP client")?;
        Ok(Self {
            base: client.base().to_owned(),
            client,
            idempotent: true,
            // Short, so that a query held by a server that stopped answering moves on soon.
            block_wait: timeout,
        })
    }

    /// The same connection pool with another token (a node's).
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            client: self.client.with_token(Some(token.to_owned())),
            base: self.base.clone(),
            idempotent: self.idempotent,
            block_wait: self.block_wait,
        }
    }

    pub async fn send<B: Serialize + ?Sized>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> anyhow::Result<Resp> {
        REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = body.map_or(Body::None, Body::Json);
        let sent = if self.idempotent {
            // A blocking query may take its wait and the timeout besides.
            let timeout = path
                .contains("wait=")
                .then(|| self.client.blocking_timeout(self.block_wait))
                .flatten();
            self.client
                .send_idempotent(method.clone(), path, body, timeout)
                .await
        } else {
            self.client.send(method.clone(), path, body, None).await
        };
        let raw = sent.with_context(|| format!("{method} {path}: no answer from the server"))?;
        Ok(raw.into())
    }

    /// [`Http::post`] of one request (`once`: its `Idempotency-Key`, if any, and its first
    /// send time, the same on every attempt) sent to one server only, for a caller that
    /// records every attempt as an operation of its own (the chaos campaign's history): an
    /// attempt that got no answer may still take effect later, which an answer from
    /// another server to the same request, had it moved on, would hide from the history.
    /// Instead of moving on, it makes the next request go to the next server first.
    pub async fn post_once<B: Serialize + ?Sized>(
        &self,
        path: &str,
        body: &B,
        once: &Once,
    ) -> anyhow::Result<Resp> {
        REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sent = self
            .client
            .send_as(reqwest::Method::POST, path, Body::Json(body), None, once)
            .await;
        let unanswered = match &sent {
            Ok(raw) => raw.status == reqwest::StatusCode::SERVICE_UNAVAILABLE,
            Err(_) => true,
        };
        if unanswered && self.idempotent {
            self.client.avoid_current();
        }
        let raw = sent.with_context(|| format!("POST {path}: no answer from the server"))?;
        Ok(raw.into())
    }

    /// Opens `node`'s channel (this client's token must be the node's).
    pub async fn channel(
        &self,
        node: &str,
    ) -> Result<csivol_client::channel::Channel, csivol_client::Error> {
        REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.client.channel(node).await
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

    /// `path` with `wait=` for a write whose answer is held until what it wrote changes
    /// again (a claim's POST and DELETE), for as long as a blocking query waits.
    pub fn held(&self, path: &str) -> String {
        let sep = if path.contains('?') { '&' } else { '?' };
        format!("{path}{sep}wait={}ms", self.block_wait.as_millis())
    }

    /// A blocking query from `cursor`: answers once the resource changed past its index,
    /// or after the wait; at once when the server's state is of another generation (a
    /// restore took it back in time), instead of waiting for its index to pass the one
    /// held.
    pub async fn get_following(&self, path: &str, cursor: &Cursor) -> anyhow::Result<Resp> {
        REQUESTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sep = if path.contains('?') { '&' } else { '?' };
        let path = format!(
            "{path}{sep}index={}&wait={}ms",
            cursor.index,
            self.block_wait.as_millis()
        );
        let timeout = self.client.blocking_timeout(self.block_wait);
        let sent = self
            .client
            .send_idempotent_in::<()>(
                reqwest::Method::GET,
                &path,
                Body::None,
                timeout,
                cursor.generation.as_deref(),
            )
            .await;
        let raw = sent.with_context(|| format!("GET {path}: no answer from the server"))?;
        Ok(raw.into())
    }

    /// A blocking query: answers once the resource changed past `index`, or after `wait`.
    pub async fn get_blocking(&self, path: &str, index: u64) -> anyhow::Result<Resp> {
        let sep = if path.contains('?') { '&' } else { '?' };
        self.get(&format!(
            "{path}{sep}index={index}&wait={}ms",
            self.block_wait.as_millis()
        ))
        .await
    }
}
