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

/// Whether csivol may change a volume's ownership itself: per plugin (the server's
/// `[plugins.NAME] ownership`) or per volume (its spec's `ownership`, which overrides its
/// plugin's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ownership {
    /// Never: only a plugin with VOLUME_MOUNT_GROUP applies a group.
    #[default]
    Never,
    /// The target's root gets the group, `g+rwX` and setgid unless it has them.
    OnRootMismatch,
    /// Likewise, and every entry below it, bounded.
    Recursive,
}

impl Ownership {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::OnRootMismatch => "on-root-mismatch",
            Self::Recursive => "recursive",
        }
    }
}

/// What csivol's own ownership change did to a claim's target, as its node reported it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnershipChange {
    /// Entries given the group (the root included); 0 when the root had it already.
    pub entries: u64,
    /// A `recursive` change stopped at the agent's bound: entries below those counted
    /// kept their group.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bounded: bool,
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
    /// What csivol's ownership change did on the claim's node (`group_by` is
    /// `on-root-mismatch` or `recursive`), once the node reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ownership_change: Option<OwnershipChange>,
}

impl ClaimMount {
    pub fn is_empty(&self) -> bool {
        self.gid.is_none()
            && self.not_applied.is_none()
            && self.mount_flags.is_empty()
            && self.selinux_context.is_none()
            && self.ownership_change.is_none()
    }

    /// The `context="..."` mount flag of the SELinux context. Quoted: a context holds
    /// commas, which separate mount options (mount(8), "context=").
    pub fn context_flag(&self) -> Option<String> {
        self.selinux_context
            .as_ref()
            .map(|c| format!("context=\"{c}\""))
    }
}

/// What a volume allows its claims to ask of their mounts, its default SELinux context
/// and whether csivol may change its ownership (kept beside the volume's row).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeMounts {
    pub claim_mount_flags: Vec<String>,
    pub selinux_context: Option<String>,
    /// The volume's own `ownership`; `None`: its plugin's.
    pub ownership: Option<Ownership>,
}

impl VolumeMounts {
    pub fn is_empty(&self) -> bool {
        self.claim_mount_flags.is_empty()
            && self.selinux_context.is_none()
            && self.ownership.is_none()
    }

    /// The `context="..."` mount flag of the volume's default context.
    pub fn context_flag(&self) -> Option<String> {
        self.selinux_context
            .as_ref()
            .map(|c| format!("context=\"{c}\""))
    }
}
