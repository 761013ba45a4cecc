//! The Controller service: volumes created and deleted, published to and unpublished from
//! nodes, capabilities validated, volumes listed.

use csivol_api::domain::ControllerCapabilities;
use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;
use crate::store::{AttachmentRecord, VolumeRecord};

use super::{
    CONTEXT_NAME_KEY, DEFAULT_CAPACITY, PUBLISH_DEVICE_KEY, Plugin, Service, capabilities,
    capability, check_volume_context, internal, require,
};

#[tonic::async_trait]
impl csi::controller_server::Controller for Service {
    async fn create_volume(
        &self,
        request: Request<csi::CreateVolumeRequest>,
    ) -> Result<Response<csi::CreateVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::CreateVolume, req.name.clone(), move |p| {
                p.create_volume(req)
            })
            .await
    }

    async fn delete_volume(
        &self,
        request: Request<csi::DeleteVolumeRequest>,
    ) -> Result<Response<csi::DeleteVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::DeleteVolume, req.volume_id.clone(), move |p| {
                p.delete_volume(req)
            })
            .await
    }

    async fn controller_publish_volume(
        &self,
        request: Request<csi::ControllerPublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerPublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(
                Rpc::ControllerPublishVolume,
                req.volume_id.clone(),
                move |p| p.controller_publish(req),
            )
            .await
    }

    async fn controller_unpublish_volume(
        &self,
        request: Request<csi::ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<csi::ControllerUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(
                Rpc::ControllerUnpublishVolume,
                req.volume_id.clone(),
                move |p| p.controller_unpublish(req),
            )
            .await
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<csi::ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<csi::ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(
                Rpc::ValidateVolumeCapabilities,
                req.volume_id.clone(),
                move |p| p.validate(req),
            )
            .await
    }

    async fn list_volumes(
        &self,
        request: Request<csi::ListVolumesRequest>,
    ) -> Result<Response<csi::ListVolumesResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::ListVolumes, String::new(), move |p| {
                p.list_volumes(req)
            })
            .await
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<csi::ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<csi::ControllerGetCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::ControllerGetCapabilities, String::new(), |p| {
                Ok(ControllerCapabilities {
                    create_delete_volume: true,
                    publish_unpublish_volume: p.cfg.controller_publish,
                    list_volumes: true,
                    list_volumes_published_nodes: p.cfg.controller_publish,
                    publish_readonly: p.cfg.controller_publish,
                    single_node_multi_writer: true,
                }
                .into())
            })
            .await
    }
}

impl Plugin {
    fn create_volume(
        &self,
        req: csi::CreateVolumeRequest,
    ) -> Result<csi::CreateVolumeResponse, Status> {
        require(&req.name, "name")?;
        if crate::store::file_safe(&req.name).len() > 240 {
            return Err(Status::invalid_argument(
                "`name` is too long for csivol-hostpath (at most 120 bytes of non-alphanumeric text)",
            ));
        }
        capabilities(&req.volume_capabilities)?;
        if req.volume_content_source.is_some() {
            return Err(Status::invalid_argument(
                "csivol-hostpath cannot create a volume from a content source",
            ));
        }
        let (required, limit) = match &req.capacity_range {
            Some(r) if r.required_bytes < 0 || r.limit_bytes < 0 => {
                return Err(Status::invalid_argument(
                    "`capacity_range` must not be negative",
                ));
            }
            Some(r) if r.limit_bytes > 0 && r.limit_bytes < r.required_bytes => {
                return Err(Status::out_of_range(format!(
                    "`capacity_range`: limit_bytes {} is below required_bytes {}",
                    r.limit_bytes, r.required_bytes
                )));
            }
            Some(r) => (r.required_bytes, r.limit_bytes),
            None => (0, 0),
        };
        let lock = self
            .backend
            .lock()
            .map_err(|e| internal(e, "lock the backend"))?;
        if let Some(existing) = self
            .backend
            .volume_by_name(&req.name)
            .map_err(|e| internal(e, "read volumes"))?
        {
            let fits = existing.capacity_bytes >= required
                && (limit == 0 || existing.capacity_bytes <= limit);
            if !fits || existing.parameters != req.parameters.clone().into_iter().collect() {
                return Err(Status::already_exists(format!(
                    "a volume named `{}` exists with a different capacity or parameters",
                    req.name
                )));
            }
            return Ok(csi::CreateVolumeResponse {
                volume: Some(wire_volume(&existing)),
            });
        }
        let capacity = if required > 0 {
            required
        } else if limit > 0 {
            limit.min(DEFAULT_CAPACITY)
        } else {
            DEFAULT_CAPACITY
        };
        let record = VolumeRecord {
            id: String::new(),
            name: req.name.clone(),
            capacity_bytes: capacity,
            parameters: req.parameters.into_iter().collect(),
            context: [(CONTEXT_NAME_KEY.to_owned(), req.name)].into(),
        };
        let record = self
            .backend
            .create_volume(&lock, record)
            .map_err(|e| internal(e, "create volume"))?;
        tracing::info!(volume_id = record.id, name = record.name, "created volume");
        Ok(csi::CreateVolumeResponse {
            volume: Some(wire_volume(&record)),
        })
    }

