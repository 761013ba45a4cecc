//! NodeGetVolumeStats and NodeExpandVolume: what a volume held on this node uses, its
//! condition, and its growth on the node.

use std::path::{Path, PathBuf};

use csivol_csi::csi::v1 as csi;
use tonic::Status;

use crate::loopdev;
use crate::mounts::MountMode;
use crate::service::{Plugin, capacity_range, internal, kind_mismatch, require};
use crate::store::VolumeRecord;
use crate::store::node::NodeState;

impl Plugin {
    pub(super) fn node_stats(
        &self,
        req: csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse, Status> {
        let f = self.cfg.features;
        if !(f.volume_stats || f.volume_condition) {
            return Err(Status::unimplemented(
                "this plugin advertises neither GET_VOLUME_STATS nor VOLUME_CONDITION",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        require(&req.volume_path, "volume_path")?;
        let state = self.node_state();
        let volume = self.known_volume(&req.volume_id, &state)?;
        // Any path that is not where this node staged or published the volume (a relative
        // one included) does not hold the volume: NOT_FOUND, as the spec's table says.
        let path = PathBuf::from(&req.volume_path);
        if !Self::holds_at(&state, &req.volume_id, &path) {
            return Err(Status::not_found(format!(
                "volume `{}` is not published or staged at {}",
                req.volume_id,
                path.display()
            )));
        }
        let block = self.is_block(volume.as_ref(), &state, &req.volume_id);
        let attached = if state.publications.contains_key(&path) {
            if block {
                self.cfg.mount.is_block_attached(&path, &req.volume_id)
            } else {
                self.cfg.mount.is_attached(&path)
            }
            .map_err(|e| internal(e, "read the mount table"))?
        } else {
            self.staging_in_place(&state, &req.volume_id, block, &path)?
        };
        let usage = if f.volume_stats {
            self.usage(volume.as_ref(), &state, &req.volume_id, &path, block)?
        } else {
            Vec::new()
        };
        let volume_condition = f.volume_condition.then(|| {
            self.injected_condition(&req.volume_id)
                .unwrap_or_else(|| match attached {
                    false => csi::VolumeCondition {
                        abnormal: true,
                        message: format!("{} is not mounted", path.display()),
                    },
                    true => csi::VolumeCondition {
                        abnormal: false,
                        message: "mounted".into(),
                    },
                })
        });
        Ok(csi::NodeGetVolumeStatsResponse {
            usage,
            volume_condition,
        })
    }

    /// A file-system volume reports the size its "file system" was grown to on this node
    /// and the bytes its files take, with the inodes of the file system beneath; a block
    /// volume reports its device's size only (the spec lets `used` and `available` go).
    fn usage(
        &self,
        volume: Option<&VolumeRecord>,
        state: &NodeState,
        volume_id: &str,
        path: &Path,
        block: bool,
    ) -> Result<Vec<csi::VolumeUsage>, Status> {
        use csi::volume_usage::Unit;
        let recorded = volume.map_or(0, |v| v.capacity_bytes);
        if block {
            let total = match self.block_device(state, volume_id)? {
                Some(device) if self.cfg.mount == MountMode::Bind => {
                    loopdev::size(&device).map_err(|e| internal(e, "read the device's size"))?
                }
                _ => recorded,
            };
            return Ok(vec![csi::VolumeUsage {
                available: 0,
                total,
                used: 0,
                unit: Unit::Bytes.into(),
            }]);
        }
        let total = volume.and_then(|v| v.fs_bytes).unwrap_or(recorded);
        let used = tree_size(&self.backend.data_dir(volume_id));
        let fs = rustix::fs::statvfs(path)
            .map_err(|e| internal(e.into(), &format!("statvfs {}", path.display())))?;
        Ok(vec![
            csi::VolumeUsage {
                available: (total - used).max(0),
                total,
                used,
                unit: Unit::Bytes.into(),
            },
            csi::VolumeUsage {
                available: fs.f_favail as i64,
                total: fs.f_files as i64,
                used: fs.f_files.saturating_sub(fs.f_favail) as i64,
                unit: Unit::Inodes.into(),
            },
        ])
    }

    pub(super) fn node_expand(
        &self,
        req: csi::NodeExpandVolumeRequest,
    ) -> Result<csi::NodeExpandVolumeResponse, Status> {
        if !self.cfg.features.node_expand {
            return Err(Status::unimplemented(
                "this plugin does not advertise the node's EXPAND_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        require(&req.volume_path, "volume_path")?;
        let (required, limit) = capacity_range(req.capacity_range.as_ref())?;
        let volume = self.volume(&req.volume_id)?;
        if let Some(c) = &req.volume_capability {
            let cap = self.capability(Some(c), "volume_capability")?;
            if let Some(why) = kind_mismatch(&volume, &cap) {
                return Err(Status::invalid_argument(why));
            }
        }
        let mut state = self.node_state();
        let path = PathBuf::from(&req.volume_path);
        if !Self::holds_at(&state, &volume.id, &path) {
            return Err(Status::not_found(format!(
                "volume `{}` is not published or staged at {}",
                volume.id,
                path.display()
            )));
        }
        let mut volume = volume;
        if required > volume.capacity_bytes {
            if self.cfg.features.controller_expand {
                return Err(Status::out_of_range(format!(
                    "volume `{}` has {} bytes in the backend, {required} were asked for; \
                     call ControllerExpandVolume first",
                    volume.id, volume.capacity_bytes
                )));
            }
            // Without the controller's EXPAND_VOLUME the node grows the storage itself.
            drop(state);
            volume = self.grow_in_storage(&req.volume_id, required)?;
            state = self.node_state();
        }
        let capacity = if volume.block {
            match self.block_device(&state, &volume.id)? {
                Some(device) if self.cfg.mount == MountMode::Bind => {
                    loopdev::set_capacity(&device)
                        .map_err(|e| internal(e, "refresh the loop device's capacity"))?;
                    loopdev::size(&device).map_err(|e| internal(e, "read the device's size"))?
                }
                _ => volume.capacity_bytes,
            }
        } else {
            // Grow the "file system" to the volume's size, as resize2fs would.
            drop(state);
            let lock = self.lock()?;
            let mut volume = self.volume(&req.volume_id)?;
            if volume.fs_bytes.take().is_some() {
                self.backend
                    .resize_volume(&lock, &volume)
                    .map_err(|e| internal(e, "record the grown file system"))?;
            }
            volume.capacity_bytes
        };
        if limit > 0 && capacity > limit {
            return Err(Status::out_of_range(format!(
                "volume `{}` is {capacity} bytes, above limit_bytes {limit}",
                volume.id
            )));
        }
        tracing::info!(
            volume_id = volume.id,
            capacity,
            "expanded volume on the node"
        );
        Ok(csi::NodeExpandVolumeResponse {
            capacity_bytes: capacity,
        })
    }
}

/// The bytes of the files below `dir` (0 when it cannot be read).
fn tree_size(dir: &Path) -> i64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_size(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len() as i64),
            _ => 0,
        })
        .sum()
}
