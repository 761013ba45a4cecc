//! `stat` and sysfs as a test says they are, for the checks' tables.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use super::{DeviceIdentity, Files, NodeKind};

/// `stat` and sysfs as a test says they are: paths not listed do not exist.
#[derive(Default)]
pub struct FakeFiles {
    pub kinds: HashMap<PathBuf, NodeKind>,
    /// Sectors of each device; a device not listed is gone from the kernel.
    pub sizes: HashMap<u64, u64>,
    /// What the kernel says of each device besides its number; a device not listed has
    /// nothing that tells it apart (no sequence number, no loop device).
    pub identities: HashMap<u64, DeviceIdentity>,
}

impl Files for FakeFiles {
    fn kind(&self, path: &Path) -> io::Result<NodeKind> {
        self.kinds
            .get(path)
            .copied()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn sectors(&self, rdev: u64) -> Option<Result<u64, ()>> {
        Some(self.sizes.get(&rdev).copied().ok_or(()))
    }

    fn identity(&self, rdev: u64) -> Option<DeviceIdentity> {
        Some(self.identities.get(&rdev).cloned().unwrap_or_default())
    }
}