    fn delete_volume(
        &self,
        req: csi::DeleteVolumeRequest,
    ) -> Result<csi::DeleteVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let lock = self
            .backend
            .lock()
            .map_err(|e| internal(e, "lock the backend"))?;
        if self
            .backend
            .volume(&req.volume_id)
            .map_err(|e| internal(e, "read volume"))?
            .is_none()
        {
            // Deleting a volume that is gone is a success: the call must be idempotent.
            return Ok(csi::DeleteVolumeResponse {});
        }
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
        self.backend
            .delete_volume(&lock, &req.volume_id)
            .map_err(|e| internal(e, "delete volume"))?;
        tracing::info!(volume_id = req.volume_id, "deleted volume");
        Ok(csi::DeleteVolumeResponse {})
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
        let cap = capability(req.volume_capability.as_ref(), "volume_capability")?;
        let lock = self
            .backend
            .lock()
            .map_err(|e| internal(e, "lock the backend"))?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
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
        let attached = self
            .backend
            .attachments(&volume.id)
            .map_err(|e| internal(e, "read attachments"))?;
        if let Some(existing) = attached.get(&req.node_id) {
            if existing.readonly != req.readonly {
                return Err(Status::already_exists(format!(
                    "volume `{}` is already published to node `{}` with readonly={}",
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
        if node.max_volumes_per_node > 0 {
            let used = self
                .backend
                .attached_count(&req.node_id)
                .map_err(|e| internal(e, "count attachments"))?;
            if used >= node.max_volumes_per_node as usize {
                return Err(Status::resource_exhausted(format!(
                    "node `{}` already has {used} of at most {} volumes published",
                    req.node_id, node.max_volumes_per_node
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
        let lock = self
            .backend
            .lock()
            .map_err(|e| internal(e, "lock the backend"))?;
        let volume = self.volume(&req.volume_id)?;
        let attached = self
            .backend
            .attachments(&volume.id)
            .map_err(|e| internal(e, "read attachments"))?;
        // An empty node_id means "from every node", as the spec allows.
        for node in attached
            .keys()
            .filter(|n| req.node_id.is_empty() || **n == req.node_id)
        {
            self.backend
                .detach(&lock, &volume.id, node)
                .map_err(|e| internal(e, "remove attachment"))?;
            tracing::info!(
                volume_id = volume.id,
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
        let unsupported = req
            .volume_capabilities
            .iter()
            .find_map(|c| capability(Some(c), "volume_capabilities").err());
        if let Some(status) = unsupported {
            return Ok(csi::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: status.message().to_owned(),
            });
        }
        if let Err(status) = check_volume_context(&volume, &req.volume_context) {
            return Ok(csi::ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: status.message().to_owned(),
            });
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

    fn list_volumes(
        &self,
        req: csi::ListVolumesRequest,
    ) -> Result<csi::ListVolumesResponse, Status> {
        if req.max_entries < 0 {
            return Err(Status::invalid_argument(
                "`max_entries` must not be negative",
            ));
        }
        let volumes = self
            .backend
            .volumes()
            .map_err(|e| internal(e, "read volumes"))?;
        let start = if req.starting_token.is_empty() {
            0
        } else {
            req.starting_token
                .parse::<usize>()
                .ok()
                .filter(|n| *n <= volumes.len())
                .ok_or_else(|| {
                    Status::aborted(format!(
                        "`starting_token` `{}` is not valid",
                        req.starting_token
                    ))
                })?
        };
        let take = if req.max_entries == 0 {
            usize::MAX
        } else {
            req.max_entries as usize
        };
        let mut entries = Vec::new();
        for v in volumes.iter().skip(start).take(take) {
            let nodes = self
                .backend
                .attachments(&v.id)
                .map_err(|e| internal(e, "read attachments"))?;
            entries.push(csi::list_volumes_response::Entry {
                volume: Some(wire_volume(v)),
                status: Some(csi::list_volumes_response::VolumeStatus {
                    published_node_ids: nodes.into_keys().collect(),
                    volume_condition: None,
                }),
            });
        }
        let end = start + entries.len();
        let next_token = if end < volumes.len() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(csi::ListVolumesResponse {
            entries,
            next_token,
        })
    }
}

fn wire_volume(v: &VolumeRecord) -> csi::Volume {
    csi::Volume {
        capacity_bytes: v.capacity_bytes,
        volume_id: v.id.clone(),
        volume_context: v.context.clone().into_iter().collect(),
        content_source: None,
        accessible_topology: Vec::new(),
    }
}
