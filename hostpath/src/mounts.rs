//! Bind mounts and the mount table, or their stand-ins in `--mount none` mode.

use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use csivol_csi::mountinfo::MountTable;

use rustix::io::Errno;
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
            Self::Bind => unmount_if_mounted(target),
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

/// How long an unmount the kernel refuses as busy is tried again.
const BUSY_PATIENCE: Duration = Duration::from_secs(2);

/// Unmounts `target` if something is mounted there.
pub fn unmount_if_mounted(target: &Path) -> io::Result<()> {
    if is_mount_point(target)? {
        unmount_when_free(target, BUSY_PATIENCE)?;
    }
    Ok(())
}

/// Unmounts `target`, trying again for up to `patience` while the kernel says it is busy
/// (EBUSY). A mount is busy while any process holds a file open on it, and some hold one
/// only for a moment: a child forked while its parent had the target open keeps that
/// descriptor until it runs its program, which on a loaded machine can take a while.
/// NodeUnpublishVolume and NodeUnstageVolume are idempotent (spec.md), so a CO may call
/// them again, and csivol's agent does; trying again here spares it a round for a busy
/// moment. A mount still busy after `patience` is refused as before.
fn unmount_when_free(target: &Path, patience: Duration) -> io::Result<()> {
    let deadline = Instant::now() + patience;
    let mut pause = Duration::from_millis(2);
    loop {
        match unmount(target, UnmountFlags::empty()) {
            Ok(()) => return Ok(()),
            Err(Errno::BUSY) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `path` is a mount point, from `/proc/self/mountinfo`.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(MountTable::read()?.is_mount_point(path))
}

/// Whether the node of `device` is what is bound at `target`: a mount point showing the
/// same device number. A node bound earlier whose loop device was detached and its number
/// set up again on another file shows the number still; the caller knows that `device` is
/// the volume's now (`losetup --associated`), so the same number is the same device.
pub fn binds_device(target: &Path, device: &Path) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    if !is_mount_point(target)? {
        return Ok(false);
    }
    Ok(fs::metadata(target)?.rdev() == fs::metadata(device)?.rdev())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file bind-mounted onto another in a fresh temp dir (removed, and anything left
    /// mounted under it unmounted, when the `TestDir` drops).
    fn bound_file() -> (csivol_tests::TestDir, std::path::PathBuf) {
        let dir = csivol_tests::TestDir::new("hostpath-busy");
        let (source, target) = (dir.join("source"), dir.join("target"));
        fs::write(&source, b"data").unwrap();
        fs::write(&target, b"").unwrap();
        mount_bind(&source, &target).unwrap();
        assert!(is_mount_point(&target).unwrap());
        (dir, target)
    }

    #[test]
    fn an_unmount_busy_for_a_moment_succeeds_once_the_holder_lets_go() {
        let (_dir, target) = bound_file();
        let held = fs::File::open(&target).unwrap();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        unmount_if_mounted(&target).expect("unmounted once the file was closed");
        letting_go.join().unwrap();
        assert!(!is_mount_point(&target).unwrap());
    }

    #[test]
    fn an_unmount_busy_past_its_patience_is_refused_as_busy() {
        let (_dir, target) = bound_file();
        let held = fs::File::open(&target).unwrap();
        let err = unmount_when_free(&target, Duration::from_millis(50)).unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(Errno::BUSY.raw_os_error()),
            "{err}"
        );
        assert!(is_mount_point(&target).unwrap(), "still mounted");
        drop(held);
        unmount_if_mounted(&target).unwrap();
        assert!(!is_mount_point(&target).unwrap());
    }
}
