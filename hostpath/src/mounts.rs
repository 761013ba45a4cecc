//! Bind mounts and the mount table, or their stand-ins in `--mount none` mode.

use std::fs;
use std::io;
use std::path::Path;

use csivol_csi::mountinfo::MountTable;

use rustix::mount::{MountFlags, UnmountFlags, mount_bind, mount_remount, unmount};

/// How the plugin makes a volume appear at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MountMode {
    /// Real bind mounts (needs mount rights).
    Bind,
    /// Directories and marker files only, for machines without mount rights.
    None,
}

/// Name of the marker file written in `none` mode, holding the volume id.
pub const MARKER: &str = ".csivol-hostpath";

impl MountMode {
    /// Makes `source` appear at `target` (an existing directory), read-only if asked.
    pub fn attach(
        self,
        source: &Path,
        target: &Path,
        volume_id: &str,
        readonly: bool,
    ) -> io::Result<()> {
        match self {
            Self::Bind => bind(source, target, readonly),
            Self::None => fs::write(target.join(MARKER), volume_id),
        }
    }

    /// Makes a block volume appear at `target`, a file: in `bind` mode the device node is
    /// bind-mounted onto it; in `none` mode the file holds the volume id.
    pub fn attach_block(
        self,
        device: &Path,
        target: &Path,
        volume_id: &str,
        readonly: bool,
    ) -> io::Result<()> {
        match self {
            Self::Bind => bind(device, target, readonly),
            Self::None => fs::write(target, volume_id),
        }
    }

    /// Whether the block volume `volume_id` is attached at the file `target`.
    pub fn is_block_attached(self, target: &Path, volume_id: &str) -> io::Result<bool> {
        match self {
            Self::Bind => is_mount_point(target),
            Self::None => match fs::read_to_string(target) {
                Ok(s) => Ok(s == volume_id),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                // A directory or unreadable file: not a block publication of ours.
                Err(_) => Ok(false),
            },
        }
    }

    /// Undoes [`MountMode::attach`]; succeeds when nothing is attached at `target`.
    pub fn detach(self, target: &Path) -> io::Result<()> {
        match self {
            Self::Bind => {
                if !is_mount_point(target)? {
                    return Ok(());
                }
                unmount(target, UnmountFlags::empty())?;
                Ok(())
            }
            Self::None => match fs::remove_file(target.join(MARKER)) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        }
    }

    /// Whether something is attached at `target`.
    pub fn is_attached(self, target: &Path) -> io::Result<bool> {
        match self {
            Self::Bind => is_mount_point(target),
            Self::None => Ok(target.join(MARKER).is_file()),
        }
    }
}

/// Bind-mounts `source` (a directory or a device node) onto `target`, read-only if asked.
fn bind(source: &Path, target: &Path, readonly: bool) -> io::Result<()> {
    mount_bind(source, target)?;
    if readonly {
        // A bind mount ignores MS_RDONLY on creation; it takes a remount.
        if let Err(e) = mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "") {
            let _ = unmount(target, UnmountFlags::empty());
            return Err(e.into());
        }
    }
    Ok(())
}

/// Unmounts `target` if something is mounted there.
pub fn unmount_if_mounted(target: &Path) -> io::Result<()> {
    if is_mount_point(target)? {
        unmount(target, UnmountFlags::empty())?;
    }
    Ok(())
}

/// Whether `path` is a mount point, from `/proc/self/mountinfo`.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(MountTable::read()?.is_mount_point(path))
}
