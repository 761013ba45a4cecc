//! The kernel's mount table, `/proc/self/mountinfo`, parsed once for the node agent and the
//! reference plugin alike (both must agree on what is mounted where).
//!
//! Each line is `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE
//! SUPER_OPTIONS` (proc(5)). `ROOT` is the directory of the filesystem that is mounted at
//! `MOUNT_POINT`: `/` for a whole filesystem, the source directory for a bind mount. Two
//! mounts show the same data exactly when they have the same device (`MAJOR:MINOR`) and
//! root, which is what tells a bind of a volume from a bind of an empty local directory.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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

/// The mount table, read again only once it changed. The kernel marks an open
/// `/proc/self/mountinfo` with a priority event after every mount, unmount or remount in
/// the process's mount namespace (proc(5), of `/proc/pid/mounts`, which `mountinfo` shares
/// its polling with: "a change in this file (i.e., a filesystem mount or unmount) causes
/// select(2) to mark the file descriptor as having an exceptional condition, and poll(2)
/// and epoll_wait(2) mark the file as having a priority event (POLLPRI)"); each poll that
/// reports the event takes it. So a look at the table while nothing was mounted or
/// unmounted costs one `poll`, not the kernel writing out every mount of the node and the
/// parse of it all, whose cost grows with the node's mounts.
#[derive(Debug)]
pub struct MountWatch {
    /// The open table and what was last read from it, under one lock: a poll that takes
    /// the event and the read that follows it are one step.
    state: Mutex<Watched>,
}

#[derive(Debug)]
struct Watched {
    file: File,
    table: Arc<MountTable>,
}

impl MountWatch {
    /// Opens and reads this process's mount table. The kernel counts changes from the open,
    /// so the table read after it is current until the next event.
    pub fn open() -> io::Result<Self> {
        let file = File::open("/proc/self/mountinfo")?;
        let table = Arc::new(read_from(&file)?);
        Ok(Self {
            state: Mutex::new(Watched { file, table }),
        })
    }

    /// The mount table as it is now: the one last read, unless the kernel says something was
    /// mounted or unmounted since, in which case it is read again.
    pub fn table(&self) -> io::Result<Arc<MountTable>> {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if changed(&w.file)? {
            w.table = Arc::new(read_from(&w.file)?);
        }
        Ok(Arc::clone(&w.table))
    }
}

/// Whether the kernel marked the open table as changed since the last poll (which this
/// poll clears).
fn changed(file: &File) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(file, PollFlags::PRI)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&now))?;
    Ok(fds[0].revents().intersects(PollFlags::PRI | PollFlags::ERR))
}

/// The whole table from the start of the open file (the kernel writes it afresh).
fn read_from(mut file: &File) -> io::Result<MountTable> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_string(&mut text)?;
    Ok(MountTable::parse(&text))
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

    /// A tmpfs mounted for a test, unmounted and its directory removed when dropped (even
    /// when the test fails).
    struct Tmpfs(PathBuf);

    impl Tmpfs {
        fn mount(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("csivol-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            // Canonical, as the kernel writes mount points.
            let dir = dir.canonicalize().unwrap();
            let mounted = Self(dir);
            rustix::mount::mount(
                "csivol-test",
                &mounted.0,
                "tmpfs",
                rustix::mount::MountFlags::empty(),
                None,
            )
            .expect("mounting a tmpfs needs root, as the tests do (README)");
            mounted
        }

        fn unmount(&self) {
            rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH).unwrap();
        }
    }

    impl Drop for Tmpfs {
        fn drop(&mut self) {
            let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn a_watched_table_is_read_again_after_a_mount_or_unmount_only() {
        let watch = MountWatch::open().unwrap();
        // Nothing mounted in between: the same table, not read again. The node may mount
        // something of its own at any moment, so a few tries are allowed for one quiet one.
        assert!(
            (0..100).any(|_| {
                let (a, b) = (watch.table().unwrap(), watch.table().unwrap());
                Arc::ptr_eq(&a, &b)
            }),
            "the table was read again although nothing was mounted"
        );
        let tmp = Tmpfs::mount("mount-watch");
        let after_mount = watch.table().unwrap();
        assert_eq!(
            after_mount.at(&tmp.0).map(|m| m.fs_type.as_str()),
            Some("tmpfs"),
            "the mount is seen at once"
        );
        tmp.unmount();
        assert!(
            watch.table().unwrap().at(&tmp.0).is_none(),
            "and its unmount"
        );
    }

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
