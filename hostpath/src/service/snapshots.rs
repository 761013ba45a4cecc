//! Snapshots: CreateSnapshot cuts a copy of the volume's data in the backend, DeleteSnapshot
//! removes it, ListSnapshots pages through them and GetSnapshot answers for one. A snapshot
//! is independent of its volume: the volume may be deleted and the snapshot still serves as
//! a content source. With `--snapshot-ready-after`, a snapshot is cut at once but ready to
//! use only that long afterwards, as for a plugin that uploads its snapshots after cutting
//! them (the spec's `ready_to_use` is false until then).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use csivol_csi::csi::v1 as csi;
use tonic::Status;

use crate::store::SnapshotRecord;

use super::controller::page;
use super::{Plugin, check_name, internal, require};

/// Now, as the seconds and nanoseconds the records keep.
pub(super) fn now_parts() -> (i64, i32) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (
        i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
        i32::try_from(now.subsec_nanos()).unwrap_or(0),
    )
}

pub(super) fn timestamp(secs: i64, nanos: i32) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: secs,
        nanos,
    }
}

impl Plugin {
    /// Whether a snapshot cut at the given time is ready to use now.
    pub(super) fn ready_to_use(&self, created_secs: i64, created_nanos: i32) -> bool {
        let cut = UNIX_EPOCH
            + Duration::from_secs(created_secs.max(0) as u64)
            + Duration::from_nanos(created_nanos.max(0) as u64);
        SystemTime::now() >= cut + self.cfg.snapshot_ready_after
    }

    pub(super) fn wire_snapshot(&self, s: &SnapshotRecord) -> csi::Snapshot {
        csi::Snapshot {
            size_bytes: s.size_bytes,
            snapshot_id: s.id.clone(),
            source_volume_id: s.source_volume_id.clone(),
            creation_time: Some(timestamp(s.created_secs, s.created_nanos)),
            ready_to_use: self.ready_to_use(s.created_secs, s.created_nanos),
            group_snapshot_id: s.group_snapshot_id.clone(),
        }
    }

    pub(super) fn create_snapshot(
        &self,
        req: csi::CreateSnapshotRequest,
    ) -> Result<csi::CreateSnapshotResponse, Status> {
        if !self.cfg.features.snapshots {
            return Err(Status::unimplemented(
                "this plugin does not advertise CREATE_DELETE_SNAPSHOT",
            ));
        }
        require(&req.source_volume_id, "source_volume_id")?;
        check_name(&req.name)?;
        let lock = self.lock()?;
        if let Some(existing) = self
            .backend
            .snapshot_by_name(&req.name)
            .map_err(|e| internal(e, "read snapshots"))?
        {
            if existing.source_volume_id != req.source_volume_id {
                return Err(Status::already_exists(format!(
                    "a snapshot named `{}` exists, of volume `{}`",
                    req.name, existing.source_volume_id
                )));
            }
            return Ok(csi::CreateSnapshotResponse {
                snapshot: Some(self.wire_snapshot(&existing)),
            });
        }
        let volume = self.volume(&req.source_volume_id)?;
        let (created_secs, created_nanos) = now_parts();
        let record = SnapshotRecord {
            id: String::new(),
            name: req.name,
            source_volume_id: volume.id.clone(),
            size_bytes: volume.capacity_bytes,
            block: volume.block,
            created_secs,
            created_nanos,
            group_snapshot_id: String::new(),
        };
        let record = self
            .backend
            .create_snapshot(&lock, record)
            .map_err(|e| internal(e, "cut snapshot"))?;
        tracing::info!(
            snapshot_id = record.id,
            volume_id = volume.id,
            "created snapshot"
        );
        Ok(csi::CreateSnapshotResponse {
            snapshot: Some(self.wire_snapshot(&record)),
        })
    }

