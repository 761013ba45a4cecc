//! The HTTP API's JSON types, shared by the server, the node agent and the CLI. Field names
//! are the public contract: the CLI's `-o json` output is these types, serialised.
//!
//! Request bodies refuse unknown fields, so a typo in a script fails loudly instead of
//! being ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::{
    AccessMode, ControllerCapabilities, NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo,
    PublishContext, VolumeCapability,
};

/// The header carrying the index of a blocking-query response.
pub const INDEX_HEADER: &str = "x-csivol-index";

/// Names of volumes, nodes, allocs and plugins: `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`, so a
/// name can safely become a path component and never reach a path it should not.
pub fn validate_name(kind: &str, name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let ok = match bytes.next() {
        Some(first) => {
            first.is_ascii_alphanumeric()
                && name.len() <= 128
                && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        }
        None => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid {kind} name `{}`: use 1 to 128 letters, digits, `.`, `_` or `-`, starting with a letter or digit",
            name.escape_debug()
        ))
    }
}

/// How a volume is presented to workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Attachment {
    FileSystem,
    BlockDevice,
}

impl Attachment {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FileSystem => "file-system",
            Self::BlockDevice => "block-device",
        }
    }
}

/// `PUT /v1/volumes/{name}`: register an existing volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    pub plugin: String,
    pub external_id: String,
    pub access_mode: AccessMode,
    pub attachment: Attachment,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
}

/// `POST /v1/volumes/{name}/create`: create a volume through the plugin's controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateVolumeSpec {
    pub plugin: String,
    pub access_mode: AccessMode,
    pub attachment: Attachment,
    #[serde(default)]
    pub capacity_bytes: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
}

/// Where a volume stands, derived from its claims and attachments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeState {
    /// CreateVolume is under way.
    Creating,
    /// No claim and no attachment.
    Free,
    /// Claimed or attached somewhere, nothing blocked.
    Attached,
    /// A claim or attachment is held by a lost node.
    Blocked,
    /// DeleteVolume is under way.
    Deleting,
    /// CreateVolume failed; `error` says why.
    Failed,
}

impl VolumeState {
    pub const ALL: [VolumeState; 6] = [
        Self::Creating,
        Self::Free,
        Self::Attached,
        Self::Blocked,
        Self::Deleting,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Free => "free",
            Self::Attached => "attached",
            Self::Blocked => "blocked",
            Self::Deleting => "deleting",
            Self::Failed => "failed",
        }
    }
}

/// A registered volume, with its claims and attachments. Secret values are never returned:
/// `secret_keys` lists which secrets are stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub plugin: String,
    pub external_id: String,
    pub access_mode: AccessMode,
    pub attachment: Attachment,
    pub state: VolumeState,
    /// Whether a new claim can be accepted now (by the access mode, given the claims held,
    /// blocked ones included): a `blocked` multi-node-multi-writer volume still takes them.
    #[serde(default = "yes")]
    pub accepts_claims: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    #[serde(default)]
    pub context: BTreeMap<String, String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    #[serde(default)]
    pub secret_keys: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub claims: Vec<Claim>,
    pub attachments: Vec<AttachmentStatus>,
    pub created_at: String,
    pub updated_at: String,
    pub index: u64,
}

/// Whether a claim may write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimMode {
    Read,
    Write,
}

impl ClaimMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// Where a claim stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClaimState {
    /// Waiting in the volume's queue (`claim --queue`): granted in arrival order once the
    /// rules allow it; holds nothing meanwhile.
    Queued,
    /// Recorded; waiting for another attachment of the volume to be detached first.
    Pending,
    /// Waiting for ControllerPublishVolume to this node.
    Attaching,
    /// The node is staging and publishing it.
    Publishing,
    /// Mounted at `target_path` and checked.
    Ready,
    /// Release requested; the node is unpublishing it.
    Releasing,
    /// Failed with `error`; the node cleans up whatever it did, then the claim is gone.
    Failed,
    /// Its node was lost: the claim keeps holding the volume until the node comes back or
    /// an operator unblocks it.
    Blocked,
}

