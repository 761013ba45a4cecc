//! The agent's HTTP client for its four server endpoints (register, heartbeat, desired
//! state, reports), scoped to its own node.

use std::time::Duration;

use csivol_api::{
    DesiredState, ErrorCode, ErrorResponse, HeartbeatResponse, RegisterRequest, RegisterResponse,
    ReportBatch,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Deadline of a request that does not block on the server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Extra time a blocking query gets over its `wait`, for the answer to travel.
const BLOCKING_SLACK: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("failed to reach the server at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the server refused {what} ({status}): {message}")]
    Refused {
        what: &'static str,
        status: u16,
        code: Option<ErrorCode>,
        message: String,
    },
    #[error("the server sent an invalid answer to {what}: {message}")]
    Invalid { what: &'static str, message: String },
    #[error("the server did not answer {what} within {}", humantime::format_duration(*waited))]
    TimedOut {
        what: &'static str,
        waited: Duration,
    },
}

impl ApiError {
    /// The server does not know this node (any more): register again.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            Self::Refused {
                code: Some(ErrorCode::NotFound),
                ..
            } | Self::Refused {
                status: 404,
                code: None,
                ..
            }
        )
    }

    /// Resending the same request cannot help (a bug on one side, or a bad token).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Self::Refused {
                code: Some(ErrorCode::Invalid | ErrorCode::Unauthorized),
                ..
            }
        )
    }
}

#[derive(Clone, Debug)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    node: String,
    token: String,
}

impl ApiClient {
    pub fn new(
        server: &str,
        node: &str,
        token: String,
        tls: rustls::ClientConfig,
    ) -> Result<Self, reqwest::Error> {
        csivol_client::tls::install_provider();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .pool_idle_timeout(csivol_client::tls::POOL_IDLE_TIMEOUT)
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            http,
            base: format!("{}/v1/nodes/{node}", server.trim_end_matches('/')),
            node: node.to_owned(),
            token,
        })
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse, ApiError> {
        self.post("register", "registration", req).await
    }

    pub async fn heartbeat(&self) -> Result<HeartbeatResponse, ApiError> {
        self.post("heartbeat", "the heartbeat", &serde_json::json!({}))
            .await
    }

    /// A blocking query: answers when the desired state changed past `index`, or after
    /// `wait` with the current one.
    pub async fn desired(&self, index: u64, wait: Duration) -> Result<DesiredState, ApiError> {
        let url = format!(
            "{}/desired?index={index}&wait={}ms",
            self.base,
            wait.as_millis()
        );
        let req = self
            .http
            .get(&url)
            .bearer_auth(&self.token)
            .timeout(wait + BLOCKING_SLACK);
        self.send(req, url, "the desired-state query").await
    }

    pub async fn reports(&self, batch: &ReportBatch) -> Result<(), ApiError> {
        let _: serde_json::Value = self.post("reports", "the reports", batch).await?;
        Ok(())
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        what: &'static str,
        body: &B,
    ) -> Result<T, ApiError> {
        let url = format!("{}/{path}", self.base);
        let req = self
            .http
            .post(&url)
            .bearer_auth(&self.token)
            .timeout(REQUEST_TIMEOUT)
            .json(body);
        self.send(req, url, what).await
    }

    async fn send<T: DeserializeOwned>(
        &self,
        req: reqwest::RequestBuilder,
        url: String,
        what: &'static str,
    ) -> Result<T, ApiError> {
        let unreachable = |source| ApiError::Unreachable {
            url: url.clone(),
            source,
        };
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(unreachable)?;
        if !status.is_success() {
            let (code, message) = match serde_json::from_slice::<ErrorResponse>(&bytes) {
                Ok(e) => {
                    let mut message = e.error.message;
                    if let Some(hint) = e.error.hint {
                        message.push_str(&format!("\nhint: {hint}"));
                    }
                    (Some(e.error.code), message)
                }
                Err(_) => (None, String::from_utf8_lossy(&bytes).trim().to_owned()),
            };
            return Err(ApiError::Refused {
                what,
                status: status.as_u16(),
                code,
                message,
            });
        }
        // An empty 200 is a valid answer to a request that returns nothing.
        let bytes = if bytes.is_empty() {
            &b"null"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes).map_err(|e| ApiError::Invalid {
            what,
            message: e.to_string(),
        })
    }
}
