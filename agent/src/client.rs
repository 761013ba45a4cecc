//! The agent's four server endpoints (register, heartbeat, desired state, reports) through
//! the shared API client, scoped to its own node, and what their failures mean to the
//! agent: register again, retry, or give up.

use std::time::Duration;

use csivol_api::{
    DesiredState, ErrorCode, HeartbeatResponse, RegisterRequest, RegisterResponse, ReportBatch,
    StoppingRequest,
};
use csivol_client::Client;

/// Deadline of a request that does not block on the server; a blocking query gets it on
/// top of its `wait`, for the answer to travel.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("failed to reach the server at {url}: {source}")]
    Unreachable {
        url: String,
        #[source]
        source: csivol_client::TransportError,
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
    /// A 400: the server did not understand the request (an older server that does not
    /// know a parameter).
    pub fn is_bad_request(&self) -> bool {
        matches!(self, Self::Refused { status: 400, .. })
    }

    /// The HTTP status of a refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

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

impl ApiError {
    /// The shared client's error, for the request that asked for `what`.
    pub fn from_client(what: &'static str, e: csivol_client::Error) -> Self {
        match e {
            csivol_client::Error::Unreachable { url, source } => Self::Unreachable { url, source },
            csivol_client::Error::Refused {
                status,
                error,
                text,
            } => {
                let (code, message) = match error {
                    Some(e) => {
                        let mut message = e.message;
                        if let Some(hint) = e.hint {
                            message.push_str(&format!("\nhint: {hint}"));
                        }
                        (Some(e.code), message)
                    }
                    None => (None, text.trim().to_owned()),
                };
                Self::Refused {
                    what,
                    status: status.as_u16(),
                    code,
                    message,
                }
            }
            csivol_client::Error::Invalid { source, .. } => Self::Invalid {
                what,
                message: source.to_string(),
            },
        }
    }
}

/// The API client scoped to this agent's node.
#[derive(Clone, Debug)]
pub struct ApiClient {
    api: Client,
    node: String,
}

impl ApiClient {
    pub fn new(
        server: &str,
        node: &str,
        token: String,
        tls: rustls::ClientConfig,
    ) -> Result<Self, csivol_client::BuildError> {
        let api = Client::builder(server)
            .token(Some(token))
            .tls(tls)
            .connect_timeout(Duration::from_secs(5))
            .request_timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Self {
            api,
            node: node.to_owned(),
        })
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    pub async fn register(&self, req: &RegisterRequest) -> Result<RegisterResponse, ApiError> {
        (self.api.register(&self.node, req).await)
            .map_err(|e| ApiError::from_client("registration", e))
    }

    /// A heartbeat, each server given `within` to answer before the next one is asked.
    pub async fn heartbeat(&self, within: Duration) -> Result<HeartbeatResponse, ApiError> {
        (self.api.heartbeat(&self.node, Some(within)).await)
            .map_err(|e| ApiError::from_client("the heartbeat", e))
    }

    /// The server answered last is asked last next time (its node channel went silent).
    pub fn avoid_current(&self) {
        self.api.avoid_current();
    }

    /// A blocking query: answers when the desired state changed past `index`, or after
    /// `wait` with the current one; only the volumes changed since `since` when given (and
    /// the server can say which). `generation` is the one of the state held: a server
    /// whose state is of another (it went back in time) answers at once with all of it.
    pub async fn desired(
        &self,
        index: u64,
        since: Option<u64>,
        generation: Option<&str>,
        wait: Duration,
    ) -> Result<DesiredState, ApiError> {
        (self
            .api
            .desired(&self.node, index, since, generation, wait)
            .await)
            .map_err(|e| ApiError::from_client("the desired-state query", e))
    }

    /// The desired state as the server has it now, without waiting: the node channel said
    /// it changed.
    pub async fn desired_now(
        &self,
        since: Option<u64>,
        generation: Option<&str>,
    ) -> Result<DesiredState, ApiError> {
        (self.api.desired_now(&self.node, since, generation).await)
            .map_err(|e| ApiError::from_client("the desired-state query", e))
    }

    /// Opens the node channel (heartbeats and desired-state pushes on one connection).
    pub async fn channel(&self) -> Result<csivol_client::channel::Channel, ApiError> {
        (self.api.channel(&self.node).await)
            .map_err(|e| ApiError::from_client("the node channel", e))
    }

    pub async fn reports(&self, batch: &ReportBatch) -> Result<(), ApiError> {
        (self.api.reports(&self.node, batch).await)
            .map_err(|e| ApiError::from_client("the reports", e))
    }

    /// Tells the server this agent stops in order, and whether it took its volumes down.
    pub async fn stopping(&self, took_down: bool) -> Result<(), ApiError> {
        (self
            .api
            .stopping(&self.node, &StoppingRequest { took_down })
            .await)
            .map_err(|e| ApiError::from_client("the stop notice", e))
    }
}