impl ClaimState {
    pub const ALL: [ClaimState; 8] = [
        Self::Queued,
        Self::Pending,
        Self::Attaching,
        Self::Publishing,
        Self::Ready,
        Self::Releasing,
        Self::Failed,
        Self::Blocked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Pending => "pending",
            Self::Attaching => "attaching",
            Self::Publishing => "publishing",
            Self::Ready => "ready",
            Self::Releasing => "releasing",
            Self::Failed => "failed",
            Self::Blocked => "blocked",
        }
    }
}

macro_rules! text_enum {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                serde_json::from_value(serde_json::Value::String(s.to_owned()))
                    .map_err(|_| format!("unknown {} `{s}`", stringify!($t)))
            }
        }
    )*};
}
text_enum!(
    Attachment,
    VolumeState,
    ClaimMode,
    ClaimState,
    AttachmentState,
    NodeStatus,
    Eligibility,
    Role
);

/// One workload's claim on a volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub volume: String,
    pub alloc: String,
    pub node: String,
    pub mode: ClaimMode,
    pub state: ClaimState,
    /// Where the volume is mounted on the node, once published.
    pub target_path: Option<String>,
    /// The last error, with the plugin's message.
    pub error: Option<String>,
    /// When a failed step will be tried again (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub index: u64,
    /// What the claim waits for on its node, when the node said (e.g. the target to be
    /// mounted from the volume), since when and for how long at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<ClaimWaiting>,
    /// The plugin's abnormal VOLUME_CONDITION for the claim's volume on its node; absent
    /// when the volume is normal or the plugin does not report conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// When the claim's lease runs out (RFC 3339), for a claim made with a TTL: it is then
    /// released the normal way unless renewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The lease's length, renewed by `claim renew` without a TTL of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// For a queued claim: its place in the volume's queue, 1 first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<u32>,
    /// Free-form `key=value` labels given at claim time (e.g. the CI job's URL).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// What a claim waits for on its node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimWaiting {
    pub reason: String,
    /// RFC 3339.
    pub since: String,
    /// How long the node waits before it fails the claim.
    pub timeout_ms: u64,
}

/// `POST /v1/volumes/{name}/claims`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    pub alloc: String,
    pub node: String,
    pub mode: ClaimMode,
    /// Only check whether the claim would be accepted.
    #[serde(default)]
    pub dry_run: bool,
    /// A lease: the claim is released unless renewed within this long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Wait in the volume's queue when other claims are in the way, instead of a refusal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl ClaimRequest {
    /// A plain claim: no lease, no queue, no labels.
    pub fn new(alloc: impl Into<String>, node: impl Into<String>, mode: ClaimMode) -> Self {
        Self {
            alloc: alloc.into(),
            node: node.into(),
            mode,
            dry_run: false,
            ttl_ms: None,
            queue: false,
            labels: BTreeMap::new(),
        }
    }
}

/// `POST /v1/volumes/{name}/claims/{alloc}/renew`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The new lease from now; without it, the claim's own TTL again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// The answer to a dry-run claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimDryRun {
    pub accepted: bool,
    /// Whether the alloc already holds this very claim (then `state` is its state); only
    /// present when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub existing: bool,
    /// When accepted: the state the claim would start in (`attaching`, `publishing`,
    /// `pending`), or the existing claim's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ClaimState>,
    /// Why not, when refused: the error the real claim would get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Where a (volume, node) attachment stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttachmentState {
    /// ControllerPublishVolume is under way.
    Attaching,
    /// Published to the node (or the plugin needs no controller publish).
    Attached,
    /// No claim is left on the node; waiting for the node to unstage.
    Unstaging,
    /// ControllerUnpublishVolume is under way.
    Detaching,
    /// The node was lost.
    Blocked,
}

