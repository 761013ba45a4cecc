//! Whether a staging or a published target really holds its volume, judged from the mount
//! table (`/proc/self/mountinfo`), never from the agent's records.
//!
//! The rule (docs/design/readiness.md): a mount shows a volume's data exactly when
//! its device (`MAJOR:MINOR`) and root are the volume's. So
//! - a staging is there when its path is a mount point that is not a bind of a directory
//!   below the agent's data dir (the empty directory the agent created for it);
//! - a target published from a staging is ready when it is a mount point with the
//!   staging's device and a root at or below the staging's root;
//! - a target published without staging is ready when it is a mount point that is not a
//!   bind of a directory below the agent's data dir;
//! - a block volume's staging must exist, and its target must be a block device node
//!   (`stat`) whose device is still there (a loop device with nothing behind it has no
//!   size), the same device as the volume's other targets on the node.
//!
//! Plugins that present volumes without mounting them (`csivol-hostpath --mount none`) are
//! checked with [`ReadyCheck::Exists`]: the path exists.

use std::io;
use std::path::{Path, PathBuf};

use csivol_csi::mountinfo::Mount;
pub use csivol_csi::mountinfo::MountTable;

use super::config::ReadyCheck;

/// Every mount point of this process's mount namespace.
pub fn mount_points() -> io::Result<Vec<PathBuf>> {
    Ok(MountTable::read()?
        .points()
        .map(Path::to_path_buf)
        .collect())
}

/// Whether `path` is a mount point. A path that does not exist is not one.
pub fn is_mount_point(path: &Path) -> io::Result<bool> {
    Ok(MountTable::read()?.is_mount_point(path))
}

/// What a readiness check looks at: one snapshot of the mount table and the agent's data
/// dir (canonical, like every path the agent records).
#[derive(Debug)]
pub struct Checker<'a> {
    table: MountTable,
    /// Device and directory of the data dir inside its filesystem: a mount showing that
    /// device with a root below it is a bind of a local directory, not of a volume.
    local: Option<(String, PathBuf)>,
    data_dir: &'a Path,
}

impl<'a> Checker<'a> {
    pub fn read(data_dir: &'a Path) -> io::Result<Self> {
        Ok(Self::new(MountTable::read()?, data_dir))
    }

    pub fn new(table: MountTable, data_dir: &'a Path) -> Self {
        let local = table.fs_location(data_dir);
        Self {
            table,
            local,
            data_dir,
        }
    }

    /// Whether something is mounted at `path` (canonical).
    pub fn is_mount_point(&self, path: &Path) -> bool {
        self.table.at(path).is_some()
    }

    fn is_local_bind(&self, m: &Mount) -> bool {
        self.local
            .as_ref()
            .is_some_and(|(dev, root)| m.device == *dev && m.root.starts_with(root))
    }

    fn mounted<'m>(&'m self, what: &str, path: &Path) -> Result<&'m Mount, String> {
        let m = self
            .table
            .at(path)
            .ok_or_else(|| format!("{what} is no longer mounted ({})", path.display()))?;
        if self.is_local_bind(m) {
            let inside = m
                .root
                .strip_prefix(self.local.as_ref().map_or(Path::new("/"), |l| &l.1))
                .map_or_else(|_| m.root.clone(), |r| self.data_dir.join(r));
            return Err(format!(
                "{what} at {} is a bind of the node's own directory {}, not of the volume",
                path.display(),
                inside.display()
            ));
        }
        Ok(m)
    }

    /// Whether the staging of `volume` at `path` holds the volume.
    pub fn staging(
        &self,
        check: ReadyCheck,
        volume: &str,
        path: &Path,
        block: bool,
    ) -> Result<(), String> {
        let what = format!("staging of {volume}");
        if check == ReadyCheck::Exists || block {
            return exists(&what, path);
        }
        self.mounted(&what, path).map(|_| ())
    }

    /// Whether the target of a claim of `volume` is mounted from the volume: from its
    /// staging when it has one.
    pub fn target(
        &self,
        check: ReadyCheck,
        volume: &str,
        target: &Path,
        staging: Option<&Path>,
        block: bool,
    ) -> Result<(), String> {
        let what = format!("target of {volume}");
        if block && check == ReadyCheck::Mount {
            return self.block_target(volume, target, staging).map(|_| ());
        }
        if check == ReadyCheck::Exists || block {
            if let Some(s) = staging {
                exists(&format!("staging of {volume}"), s)?;
            }
            return exists(&what, target);
        }
        let t = self.mounted(&what, target)?;
        let Some(staging) = staging else {
            return Ok(());
        };
        let s = self.mounted(&format!("staging of {volume}"), staging)?;
        if t.device != s.device || !t.root.starts_with(&s.root) {
            return Err(format!(
                "{what} at {} is not mounted from the volume's staging {} (device {} root {}, \
                 the staging is device {} root {})",
                target.display(),
                staging.display(),
                t.device,
                t.root.display(),
                s.device,
                s.root.display()
            ));
        }
        Ok(())
    }
}

