//! Snapshots: CreateSnapshot cuts a copy of the volume's data in the backend (ready to use
//! at once), DeleteSnapshot removes it, ListSnapshots pages through them. A snapshot is
//! independent of its volume: the volume may be deleted and the snapshot still serves as
//! a content source.

use csivol_csi::csi::v1 as csi;
use tonic::Status;

use crate::store::SnapshotRecord;

use super::controller::page;
use super::{Plugin, check_name, internal, require};

fn wire_snapshot(s: &SnapshotRecord) -> csi::Snapshot {
    csi::Snapshot {
        size_bytes: s.size_bytes,
        snapshot_id: s.id.clone(),
        source_volume_id: s.source_volume_id.clone(),
        creation_time: Some(prost_types::Timestamp {
            seconds: s.created_secs,
            nanos: s.created_nanos,
        }),
        ready_to_use: true,
        group_snapshot_id: String::new(),
    }
}

impl Plugin {
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
                snapshot: Some(wire_snapshot(&existing)),
            });
        }
        let volume = self.volume(&req.source_volume_id)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let record = SnapshotRecord {
            id: String::new(),
            name: req.name,
            source_volume_id: volume.id.clone(),
            size_bytes: volume.capacity_bytes,
            block: volume.block,
            created_secs: i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
            created_nanos: i32::try_from(now.subsec_nanos()).unwrap_or(0),
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
            snapshot: Some(wire_snapshot(&record)),
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
        let (page, next_token) = page(&snapshots, req.max_entries, &req.starting_token)?;
        Ok(csi::ListSnapshotsResponse {
            entries: page
                .iter()
                .map(|s| csi::list_snapshots_response::Entry {
                    snapshot: Some(wire_snapshot(s)),
                })
                .collect(),
            next_token,
        })
    }
}
