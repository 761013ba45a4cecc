//! What a plugin made at a staging path or a target, as the node agent observed it right
//! after the call succeeded (its `mounts` module reads the mount table, `stat` and sysfs):
//! plain data, recorded in `agent.db` and judged against later snapshots.
//!
//! A block device is known by more than its number: loop devices (and disks that come and
//! go) are reused by number, so a target still showing the recorded `MAJOR:MINOR` may be
//! another volume's device. What the kernel says of the device besides its number
//! ([`DeviceIdentity`]) is recorded with it, and [`compare`] tells whether a device now is
//! the one recorded.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A mount as the agent remembers it: what tells its data apart (device and root) and,
/// for people, where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenMount {
    /// `MAJOR:MINOR` of the filesystem.
    pub device: String,
    /// The directory of that filesystem mounted there.
    pub root: PathBuf,
    pub source: String,
}

/// A mount point below an observed path, by its path relative to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InnerMount {
    pub path: PathBuf,
    pub mount: SeenMount,
    /// The mount point was a block device node (a device bound onto a file in a staging
    /// directory): its device number (`rdev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u64>,
    /// What the kernel said of that device besides its number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<DeviceIdentity>,
}

/// What was at a path when the plugin's call had succeeded. Empty: nothing (a plain
/// directory or file, or no path at all).
///
/// Stored as JSON in `agent.db`: every field added later has a default, so a record of an
/// older agent reads with the field empty, and an older agent reading a newer record skips
/// what it does not know.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The path was a mount point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<SeenMount>,
    /// The path was a block device node: its device number (`rdev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u64>,
    /// What the kernel said of `device` besides its number; `None` in a record made before
    /// identities were recorded, or where the machine could not be asked (no sysfs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<DeviceIdentity>,
    /// Mount points below the path (stagings only): say, a block device a plugin bound
    /// onto a file inside its staging directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inside: Vec<InnerMount>,
}

impl Observation {
    /// One word for people (`csivol plugin show`): `device`, `mount`, `mounts-inside` or
    /// `none`. A block device node bound onto a file is both a device node and a mount
    /// point; the device is what it is for.
    pub fn kind(&self) -> &'static str {
        if self.device.is_some() {
            "device"
        } else if self.mount.is_some() {
            "mount"
        } else if !self.inside.is_empty() {
            "mounts-inside"
        } else {
            "none"
        }
    }

    /// Whether a later observation may add to this record: a device recorded without its
    /// identity, or a mount inside recorded without saying whether it is a device node
    /// (records made before identities were).
    pub fn may_gain(&self) -> bool {
        (self.device.is_some() && self.identity.is_none())
            || self
                .inside
                .iter()
                .any(|i| i.device.is_none() || i.identity.is_none())
    }

    /// This record with what `now` adds to it: the identity of a device recorded without
    /// one, and the device (with its identity) of a mount inside recorded without one.
    /// `None` when `now` adds nothing. `now` is what the same path shows at a check that
    /// passed, so its devices are the recorded ones; the rest of the record is kept as it
    /// was made.
    pub fn completed_by(&self, now: &Observation) -> Option<Observation> {
        let mut out = self.clone();
        if out.identity.is_none() && out.device.is_some() && out.device == now.device {
            out.identity.clone_from(&now.identity);
        }
        for inner in &mut out.inside {
            let Some(seen) = now.inside.iter().find(|n| n.path == inner.path) else {
                continue;
            };
            if inner.device.is_none() && seen.device.is_some() {
                inner.device = seen.device;
                inner.identity.clone_from(&seen.identity);
            } else if inner.identity.is_none() && inner.device == seen.device {
                inner.identity.clone_from(&seen.identity);
            }
        }
        (out != *self).then_some(out)
    }
}

/// What to record after a check passed: what is there when nothing was recorded (a record
/// of an older agent), the record completed where it lacks what is known now (a device
/// recorded before its identity was), or nothing.
pub fn to_record(recorded: Option<&Observation>, now: Observation) -> Option<Observation> {
    match recorded {
        None => Some(now),
        Some(r) => r.completed_by(&now),
    }
}

/// What the kernel says of a block device besides its number
/// (`/sys/dev/block/MAJOR:MINOR`): what a device that takes the number over later does not
/// share. All `None`: nothing on this machine tells devices of one number apart.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceIdentity {
    /// The disk's sequence number (`diskseq`, Linux 5.15 and later; a partition's is its
    /// disk's): unique within a boot, given to every disk the kernel makes and again each
    /// time a loop device is set up or torn down, so a number reused shows another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diskseq: Option<u64>,
    /// A partition's first sector on its disk (`start`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
    /// A loop device's backing file (`loop/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing: Option<Backing>,
}

/// What a loop device shows: which part of which file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backing {
    /// The file's path as the kernel shows it (`loop/backing_file`), ending in
    /// ` (deleted)` once the file was removed.
    pub file: String,
    /// Where in the file the device begins (`loop/offset`), in bytes.
    pub offset: u64,
    /// How much of the file it shows (`loop/sizelimit`); 0: all of it.
    pub sizelimit: u64,
    /// The file at that path (`stat`), unless it was deleted or the path leads nowhere
    /// from the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_id: Option<FileId>,
}