impl AttachmentState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Attaching => "attaching",
            Self::Attached => "attached",
            Self::Unstaging => "unstaging",
            Self::Detaching => "detaching",
            Self::Blocked => "blocked",
        }
    }
}

/// A volume's attachment to one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentStatus {
    pub volume: String,
    pub node: String,
    pub state: AttachmentState,
    #[serde(default)]
    pub publish_context: PublishContext,
    /// Detaching without the node's help (after an unblock).
    #[serde(default)]
    pub forced: bool,
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<String>,
    pub updated_at: String,
}

/// Whether a node is heard from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeStatus {
    Ready,
    Lost,
    /// Powered off by a confirmed fence; stays so until its agent registers again holding
    /// nothing.
    Fenced,
}

impl NodeStatus {
    pub const ALL: [Self; 3] = [Self::Ready, Self::Lost, Self::Fenced];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Lost => "lost",
            Self::Fenced => "fenced",
        }
    }
}

fn yes() -> bool {
    true
}

/// Whether a node takes new claims: an operator's choice, kept across registrations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Eligibility {
    /// New claims are accepted (the default).
    #[default]
    Eligible,
    /// No new claims (`csivol node eligibility NODE --disable`); existing ones stay.
    Ineligible,
    /// No new claims, and the operator waits for the node's claims to be released by their
    /// owners (`csivol node drain`); nothing is force-released.
    Draining,
}

impl Eligibility {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Eligible => "eligible",
            Self::Ineligible => "ineligible",
            Self::Draining => "draining",
        }
    }
}

/// `POST /v1/nodes/{node}/eligibility`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EligibilityRequest {
    pub eligibility: Eligibility,
}

/// A node and its plugins.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub status: NodeStatus,
    pub last_heartbeat: Option<String>,
    /// The server's heartbeat TTL: a node silent for longer is marked lost.
    #[serde(default)]
    pub heartbeat_ttl_ms: u64,
    /// For a ready node, how long it has been silent: since its last heartbeat, or since
    /// the server started (every node gets a full TTL after a restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_ms: Option<u64>,
    /// Whether the node takes new claims.
    #[serde(default)]
    pub eligibility: Eligibility,
    pub lost_at: Option<String>,
    /// The agent's self-fencing delay (`30s`), if it self-fences.
    pub fence_after: Option<String>,
    /// When the agent last fenced itself, as it reported.
    pub fenced_at: Option<String>,
    pub plugins: Vec<NodePlugin>,
    pub registered_at: String,
    /// The node's labels: the agent's, overridden by the server's `[node_labels]`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The server's fence method for this node, if one applies.
    #[serde(default)]
    pub fence_method: Option<String>,
    /// Failed automatic fences since the node was lost, and the last one's error.
    #[serde(default)]
    pub fence_failures: u32,
    #[serde(default)]
    pub fence_error: Option<String>,
    /// When the policy fences it (again), for a lost node under `auto_fence_after`.
    #[serde(default)]
    pub next_fence_at: Option<String>,
    /// Fence attempts, newest first (only when one node is shown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fences: Vec<FenceRecord>,
}

/// One run of a fence method: the evidence that a node is off, or why it is not proved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceRecord {
    pub id: u64,
    pub at: String,
    pub node: String,
    pub method: String,
    /// The command as run (arguments filled in; environment values are never shown).
    pub command: Vec<String>,
    /// The exit status; `None` when it timed out or could not start or was killed.
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    /// Its stdout and stderr, bounded.
    pub output: String,
    pub duration_ms: u64,
    /// `operator:<token id>` or `policy:<method>`.
    pub actor: String,
    pub reason: String,
    /// Exit 0 within the timeout: the node is confirmed off.
    pub ok: bool,
}

/// `POST /v1/nodes/{node}/fence`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FenceRequest {
    pub reason: String,
    #[serde(default)]
    pub dry_run: bool,
    /// Fence a node that is not lost (ready). The CLI asks twice.
    #[serde(default)]
    pub force: bool,
}

