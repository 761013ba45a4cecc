//! What a plugin made at a staging path or a target, and whether it is still there, judged
//! from one snapshot of the mount table (`/proc/self/mountinfo`) and `stat`, never from the
//! agent's records.
//!
//! The CSI spec lets plugins differ here, so the agent learns instead of assuming. Of
//! `NodeStageVolumeRequest.staging_target_path` csi.proto says only "The path to which the
//! volume MAY be staged": a plugin may mount the volume there, place a device node in it, or
//! make nothing at all (the Kubernetes reference driver stages nothing). Of
//! `NodePublishVolumeRequest.target_path` it says "For volumes with an access type of block,
//! the SP SHALL place the block device at target_path. For volumes with an access type of
//! mount, the SP SHALL place the mounted directory at target_path", and nothing of where the
//! mount comes from: from the staging, or from the plugin's own directories.
//!
//! So right after NodeStageVolume succeeds the agent records what is at the staging path
//! (an [`Observation`]: a mount point with its device, root and source, a block device node,
//! mounts inside it, or nothing), and once the target passes its first check, what is at
//! the target. From then on (docs/design/readiness.md):
//! - a staging holds its volume while it still shows what the plugin made there; a plugin
//!   that made nothing there is never asked for a mount;
//! - a file-system target is ready while it is a mount point that is not a bind of a
//!   directory of the agent's own data dir (the one thing never accepted), shows the device
//!   and root the plugin mounted there, and, where the plugin made a mount at the staging
//!   path, that mount's device with a root at or below its root (two mounts show the same
//!   data exactly when their `MAJOR:MINOR` and root agree);
//! - a block target is ready while it is a block device node (`stat`) whose device the
//!   kernel still has with a size (a detached loop device has none), the device the plugin
//!   placed there: the same number, and the same device behind it, not one that took the
//!   number since (loop devices are reused by number). What sysfs says of the device besides
//!   its number is recorded with it ([`DeviceIdentity`]: the kernel's sequence number of the
//!   disk, a loop device's backing file) and compared at each check
//!   (`csivol_rules::agent::observed::compare`); where sysfs tells devices of one number apart by
//!   nothing (no sequence number, no loop device), the number and size are all that is
//!   checked. A device node bound inside a staging directory is held to the same.
//!
//! Records made by an older agent carry no observation: they are judged once by that
//! agent's rule (a staging is a mount point; a block staging exists), and what is found is
//! recorded. A device recorded before identities were is judged by its number and size
//! once more, and gains its identity then. Plugins checked with [`ReadyCheck::Exists`] (`--ready-check ID=exists`, for
//! plugins that present volumes without mounting, as `csivol-hostpath --mount none` does)
//! only need the paths to exist.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use csivol_csi::mountinfo::Mount;
pub use csivol_csi::mountinfo::{MountTable, MountWatch};

use std::collections::BTreeMap;

use csivol_rules::agent::records::{PublicationRecord, StagingRecord};
use csivol_rules::agent::verify::Checks;

use crate::config::ReadyCheck;

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

use csivol_rules::agent::observed::{
    self, DeviceIdentity, InnerMount, Observation, Sameness, SeenMount,
};

/// How the agent remembers a mount of the table.
fn seen(m: &Mount) -> SeenMount {
    SeenMount {
        device: m.device.clone(),
        root: m.root.clone(),
        source: m.source.clone(),
    }
}

/// What `stat` says a path is, as far as the checks care.
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

/// The files a check looks at besides the mount table: `stat` of a path, and the size the
/// kernel gives a block device. Tests answer for them; the agent asks the system.
pub trait Files: Send + Sync {
    /// `stat` of `path` (following a symlink); an error when it does not exist.
    fn kind(&self, path: &Path) -> io::Result<NodeKind>;
    /// The size in 512-byte sectors of the block device `rdev`; `None` when the machine
    /// cannot say (no sysfs: the size is not judged), `Err(())` when the kernel no longer
    /// has the device.
    fn sectors(&self, rdev: u64) -> Option<Result<u64, ()>>;
    /// What the kernel says of the block device `rdev` besides its number; `None` when the
    /// machine cannot say (no sysfs).
    fn identity(&self, rdev: u64) -> Option<DeviceIdentity>;
}

