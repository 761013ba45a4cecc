//! Exact retries on the client's side: a mutating request's [`Once`] (its
//! `Idempotency-Key` and send time, sent unchanged on every retry) and
//! [`Client::send_once`], which sends a keyed request again when its answer was lost.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Answer, Body, Client, Error, Method, Raw, Retry, Said, StatusCode};

/// One mutating request as the server knows it across its retries: its `Idempotency-Key`
/// (scoped by the server to the token) and when it was first sent, both sent unchanged on
/// every retry. With a key the server answers a repeat with its first answer instead of
/// acting again, which makes the request safe to send again when an answer was lost
/// ([`Client::send_once`]); the send time lets the server refuse a claim request that a
/// release overtook (it was sent before its alloc's release) and any request older than it
/// remembers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Once {
    key: Option<String>,
    sent_at_ms: i64,
}

impl Once {
    /// A request named `key` (visible ASCII, at most 255 characters; make one per request,
    /// e.g. 128 random bits), sent now.
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            key: Some(key.into()),
            sent_at_ms: now_ms(),
        }
    }

    /// A request without a key that says when it was sent (now).
    pub fn unkeyed() -> Self {
        Self {
            key: None,
            sent_at_ms: now_ms(),
        }
    }

    /// The same request, first sent at `ms` (unix milliseconds).
    pub fn sent_at(self, ms: i64) -> Self {
        Self {
            sent_at_ms: ms,
            ..self
        }
    }

    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    pub fn sent_at_ms(&self) -> i64 {
        self.sent_at_ms
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How many times [`Client::send_once`] sends a keyed request, each time to every server in
/// turn, while none answers.
const ONCE_ROUNDS: u32 = 3;
/// The pause before each round after the first: a server restarting, or a store finding a
/// leader again, has a moment.
const ONCE_BACKOFF: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];

impl Client {
    /// [`Client::send`] for a mutating request with its [`Once`]. With a key, a request that
    /// got no answer (a timeout, a connection broken after it was sent) or a 503 is sent
    /// again, to the next server and, for up to [`ONCE_ROUNDS`] rounds after a short pause,
    /// to every server again, while less than `timeout` has passed: the server answers a
    /// repeat it carried out with that first answer, so nothing is done twice. Without a
    /// key it is sent once, as [`Client::send`] does (a request that may have landed is
    /// not sent again), with its send time.
    pub async fn send_once<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        timeout: Option<Duration>,
        once: &Once,
    ) -> Result<Raw, Error> {
        let retry = match once.key {
            Some(_) => Retry::Unanswered,
            None => Retry::Unconnected,
        };
        let budget = timeout
            .or(self.request_timeout)
            .unwrap_or(Duration::from_secs(30));
        let started = std::time::Instant::now();
        let mut round = 0;
        loop {
            let result = self
                .in_turn(retry, |base| {
                    self.send_to(base, method.clone(), path, &body, timeout, Said::once(once))
                })
                .await;
            round += 1;
            let unanswered = match &result {
                // Every server refused the connection: nothing was sent, nothing to repeat.
                Err(Error::Unreachable { source, .. }) => !source.is_connect(),
                Err(Error::Refused { status, .. }) => *status == StatusCode::SERVICE_UNAVAILABLE,
                Err(Error::Invalid { .. }) => false,
                Ok(raw) => raw.status == StatusCode::SERVICE_UNAVAILABLE,
            };
            let again = once.key.is_some()
                && unanswered
                && round < ONCE_ROUNDS
                && started.elapsed() < budget;
            if !again {
                return result;
            }
            tokio::time::sleep(ONCE_BACKOFF[(round - 1) as usize % ONCE_BACKOFF.len()]).await;
        }
    }

    /// [`Client::send`] with the request's [`Once`], sent once to the server that answered
    /// last (to the next only when it could not connect, so the request never reached
    /// it), for a caller that sends it again itself and records each attempt apart: a
    /// fault campaign's history, or a delayed duplicate sent on purpose.
    pub async fn send_as<B: Serialize + ?Sized>(
        &self,
        method: Method,
        path: &str,
        body: Body<'_, B>,
        timeout: Option<Duration>,
        once: &Once,
    ) -> Result<Raw, Error> {
        self.in_turn(Retry::Unconnected, |base| {
            self.send_to(base, method.clone(), path, &body, timeout, Said::once(once))
        })
        .await
    }

    /// [`Client::request`] for a mutating request with its [`Once`] ([`Client::send_once`]).
    pub async fn request_once<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        timeout: Option<Duration>,
        once: &Once,
    ) -> Result<Answer<T>, Error> {
        let body = body.map_or(Body::None, Body::Json);
        let raw = self.send_once(method, path, body, timeout, once).await?;
        raw.into_answer()
    }
}
