//! How a claim asks for its volume to be mounted beyond the volume's own capability: the
//! group its workload writes as, and how csivol has that group applied on the node.

use serde::{Deserialize, Serialize};

/// What a claim asks of its mount (`csivol claim --gid`). Empty: the volume as its
/// capability says, as before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountRequest {
    /// The group (a numeric gid) the claim's workload writes the volume as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Where the group cannot be applied, record the claim without it and say why
    /// (`ClaimMount::not_applied`) instead of refusing it: `csivol run` asks so for its
    /// caller's own group, so that a run that worked without one keeps working.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub best_effort: bool,
}

impl MountRequest {
    pub fn is_empty(&self) -> bool {
        self.gid.is_none()
    }
}

/// How csivol has a claim's group applied, decided when the server records the claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupBy {
    /// The node plugin has VOLUME_MOUNT_GROUP: the group goes to NodeStageVolume and
    /// NodePublishVolume in `MountVolume.volume_mount_group`, and the plugin applies it.
    Plugin,
    /// The agent gives the target's root the group, `g+rwX` and the setgid bit, unless
    /// they are already so (`ownership = "on-root-mismatch"`).
    OnRootMismatch,
    /// Likewise, and every entry below the root, a bounded number of them
    /// (`ownership = "recursive"`).
    Recursive,
}

impl GroupBy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plugin => "plugin",
            Self::OnRootMismatch => "on-root-mismatch",
            Self::Recursive => "recursive",
        }
    }
}

/// A claim's mount as recorded: what it asked and how the group is applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimMount {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// How the group is applied; set whenever `gid` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<GroupBy>,
    /// Why the group asked for on a best-effort claim was not applied (the claim was
    /// recorded without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applied: Option<String>,
}

impl ClaimMount {
    pub fn is_empty(&self) -> bool {
        self.gid.is_none() && self.not_applied.is_none()
    }
}
