//! The Controller service: the gRPC handlers, volumes published to and unpublished from
//! nodes, capabilities validated, volumes listed and fetched, capacity reported. Creating,
//! deleting and expanding volumes are in `provision.rs`, snapshots in `snapshots.rs`.

use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;
use crate::store::{AttachmentRecord, ContentSource, Segment, VolumeRecord};
use crate::topology;

use super::{
    PUBLISH_DEVICE_KEY, Plugin, Service, check_given_context, internal, kind_mismatch, require,
};

#[tonic::async_trait]
impl csi::controller_server::Controller for Service {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            CreateVolume,
            create_volume,
            |r: &csi::CreateVolumeRequest| r.name.clone()
        )
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            DeleteVolume,
            delete_volume,
            |r: &csi::DeleteVolumeRequest| r.volume_id.clone()
        )
    }

    async fn controller_publish_volume(
        &self,
        request: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerPublishVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            ControllerPublishVolume,
            controller_publish,
            |r: &csi::ControllerPublishVolumeRequest| r.volume_id.clone()
        )
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerUnpublishVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            ControllerUnpublishVolume,
            controller_unpublish,
            |r: &csi::ControllerUnpublishVolumeRequest| r.volume_id.clone()
        )
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        delegate!(
            self,
            request,
            ValidateVolumeCapabilities,
            validate,
            |r: &csi::ValidateVolumeCapabilitiesRequest| r.volume_id.clone()
        )
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        delegate!(
            self,
            request,
            ListVolumes,
            list_volumes,
            |_: &csi::ListVolumesRequest| String::new()
        )
    }

    async fn get_capacity(
        &self,
        request: Request<csi::GetCapacityRequest>,
    ) -> Result<Response<csi::GetCapacityResponse>, Status> {
        delegate!(
            self,
            request,
            GetCapacity,
            get_capacity,
            |_: &csi::GetCapacityRequest| String::new()
        )
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::ControllerGetCapabilities, String::new(), |p| {
                Ok(p.controller_capabilities())
            })
            .await
    }

    async fn create_snapshot(
        &self,
        request: Request<csi::CreateSnapshotRequest>,
    ) -> Result<Response<csi::CreateSnapshotResponse>, Status> {
        delegate!(
            self,
            request,
            CreateSnapshot,
            create_snapshot,
            |r: &csi::CreateSnapshotRequest| r.source_volume_id.clone()
        )
    }

    async fn delete_snapshot(
        &self,
        request: Request<csi::DeleteSnapshotRequest>,
    ) -> Result<Response<csi::DeleteSnapshotResponse>, Status> {
        delegate!(
            self,
            request,
            DeleteSnapshot,
            delete_snapshot,
            |_: &csi::DeleteSnapshotRequest| String::new()
        )
    }

    async fn list_snapshots(
        &self,
        request: Request<csi::ListSnapshotsRequest>,
    ) -> Result<Response<csi::ListSnapshotsResponse>, Status> {
        delegate!(
            self,
            request,
            ListSnapshots,
            list_snapshots,
            |r: &csi::ListSnapshotsRequest| r.source_volume_id.clone()
        )
    }

    async fn controller_expand_volume(
        &self,
        request: Request<csi::ControllerExpandVolumeRequest>,
    ) -> Result<Response<csi::ControllerExpandVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            ControllerExpandVolume,
            controller_expand,
            |r: &csi::ControllerExpandVolumeRequest| r.volume_id.clone()
        )
    }

    async fn controller_get_volume(
        &self,
        request: Request<csi::ControllerGetVolumeRequest>,
    ) -> Result<Response<csi::ControllerGetVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            ControllerGetVolume,
            controller_get_volume,
            |r: &csi::ControllerGetVolumeRequest| r.volume_id.clone()
        )
    }

    async fn controller_modify_volume(
        &self,
        request: Request<csi::ControllerModifyVolumeRequest>,
    ) -> Result<Response<csi::ControllerModifyVolumeResponse>, Status> {
        delegate!(
            self,
            request,
            ControllerModifyVolume,
            controller_modify,
            |r: &csi::ControllerModifyVolumeRequest| r.volume_id.clone()
        )
    }

    async fn get_snapshot(
        &self,
        request: Request<csi::GetSnapshotRequest>,
    ) -> Result<Response<csi::GetSnapshotResponse>, Status> {
        delegate!(
            self,
            request,
            GetSnapshot,
            get_snapshot,
            |_: &csi::GetSnapshotRequest| String::new()
        )
    }
}

/// The segments of a wire topology list.
pub(super) fn segments(topologies: &[csi::Topology]) -> Vec<Segment> {
    topologies
        .iter()
        .map(|t| t.segments.clone().into_iter().collect())
        .collect()
}