impl Checker<'_> {
    /// Whether the target of a block volume holds a live block device, and which (its
    /// `rdev`): the staging exists, and the target is a device node, not the empty file or
    /// directory it was before the device was placed there. A bind of the agent's own file
    /// is no device node, so `stat` alone tells; the mount table is read for the message.
    pub fn block_target(
        &self,
        volume: &str,
        target: &Path,
        staging: Option<&Path>,
    ) -> Result<u64, String> {
        if let Some(s) = staging {
            exists(&format!("staging of {volume}"), s)?;
        }
        let what = format!("target of {volume}");
        let node = std::fs::metadata(target).map(|m| NodeKind::of(&m));
        let verdict = block_verdict(&what, target, node, sectors);
        if verdict.is_err() && self.table.at(target).is_none() {
            // Say it plainly: the device was never bound there, or was unmounted.
            return verdict.map_err(|e| format!("{e}; nothing is mounted there"));
        }
        verdict
    }
}

impl Checker<'_> {
    /// Why the block device node at `path` no longer has its device behind it (detached,
    /// or gone from the kernel); `None` when it has, or when `path` is no device node.
    /// A staging whose device died this way must be staged again before publishing.
    pub fn dead_device(&self, path: &Path) -> Option<String> {
        let node = std::fs::metadata(path).map(|m| NodeKind::of(&m));
        if !matches!(node, Ok(NodeKind::Block { .. })) {
            return None;
        }
        block_verdict("the device", path, node, sectors).err()
    }
}

/// What `stat` says a path is, as far as the block check cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Block { rdev: u64 },
    Other(&'static str),
}

impl NodeKind {
    fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let t = m.file_type();
        if t.is_block_device() {
            Self::Block { rdev: m.rdev() }
        } else if t.is_file() {
            Self::Other("a regular file")
        } else if t.is_dir() {
            Self::Other("a directory")
        } else if t.is_char_device() {
            Self::Other("a character device")
        } else {
            Self::Other("not a device node")
        }
    }
}

/// The size in 512-byte sectors the kernel gives the block device `rdev`, from sysfs;
/// `None` when the machine has no sysfs to ask (then the size is not judged).
fn sectors(rdev: u64) -> Option<Result<u64, ()>> {
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    if !Path::new("/sys/dev/block").is_dir() {
        return None;
    }
    let size = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/size"));
    Some(size.ok().and_then(|s| s.trim().parse().ok()).ok_or(()))
}

/// The pure judgement of a block target: a block device node whose device is still there
/// (known to the kernel, with a size). `sectors` answers the size of a device, or `None`
/// when it cannot be asked; `Err(())` when the kernel no longer knows the device.
pub fn block_verdict(
    what: &str,
    path: &Path,
    node: io::Result<NodeKind>,
    sectors: impl Fn(u64) -> Option<Result<u64, ()>>,
) -> Result<u64, String> {
    let rdev = match node {
        Err(e) => return Err(format!("{what} is gone ({}: {e})", path.display())),
        Ok(NodeKind::Other(kind)) => {
            return Err(format!(
                "{what} at {} is {kind}, not the volume's block device",
                path.display()
            ));
        }
        Ok(NodeKind::Block { rdev }) => rdev,
    };
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    match sectors(rdev) {
        None => Ok(rdev),
        Some(Err(())) => Err(format!(
            "{what} at {} is device {major}:{minor}, which the kernel no longer has",
            path.display()
        )),
        Some(Ok(0)) => Err(format!(
            "{what} at {} is device {major}:{minor}, which has nothing behind it (size 0)",
            path.display()
        )),
        Some(Ok(_)) => Ok(rdev),
    }
}

