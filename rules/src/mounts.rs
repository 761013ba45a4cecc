//! How a claim's group is applied on its node, decided when the server records the claim.
//!
//! A claim may ask for the group its workload writes as (`csivol claim --gid`). Where the
//! node plugin has the VOLUME_MOUNT_GROUP node capability, the plugin applies it; the CSI
//! spec (csi.proto, `MountVolume.volume_mount_group`): "If SP has VOLUME_MOUNT_GROUP node
//! capability and CO provides this field then SP MUST ensure that the volume_mount_group
//! parameter is passed as the group identifier to the underlying operating system mount
//! system call". A plugin without it gets no such field, and the group is applied by
//! csivol itself only where the operator allowed it for the plugin or the volume
//! (`ownership`; the volume's overrides its plugin's), for the gids the operator allowed
//! for the plugin: otherwise a claimer could give a volume to any group.

use std::fmt;
use std::ops::RangeInclusive;

use csivol_api::domain::{AccessMode, AccessType};
use csivol_api::{ClaimMode, GroupBy, Ownership};

/// What the operator set for one plugin's mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PluginMounts {
    pub ownership: Ownership,
    /// The gids csivol may give a volume of the plugin (`ownership_gids`).
    pub gids: Vec<RangeInclusive<u32>>,
    /// The plugin mounts with a `context=` flag (`selinux_mount`), as a Kubernetes
    /// CSIDriver declares `seLinuxMount`.
    pub selinux_mount: bool,
}

/// The facts of one claim that asks for a group.
#[derive(Clone, Debug)]
pub struct GroupClaim<'a> {
    pub gid: u32,
    pub mode: ClaimMode,
    pub access_mode: AccessMode,
    pub access_type: &'a AccessType,
    /// The node plugin's VOLUME_MOUNT_GROUP, if the node registered the plugin.
    pub volume_mount_group: Option<bool>,
    /// The group every other unreleased claim of the volume asks for (`None`: it asks
    /// for none, and takes the volume as the others have it).
    pub others: &'a [Option<u32>],
    /// The volume's own `ownership`, which overrides its plugin's (`None`: the plugin's).
    pub volume_ownership: Option<Ownership>,
}

/// Why a group cannot be applied. The words name the problem; `hint` the way out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupRefused {
    Block,
    Unregistered,
    Disagrees {
        other: u32,
    },
    /// Nothing may give the group: `by_volume`, the volume's own `ownership` says
    /// `never`, else its plugin's.
    OwnershipNever {
        by_volume: bool,
    },
    NotSingleNodeWrite,
    GidNotAllowed,
}

impl GroupRefused {
    pub fn hint(&self, plugin: &str) -> String {
        match self {
            Self::Block => "claim without --gid: a block volume has no file system".into(),
            Self::Unregistered => "wait for the node's agent to register, then claim again".into(),
            Self::Disagrees { .. } => {
                "claim with the group the volume's other claims use, or after they are released"
                    .into()
            }
            Self::OwnershipNever { by_volume: true } => format!(
                "set `ownership = \"on-root-mismatch\"` in the volume's spec (or leave it out to \
                 take the plugin's), with `ownership_gids` under [plugins.\"{plugin}\"] in the \
                 server's config, or use a plugin with VOLUME_MOUNT_GROUP"
            ),
            Self::OwnershipNever { by_volume: false } => format!(
                "set `ownership = \"on-root-mismatch\"` and `ownership_gids` under \
                 [plugins.\"{plugin}\"] in the server's config (or `ownership` in the volume's \
                 spec, with those gids), or use a plugin with VOLUME_MOUNT_GROUP"
            ),
            Self::NotSingleNodeWrite => {
                "claim for writing a single-node volume, or use a plugin with VOLUME_MOUNT_GROUP"
                    .into()
            }
            Self::GidNotAllowed => format!(
                "ask an operator to allow the gid in `ownership_gids` under \
                 [plugins.\"{plugin}\"] in the server's config"
            ),
        }
    }
}

impl fmt::Display for GroupRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Block => write!(
                f,
                "a group applies to a file-system volume, not a block one"
            ),
            Self::Unregistered => write!(
                f,
                "the node has not registered the volume's plugin, so whether it can apply \
                 a group is not known"
            ),
            Self::Disagrees { other } => write!(
                f,
                "another claim of the volume mounts it with group {other}: one volume is \
                 mounted with one group"
            ),
            Self::OwnershipNever { by_volume: true } => write!(
                f,
                "the node plugin does not have VOLUME_MOUNT_GROUP and the volume's \
                 `ownership` is `never`, so nothing would give the volume the group"
            ),
            Self::OwnershipNever { by_volume: false } => write!(
                f,
                "the node plugin does not have VOLUME_MOUNT_GROUP and the server's \
                 `ownership` for the plugin is `never`, so nothing would give the volume \
                 the group"
            ),
            Self::NotSingleNodeWrite => write!(
                f,
                "csivol changes ownership itself only for write claims of single-node \
                 volumes, and the plugin does not have VOLUME_MOUNT_GROUP"
            ),
            Self::GidNotAllowed => write!(
                f,
                "the gid is not among the server's `ownership_gids` for the plugin"
            ),
        }
    }
}

/// How the claim's group is applied, or why it cannot be.
pub fn group_by(c: &GroupClaim<'_>, plugin: &PluginMounts) -> Result<GroupBy, GroupRefused> {
    if c.access_type.is_block() {
        return Err(GroupRefused::Block);
    }
    // The staging is shared by every claim of the volume on a node, and a NodeStageVolume
    // with another capability is answered ALREADY_EXISTS (spec.md, NodeStageVolume
    // errors: "Volume published but is incompatible"): one group per volume.
    if let Some(other) = c.others.iter().flatten().find(|o| **o != c.gid) {
        return Err(GroupRefused::Disagrees { other: *other });
    }
    match c.volume_mount_group {
        None => return Err(GroupRefused::Unregistered),
        Some(true) => return Ok(GroupBy::Plugin),
        Some(false) => {}
    }
    let by = match c.volume_ownership.unwrap_or(plugin.ownership) {
        Ownership::Never => {
            return Err(GroupRefused::OwnershipNever {
                by_volume: c.volume_ownership.is_some(),
            });
        }
        Ownership::OnRootMismatch => GroupBy::OnRootMismatch,
        Ownership::Recursive => GroupBy::Recursive,
    };
    let single_node = matches!(
        c.access_mode,
        AccessMode::SingleNodeWriter
            | AccessMode::SingleNodeSingleWriter
            | AccessMode::SingleNodeMultiWriter
    );
    if !single_node || c.mode != ClaimMode::Write {
        return Err(GroupRefused::NotSingleNodeWrite);
    }
    if !plugin.gids.iter().any(|r| r.contains(&c.gid)) {
        return Err(GroupRefused::GidNotAllowed);
    }
    Ok(by)
}

#[cfg(test)]
mod tests;