/// A file as another file at its path cannot fake it: its filesystem, its inode and, where
/// the filesystem keeps one, its birth time (a deleted file's inode number is given to the
/// next file made).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    /// `st_dev` of the filesystem holding the file.
    pub dev: u64,
    pub ino: u64,
    /// Birth time, in nanoseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub born_ns: Option<u64>,
}

/// Whether a device of the recorded number is the device recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sameness {
    /// The same device, by its sequence number or its backing file.
    Same,
    /// Nothing recorded and known now tells devices of one number apart (a device without
    /// a sequence number that is no loop device, or a record made before identities were):
    /// the device is judged by its number and size alone.
    Unknown,
    /// Another device has taken the number; why it is another.
    Other(String),
}

/// Whether the device now behind a number is the one recorded behind it.
///
/// The sequence number decides where both have one: the kernel gives each disk a new one,
/// and a loop device a new one whenever it is set up again, so a reuse cannot keep it. A
/// loop device's backing file decides otherwise: which part (offset, size limit) of which
/// file (filesystem, inode, birth time; the kernel's path only when the file could not be
/// looked at then). A backing file deleted since, which can no longer be looked at, is
/// the same only by an unchanged sequence number: without one nothing shows that the
/// device still holds that file, and the volume's file is gone anyway.
pub fn compare(recorded: &DeviceIdentity, now: &DeviceIdentity) -> Sameness {
    let also = || {
        now.backing
            .as_ref()
            .map(|b| format!("; it now shows {}", b.file))
            .unwrap_or_default()
    };
    let by_seq = match (recorded.diskseq, now.diskseq) {
        (Some(was), Some(is)) if was != is => {
            return Sameness::Other(format!(
                "its sequence number is {is}, not {was}: the kernel made it anew since{}",
                also()
            ));
        }
        (Some(_), Some(_)) => true,
        (Some(was), None) => {
            return Sameness::Other(format!(
                "the kernel gives it no sequence number, where it gave {was}"
            ));
        }
        (None, _) => false,
    };
    match (recorded.start, now.start) {
        (Some(was), Some(is)) if was != is => {
            return Sameness::Other(format!("the partition starts at sector {is}, not {was}"));
        }
        (Some(was), None) => {
            return Sameness::Other(format!(
                "it is no partition now, where it started at sector {was}"
            ));
        }
        _ => {}
    }
    let by_backing = match (&recorded.backing, &now.backing) {
        (Some(was), None) => {
            return Sameness::Other(format!(
                "it is no loop device with a backing file now, where it showed {}",
                was.file
            ));
        }
        (Some(was), Some(is)) => match same_backing(was, is, by_seq) {
            Ok(same) => same,
            Err(why) => return Sameness::Other(why),
        },
        (None, _) => false,
    };
    if by_seq || by_backing {
        Sameness::Same
    } else {
        Sameness::Unknown
    }
}

/// Whether a loop device shows the part of the file recorded: `Ok(true)` when its file is
/// the same, `Ok(false)` when that is not known but `by_seq` says the device was not set up
/// again, why not otherwise. Another part of the file, or another file by inode, is
/// another device whatever the sequence number says (a loop device's file can be swapped
/// without setting it up again, `LOOP_CHANGE_FD`).
fn same_backing(was: &Backing, is: &Backing, by_seq: bool) -> Result<bool, String> {
    if (was.offset, was.sizelimit) != (is.offset, is.sizelimit) {
        return Err(format!(
            "it shows {} from offset {} size limit {}, not from offset {} size limit {}",
            is.file, is.offset, is.sizelimit, was.offset, was.sizelimit
        ));
    }
    match (was.file_id, is.file_id) {
        (Some(a), Some(b)) if a == b => Ok(true),
        (Some(a), Some(b)) if (a.dev, a.ino) == (b.dev, b.ino) => Err(format!(
            "it shows {}, a file made after the one it showed ({}) and given its inode number",
            is.file, was.file
        )),
        (Some(a), Some(b)) => Err(format!(
            "it shows {} (inode {} of filesystem {}), not the file it showed (inode {} of \
             filesystem {}, then {})",
            is.file,
            b.ino,
            dev_name(b.dev),
            a.ino,
            dev_name(a.dev),
            was.file
        )),
        // The device was not set up again since: its file is the one it showed, under
        // whatever name it has now.
        _ if by_seq => Ok(false),
        (Some(_), None) => Err(format!(
            "its backing file {} cannot be looked at any more, so nothing shows that it is \
             still the file it showed ({})",
            is.file, was.file
        )),
        // The file could not be looked at when recorded: its path as the kernel showed it
        // is all there is to compare.
        (None, _) if was.file == is.file => Ok(true),
        (None, _) => Err(format!("it shows {}, not {}", is.file, was.file)),
    }
}

/// `MAJOR:MINOR` of a device number, as Linux encodes it in `dev_t` (glibc's `major` and
/// `minor`).
pub fn dev_name(dev: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    format!("{major}:{minor}")
}

#[cfg(test)]
mod tests;