/// The machine's own files and sysfs.
#[derive(Debug)]
pub struct SystemFiles;

impl Files for SystemFiles {
    fn kind(&self, path: &Path) -> io::Result<NodeKind> {
        std::fs::metadata(path).map(|m| NodeKind::of(&m))
    }

    fn sectors(&self, rdev: u64) -> Option<Result<u64, ()>> {
        let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
        if !Path::new("/sys/dev/block").is_dir() {
            return None;
        }
        let size = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/size"));
        Some(size.ok().and_then(|s| s.trim().parse().ok()).ok_or(()))
    }

    fn identity(&self, rdev: u64) -> Option<DeviceIdentity> {
        identity::read(rustix::fs::major(rdev), rustix::fs::minor(rdev))
    }
}

/// A staging as a check sees it.
#[derive(Clone, Copy, Debug)]
pub struct Staging<'a> {
    pub volume: &'a str,
    pub path: &'a Path,
    /// What the plugin made there; `None` for a record of an older agent.
    pub observed: Option<&'a Observation>,
    pub block: bool,
}

/// A target as a check sees it.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub volume: &'a str,
    pub path: &'a Path,
    /// What the plugin made there; `None` until the first check passed (and for a record
    /// of an older agent).
    pub observed: Option<&'a Observation>,
    pub block: bool,
}

/// What a check looks at: one snapshot of the mount table, the agent's data dir
/// (canonical, like every path the agent records) and `stat`.
pub struct Checker<'a> {
    table: Arc<MountTable>,
    /// Device and directory of the data dir inside its filesystem: a mount showing that
    /// device with a root below it is a bind of a local directory, not of a volume.
    local: Option<(String, PathBuf)>,
    data_dir: &'a Path,
    files: &'a dyn Files,
}