fn exists(what: &str, path: &Path) -> Result<(), String> {
    match path.symlink_metadata() {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{what} is gone ({}: {e})", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data dir `/data` on the root filesystem `8:1`; the plugin's backend on `/srv`.
    fn check(lines: &[&str]) -> Checker<'static> {
        let mut text = String::from("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        Checker::new(MountTable::parse(&text), Path::new("/data"))
    }

    const STAGING: &str = "/data/staging/hp/v1";
    const TARGET: &str = "/data/targets/v1/a";
    const STAGED: &str = "40 1 8:1 /srv/v1 /data/staging/hp/v1 rw - ext4 /dev/sda1 rw";
    const PUBLISHED: &str = "41 1 8:1 /srv/v1 /data/targets/v1/a rw - ext4 /dev/sda1 rw";
    /// What the bug looked like: the target bound from the unmounted staging directory.
    const BOUND_EMPTY: &str =
        "41 1 8:1 /data/staging/hp/v1 /data/targets/v1/a rw - ext4 /dev/sda1 rw";

    fn target(c: &Checker<'_>, staging: bool) -> Result<(), String> {
        c.target(
            ReadyCheck::Mount,
            "v1",
            Path::new(TARGET),
            staging.then_some(Path::new(STAGING)),
            false,
        )
    }

    #[test]
    fn a_target_bound_from_the_mounted_staging_is_ready() {
        assert_eq!(target(&check(&[STAGED, PUBLISHED]), true), Ok(()));
        // A plugin may publish a directory inside the staged filesystem.
        let sub = "41 1 8:1 /srv/v1/sub /data/targets/v1/a rw - ext4 /dev/sda1 rw";
        assert_eq!(target(&check(&[STAGED, sub]), true), Ok(()));
    }

    #[test]
    fn a_target_bound_from_an_empty_local_directory_is_not_ready() {
        let c = check(&[BOUND_EMPTY]);
        let e = target(&c, true).unwrap_err();
        assert!(
            e.contains("bind of the node's own directory /data/staging/hp/v1"),
            "{e}"
        );
        // Even with the staging mounted again afterwards.
        let e = target(&check(&[BOUND_EMPTY, STAGED]), true).unwrap_err();
        assert!(e.contains("not of the volume"), "{e}");
        // And without staging.
        assert!(target(&c, false).is_err());
    }

    #[test]
    fn a_target_needs_its_staging_mounted_and_the_same_data() {
        let e = target(&check(&[PUBLISHED]), true).unwrap_err();
        assert_eq!(
            e,
            "staging of v1 is no longer mounted (/data/staging/hp/v1)"
        );
        let other = "41 1 8:1 /srv/v2 /data/targets/v1/a rw - ext4 /dev/sda1 rw";
        let e = target(&check(&[STAGED, other]), true).unwrap_err();
        assert!(
            e.contains("is not mounted from the volume's staging"),
            "{e}"
        );
        let other_dev = "41 1 8:2 /srv/v1 /data/targets/v1/a rw - ext4 /dev/sdb rw";
        assert!(target(&check(&[STAGED, other_dev]), true).is_err());
        let e = target(&check(&[STAGED]), true).unwrap_err();
        assert_eq!(e, "target of v1 is no longer mounted (/data/targets/v1/a)");
    }

    #[test]
    fn a_volume_filesystem_of_its_own_is_ready() {
        let staged = "40 1 259:3 / /data/staging/hp/v1 rw - xfs /dev/nvme1n1 rw";
        let published = "41 1 259:3 / /data/targets/v1/a rw - xfs /dev/nvme1n1 rw";
        assert_eq!(target(&check(&[staged, published]), true), Ok(()));
        // Without staging, the plugin's own mount at the target.
        assert_eq!(target(&check(&[published]), false), Ok(()));
    }

    #[test]
    fn a_staging_is_there_only_when_mounted_from_elsewhere() {
        let stage = |c: &Checker<'_>| c.staging(ReadyCheck::Mount, "v1", Path::new(STAGING), false);
        assert_eq!(stage(&check(&[STAGED])), Ok(()));
        assert!(stage(&check(&[])).is_err());
        let self_bind = "40 1 8:1 /data/staging/hp/v1 /data/staging/hp/v1 rw - ext4 /dev/sda1 rw";
        assert!(stage(&check(&[self_bind])).is_err());
    }

    #[test]
    fn exists_checks_look_at_the_path_and_block_stagings_too() {
        let c = check(&[]);
        let root = Path::new("/");
        assert_eq!(c.target(ReadyCheck::Exists, "v", root, None, false), Ok(()));
        assert_eq!(c.target(ReadyCheck::Exists, "v", root, None, true), Ok(()));
        let gone = Path::new("/nonexistent/csivol");
        assert!(
            c.target(ReadyCheck::Exists, "v", gone, None, false)
                .is_err()
        );
        assert!(c.staging(ReadyCheck::Mount, "v", gone, true).is_err());
        assert_eq!(c.staging(ReadyCheck::Mount, "v", root, true), Ok(()));
    }

    /// What stat says, what the kernel says of the device's size, the verdict.
    type Case = (
        io::Result<NodeKind>,
        Option<Result<u64, ()>>,
        Result<u64, &'static str>,
    );

    #[test]
    fn a_block_target_is_ready_only_as_a_live_block_device() {
        let loop3 = rustix::fs::makedev(7, 3);
        let t = Path::new(TARGET);
        let gone = || Err(io::Error::from(io::ErrorKind::NotFound));
        // (what stat says, what the kernel says of the device's size) -> verdict
        let cases: [Case; 7] = [
            (
                Ok(NodeKind::Block { rdev: loop3 }),
                Some(Ok(16384)),
                Ok(loop3),
            ),
            // No sysfs to ask: the device node is enough.
            (Ok(NodeKind::Block { rdev: loop3 }), None, Ok(loop3)),
            (
                Ok(NodeKind::Block { rdev: loop3 }),
                Some(Ok(0)),
                Err(
                    "target of v1 at /data/targets/v1/a is device 7:3, which has nothing behind it (size 0)",
                ),
            ),
            (
                Ok(NodeKind::Block { rdev: loop3 }),
                Some(Err(())),
                Err(
                    "target of v1 at /data/targets/v1/a is device 7:3, which the kernel no longer has",
                ),
            ),
            (
                Ok(NodeKind::Other("a regular file")),
                Some(Ok(16384)),
                Err(
                    "target of v1 at /data/targets/v1/a is a regular file, not the volume's block device",
                ),
            ),
            (
                Ok(NodeKind::Other("a directory")),
                None,
                Err(
                    "target of v1 at /data/targets/v1/a is a directory, not the volume's block device",
                ),
            ),
            (
                gone(),
                None,
                Err("target of v1 is gone (/data/targets/v1/a: entity not found)"),
            ),
        ];
        for (node, size, want) in cases {
            let got = block_verdict("target of v1", t, node, |_| size);
            assert_eq!(got, want.map_err(str::to_owned));
        }
    }

    #[test]
    fn a_real_block_target_that_is_a_file_or_missing_is_not_ready() {
        let dir = std::env::temp_dir().join(format!("csivol-block-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("target");
        std::fs::write(&file, "").unwrap();
        let c = check(&[]);
        let e = c.block_target("v1", &file, Some(&dir)).unwrap_err();
        assert!(
            e.contains(
                "is a regular file, not the volume's block device; nothing is mounted there"
            ),
            "{e}"
        );
        let e = c
            .block_target("v1", &file, Some(&dir.join("gone")))
            .unwrap_err();
        assert!(e.starts_with("staging of v1 is gone"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
