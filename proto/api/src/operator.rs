//! The audit trail and the operator's actions on blocked volumes: unblock and detach.

use serde::{Deserialize, Serialize};

/// An entry of the audit trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub index: u64,
    pub at: String,
    pub kind: String,
    /// Its volume's name within its namespace.
    pub volume: Option<String>,
    /// Its volume's namespace; none for an event of no volume (a node's, a token's).
    #[serde(default)]
    pub namespace: Option<String>,
    pub node: Option<String>,
    pub alloc: Option<String>,
    /// Who asked for it: `operator:<token id>`, `node:<name>`, or `server`.
    pub actor: String,
    pub message: String,
}

/// `POST /v1/volumes/{name}/unblock`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnblockRequest {
    pub reason: String,
    #[serde(default)]
    pub node: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/nodes/{node}/unblock`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeUnblockRequest {
    pub reason: String,
    #[serde(default)]
    pub dry_run: bool,
}

/// `POST /v1/volumes/{name}/detach`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetachRequest {
    pub node: String,
    pub reason: String,
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub dry_run: bool,
}

/// What an operator action did, or would do with `dry_run`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionPlan {
    pub dry_run: bool,
    pub actions: Vec<PlannedAction>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedAction {
    /// `force-release` (a blocked claim dropped without the node), `force-detach`
    /// (ControllerUnpublish without the node), `release` (through the node), `stop-waiting`
    /// (after a restore, the node is no longer waited for to say what it holds; `volume` is
    /// empty).
    pub action: String,
    pub volume: String,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc: Option<String>,
    /// When the node was lost, for actions on a lost node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_since: Option<String>,
}
