//! What a plugin made at a staging path or a target, as the node agent observed it right
//! after the call succeeded (its `mounts` module reads the mount table and `stat`): plain
//! data, recorded in `agent.db` and judged against later snapshots.

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
}

/// What was at a path when the plugin's call had succeeded. Empty: nothing (a plain
/// directory or file, or no path at all).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The path was a mount point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount: Option<SeenMount>,
    /// The path was a block device node: its device number (`rdev`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u64>,
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
}
