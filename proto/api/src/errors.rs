//! The health answer and the error body every endpoint shares.

use serde::{Deserialize, Serialize};

/// `GET /v1/health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, or `degraded` (the server answers, but `reasons` says what is wrong).
    pub status: String,
    pub version: String,
    /// Why the server is degraded, e.g. the state database refuses writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// With several servers over etcd: whether this server leads now (runs the once-only
    /// work: loss detection, controller-operation scheduling, lease expiry, fencing).
    /// Absent with the single-server store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<bool>,
    /// The schema version the state is kept in, and the newest this server knows: they
    /// differ on a server of a new release during a rolling upgrade, until `csivol-server
    /// upgrade finalize` raises the cluster's. Absent from older servers' answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<SchemaVersions>,
}

/// See [`Health::schema`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersions {
    /// What the state is kept in (the cluster's, with several servers).
    pub running: i64,
    /// The newest this server knows.
    pub known: i64,
}

/// Every error: `{"error": {"code", "message", "hint"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// What kind of error; tells a client whether retrying can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is wrong; fix it.
    Invalid,
    /// No token, a wrong token, or a token without the right.
    Unauthorized,
    NotFound,
    /// Something in the way (another claim, capacity); retry after it changes.
    Conflict,
    /// Held by a lost node; needs the node back or an operator unblock.
    Blocked,
    /// The node lies outside the volume's accessible topology: never on that node, choose
    /// another.
    Topology,
    /// An action ran and failed (a fence method that did not confirm the node off).
    Failed,
    /// The server cannot serve now; retry.
    Unavailable,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Unauthorized => "unauthorized",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Blocked => "blocked",
            Self::Topology => "topology",
            Self::Failed => "failed",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }
}