impl Plugin {
    fn controller_capabilities(&self) -> csi::ControllerGetCapabilitiesResponse {
        use csi::controller_service_capability::{Rpc as R, Type, rpc::Type as T};
        let f = self.cfg.features;
        let publish = self.cfg.controller_publish;
        let flags = [
            (true, T::CreateDeleteVolume),
            (publish, T::PublishUnpublishVolume),
            (f.list_volumes, T::ListVolumes),
            (f.get_capacity, T::GetCapacity),
            (f.snapshots, T::CreateDeleteSnapshot),
            (f.list_snapshots, T::ListSnapshots),
            (f.clone, T::CloneVolume),
            (publish, T::PublishReadonly),
            (f.controller_expand, T::ExpandVolume),
            // The spec makes this capability depend on PUBLISH_UNPUBLISH_VOLUME.
            (f.published_nodes && publish, T::ListVolumesPublishedNodes),
            (f.volume_condition, T::VolumeCondition),
            (f.get_volume, T::GetVolume),
            (true, T::SingleNodeMultiWriter),
            (f.modify_volume, T::ModifyVolume),
            (f.get_snapshot, T::GetSnapshot),
        ];
        csi::ControllerGetCapabilitiesResponse {
            capabilities: flags
                .into_iter()
                .filter(|(on, _)| *on)
                .map(|(_, t)| csi::ControllerServiceCapability {
                    r#type: Some(Type::Rpc(R { r#type: t.into() })),
                })
                .collect(),
        }
    }