    pub(super) fn delete_snapshot(
        &self,
        req: csi::DeleteSnapshotRequest,
    ) -> Result<csi::DeleteSnapshotResponse, Status> {
        if !self.cfg.features.snapshots {
            return Err(Status::unimplemented(
                "this plugin does not advertise CREATE_DELETE_SNAPSHOT",
            ));
        }
        require(&req.snapshot_id, "snapshot_id")?;
        let lock = self.lock()?;
        // The spec's DeleteSnapshot errors: a snapshot that is part of a group snapshot
        // and cannot be deleted on its own is INVALID_ARGUMENT. Its group goes as a whole
        // (DeleteVolumeGroupSnapshot).
        if let Some(s) = self
            .backend
            .snapshot(&req.snapshot_id)
            .map_err(|e| internal(e, "read snapshot"))?
            && !s.group_snapshot_id.is_empty()
        {
            return Err(Status::invalid_argument(format!(
                "snapshot `{}` is part of group snapshot `{}` and cannot be deleted on its own; \
                 call DeleteVolumeGroupSnapshot",
                s.id, s.group_snapshot_id
            )));
        }
        // A snapshot that is gone is deleted: the call is idempotent. Volumes created from
        // a snapshot hold copies, so a snapshot is never in use.
        self.backend
            .delete_snapshot(&lock, &req.snapshot_id)
            .map_err(|e| internal(e, "delete snapshot"))?;
        tracing::info!(snapshot_id = req.snapshot_id, "deleted snapshot");
        Ok(csi::DeleteSnapshotResponse {})
    }

    pub(super) fn list_snapshots(
        &self,
        req: csi::ListSnapshotsRequest,
    ) -> Result<csi::ListSnapshotsResponse, Status> {
        if !self.cfg.features.list_snapshots {
            return Err(Status::unimplemented(
                "this plugin does not advertise LIST_SNAPSHOTS",
            ));
        }
        let snapshots: Vec<_> = self
            .backend
            .snapshots()
            .map_err(|e| internal(e, "read snapshots"))?
            .into_iter()
            .filter(|s| req.snapshot_id.is_empty() || s.id == req.snapshot_id)
            .filter(|s| {
                req.source_volume_id.is_empty() || s.source_volume_id == req.source_volume_id
            })
            .collect();
        if !req.starting_token.is_empty()
            && self
                .cfg
                .stale_snapshot_tokens
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| n.checked_sub(1),
                )
                .is_ok()
        {
            return Err(Status::aborted(format!(
                "`starting_token` `{}` is not valid (--stale-snapshot-tokens)",
                req.starting_token
            )));
        }
        let max = self.cfg.page_size(req.max_entries);
        let (page, next_token) = page(&snapshots, max, &req.starting_token)?;
        Ok(csi::ListSnapshotsResponse {
            entries: page
                .iter()
                .map(|s| csi::list_snapshots_response::Entry {
                    snapshot: Some(self.wire_snapshot(s)),
                })
                .collect(),
            next_token,
        })
    }

    /// GetSnapshot: one snapshot as it is now; NOT_FOUND when there is none, as the
    /// spec's GetSnapshot errors ask ("Snapshot does not exist").
    pub(super) fn get_snapshot(
        &self,
        req: csi::GetSnapshotRequest,
    ) -> Result<csi::GetSnapshotResponse, Status> {
        if !self.cfg.features.get_snapshot {
            return Err(Status::unimplemented(
                "this plugin does not advertise GET_SNAPSHOT",
            ));
        }
        require(&req.snapshot_id, "snapshot_id")?;
        let snapshot = self
            .backend
            .snapshot(&req.snapshot_id)
            .map_err(|e| internal(e, "read snapshot"))?
            .ok_or_else(|| {
                Status::not_found(format!("snapshot `{}` does not exist", req.snapshot_id))
            })?;
        Ok(csi::GetSnapshotResponse {
            snapshot: Some(self.wire_snapshot(&snapshot)),
        })
    }
}
