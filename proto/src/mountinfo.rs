//! The kernel's mount table, `/proc/self/mountinfo`, parsed once for the node agent and the
//! reference plugin alike (both must agree on what is mounted where).
//!
//! Each line is `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
//! SUPER_OPTIONS` (proc(5)). `ROOT` is the directory of the filesystem that is mounted at
//! `MOUNT_POINT`: `/` for a whole filesystem, the source directory for a bind mount. Two
//! mounts show the same data exactly when they have the same device (`MAJOR:MINOR`) and
//! root, which is what tells a bind of a volume from a bind of an empty local directory.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of the mount table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub id: u64,
    pub parent: u64,
    /// `MAJOR:MINOR` of the filesystem.
    pub device: String,
    /// The directory of that filesystem mounted here.
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

/// A snapshot of the mount table, in the kernel's order (a later line mounted over an
/// earlier one at the same point hides it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountTable {
    pub mounts: Vec<Mount>,
}

impl MountTable {
    /// Reads this process's mount namespace.
    pub fn read() -> io::Result<Self> {
        Ok(Self::parse(&std::fs::read_to_string(
            "/proc/self/mountinfo",
        )?))
    }

    /// Parses mountinfo text; lines that do not parse are skipped.
    pub fn parse(text: &str) -> Self {
        Self {
            mounts: text.lines().filter_map(parse_line).collect(),
        }
    }

    /// The mount visible at `path` exactly (the topmost one), if `path` is a mount point.
    /// `path` must be canonical, as the kernel writes it.
    pub fn at(&self, path: &Path) -> Option<&Mount> {
        self.mounts.iter().rev().find(|m| m.mount_point == path)
    }

    /// The mount that holds `path`: the topmost mount whose point is `path` or its
    /// deepest ancestor.
    pub fn containing(&self, path: &Path) -> Option<&Mount> {
        self.mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| path.starts_with(&m.mount_point))
            .max_by_key(|(i, m)| (m.mount_point.components().count(), *i))
            .map(|(_, m)| m)
    }

    /// Whether `path` (canonicalised here; a path that does not exist is not one) is a
    /// mount point.
    pub fn is_mount_point(&self, path: &Path) -> bool {
        path.canonicalize().is_ok_and(|p| self.at(&p).is_some())
    }

    /// Every mount point, in the kernel's order.
    pub fn points(&self) -> impl Iterator<Item = &Path> {
        self.mounts.iter().map(|m| m.mount_point.as_path())
    }

    /// Where `path` lives inside its filesystem: `(device, directory within it)`. A bind
    /// mount of `path` shows exactly this device and root.
    pub fn fs_location(&self, path: &Path) -> Option<(String, PathBuf)> {
        let m = self.containing(path)?;
        let rest = path.strip_prefix(&m.mount_point).ok()?;
        Some((m.device.clone(), m.root.join(rest)))
    }
}

fn parse_line(line: &str) -> Option<Mount> {
    let mut fields = line.split(' ');
    let id = fields.next()?.parse().ok()?;
    let parent = fields.next()?.parse().ok()?;
    let device = fields.next()?.to_owned();
    let root = unescape(fields.next()?);
    let mount_point = unescape(fields.next()?);
    // Options, then optional fields up to the `-` separator.
    let mut rest = fields.skip(1).skip_while(|f| *f != "-");
    rest.next()?;
    let fs_type = rest.next()?.to_owned();
    let source = rest.next().map(unescape_str).unwrap_or_default();
    Some(Mount {
        id,
        parent,
        device,
        root,
        mount_point,
        fs_type,
        source,
    })
}

fn unescape_str(field: &str) -> String {
    unescape(field).to_string_lossy().into_owned()
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

    const TABLE: &str = "\
22 1 0:21 / /proc rw,relatime - proc proc rw
1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 1 8:1 /srv/backend/vol-1 /var/lib/csivol/staging/hp/v1 rw,relatime shared:1 - ext4 /dev/sda1 rw
41 1 8:1 /srv/backend/vol-1 /var/lib/csivol/targets/v1/a\\040b rw,relatime - ext4 /dev/sda1 rw
42 41 8:1 /var/lib/csivol/staging/hp/v1 /var/lib/csivol/targets/v1/a\\040b rw - ext4 /dev/sda1 rw
garbage line
";

    #[test]
    fn parses_every_field_and_skips_garbage() {
        let t = MountTable::parse(TABLE);
        assert_eq!(t.mounts.len(), 5);
        assert_eq!(
            t.mounts[2],
            Mount {
                id: 40,
                parent: 1,
                device: "8:1".into(),
                root: "/srv/backend/vol-1".into(),
                mount_point: "/var/lib/csivol/staging/hp/v1".into(),
                fs_type: "ext4".into(),
                source: "/dev/sda1".into(),
            }
        );
    }

    #[test]
    fn the_topmost_mount_at_a_point_wins() {
        let t = MountTable::parse(TABLE);
        let m = t.at(Path::new("/var/lib/csivol/targets/v1/a b")).unwrap();
        assert_eq!(m.id, 42);
        assert_eq!(t.at(Path::new("/var/lib/csivol/targets/v1")), None);
    }

    #[test]
    fn locates_a_path_inside_its_filesystem() {
        let t = MountTable::parse(TABLE);
        assert_eq!(
            t.fs_location(Path::new("/var/lib/csivol/staging/hp/v2")),
            Some(("8:1".into(), "/var/lib/csivol/staging/hp/v2".into()))
        );
        assert_eq!(
            t.fs_location(Path::new("/var/lib/csivol/staging/hp/v1/data")),
            Some(("8:1".into(), "/srv/backend/vol-1/data".into()))
        );
        assert_eq!(t.containing(Path::new("/proc/1")).unwrap().id, 22);
    }

    #[test]
    fn unescapes_mountinfo_paths() {
        assert_eq!(unescape("/a\\040b"), PathBuf::from("/a b"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape("/end\\04"), PathBuf::from("/end\\04"));
    }

    #[test]
    fn the_real_table_has_a_root() {
        let t = MountTable::read().unwrap();
        assert!(t.is_mount_point(Path::new("/")));
        assert!(!t.is_mount_point(Path::new("/nonexistent/csivol")));
    }
}