    fn controller_publish(
        &self,
        req: csi::ControllerPublishVolumeRequest,
    ) -> Result<csi::ControllerPublishVolumeResponse, Status> {
        if !self.cfg.controller_publish {
            return Err(Status::unimplemented(
                "this plugin does not advertise PUBLISH_UNPUBLISH_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        require(&req.node_id, "node_id")?;
        let cap = self.capability(req.volume_capability.as_ref(), "volume_capability")?;
        let lock = self.lock()?;
        let volume = self.volume(&req.volume_id)?;
        check_given_context(&volume, &req.volume_context)?;
        if let Some(why) = kind_mismatch(&volume, &cap) {
            return Err(Status::invalid_argument(why));
        }
        let node = self
            .backend
            .node(&req.node_id)
            .map_err(|e| internal(e, "read nodes"))?
            .ok_or_else(|| {
                Status::not_found(format!(
                    "node `{}` is unknown to this storage backend",
                    req.node_id
                ))
            })?;
        if !topology::reachable(&volume.accessible_topology, &node.topology) {
            let segments: Vec<_> = volume
                .accessible_topology
                .iter()
                .map(topology::show)
                .collect();
            return Err(Status::failed_precondition(format!(
                "volume `{}` is accessible from {} only; node `{}` lies in {}",
                volume.id,
                segments.join(", "),
                req.node_id,
                topology::show(&node.topology)
            )));
        }
        let attached = self
            .backend
            .attachments(&volume.id)
            .map_err(|e| internal(e, "read attachments"))?;
        if let Some(existing) = attached.get(&req.node_id) {
            let same_cap = existing.capability.as_ref().is_none_or(|c| *c == cap);
            if existing.readonly != req.readonly || !same_cap {
                return Err(Status::already_exists(format!(
                    "volume `{}` is already published to node `{}` with readonly={} and another capability",
                    volume.id, req.node_id, existing.readonly
                )));
            }
            return Ok(csi::ControllerPublishVolumeResponse {
                publish_context: existing.publish_context.clone().into_iter().collect(),
            });
        }
        if cap.access_mode.is_single_node()
            && let Some(other) = attached.keys().next()
        {
            return Err(Status::failed_precondition(format!(
                "volume `{}` has a single-node access mode and is published to node `{other}`",
                volume.id
            )));
        }
        let limit = self
            .backend
            .node_limit(&req.node_id, node.max_volumes_per_node)
            .map_err(|e| internal(e, "read the node's attach limit"))?;
        if limit > 0 {
            let used = self
                .backend
                .attached_count(&req.node_id)
                .map_err(|e| internal(e, "count attachments"))?;
            if used >= limit as usize {
                return Err(Status::resource_exhausted(format!(
                    "node `{}` already has {used} of at most {limit} volumes published",
                    req.node_id
                )));
            }
        }
        let device = format!(
            "/dev/hostpath/{}@{}",
            volume.id,
            crate::store::file_safe(&req.node_id)
        );
        let record = AttachmentRecord {
            node_id: req.node_id.clone(),
            readonly: req.readonly,
            publish_context: [(PUBLISH_DEVICE_KEY.to_owned(), device)].into(),
            capability: Some(cap),
        };
        self.backend
            .attach(&lock, &volume.id, &req.node_id, &record)
            .map_err(|e| internal(e, "record attachment"))?;
        tracing::info!(
            volume_id = volume.id,
            node_id = req.node_id,
            "controller-published"
        );
        Ok(csi::ControllerPublishVolumeResponse {
            publish_context: record.publish_context.into_iter().collect(),
        })
    }

    fn controller_unpublish(
        &self,
        req: csi::ControllerUnpublishVolumeRequest,
    ) -> Result<csi::ControllerUnpublishVolumeResponse, Status> {
        if !self.cfg.controller_publish {
            return Err(Status::unimplemented(
                "this plugin does not advertise PUBLISH_UNPUBLISH_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let lock = self.lock()?;
        // A volume or node that no longer exists is not published anywhere: the volume can
        // be regarded as unpublished, and the spec asks for OK. Attachment records left
        // under a deleted volume's id are removed all the same.
        let attached = self
            .backend
            .attachments(&req.volume_id)
            .map_err(|e| internal(e, "read attachments"))?;
        // An empty node_id means "from every node", as the spec allows.
        for node in attached
            .keys()
            .filter(|n| req.node_id.is_empty() || **n == req.node_id)
        {
            self.backend
                .detach(&lock, &req.volume_id, node)
                .map_err(|e| internal(e, "remove attachment"))?;
            tracing::info!(
                volume_id = req.volume_id,
                node_id = node,
                "controller-unpublished"
            );
        }
        Ok(csi::ControllerUnpublishVolumeResponse {})
    }

    fn validate(
        &self,
        req: csi::ValidateVolumeCapabilitiesRequest,
    ) -> Result<csi::ValidateVolumeCapabilitiesResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument(
                "`volume_capabilities` is required",
            ));
        }
        let volume = self.volume(&req.volume_id)?;
        let refused = |message: String| csi::ValidateVolumeCapabilitiesResponse {
            confirmed: None,
            message,
        };
        for cap in &req.volume_capabilities {
            match self.capability(Some(cap), "volume_capabilities") {
                Err(status) => return Ok(refused(status.message().to_owned())),
                Ok(cap) => {
                    if let Some(why) = kind_mismatch(&volume, &cap) {
                        return Ok(refused(why));
                    }
                }
            }
        }
        if let Err(status) = check_given_context(&volume, &req.volume_context) {
            return Ok(refused(status.message().to_owned()));
        }
        Ok(csi::ValidateVolumeCapabilitiesResponse {
            confirmed: Some(csi::validate_volume_capabilities_response::Confirmed {
                volume_context: req.volume_context,
                volume_capabilities: req.volume_capabilities,
                parameters: req.parameters,
                mutable_parameters: req.mutable_parameters,
            }),
            message: String::new(),
        })
    }

    /// The nodes a volume is published to, when this plugin reports them.
    fn published_node_ids(&self, volume_id: &str) -> Result<Option<Vec<String>>, Status> {
        if !(self.cfg.features.published_nodes && self.cfg.controller_publish) {
            return Ok(None);
        }
        let nodes = self
            .backend
            .attachments(volume_id)
            .map_err(|e| internal(e, "read attachments"))?;
        Ok(Some(nodes.into_keys().collect()))
    }

    /// The volume's condition as the storage system sees it: abnormal when injected, or
    /// when the volume's data is gone from the backend.
    fn controller_condition(&self, volume: &VolumeRecord) -> Option<csi::VolumeCondition> {
        if !self.cfg.features.volume_condition {
            return None;
        }
        if let Some(injected) = self.injected_condition(&volume.id) {
            return Some(injected);
        }
        let data = if volume.block {
            self.backend.image(&volume.id)
        } else {
            self.backend.data_dir(&volume.id)
        };
        Some(if data.exists() {
            csi::VolumeCondition {
                abnormal: false,
                message: "the volume's data is in the backend".into(),
            }
        } else {
            csi::VolumeCondition {
                abnormal: true,
                message: format!("the volume's data is missing: {}", data.display()),
            }
        })
    }

    fn list_volumes(
        &self,
        req: csi::ListVolumesRequest,
    ) -> Result<csi::ListVolumesResponse, Status> {
        if !self.cfg.features.list_volumes {
            return Err(Status::unimplemented(
                "this plugin does not advertise LIST_VOLUMES",
            ));
        }
        let volumes = self
            .backend
            .volumes()
            .map_err(|e| internal(e, "read volumes"))?;
        let max = self.cfg.page_size(req.max_entries);
        let (page, next_token) = page(&volumes, max, &req.starting_token)?;
        let mut entries = Vec::new();
        for v in page {
            let published = self.published_node_ids(&v.id)?;
            let condition = self.controller_condition(v);
            let status = (published.is_some() || condition.is_some()).then(|| {
                csi::list_volumes_response::VolumeStatus {
                    published_node_ids: published.unwrap_or_default(),
                    volume_condition: condition,
                }
            });
            entries.push(csi::list_volumes_response::Entry {
                volume: Some(wire_volume(v)),
                status,
            });
        }
        Ok(csi::ListVolumesResponse {
            entries,
            next_token,
        })
    }

    fn controller_get_volume(
        &self,
        req: csi::ControllerGetVolumeRequest,
    ) -> Result<csi::ControllerGetVolumeResponse, Status> {
        if !self.cfg.features.get_volume {
            return Err(Status::unimplemented(
                "this plugin does not advertise GET_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let volume = self.volume(&req.volume_id)?;
        Ok(csi::ControllerGetVolumeResponse {
            status: Some(csi::controller_get_volume_response::VolumeStatus {
                published_node_ids: self.published_node_ids(&volume.id)?.unwrap_or_default(),
                volume_condition: self.controller_condition(&volume),
            }),
            volume: Some(wire_volume(&volume)),
        })
    }

    fn get_capacity(
        &self,
        req: csi::GetCapacityRequest,
    ) -> Result<csi::GetCapacityResponse, Status> {
        if !self.cfg.features.get_capacity {
            return Err(Status::unimplemented(
                "this plugin does not advertise GET_CAPACITY",
            ));
        }
        let zero = csi::GetCapacityResponse {
            available_capacity: 0,
            maximum_volume_size: Some(0),
            minimum_volume_size: None,
        };
        // Capabilities this plugin cannot provide have no capacity.
        if req
            .volume_capabilities
            .iter()
            .any(|c| self.capability(Some(c), "volume_capabilities").is_err())
        {
            return Ok(zero);
        }
        if let Some(t) = &req.accessible_topology {
            let wanted: Segment = t.segments.clone().into_iter().collect();
            let known = self
                .backend
                .nodes()
                .map_err(|e| internal(e, "read nodes"))?;
            if !known
                .iter()
                .any(|n| !n.topology.is_empty() && topology::lies_in(&n.topology, &wanted))
            {
                return Ok(zero);
            }
        }
        let mut available = self.available()?;
        let mut capped = false;
        if let Some(t) = &req.accessible_topology {
            let wanted: Segment = t.segments.clone().into_iter().collect();
            for (segment, most) in &self.cfg.segment_capacity {
                if topology::lies_in(&wanted, segment) {
                    available = available.min(*most);
                    capped = true;
                }
            }
        }
        Ok(csi::GetCapacityResponse {
            available_capacity: available,
            // With a pool (or a segment's own), the largest volume is what is left of it;
            // without, the file system sets no such limit.
            maximum_volume_size: (self.cfg.capacity.is_some() || capped).then_some(available),
            minimum_volume_size: None,
        })
    }
}

/// One page of `items` for a List call: `starting_token` is the index to start at (as
/// the previous page's `next_token` gave it), `max_entries` the page's size (0: all).
/// A token that is not one this plugin handed out is ABORTED, as the spec asks.
pub(super) fn page<'a, T>(
    items: &'a [T],
    max_entries: i32,
    starting_token: &str,
) -> Result<(&'a [T], String), Status> {
    if max_entries < 0 {
        return Err(Status::invalid_argument(
            "`max_entries` must not be negative",
        ));
    }
    let start = if starting_token.is_empty() {
        0
    } else {
        starting_token
            .parse::<usize>()
            .ok()
            .filter(|n| *n <= items.len())
            .ok_or_else(|| {
                Status::aborted(format!("`starting_token` `{starting_token}` is not valid"))
            })?
    };
    let take = if max_entries == 0 {
        items.len()
    } else {
        max_entries as usize
    };
    let end = start.saturating_add(take).min(items.len());
    let next_token = if end < items.len() {
        end.to_string()
    } else {
        String::new()
    };
    Ok((&items[start..end], next_token))
}

pub(super) fn wire_volume(v: &VolumeRecord) -> csi::Volume {
    use csi::volume_content_source::{SnapshotSource, Type, VolumeSource};
    csi::Volume {
        capacity_bytes: v.capacity_bytes,
        volume_id: v.id.clone(),
        volume_context: v.context.clone().into_iter().collect(),
        content_source: v.content_source.as_ref().map(|s| csi::VolumeContentSource {
            r#type: Some(match s {
                ContentSource::Snapshot(id) => Type::Snapshot(SnapshotSource {
                    snapshot_id: id.clone(),
                }),
                ContentSource::Volume(id) => Type::Volume(VolumeSource {
                    volume_id: id.clone(),
                }),
            }),
        }),
        accessible_topology: v
            .accessible_topology
            .iter()
            .map(|s| csi::Topology {
                segments: s.clone().into_iter().collect(),
            })
            .collect(),
    }
}
