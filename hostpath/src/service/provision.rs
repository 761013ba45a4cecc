//! The Controller service's provisioning: volumes created (empty, from a snapshot, as a
//! clone, in a topology segment), checked against the storage pool, deleted and expanded.
//! The gRPC service itself, publishing and the read-only calls are in `controller.rs`.

use csivol_csi::csi::v1 as csi;
use tonic::Status;

use crate::loopdev;
use crate::store::{ContentSource, Segment, VolumeRecord};
use crate::topology;

use super::controller::{segments, wire_volume};
use super::{
    CONTEXT_NAME_KEY, DEFAULT_CAPACITY, Expansion, Plugin, capacity_range, check_name, internal,
    kind_mismatch, require,
};

impl Plugin {
    pub(super) fn create_volume(
        &self,
        req: csi::CreateVolumeRequest,
    ) -> Result<csi::CreateVolumeResponse, Status> {
        check_name(&req.name)?;
        let caps = self.capabilities(&req.volume_capabilities)?;
        let block = caps.iter().any(|c| c.access_type.is_block());
        if block && caps.iter().any(|c| !c.access_type.is_block()) {
            return Err(Status::invalid_argument(
                "`volume_capabilities` mixes block and mount access; a csivol-hostpath volume is one or the other",
            ));
        }
        let (required, limit) = capacity_range(req.capacity_range.as_ref())?;
        let source = self.content_source(req.volume_content_source.as_ref())?;
        let (requisite, preferred) = match &req.accessibility_requirements {
            None => (Vec::new(), Vec::new()),
            Some(_) if self.cfg.topology.is_empty() => {
                return Err(Status::invalid_argument(
                    "`accessibility_requirements` given, but this plugin has no \
                     VOLUME_ACCESSIBILITY_CONSTRAINTS (start it with --topology)",
                ));
            }
            Some(r) if r.requisite.is_empty() && r.preferred.is_empty() => {
                return Err(Status::invalid_argument(
                    "`accessibility_requirements` must have requisite or preferred segments",
                ));
            }
            Some(r) => (segments(&r.requisite), segments(&r.preferred)),
        };
        let parameters: std::collections::BTreeMap<_, _> = req.parameters.into_iter().collect();
        // Not compared with an existing volume's: ControllerModifyVolume may have changed
        // them since, and a CreateVolume retried after that is still the same volume.
        let mutable_parameters = self.creation_mutable(req.mutable_parameters)?;
        let lock = self.lock()?;
        if let Some(existing) = self
            .backend
            .volume_by_name(&req.name)
            .map_err(|e| internal(e, "read volumes"))?
        {
            let fits = existing.capacity_bytes >= required
                && (limit == 0 || existing.capacity_bytes <= limit);
            let placed = requisite.is_empty()
                || existing
                    .accessible_topology
                    .iter()
                    .all(|s| requisite.contains(s));
            if !fits
                || existing.parameters != parameters
                || existing.block != block
                || existing.content_source != source
                || !placed
            {
                return Err(Status::already_exists(format!(
                    "a volume named `{}` exists with a different capacity, parameters, access type, \
                     content source or topology",
                    req.name
                )));
            }
            return Ok(csi::CreateVolumeResponse {
                volume: Some(wire_volume(&existing)),
            });
        }
        let (source_dir, source_size) = match &source {
            None => (None, 0),
            Some(ContentSource::Snapshot(id)) => {
                let snap = self
                    .backend
                    .snapshot(id)
                    .map_err(|e| internal(e, "read snapshot"))?
                    .ok_or_else(|| Status::not_found(format!("snapshot `{id}` does not exist")))?;
                if snap.block != block {
                    return Err(Status::invalid_argument(format!(
                        "snapshot `{id}` is of a {} volume; request the same access type",
                        if snap.block { "block" } else { "file-system" }
                    )));
                }
                (Some(self.backend.snapshot_data(id)), snap.size_bytes)
            }
            Some(ContentSource::Volume(id)) => {
                let v = self
                    .backend
                    .volume(id)
                    .map_err(|e| internal(e, "read volume"))?
                    .ok_or_else(|| {
                        Status::not_found(format!("source volume `{id}` does not exist"))
                    })?;
                if v.block != block {
                    return Err(Status::invalid_argument(format!(
                        "source volume `{id}` is a {} volume; request the same access type",
                        if v.block { "block" } else { "file-system" }
                    )));
                }
                (Some(self.backend.data_dir(id)), v.capacity_bytes)
            }
        };
        if limit > 0 && limit < source_size {
            return Err(Status::out_of_range(format!(
                "`capacity_range`: limit_bytes {limit} is below the source's size {source_size}"
            )));
        }
        let capacity = if required > 0 {
            required.max(source_size)
        } else if source.is_some() {
            source_size
        } else if limit > 0 {
            limit.min(DEFAULT_CAPACITY)
        } else {
            DEFAULT_CAPACITY
        };
        self.check_pool(capacity)?;
        let known: Vec<Segment> = self
            .backend
            .nodes()
            .map_err(|e| internal(e, "read nodes"))?
            .into_iter()
            .map(|n| n.topology)
            .collect();
        let accessible_topology =
            topology::place(&requisite, &preferred, &known, &self.cfg.topology)
                .map_err(|e| Status::resource_exhausted(e.0))?;
        let record = VolumeRecord {
            id: String::new(),
            name: req.name.clone(),
            capacity_bytes: capacity,
            parameters,
            context: [(CONTEXT_NAME_KEY.to_owned(), req.name)].into(),
            block,
            accessible_topology,
            content_source: source,
            fs_bytes: None,
            mutable_parameters,
        };
        let record = self
            .backend
            .create_volume(&lock, record, source_dir.as_deref())
            .map_err(|e| internal(e, "create volume"))?;
        tracing::info!(volume_id = record.id, name = record.name, "created volume");
        Ok(csi::CreateVolumeResponse {
            volume: Some(wire_volume(&record)),
        })
    }

