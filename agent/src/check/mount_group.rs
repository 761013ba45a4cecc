//! Whether a plugin with VOLUME_MOUNT_GROUP honours `volume_mount_group`: the check's
//! scratch volume is staged and published with a group, and a process with that uid and
//! gid and no other group makes a file through the target.
//!
//! The spec (csi.proto, `MountVolume.volume_mount_group`): the plugin "MUST ensure that
//! the volume_mount_group parameter is passed as the group identifier to the underlying
//! operating system mount system call", and "new file and/or directory entries written to
//! the underlying filesystem SHOULD be permission-labeled in such a manner [...] that they
//! are both readable and writable by said mount group identifier". It does not promise
//! the root a group, so this is reported, not counted as a departure: a plugin that fails
//! it is one a non-root workload cannot write through by its group alone, which is what
//! csivol's own ownership change (`ownership` in the server's config) is for.

use std::os::unix::process::CommandExt;
use std::path::Path;

use csivol_api::domain::NodeCapabilities;
use csivol_api::{ClaimMount, GroupBy};

/// The mount the check stages and publishes with: the group where the plugin has
/// VOLUME_MOUNT_GROUP and the volume is a file system, else none.
pub(super) fn mount(caps: &NodeCapabilities, block: bool, gid: u32) -> ClaimMount {
    if !caps.volume_mount_group || block {
        return ClaimMount::default();
    }
    ClaimMount {
        gid: Some(gid),
        group_by: Some(GroupBy::Plugin),
        ..ClaimMount::default()
    }
}

/// Makes a file through `target` as uid and gid `gid` with no supplementary group (the
/// standard library drops them when a root process sets the uid), and removes it.
pub(super) fn write_as(target: &Path, gid: u32) -> Result<(), String> {
    let file = target.join(".csivol-check-group");
    let out = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg("echo csivol > \"$1\" && rm -f \"$1\"")
        .arg("sh")
        .arg(&file)
        .uid(gid)
        .gid(gid)
        .env_clear()
        .output()
        .map_err(|e| format!("failed to run /bin/sh as uid and gid {gid}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "a process of uid and gid {gid} with no other group could not make a file in {}: {}",
        target.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}
