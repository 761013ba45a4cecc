//! Tokens, their roles, and who may host a plugin's controller.

use serde::{Deserialize, Serialize};

/// Token roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Everything.
    Operator,
    /// Read-only.
    Reader,
    /// CI jobs: read, and claim, renew, queue and release claims; nothing else.
    Claimer,
    /// One node's agent: register, heartbeat, desired state and reports of that node only.
    Node,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Operator => "operator",
            Self::Reader => "reader",
            Self::Claimer => "claimer",
            Self::Node => "node",
        }
    }
}

/// `POST /v1/tokens`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    pub role: Role,
    #[serde(default)]
    pub node: Option<String>,
    /// A name people recognise (`alice`, `ci-deploy`), shown as the actor in events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How long the token is valid; none: until revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Plugins whose controller a node token's node may host (node tokens only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<String>,
    /// Capabilities added to the role's preset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<crate::Capability>,
    /// Volume-name patterns (`build-*`) the token is narrowed to; none: every volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// The namespaces the token is narrowed to (`*`: every namespace); none: every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// `GET /v1/plugins/{id}/controllers`: the nodes that may host a plugin's controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerHosts {
    pub plugin: String,
    pub allowed: Vec<ControllerHost>,
    /// The nodes registered as its controller hosts now.
    pub hosting: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerHost {
    pub node: String,
    /// `operator` (allowed with `csivol plugin controllers`) or `token` (its node token
    /// names the plugin).
    pub source: String,
    /// The operator who allowed it, or the token's id.
    pub by: Option<String>,
    pub since: Option<String>,
}

/// `POST /v1/plugins/{id}/controllers`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerHostsChange {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub disallow: Vec<String>,
}

/// `GET /v1/tokens`: a token without its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    /// The name given at `token create --name`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub role: Role,
    pub node: Option<String>,
    /// Plugins whose controller this node token's node may host.
    #[serde(default)]
    pub controllers: Vec<String>,
    /// Everything it may do: its role's preset and what was added.
    #[serde(default)]
    pub capabilities: Vec<crate::Capability>,
    /// Volume-name patterns it is narrowed to; empty: every volume.
    #[serde(default)]
    pub volumes: Vec<String>,
    /// The namespaces it is narrowed to; empty: every namespace.
    #[serde(default)]
    pub namespaces: Vec<String>,
    pub created_at: String,
    /// The last request made with it (persisted when tokens are listed and at shutdown).
    pub last_used_at: Option<String>,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    /// `active`, `expired` or `revoked`.
    pub status: String,
}

/// A new token; the secret is shown once and only its hash is stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenResponse {
    pub id: String,
    pub role: Role,
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub controllers: Vec<String>,
    /// Everything it may do: its role's preset and what was added.
    #[serde(default)]
    pub capabilities: Vec<crate::Capability>,
    /// Volume-name patterns it is narrowed to; empty: every volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<String>,
    /// The namespaces it is narrowed to; empty: every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}
