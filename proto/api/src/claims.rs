//! Claims and the attachments they need.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{ClaimMount, ErrorBody, MountRequest, PublishContext};

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

/// One workload's claim on a volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// Its volume's name within its namespace.
    pub volume: String,
    #[serde(default = "crate::default_namespace")]
    pub namespace: String,
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
    /// A claim found not mounted as its plugin made it, which its node publishes again:
    /// what found it, since when and why; absent once republished (its repair) or released.
    /// `error` says it too (`drift: WHY`) while no later error replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<ClaimDrift>,
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
    /// The claim's mount: the group its workload writes as and how it is applied.
    #[serde(default, skip_serializing_if = "ClaimMount::is_empty")]
    pub mount: ClaimMount,
    /// How full the claim's volume is on its node, as its node plugin last said (kept in
    /// the server's memory: absent until a sample came since the server started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::ClaimUsage>,
    /// For a claim made from a pool (`claim --pool`): the pool, and why this member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::ClaimPool>,
}

/// A claim's drift: its volume not mounted at its target as its plugin made it, while
/// nobody released the claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimDrift {
    /// What found it.
    pub found: DriftFound,
    /// When csivol recorded it (RFC 3339).
    pub since: String,
    /// Why, in the words of what found it.
    pub reason: String,
}

/// What found a claim's drift.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DriftFound {
    /// Its node's agent, checking the claim's target against the mount table.
    Check,
    /// Its node registered (its agent started) without it mounted.
    Registration,
    /// Its node came back from being lost without it mounted.
    Return,
}

impl DriftFound {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Check => "check",
            Self::Registration => "registration",
            Self::Return => "return",
        }
    }
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
    /// What the claim asks of its mount (a group for its workload); empty: as before.
    #[serde(default, skip_serializing_if = "MountRequest::is_empty")]
    pub mount: MountRequest,
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
            mount: MountRequest::default(),
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
    /// Set while the node keeps the volume staged with no claim left (its pool lingers),
    /// and while a node lost so holds it blocked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linger: Option<Linger>,
}

/// A staging kept on its node after the release of its last claim there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Linger {
    /// The alloc whose release left the staging.
    pub after_alloc: String,
    /// Since when (RFC 3339).
    pub since: String,
    /// Until when, unless the volume is wanted elsewhere first (RFC 3339).
    pub until: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VolumeState;

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
}
