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
    /// Mount flags for this claim's publication only, among the volume's
    /// `claim_mount_flags` (`csivol claim --mount-flag`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    /// The SELinux context to mount the volume with (`csivol claim --selinux-context`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
}

impl MountRequest {
    pub fn is_empty(&self) -> bool {
        self.gid.is_none() && self.mount_flags.is_empty() && self.selinux_context.is_none()
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
    /// Mount flags added to NodePublishVolume's for this claim only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mount_flags: Vec<String>,
    /// The SELinux context the volume is mounted with on the claim's node (the claim's,
    /// or the volume's default), sent as a `context="..."` mount flag to NodeStageVolume
    /// and NodePublishVolume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
}

impl ClaimMount {
    pub fn is_empty(&self) -> bool {
        self.gid.is_none()
            && self.not_applied.is_none()
            && self.mount_flags.is_empty()
            && self.selinux_context.is_none()
    }

    /// The `context="..."` mount flag of the SELinux context. Quoted: a context holds
    /// commas, which separate mount options (mount(8), "context=").
    pub fn context_flag(&self) -> Option<String> {
        self.selinux_context
            .as_ref()
            .map(|c| format!("context=\"{c}\""))
    }
}

/// What a volume allows its claims to ask of their mounts, and its default SELinux
/// context (kept beside the volume's row).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeMounts {
    pub claim_mount_flags: Vec<String>,
    pub selinux_context: Option<String>,
}

impl VolumeMounts {
    pub fn is_empty(&self) -> bool {
        self.claim_mount_flags.is_empty() && self.selinux_context.is_none()
    }
}
