//! Bind mounts and the mount table, or their stand-ins in `--mount none` mode.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

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
            Self::Bind => {
                mount_bind(source, target)?;
                if readonly {
                    // A bind mount ignores MS_RDONLY on creation; it takes a remount.
                    if let Err(e) = mount_remount(target, MountFlags::BIND | MountFlags::RDONLY, "")
                    {
                        let _ = unmount(target, UnmountFlags::empty());
                        return Err(e.into());
                    }
                }
                Ok(())
            }
            Self::None => fs::write(target.join(MARKER), volume_id),
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

/// Whether `path` is a mount point, from `/proc/self/mountinfo`.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    let Ok(path) = path.canonicalize() else {
        return Ok(false);
    };
    Ok(mount_points()?.contains(&path))
}

/// Every mount point of this process's mount namespace.
pub fn mount_points() -> io::Result<Vec<PathBuf>> {
    let table = fs::read_to_string("/proc/self/mountinfo")?;
    Ok(table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .collect())
}

/// Decodes the octal escapes (`\040` for a space) the kernel writes in mountinfo paths.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let n = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(unescape("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape("/end\\04"), PathBuf::from("/end\\04"));
    }
}
