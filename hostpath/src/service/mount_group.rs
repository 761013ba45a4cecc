//! VOLUME_MOUNT_GROUP: the group a CO passes in `MountVolume.volume_mount_group`.
//!
//! The spec (csi.proto, `MountVolume.volume_mount_group`): "If SP has VOLUME_MOUNT_GROUP
//! node capability and CO provides this field then SP MUST ensure that the
//! volume_mount_group parameter is passed as the group identifier to the underlying
//! operating system mount system call [...] Additionally, new file and/or directory
//! entries written to the underlying filesystem SHOULD be permission-labeled in such a
//! manner, unless otherwise modified by a workload, that they are both readable and
//! writable by said mount group identifier." This plugin's mounts are bind mounts, which
//! take no group option: it gives the published root the group, `g+rwx` and the setgid
//! bit instead, which is what a workload in the group sees of a `gid=` mount. Without the
//! capability (`--disable volume-mount-group`) a CO that sends the field anyway is refused,
//! as the reference plugin refuses every caller's mistake.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use csivol_csi::csi::v1 as csi;
use tonic::Status;

use super::{Plugin, internal};

impl Plugin {
    /// The group the call asks for, if any; refused when this instance does not have
    /// VOLUME_MOUNT_GROUP or the field is not a numeric gid.
    pub(super) fn mount_group(
        &self,
        cap: Option<&csi::VolumeCapability>,
    ) -> Result<Option<u32>, Status> {
        let Some(csi::volume_capability::AccessType::Mount(m)) =
            cap.and_then(|c| c.access_type.as_ref())
        else {
            return Ok(None);
        };
        if m.volume_mount_group.is_empty() {
            return Ok(None);
        }
        if !self.cfg.features.volume_mount_group {
            return Err(Status::invalid_argument(
                "`volume_mount_group` is set, but this plugin does not advertise \
                 VOLUME_MOUNT_GROUP (started with `--disable volume-mount-group`); \
                 the CO must not send it",
            ));
        }
        m.volume_mount_group.parse().map(Some).map_err(|_| {
            Status::invalid_argument(format!(
                "`volume_mount_group` `{}` is not a numeric gid",
                m.volume_mount_group
            ))
        })
    }
}

/// Gives the mount's root at `path` group `gid`, `g+rwx` and the setgid bit.
pub(super) fn give_group(path: &Path, gid: u32) -> Result<(), Status> {
    let meta = std::fs::metadata(path).map_err(|e| internal(e, "read the target"))?;
    if meta.gid() != gid {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| internal(e, &format!("give group {gid} to {}", path.display())))?;
    }
    let mode = meta.mode() & 0o7777;
    let wanted = mode | 0o2070;
    if wanted != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted))
            .map_err(|e| internal(e, &format!("set the mode of {}", path.display())))?;
    }
    Ok(())
}