impl std::fmt::Debug for Checker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("mounts", &self.table.mounts.len())
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl<'a> Checker<'a> {
    pub fn read(data_dir: &'a Path) -> io::Result<Self> {
        Ok(Self::new(MountTable::read()?, data_dir))
    }

    pub fn new(table: impl Into<Arc<MountTable>>, data_dir: &'a Path) -> Self {
        Self::with_files(table, data_dir, &SystemFiles)
    }

    pub fn with_files(
        table: impl Into<Arc<MountTable>>,
        data_dir: &'a Path,
        files: &'a dyn Files,
    ) -> Self {
        let table = table.into();
        let local = table.fs_location(data_dir);
        Self {
            table,
            local,
            data_dir,
            files,
        }
    }

    /// Whether something is mounted at `path` (canonical).
    pub fn is_mount_point(&self, path: &Path) -> bool {
        self.table.at(path).is_some()
    }

    /// What is at `path` now; with `inside`, the mount points below it too.
    pub fn observe(&self, path: &Path, inside: bool) -> Observation {
        let mut below: Vec<InnerMount> = Vec::new();
        if inside {
            for m in &self.table.mounts {
                let Ok(rest) = m.mount_point.strip_prefix(path) else {
                    continue;
                };
                if rest.as_os_str().is_empty() {
                    continue;
                }
                // A later mount at the same point hides the earlier one.
                below.retain(|b| b.path != rest);
                let device = self.device_node(&m.mount_point);
                below.push(InnerMount {
                    path: rest.to_owned(),
                    mount: seen(m),
                    device,
                    identity: device.and_then(|rdev| self.files.identity(rdev)),
                });
            }
        }
        let device = self.device_node(path);
        Observation {
            mount: self.table.at(path).map(seen),
            device,
            identity: device.and_then(|rdev| self.files.identity(rdev)),
            inside: below,
        }
    }

    /// The device number of the block device node at `path`, if it is one.
    fn device_node(&self, path: &Path) -> Option<u64> {
        match self.files.kind(path) {
            Ok(NodeKind::Block { rdev }) => Some(rdev),
            _ => None,
        }
    }

    /// Whether the device `rdev` now is the device recorded with `identity`: why not, when
    /// another device has taken its number.
    fn same_device(
        &self,
        what: &str,
        path: &Path,
        rdev: u64,
        identity: Option<&DeviceIdentity>,
    ) -> Result<(), String> {
        let (Some(recorded), Some(now)) = (identity, self.files.identity(rdev)) else {
            return Ok(());
        };
        match observed::compare(recorded, &now) {
            Sameness::Same | Sameness::Unknown => Ok(()),
            Sameness::Other(why) => Err(format!(
                "{what} at {} is device {} as the plugin placed there, but another device has \
                 taken that number: {why}",
                path.display(),
                dev_name(rdev)
            )),
        }
    }

    /// The live block device node at `path`, the device the plugin placed there: its
    /// number `want` and, where recorded, its identity.
    fn placed_device(
        &self,
        what: &str,
        path: &Path,
        want: u64,
        identity: Option<&DeviceIdentity>,
    ) -> Result<(), String> {
        let now = self.block_device(what, path)?;
        if now != want {
            return Err(format!(
                "{what} at {} is device {}, not the device the plugin placed there ({})",
                path.display(),
                dev_name(now),
                dev_name(want)
            ));
        }
        self.same_device(what, path, now, identity)
    }

    fn is_local_bind(&self, m: &Mount) -> bool {
        self.local
            .as_ref()
            .is_some_and(|(dev, root)| m.device == *dev && m.root.starts_with(root))
    }

    /// The mount at `path`, unless there is none or it is a bind of the agent's own
    /// directory.
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

    /// The mount at `path`, if it shows the data of `seen`.
    fn same_mount<'m>(
        &'m self,
        what: &str,
        path: &Path,
        seen: &SeenMount,
    ) -> Result<&'m Mount, String> {
        let now = self
            .table
            .at(path)
            .ok_or_else(|| format!("{what} is no longer mounted ({})", path.display()))?;
        if now.device != seen.device || now.root != seen.root {
            return Err(format!(
                "{what} at {} shows device {} root {}, not what the plugin mounted there \
                 (device {} root {})",
                path.display(),
                now.device,
                now.root.display(),
                seen.device,
                seen.root.display()
            ));
        }
        Ok(now)
    }

    /// Whether `path` still shows what the plugin made there.
    fn shows(&self, what: &str, path: &Path, seen: &Observation) -> Result<(), String> {
        if let Some(m) = &seen.mount {
            self.same_mount(what, path, m)?;
        }
        if let Some(want) = seen.device {
            self.placed_device(what, path, want, seen.identity.as_ref())?;
        }
        for inner in &seen.inside {
            let at = path.join(&inner.path);
            let what = format!("the mount the plugin made in the {what}");
            self.same_mount(&what, &at, &inner.mount)?;
            if let Some(want) = inner.device {
                self.placed_device(&what, &at, want, inner.identity.as_ref())?;
            }
        }
        Ok(())
    }

    /// Whether a staging still holds its volume. A record without an observation (an
    /// older agent's) is judged by that agent's rule once, and what is there is returned
    /// to be recorded; a block staging's record lacking what is known now (the identity of
    /// a device in it) is returned completed.
    pub fn staging(
        &self,
        check: ReadyCheck,
        s: Staging<'_>,
    ) -> Result<Option<Observation>, String> {
        let what = format!("staging of {}", s.volume);
        match (check, s.observed) {
            (ReadyCheck::Exists, _) => exists(self.files, &what, s.path)?,
            (ReadyCheck::Mount, Some(seen)) => self.shows(&what, s.path, seen)?,
            (ReadyCheck::Mount, None) if s.block => exists(self.files, &what, s.path)?,
            (ReadyCheck::Mount, None) => {
                self.mounted(&what, s.path)?;
            }
        }
        if s.observed.is_some_and(|o| !s.block || !o.may_gain()) {
            return Ok(None);
        }
        Ok(observed::to_record(s.observed, self.observe(s.path, true)))
    }

    /// Whether a claim's target is ready: it still shows what the plugin made there (the
    /// first check accepts any mount point that is not the agent's own directory, or a live
    /// block device node), its staging still holds the volume, and a file-system target
    /// shows the device and root of the mount the plugin made at the staging, if it made
    /// one. Returns what is at the target, to be recorded.
    pub fn target(
        &self,
        check: ReadyCheck,
        t: Target<'_>,
        staging: Option<Staging<'_>>,
    ) -> Result<Observation, String> {
        let what = format!("target of {}", t.volume);
        if check == ReadyCheck::Exists {
            if let Some(s) = staging {
                exists(self.files, &format!("staging of {}", s.volume), s.path)?;
            }
            exists(self.files, &what, t.path)?;
            return Ok(self.observe(t.path, false));
        }
        if let Some(s) = staging {
            self.staging(check, s)?;
        }
        if t.block {
            match t
                .observed
                .and_then(|o| o.device.map(|d| (d, o.identity.as_ref())))
            {
                Some((want, identity)) => self.placed_device(&what, t.path, want, identity)?,
                None => {
                    self.block_device(&what, t.path)?;
                }
            }
            return Ok(self.observe(t.path, false));
        }
        let m = self.mounted(&what, t.path)?;
        if let Some(seen) = t.observed.and_then(|o| o.mount.as_ref()) {
            self.same_mount(&what, t.path, seen)?;
        }
        // Where the plugin mounted the volume at the staging path, the target shows that
        // mount's data: its device, and its root or a directory inside it (a plugin may
        // publish a directory of the staged filesystem). A record of an older agent is
        // judged by what is mounted there now, as that agent did.
        let staged: Option<SeenMount> = match staging {
            Some(s) if !s.block => match s.observed {
                Some(o) => o.mount.clone(),
                None => Some(seen(
                    self.mounted(&format!("staging of {}", s.volume), s.path)?,
                )),
            },
            _ => None,
        };
        if let (Some(s), Some(sm)) = (staging, staged)
            && (m.device != sm.device || !m.root.starts_with(&sm.root))
        {
            return Err(format!(
                "{what} at {} is not mounted from the volume's staging {} (device {} root {}, \
                 the staging is device {} root {})",
                t.path.display(),
                s.path.display(),
                m.device,
                m.root.display(),
                sm.device,
                sm.root.display()
            ));
        }
        Ok(self.observe(t.path, false))
    }

    /// The live block device node at `path` (its `rdev`): a device node, not the empty
    /// file or directory it was before the device was placed there, whose device the
    /// kernel still has with a size. A bind of the agent's own file is no device node, so
    /// `stat` alone tells; the mount table is read for the message.
    pub fn block_device(&self, what: &str, path: &Path) -> Result<u64, String> {
        let verdict = block_verdict(what, path, self.files.kind(path), |rdev| {
            self.files.sectors(rdev)
        });
        if verdict.is_err() && self.table.at(path).is_none() {
            // Say it plainly: the device was never bound there, or was unmounted.
            return verdict.map_err(|e| format!("{e}; nothing is mounted there"));
        }
        verdict
    }

    /// Why the block device node at `path` no longer has the device the plugin placed
    /// there behind it (detached, gone from the kernel, or its number taken by another
    /// device since `recorded`); `None` when it has, or when `path` is no device node. A
    /// staging whose device was lost this way must be staged again before publishing.
    pub fn lost_device(&self, path: &Path, recorded: Option<&Observation>) -> Option<String> {
        let node = self.files.kind(path);
        let Ok(NodeKind::Block { rdev }) = node else {
            return None;
        };
        if let Err(why) = block_verdict("the device", path, node, |rdev| self.files.sectors(rdev)) {
            return Some(why);
        }
        let recorded = recorded.filter(|o| o.device == Some(rdev))?;
        self.same_device("the device", path, rdev, recorded.identity.as_ref())
            .err()
    }
}

