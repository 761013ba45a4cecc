//! The node agent's endpoints, scoped to its node: register, heartbeat, desired state
//! (long-polled, or fetched when the node channel says it changed), the channel itself,
//! reports and the stop notice.

use std::time::Duration;

use csivol_api::{
    DesiredState, HeartbeatResponse, RegisterRequest, RegisterResponse, ReportBatch,
    StoppingRequest,
};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;

use crate::{Body, Client, Error, Method, Raw, Retry, blocking_path, channel};

impl Client {
    /// Registers `node` with the state it reports (sent again elsewhere when a server
    /// does not answer: registering twice is registering once, so it carries no
    /// `Idempotency-Key`).
    pub async fn register(
        &self,
        node: &str,
        req: &RegisterRequest,
    ) -> Result<RegisterResponse, Error> {
        let path = format!("/v1/nodes/{node}/register");
        let raw = (self.send_idempotent(Method::POST, &path, Body::Json(req), None)).await?;
        Ok(raw.into_answer()?.body)
    }

    /// A heartbeat of `node`, given `within` to be answered by each server in turn
    /// (`None`: the request timeout).
    pub async fn heartbeat(
        &self,
        node: &str,
        within: Option<Duration>,
    ) -> Result<HeartbeatResponse, Error> {
        let empty = serde_json::Map::new();
        let path = format!("/v1/nodes/{node}/heartbeat");
        let raw = (self.send_idempotent(Method::POST, &path, Body::Json(&empty), within)).await?;
        Ok(raw.into_answer()?.body)
    }

    /// A blocking query: answers when the node's desired state changed past `index`, or
    /// after `wait` with the current one. With `since` (the index of the state the caller
    /// holds), the answer may hold only the volumes changed since: apply it with
    /// [`DesiredState::apply`]. `generation` is the one of the state the caller holds
    /// ([`DesiredState::generation`]): a server of another generation answers at once with
    /// the whole state.
    pub async fn desired(
        &self,
        node: &str,
        index: u64,
        since: Option<u64>,
        generation: Option<&str>,
        wait: Duration,
    ) -> Result<DesiredState, Error> {
        let path = match since {
            Some(since) => format!("/v1/nodes/{node}/desired?since={since}"),
            None => format!("/v1/nodes/{node}/desired"),
        };
        let path = blocking_path(&path, index, wait);
        self.read(&path, self.blocking_timeout(wait), generation)
            .await
    }

    /// The node's desired state as the server has it now (no blocking query), for a
    /// caller told by the node channel that it changed; `since` and `generation` as in
    /// [`Client::desired`].
    pub async fn desired_now(
        &self,
        node: &str,
        since: Option<u64>,
        generation: Option<&str>,
    ) -> Result<DesiredState, Error> {
        let path = match since {
            Some(since) => format!("/v1/nodes/{node}/desired?since={since}"),
            None => format!("/v1/nodes/{node}/desired"),
        };
        self.read(&path, None, generation).await
    }

    /// A `GET` asked of the next server too when one does not answer (see
    /// [`Client::send_idempotent`]).
    async fn read<T: DeserializeOwned>(
        &self,
        path: &str,
        timeout: Option<Duration>,
        generation: Option<&str>,
    ) -> Result<T, Error> {
        let raw = self
            .send_idempotent_in::<()>(Method::GET, path, Body::None, timeout, generation)
            .await?;
        Ok(raw.into_answer()?.body)
    }

    /// Opens `node`'s channel (see [`channel`]): the first server, in order, that accepts
    /// a connection. A server without the channel answers [`Error::Refused`] with 404 (an
    /// older server, or `--no-node-channel`) or 426.
    pub async fn channel(&self, node: &str) -> Result<channel::Channel, Error> {
        self.in_turn(Retry::Unconnected, |base| self.channel_at(base, node))
            .await
    }

    async fn channel_at(&self, base: &str, node: &str) -> Result<channel::Channel, Error> {
        use reqwest::header::{CONNECTION, UPGRADE};
        let url = format!("{base}/v1/nodes/{node}/channel");
        let mut req = self
            .http
            .get(&url)
            .header(CONNECTION, "upgrade")
            // The versions this client speaks, best first: the server chooses.
            .header(
                UPGRADE,
                format!(
                    "{}, {}, {}",
                    csivol_api::channel::UPGRADE_V3,
                    csivol_api::channel::UPGRADE_V2,
                    csivol_api::channel::UPGRADE
                ),
            );
        if let Some(t) = self.request_timeout {
            req = req.timeout(t);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let unreachable = |source| Error::Unreachable {
            url: url.clone(),
            source,
        };
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        if status == StatusCode::SWITCHING_PROTOCOLS {
            let io = resp.upgrade().await.map_err(unreachable)?;
            return Ok(channel::Channel::new(io));
        }
        let body = Vec::from(resp.bytes().await.map_err(unreachable)?);
        let raw = Raw {
            status,
            index: None,
            generation: None,
            headers: Default::default(),
            body,
        };
        match raw.into_answer::<serde_json::Value>() {
            Err(e) => Err(e),
            // A success that is not an upgrade: a server (or a proxy) that ignored it.
            Ok(_) => Err(Error::Refused {
                status,
                error: None,
                text: "the server answered the channel request without upgrading".to_owned(),
            }),
        }
    }

    /// Sends a batch of reports (to the next server too when one does not answer: the
    /// agent resends a batch until one accepts it, so each report may arrive twice). No
    /// `Idempotency-Key`: a report states a fact about the node (staged, published,
    /// unpublished, an operation's result for its attempt), and the server applies a fact
    /// it already holds as nothing, so a late or repeated batch changes nothing.
    pub async fn reports(&self, node: &str, batch: &ReportBatch) -> Result<(), Error> {
        let path = format!("/v1/nodes/{node}/reports");
        let raw = (self.send_idempotent(Method::POST, &path, Body::Json(batch), None)).await?;
        raw.into_answer::<serde_json::Value>()?;
        Ok(())
    }

    /// The agent stops in order: the node is `stopped`, not lost. No `Idempotency-Key`:
    /// saying it twice is saying it once.
    pub async fn stopping(&self, node: &str, req: &StoppingRequest) -> Result<(), Error> {
        let _: serde_json::Value = self
            .post(&format!("/v1/nodes/{node}/stopping"), req)
            .await?;
        Ok(())
    }
}