    /// The content source of a CreateVolume request, refused where the capability is off.
    fn content_source(
        &self,
        source: Option<&csi::VolumeContentSource>,
    ) -> Result<Option<ContentSource>, Status> {
        use csi::volume_content_source::Type;
        let Some(source) = source else {
            return Ok(None);
        };
        match &source.r#type {
            None => Err(Status::invalid_argument(
                "`volume_content_source` must name a snapshot or a volume",
            )),
            Some(Type::Snapshot(_)) if !self.cfg.features.snapshots => {
                Err(Status::invalid_argument(
                    "this plugin has no CREATE_DELETE_SNAPSHOT: it cannot create a volume from a snapshot",
                ))
            }
            Some(Type::Volume(_)) if !self.cfg.features.clone => Err(Status::invalid_argument(
                "this plugin has no CLONE_VOLUME: it cannot create a volume from another volume",
            )),
            Some(Type::Snapshot(s)) => {
                require(&s.snapshot_id, "volume_content_source.snapshot.snapshot_id")?;
                Ok(Some(ContentSource::Snapshot(s.snapshot_id.clone())))
            }
            Some(Type::Volume(v)) => {
                require(&v.volume_id, "volume_content_source.volume.volume_id")?;
                Ok(Some(ContentSource::Volume(v.volume_id.clone())))
            }
        }
    }

    /// What is left of the pool: `--capacity` less every volume's capacity, or the free
    /// space of the backend's file system.
    pub(super) fn available(&self) -> Result<i64, Status> {
        match self.cfg.capacity {
            Some(pool) => {
                let used: i64 = self
                    .backend
                    .volumes()
                    .map_err(|e| internal(e, "read volumes"))?
                    .iter()
                    .map(|v| v.capacity_bytes)
                    .sum();
                Ok((pool - used).max(0))
            }
            None => {
                let fs = rustix::fs::statvfs(self.backend.root())
                    .map_err(|e| internal(e.into(), "statvfs the backend"))?;
                Ok(i64::try_from(fs.f_bavail.saturating_mul(fs.f_frsize)).unwrap_or(i64::MAX))
            }
        }
    }

    /// Refuses `extra` bytes more than a `--capacity` pool has left.
    fn check_pool(&self, extra: i64) -> Result<(), Status> {
        if self.cfg.capacity.is_none() {
            return Ok(());
        }
        let available = self.available()?;
        if extra > available {
            return Err(Status::resource_exhausted(format!(
                "the storage pool has {available} bytes left, {extra} are needed"
            )));
        }
        Ok(())
    }

    pub(super) fn delete_volume(
        &self,
        req: csi::DeleteVolumeRequest,
    ) -> Result<csi::DeleteVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let lock = self.lock()?;
        let Some(volume) = self
            .backend
            .volume(&req.volume_id)
            .map_err(|e| internal(e, "read volume"))?
        else {
            // Deleting a volume that is gone is a success: the call must be idempotent.
            return Ok(csi::DeleteVolumeResponse {});
        };
        let attached = self
            .backend
            .attachments(&req.volume_id)
            .map_err(|e| internal(e, "read attachments"))?;
        if !attached.is_empty() {
            let nodes: Vec<_> = attached.keys().cloned().collect();
            return Err(Status::failed_precondition(format!(
                "volume `{}` is still published to node(s) {}; call ControllerUnpublishVolume first",
                req.volume_id,
                nodes.join(", ")
            )));
        }
        if volume.block {
            // Loop devices a node left behind would keep the deleted image alive.
            loopdev::detach_all(&self.backend.image(&volume.id))
                .map_err(|e| internal(e, "release the volume's loop devices"))?;
        }
        self.backend
            .delete_volume(&lock, &req.volume_id)
            .map_err(|e| internal(e, "delete volume"))?;
        tracing::info!(volume_id = req.volume_id, "deleted volume");
        Ok(csi::DeleteVolumeResponse {})
    }

    /// A node-only expansion: the volume's storage grown to `required` bytes by the node's
    /// NodeExpandVolume (within the pool), its file system with it.
    pub(super) fn grow_in_storage(
        &self,
        volume_id: &str,
        required: i64,
    ) -> Result<VolumeRecord, Status> {
        let lock = self.lock()?;
        let mut volume = self.volume(volume_id)?;
        if volume.capacity_bytes >= required {
            return Ok(volume);
        }
        if self.cfg.capacity.is_some() && self.check_pool(required - volume.capacity_bytes).is_err()
        {
            return Err(Status::out_of_range(format!(
                "the storage pool cannot grow volume `{volume_id}` to {required} bytes"
            )));
        }
        volume.capacity_bytes = required;
        volume.fs_bytes = None;
        self.backend
            .resize_volume(&lock, &volume)
            .map_err(|e| internal(e, "resize volume"))?;
        tracing::info!(
            volume_id,
            capacity = required,
            "grew the volume from the node"
        );
        Ok(volume)
    }

    pub(super) fn controller_expand(
        &self,
        req: csi::ControllerExpandVolumeRequest,
    ) -> Result<csi::ControllerExpandVolumeResponse, Status> {
        if !self.cfg.features.controller_expand {
            return Err(Status::unimplemented(
                "this plugin does not advertise the controller's EXPAND_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let Some(range) = &req.capacity_range else {
            return Err(Status::invalid_argument("`capacity_range` is required"));
        };
        let (required, limit) = capacity_range(Some(range))?;
        if required == 0 && limit == 0 {
            return Err(Status::invalid_argument(
                "`capacity_range` needs required_bytes or limit_bytes",
            ));
        }
        let cap = req
            .volume_capability
            .as_ref()
            .map(|c| self.capability(Some(c), "volume_capability"))
            .transpose()?;
        let lock = self.lock()?;
        let mut volume = self.volume(&req.volume_id)?;
        if let Some(why) = cap.as_ref().and_then(|c| kind_mismatch(&volume, c)) {
            return Err(Status::invalid_argument(why));
        }
        let node_expansion_required = self.cfg.features.node_expand;
        let target = if required > 0 { required } else { limit };
        if volume.capacity_bytes >= target {
            // Already that large (a retry, or a request to shrink within the range): OK.
            return Ok(csi::ControllerExpandVolumeResponse {
                capacity_bytes: volume.capacity_bytes,
                node_expansion_required,
            });
        }
        if self.cfg.expansion == Expansion::Offline {
            let attached = self
                .backend
                .attachments(&volume.id)
                .map_err(|e| internal(e, "read attachments"))?;
            if let Some(node) = attached.keys().next() {
                return Err(Status::failed_precondition(format!(
                    "volume `{}` is published to node `{node}` and this plugin expands volumes \
                     OFFLINE only; call ControllerUnpublishVolume first",
                    volume.id
                )));
            }
        }
        if self.cfg.capacity.is_some() && self.check_pool(target - volume.capacity_bytes).is_err() {
            return Err(Status::out_of_range(format!(
                "the storage pool cannot grow volume `{}` to {target} bytes",
                volume.id
            )));
        }
        if volume.block || !node_expansion_required {
            volume.fs_bytes = None;
        } else {
            // The file system stays as it is until a node grows it.
            volume.fs_bytes.get_or_insert(volume.capacity_bytes);
        }
        volume.capacity_bytes = target;
        self.backend
            .resize_volume(&lock, &volume)
            .map_err(|e| internal(e, "resize volume"))?;
        if volume.block && !node_expansion_required {
            // Without a node step, the loop devices must see the new size at once.
            loopdev::refresh_capacity(&self.backend.image(&volume.id))
                .map_err(|e| internal(e, "refresh the loop devices' capacity"))?;
        }
        tracing::info!(volume_id = volume.id, capacity = target, "expanded volume");
        Ok(csi::ControllerExpandVolumeResponse {
            capacity_bytes: target,
            node_expansion_required,
        })
    }
}