/// What a fence did (or with `dry_run`, would do): the method and command, the evidence,
/// and the unblock that followed it. Deserialises as an [`ActionPlan`] too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceOutcome {
    pub dry_run: bool,
    pub node: String,
    pub method: String,
    pub command: Vec<String>,
    pub timeout_ms: u64,
    /// The evidence; `None` on a dry run.
    #[serde(default)]
    pub fence: Option<FenceRecord>,
    /// The unblock the fence carries out (or would).
    pub actions: Vec<PlannedAction>,
}

impl Node {
    /// A ready node that has missed heartbeats: silent for at least half the TTL (agents
    /// heartbeat every third of it), so it is lost soon unless one arrives.
    pub fn at_risk(&self) -> bool {
        self.status == NodeStatus::Ready
            && self.silent_ms.is_some_and(|s| {
                self.heartbeat_ttl_ms > 0 && s.saturating_mul(2) >= self.heartbeat_ttl_ms
            })
    }

    /// How long until the server marks a ready node lost, unless a heartbeat arrives.
    pub fn lost_in_ms(&self) -> Option<u64> {
        let silent = self
            .silent_ms
            .filter(|_| self.status == NodeStatus::Ready)?;
        Some(self.heartbeat_ttl_ms.saturating_sub(silent))
    }
}

/// A plugin as one node runs it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlugin {
    pub id: String,
    /// The plugin's own id for the node, from NodeGetInfo.
    pub node_id: String,
    /// 0: no limit.
    pub max_volumes: u32,
    /// Attachments of this plugin's volumes on the node, detaching ones included.
    pub used: u32,
    /// Whether this node's agent hosts the plugin's controller.
    pub controller: bool,
    /// The node's topology segments as the plugin reports them (NodeGetInfo's
    /// `accessible_topology`, e.g. `{"zone": "a"}`); empty when it reports none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub topology: BTreeMap<String, String>,
}

/// A plugin across the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plugin {
    pub id: String,
    pub name: String,
    pub version: String,
    pub nodes_healthy: u32,
    pub nodes_expected: u32,
    pub controllers_healthy: u32,
    pub controllers_expected: u32,
    pub controller_publish: bool,
    pub stage_unstage: bool,
    pub volumes: u32,
}

/// An entry of the audit trail.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub index: u64,
    pub at: String,
    pub kind: String,
    pub volume: Option<String>,
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
    /// (ControllerUnpublish without the node), `release` (through the node).
    pub action: String,
    pub volume: String,
    pub node: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alloc: Option<String>,
    /// When the node was lost, for actions on a lost node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_since: Option<String>,
}

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
}

/// `GET /v1/health`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, or `degraded` (the server answers, but `reasons` says what is wrong).
    pub status: String,
    pub version: String,
    /// Why the server is degraded, e.g. the state database refuses writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
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
            Self::Failed => "failed",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }
}

// ---- agent endpoints ----

/// One plugin as a node agent found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRegistration {
    /// csivol's id for the plugin (what volumes name in `plugin`).
    pub id: String,
    pub info: PluginInfo,
    pub capabilities: PluginCapabilities,
    /// Node service facts; `None` when this agent only hosts the controller.
    #[serde(default)]
    pub node: Option<NodePluginRegistration>,
    /// Controller capabilities, when this agent hosts the plugin's controller.
    #[serde(default)]
    pub controller: Option<ControllerCapabilities>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodePluginRegistration {
    pub info: NodeInfo,
    pub capabilities: NodeCapabilities,
}

/// `POST /v1/nodes/{node}/register`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    pub plugins: Vec<PluginRegistration>,
    /// Self-fencing delay in milliseconds, if the agent self-fences.
    #[serde(default)]
    pub fence_after_ms: Option<u64>,
    /// What the node has published now (after its restart recovery).
    #[serde(default)]
    pub published: Vec<ClaimRef>,
    /// Volumes the node has staged now.
    #[serde(default)]
    pub staged: Vec<String>,
    /// The node's labels (`bmc = "10.0.0.11"`), for choosing and running its fence method.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterResponse {
    pub heartbeat_ttl_ms: u64,
    pub index: u64,
}

