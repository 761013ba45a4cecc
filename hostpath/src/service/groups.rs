//! The GroupController service: group snapshots (CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT).
//!
//! CreateVolumeGroupSnapshot cuts one snapshot of each source volume under the backend's
//! lock, so no controller call of any plugin instance changes the volumes in between, and
//! gives them one creation time. The reference plugin does not freeze writers on the nodes:
//! what it offers is the shape of the call, not a storage array's write-order consistency.
//! The members are ordinary snapshots (ListSnapshots and GetSnapshot show them with their
//! `group_snapshot_id`, CreateVolume restores from them) that are deleted with their group.

use std::collections::BTreeSet;

use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;
use crate::store::{GroupSnapshotRecord, SnapshotRecord};

use super::snapshots::{now_parts, timestamp};
use super::{Plugin, Service, check_name, internal, require};

#[tonic::async_trait]
impl csi::group_controller_server::GroupController for Service {
    async fn group_controller_get_capabilities(
        &self,
        _: Request<csi::GroupControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::GroupControllerGetCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::GroupControllerGetCapabilities, String::new(), |p| {
                Ok(csivol_api::GroupControllerCapabilities {
                    create_delete_get_volume_group_snapshot: p.cfg.features.group_snapshots,
                }
                .into())
            })
            .await
    }

    async fn create_volume_group_snapshot(
        &self,
        request: Request<csi::CreateVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::CreateVolumeGroupSnapshotResponse>, Status> {
        delegate!(
            self,
            request,
            CreateVolumeGroupSnapshot,
            create_group_snapshot,
            |r: &csi::CreateVolumeGroupSnapshotRequest| r.source_volume_ids.join(",")
        )
    }

    async fn delete_volume_group_snapshot(
        &self,
        request: Request<csi::DeleteVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::DeleteVolumeGroupSnapshotResponse>, Status> {
        delegate!(
            self,
            request,
            DeleteVolumeGroupSnapshot,
            delete_group_snapshot,
            |_: &csi::DeleteVolumeGroupSnapshotRequest| String::new()
        )
    }

    async fn get_volume_group_snapshot(
        &self,
        request: Request<csi::GetVolumeGroupSnapshotRequest>,
    ) -> Result<Response<csi::GetVolumeGroupSnapshotResponse>, Status> {
        delegate!(
            self,
            request,
            GetVolumeGroupSnapshot,
            get_group_snapshot,
            |_: &csi::GetVolumeGroupSnapshotRequest| String::new()
        )
    }
}

/// Whether two lists of ids hold the same ids (the spec sets no order).
fn same_ids(a: &[String], b: &[String]) -> bool {
    let a: BTreeSet<_> = a.iter().collect();
    let b: BTreeSet<_> = b.iter().collect();
    a == b
}

impl Plugin {
    fn require_groups(&self) -> Result<(), Status> {
        if self.cfg.features.group_snapshots {
            return Ok(());
        }
        Err(Status::unimplemented(
            "this plugin does not advertise CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT \
             (started with `--disable group-snapshots`)",
        ))
    }

    fn wire_group(&self, g: &GroupSnapshotRecord) -> Result<csi::VolumeGroupSnapshot, Status> {
        let mut snapshots = Vec::with_capacity(g.snapshot_ids.len());
        for id in &g.snapshot_ids {
            let s = self
                .backend
                .snapshot(id)
                .map_err(|e| internal(e, "read snapshot"))?
                .ok_or_else(|| {
                    Status::internal(format!("group snapshot `{}` lost its member `{id}`", g.id))
                })?;
            snapshots.push(self.wire_snapshot(&s));
        }
        Ok(csi::VolumeGroupSnapshot {
            group_snapshot_id: g.id.clone(),
            // The spec: if any member is not ready to use, the group is not.
            ready_to_use: snapshots.iter().all(|s| s.ready_to_use),
            snapshots,
            creation_time: Some(timestamp(g.created_secs, g.created_nanos)),
        })
    }

    /// Refuses `snapshot_ids` that are not the group's: the spec's "Snapshot list
    /// mismatch", INVALID_ARGUMENT, for a plugin that can detect it.
    fn check_members(g: &GroupSnapshotRecord, snapshot_ids: &[String]) -> Result<(), Status> {
        if snapshot_ids.is_empty() {
            return Err(Status::invalid_argument("`snapshot_ids` is required"));
        }
        if !same_ids(&g.snapshot_ids, snapshot_ids) {
            return Err(Status::invalid_argument(format!(
                "`snapshot_ids` [{}] are not the members of group snapshot `{}` [{}]",
                snapshot_ids.join(", "),
                g.id,
                g.snapshot_ids.join(", ")
            )));
        }
        Ok(())
    }

    pub(super) fn create_group_snapshot(
        &self,
        req: csi::CreateVolumeGroupSnapshotRequest,
    ) -> Result<csi::CreateVolumeGroupSnapshotResponse, Status> {
        self.require_groups()?;
        check_name(&req.name)?;
        if req.source_volume_ids.is_empty() {
            return Err(Status::invalid_argument("`source_volume_ids` is required"));
        }
        let unique: BTreeSet<_> = req.source_volume_ids.iter().collect();
        if unique.len() != req.source_volume_ids.len() {
            return Err(Status::invalid_argument(
                "`source_volume_ids` names a volume twice",
            ));
        }
        let lock = self.lock()?;
        if let Some(existing) = self
            .backend
            .group_snapshot_by_name(&req.name)
            .map_err(|e| internal(e, "read group snapshots"))?
        {
            // The spec: a group snapshot of that name "already exists but is incompatible
            // with the specified source_volume_ids" is ALREADY_EXISTS.
            if !same_ids(&existing.source_volume_ids, &req.source_volume_ids) {
                return Err(Status::already_exists(format!(
                    "a group snapshot named `{}` exists, of volumes {}",
                    req.name,
                    existing.source_volume_ids.join(", ")
                )));
            }
            return Ok(csi::CreateVolumeGroupSnapshotResponse {
                group_snapshot: Some(self.wire_group(&existing)?),
            });
        }
        let (created_secs, created_nanos) = now_parts();
        let mut members = Vec::with_capacity(req.source_volume_ids.len());
        for id in &req.source_volume_ids {
            let volume = self.volume(id)?;
            members.push(SnapshotRecord {
                id: String::new(),
                // Named by the group's id once it has one (the backend sets it).
                name: String::new(),
                source_volume_id: volume.id.clone(),
                size_bytes: volume.capacity_bytes,
                block: volume.block,
                created_secs,
                created_nanos,
                group_snapshot_id: String::new(),
            });
        }
        let group = GroupSnapshotRecord {
            id: String::new(),
            name: req.name,
            source_volume_ids: req.source_volume_ids,
            snapshot_ids: Vec::new(),
            created_secs,
            created_nanos,
        };
        let group = self
            .backend
            .create_group_snapshot(&lock, group, members)
            .map_err(|e| internal(e, "cut group snapshot"))?;
        tracing::info!(
            group_snapshot_id = group.id,
            snapshots = ?group.snapshot_ids,
            "created group snapshot"
        );
        Ok(csi::CreateVolumeGroupSnapshotResponse {
            group_snapshot: Some(self.wire_group(&group)?),
        })
    }

    pub(super) fn delete_group_snapshot(
        &self,
        req: csi::DeleteVolumeGroupSnapshotRequest,
    ) -> Result<csi::DeleteVolumeGroupSnapshotResponse, Status> {
        self.require_groups()?;
        require(&req.group_snapshot_id, "group_snapshot_id")?;
        let lock = self.lock()?;
        // The spec: a group snapshot that does not exist is deleted (OK).
        let Some(group) = self
            .backend
            .group_snapshot(&req.group_snapshot_id)
            .map_err(|e| internal(e, "read group snapshot"))?
        else {
            return Ok(csi::DeleteVolumeGroupSnapshotResponse {});
        };
        Self::check_members(&group, &req.snapshot_ids)?;
        self.backend
            .delete_group_snapshot(&lock, &group.id)
            .map_err(|e| internal(e, "delete group snapshot"))?;
        tracing::info!(group_snapshot_id = group.id, "deleted group snapshot");
        Ok(csi::DeleteVolumeGroupSnapshotResponse {})
    }

    pub(super) fn get_group_snapshot(
        &self,
        req: csi::GetVolumeGroupSnapshotRequest,
    ) -> Result<csi::GetVolumeGroupSnapshotResponse, Status> {
        self.require_groups()?;
        require(&req.group_snapshot_id, "group_snapshot_id")?;
        // The spec: "Volume group snapshot does not exist" is NOT_FOUND.
        let group = self
            .backend
            .group_snapshot(&req.group_snapshot_id)
            .map_err(|e| internal(e, "read group snapshot"))?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "group snapshot `{}` does not exist",
                    req.group_snapshot_id
                ))
            })?;
        Self::check_members(&group, &req.snapshot_ids)?;
        Ok(csi::GetVolumeGroupSnapshotResponse {
            group_snapshot: Some(self.wire_group(&group)?),
        })
    }
}