/// The checks of one snapshot, as the agent's records need them.
#[derive(Debug)]
pub struct Judge<'a, 'c> {
    /// The snapshot; `None` when the mount table could not be read (nothing is verified
    /// then).
    pub checker: Option<&'c Checker<'a>>,
    /// The readiness check of plugins not in `plugin_checks`, and per plugin
    /// (`--ready-check [ID=]CHECK`).
    pub default_check: ReadyCheck,
    pub plugin_checks: &'c BTreeMap<String, ReadyCheck>,
}

/// Why nothing could be verified.
pub const UNREADABLE: &str = "the mount table could not be read";

impl Judge<'_, '_> {
    fn check(&self, plugin: &str) -> ReadyCheck {
        self.plugin_checks
            .get(plugin)
            .copied()
            .unwrap_or(self.default_check)
    }

    fn checker(&self) -> Result<&Checker<'_>, String> {
        self.checker.ok_or_else(|| UNREADABLE.to_owned())
    }
}

impl Checks for Judge<'_, '_> {
    /// Whether a staging holds its volume; for a record without an observation, what is
    /// there, to record. `publications` are the volume's: a block staging whose device
    /// died at a target (a loop device detached) lost the volume too.
    fn staging(
        &self,
        s: &StagingRecord,
        publications: &[PublicationRecord],
    ) -> Result<Option<Observation>, String> {
        let c = self.checker()?;
        let check = self.check(&s.plugin);
        let block = s.block || publications.iter().any(|p| p.block);
        let observed = c.staging(check, staging_view(s, block))?;
        if block && check == ReadyCheck::Mount {
            for p in publications.iter().filter(|p| p.block) {
                if let Some(why) = c.lost_device(&p.target, p.observed.as_ref()) {
                    return Err(format!(
                        "staging of {} no longer holds the volume's device: {why}",
                        s.volume
                    ));
                }
            }
        }
        Ok(observed)
    }