/// `POST /v1/nodes/{node}/heartbeat` answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    pub status: NodeStatus,
    pub heartbeat_ttl_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRef {
    pub volume: String,
    pub alloc: String,
}

/// What a volume needs on a node: enough to call the plugin with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVolume {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
    pub capability: VolumeCapability,
    #[serde(default)]
    pub context: BTreeMap<String, String>,
    /// Passed to node calls; never logged.
    #[serde(default)]
    pub secrets: BTreeMap<String, String>,
    #[serde(default)]
    pub publish_context: PublishContext,
}

/// A claim the node must have published.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredPublish {
    pub alloc: String,
    pub read_only: bool,
    #[serde(flatten)]
    pub volume: NodeVolume,
}

/// A claim the node must take down (release, failure), then report unpublished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredUnpublish {
    pub volume: String,
    pub alloc: String,
    pub plugin: String,
    pub external_id: String,
}

/// A volume with no claim left on the node: unstage it (if staged) and report unstaged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredUnstage {
    pub volume: String,
    pub plugin: String,
    pub external_id: String,
}

/// A controller operation assigned to this agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerOp {
    pub id: u64,
    /// Bumped on every retry; a report names the attempt it answers.
    pub attempt: u32,
    pub plugin: String,
    /// Do not start before this time (unix ms): the server's backoff after an error.
    pub not_before_ms: u64,
    #[serde(flatten)]
    pub kind: ControllerOpKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControllerOpKind {
    Publish {
        volume: String,
        external_id: String,
        /// The plugin's id for the target node (from its NodeGetInfo).
        node_id: String,
        capability: VolumeCapability,
        readonly: bool,
        #[serde(default)]
        context: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    Unpublish {
        volume: String,
        external_id: String,
        node_id: String,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    Create {
        volume: String,
        capability: VolumeCapability,
        capacity_bytes: u64,
        #[serde(default)]
        parameters: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    Delete {
        volume: String,
        external_id: String,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
}

/// `GET /v1/nodes/{node}/desired`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredState {
    pub index: u64,
    pub status: Option<NodeStatus>,
    pub publish: Vec<DesiredPublish>,
    pub unpublish: Vec<DesiredUnpublish>,
    pub unstage: Vec<DesiredUnstage>,
    pub controller_ops: Vec<ControllerOp>,
}

/// `POST /v1/nodes/{node}/reports`: a batch of outcomes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportBatch {
    pub reports: Vec<Report>,
}

/// A plugin error as the agent saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginError {
    /// gRPC code name (`UNAVAILABLE`), or `TIMEOUT` for a readiness timeout.
    pub code: String,
    pub message: String,
    /// Whether the agent gave up (the claim fails) or will retry at `next_retry_at_ms`.
    #[serde(rename = "final")]
    pub is_final: bool,
    #[serde(default)]
    pub next_retry_at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Report {
    /// Staged (if needed), published and checked mounted.
    Published {
        volume: String,
        alloc: String,
        target_path: String,
    },
    /// Not published on the node (any more).
    Unpublished {
        volume: String,
        alloc: String,
    },
    /// Nothing of the volume is staged on the node (any more).
    Unstaged {
        volume: String,
    },
    /// A published claim's mount vanished or lost its backing (`reason`); the node is
    /// publishing it again.
    Drift {
        volume: String,
        alloc: String,
        reason: String,
    },
    /// A claim waits on the node for `reason` since `since_ms`, at most `timeout_ms`.
    Waiting {
        volume: String,
        alloc: String,
        reason: String,
        since_ms: u64,
        timeout_ms: u64,
    },
    /// The plugin's VOLUME_CONDITION for a published claim, sent when it changes.
    Condition {
        volume: String,
        alloc: String,
        abnormal: bool,
        message: String,
    },
    /// A node step failed.
    ClaimError {
        volume: String,
        alloc: String,
        error: PluginError,
    },
    /// A volume-level node step (NodeUnstageVolume) failed; it is retried.
    VolumeError {
        volume: String,
        error: PluginError,
    },
    ControllerPublished {
        op: u64,
        attempt: u32,
        publish_context: PublishContext,
    },
    ControllerUnpublished {
        op: u64,
        attempt: u32,
    },
    Created {
        op: u64,
        attempt: u32,
        external_id: String,
        capacity_bytes: u64,
        #[serde(default)]
        context: BTreeMap<String, String>,
    },
    Deleted {
        op: u64,
        attempt: u32,
    },
    OpError {
        op: u64,
        attempt: u32,
        error: PluginError,
    },
    /// The agent lost the server for its fence time and took everything down.
    Fenced {
        at_ms: u64,
        volumes: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_at_risk_have_missed_heartbeats_for_half_the_ttl() {
        let node = |status, silent_ms| Node {
            name: "n1".into(),
            status,
            last_heartbeat: None,
            heartbeat_ttl_ms: 10_000,
            silent_ms,
            eligibility: Eligibility::Eligible,
            lost_at: None,
            fence_after: None,
            fenced_at: None,
            plugins: Vec::new(),
            registered_at: String::new(),
            labels: BTreeMap::new(),
            fence_method: None,
            fence_failures: 0,
            fence_error: None,
            next_fence_at: None,
            fences: Vec::new(),
        };
        // (status, silent for, at risk, lost in)
        let cases = [
            (NodeStatus::Ready, Some(1_000), false, Some(9_000)),
            (NodeStatus::Ready, Some(4_999), false, Some(5_001)),
            (NodeStatus::Ready, Some(5_000), true, Some(5_000)),
            (NodeStatus::Ready, Some(12_000), true, Some(0)),
            (NodeStatus::Ready, None, false, None),
            (NodeStatus::Lost, Some(12_000), false, None),
        ];
        for (status, silent, risk, left) in cases {
            let n = node(status, silent);
            assert_eq!(n.at_risk(), risk, "{status:?} {silent:?}");
            assert_eq!(n.lost_in_ms(), left, "{status:?} {silent:?}");
        }
    }

    #[test]
    fn names() {
        for ok in ["a", "vol-1", "A.b_c-9", &"x".repeat(128)] {
            assert!(validate_name("volume", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../x",
            ".hidden",
            "-x",
            "a/b",
            "a b",
            &"x".repeat(129),
            "é",
        ] {
            let err = validate_name("volume", bad).unwrap_err();
            assert!(err.starts_with("invalid volume name"), "{err}");
        }
    }

    #[test]
    fn text_enums_match_serde() {
        for s in ClaimState::ALL {
            assert_eq!(s.to_string().parse::<ClaimState>(), Ok(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        for s in VolumeState::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert!("nope".parse::<ClaimMode>().is_err());
    }

    #[test]
    fn requests_refuse_unknown_fields() {
        let err = serde_json::from_str::<ClaimRequest>(
            r#"{"alloc":"a","node":"n","mode":"write","extra":1}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
    }

    #[test]
    fn reports_are_tagged() {
        let r = Report::Unstaged { volume: "v".into() };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"kind":"unstaged","volume":"v"}"#
        );
        let op = ControllerOp {
            id: 1,
            attempt: 0,
            plugin: "p".into(),
            not_before_ms: 0,
            kind: ControllerOpKind::Delete {
                volume: "v".into(),
                external_id: "e".into(),
                secrets: BTreeMap::new(),
            },
        };
        let json = serde_json::to_value(&op).unwrap();
        assert_eq!(json["op"], "delete");
        assert_eq!(serde_json::from_value::<ControllerOp>(json).unwrap(), op);
    }
}
