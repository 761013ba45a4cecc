//! The mount table and the readiness check of a published target.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use super::config::ReadyCheck;

/// Every mount point of this process's mount namespace, from `/proc/self/mountinfo`.
pub fn mount_points() -> io::Result<HashSet<PathBuf>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .collect())
}

/// Whether `path` is a mount point. A path that does not exist is not one.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    let Ok(path) = path.canonicalize() else {
        return Ok(false);
    };
    Ok(mount_points()?.contains(&path))
}

/// Whether a published target is ready for its workload.
pub fn is_ready(check: ReadyCheck, target: &Path, block: bool) -> io::Result<bool> {
    match check {
        // A block volume is published as a device file, not a mount.
        ReadyCheck::Mount if !block => is_mount_point(target),
        _ => Ok(target.symlink_metadata().is_ok()),
    }
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
            out.push(
                (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0'),
            );
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(OsString::from_vec(out))
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

    #[test]
    fn root_is_a_mount_point() {
        assert!(is_mount_point(Path::new("/")).unwrap());
        assert!(!is_mount_point(Path::new("/nonexistent/csivol")).unwrap());
        assert!(is_ready(ReadyCheck::Exists, Path::new("/"), false).unwrap());
        assert!(!is_ready(ReadyCheck::Exists, Path::new("/nonexistent/csivol"), true).unwrap());
    }
}