    /// Whether a publication's target is ready; what is there, to record. `staging` is the
    /// volume's staging record, `publications` every publication of the volume: two claims
    /// of one block volume on a node see one device, so a target showing another is not
    /// the volume.
    fn publication(
        &self,
        p: &PublicationRecord,
        staging: Option<&StagingRecord>,
        publications: &[PublicationRecord],
    ) -> Result<Observation, String> {
        let c = self.checker()?;
        let check = self.check(&p.plugin);
        let staging = p.staging.as_deref().map(|path| {
            let record = staging.filter(|s| s.path == path);
            Staging {
                volume: &p.volume,
                path,
                observed: record.and_then(|s| s.observed.as_ref()),
                block: p.block,
            }
        });
        let target = Target {
            volume: &p.volume,
            path: &p.target,
            observed: p.observed.as_ref(),
            block: p.block,
        };
        let seen = c.target(check, target, staging)?;
        if p.block
            && check == ReadyCheck::Mount
            && let Some(mine) = seen.device
        {
            for other in publications
                .iter()
                .filter(|o| o.alloc != p.alloc && o.block)
            {
                if let Ok(theirs) =
                    c.block_device(&format!("target of {}", other.volume), &other.target)
                    && theirs != mine
                {
                    return Err(format!(
                        "target of {} at {} is device {}, but the volume's device at {} is {}",
                        p.volume,
                        p.target.display(),
                        dev_name(mine),
                        other.target.display(),
                        dev_name(theirs)
                    ));
                }
            }
        }
        Ok(seen)
    }
}

fn staging_view(s: &StagingRecord, block: bool) -> Staging<'_> {
    Staging {
        volume: &s.volume,
        path: &s.path,
        observed: s.observed.as_ref(),
        block,
    }
}

/// `MAJOR:MINOR` of a device number.
pub fn dev_name(rdev: u64) -> String {
    format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev))
}

/// The pure judgement of a block device node: a block device node whose device is still
/// there (known to the kernel, with a size). `sectors` answers the size of a device, or
/// `None` when it cannot be asked; `Err(())` when the kernel no longer knows the device.
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
    match sectors(rdev) {
        None => Ok(rdev),
        Some(Err(())) => Err(format!(
            "{what} at {} is device {}, which the kernel no longer has",
            path.display(),
            dev_name(rdev)
        )),
        Some(Ok(0)) => Err(format!(
            "{what} at {} is device {}, which has nothing behind it (size 0)",
            path.display(),
            dev_name(rdev)
        )),
        Some(Ok(_)) => Ok(rdev),
    }
}

fn exists(files: &dyn Files, what: &str, path: &Path) -> Result<(), String> {
    match files.kind(path) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("{what} is gone ({}: {e})", path.display())),
    }
}

mod identity;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;
