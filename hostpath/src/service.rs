//! The CSI Identity, Controller and Node services of the reference plugin.
//!
//! The plugin is deliberately strict: it checks every required field, refuses lifecycle
//! violations with the codes the spec's error tables name, and is idempotent, so that a
//! caller that gets the protocol wrong is caught here rather than forgiven.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use csivol_proto::csi::v1 as csi;
use csivol_proto::domain::{
    ControllerCapabilities, NodeCapabilities, NodeInfo, PluginCapabilities, VolumeCapability,
};
use tonic::{Code, Request, Response, Status};

use crate::faults::{CallLog, Faults, Rpc};
use crate::mounts::MountMode;
use crate::store::{
    AttachmentRecord, Backend, NodeState, Publication, Staging, VolumeRecord, write_json,
};

pub const PLUGIN_NAME: &str = "hostpath.csivol.dev";
/// Key of the volume context entry every created volume carries.
pub const CONTEXT_NAME_KEY: &str = "hostpath.csivol.dev/name";
/// Key of the publish context entry ControllerPublishVolume returns.
pub const PUBLISH_DEVICE_KEY: &str = "hostpath.csivol.dev/device";
const DEFAULT_CAPACITY: i64 = 1 << 30;

/// How this plugin instance was started.
#[derive(Clone, Debug)]
pub struct Config {
    pub node_id: String,
    pub mount: MountMode,
    pub stage: bool,
    pub controller_publish: bool,
    pub max_volumes_per_node: u32,
    pub fsync: bool,
    /// `--publish-without-mount`: NodePublishVolume succeeds and does nothing.
    pub publish_without_mount: bool,
}

/// State shared by the three services.
#[derive(Debug)]
pub struct Plugin {
    cfg: Config,
    backend: Backend,
    node: Mutex<NodeState>,
    node_state_path: PathBuf,
    /// `<state-dir>/abnormal/<volume-id>`: a test writes a message there to make the
    /// volume's VOLUME_CONDITION abnormal with it (fault injection for conditions).
    abnormal_dir: PathBuf,
    faults: Faults,
    calls: CallLog,
}

impl Plugin {
    pub fn new(
        cfg: Config,
        backend: Backend,
        state_dir: &Path,
        faults: Faults,
    ) -> io::Result<Self> {
        let node_state_path = state_dir.join("node.json");
        let node = crate::store::read_json(&node_state_path)?.unwrap_or_default();
        backend.announce_node(
            &cfg.node_id,
            &crate::store::NodeRecord {
                max_volumes_per_node: cfg.max_volumes_per_node,
            },
        )?;
        let calls = CallLog::open(&state_dir.join("calls.jsonl"))?;
        Ok(Self {
            cfg,
            backend,
            node: Mutex::new(node),
            node_state_path,
            abnormal_dir: state_dir.join("abnormal"),
            faults,
            calls,
        })
    }

    /// Runs one RPC: counts it in flight, applies injected faults, runs `f` off the async
    /// workers (it may block on mounts and the backend lock) and logs the outcome.
    async fn call<T, F>(
        self: &Arc<Self>,
        rpc: Rpc,
        volume_id: String,
        f: F,
    ) -> Result<Response<T>, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Plugin) -> Result<T, Status> + Send + 'static,
    {
        let in_flight = self.calls.enter(rpc);
        let result = match self.faults.before(rpc).await {
            Err(status) => Err(status),
            Ok(()) => {
                let plugin = Arc::clone(self);
                tokio::task::spawn_blocking(move || f(&plugin))
                    .await
                    .unwrap_or_else(|e| Err(Status::internal(format!("{rpc} panicked: {e}"))))
            }
        };
        let code = result.as_ref().map_or_else(Status::code, |_| Code::Ok);
        self.calls.record(
            rpc,
            &volume_id,
            &self.cfg.node_id,
            code,
            in_flight.concurrent,
        );
        if code != Code::Ok {
            tracing::info!(%rpc, volume_id, ?code, "call refused");
        }
        result.map(Response::new)
    }

    fn save_node(&self, state: &NodeState) -> Result<(), Status> {
        write_json(&self.node_state_path, state, self.cfg.fsync)
            .map_err(|e| internal(e, "save node state"))
    }

    fn node_state(&self) -> std::sync::MutexGuard<'_, NodeState> {
        self.node.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn volume(&self, id: &str) -> Result<VolumeRecord, Status> {
        self.backend
            .volume(id)
            .map_err(|e| internal(e, "read volume"))?
            .ok_or_else(|| Status::not_found(format!("volume `{id}` does not exist")))
    }
}

fn internal(e: io::Error, what: &str) -> Status {
    Status::internal(format!("failed to {what}: {e}"))
}

fn require(value: &str, field: &'static str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("`{field}` is required")));
    }
    Ok(())
}

fn require_path(value: &str, field: &'static str) -> Result<PathBuf, Status> {
    require(value, field)?;
    let path = PathBuf::from(value);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "`{field}` must be an absolute path, got `{value}`"
        )));
    }
    Ok(path)
}

/// Converts and checks a volume capability: csivol-hostpath serves file systems only.
fn capability(
    cap: Option<&csi::VolumeCapability>,
    field: &'static str,
) -> Result<VolumeCapability, Status> {
    let cap = cap.ok_or_else(|| Status::invalid_argument(format!("`{field}` is required")))?;
    let cap = VolumeCapability::try_from(cap)
        .map_err(|e| Status::invalid_argument(format!("`{field}`: {e}")))?;
    if cap.access_type.is_block() {
        return Err(Status::invalid_argument(
            "block access is not supported by csivol-hostpath; use a file-system (mount) capability",
        ));
    }
    Ok(cap)
}

fn capabilities(caps: &[csi::VolumeCapability]) -> Result<Vec<VolumeCapability>, Status> {
    if caps.is_empty() {
        return Err(Status::invalid_argument(
            "`volume_capabilities` is required",
        ));
    }
    caps.iter()
        .map(|c| capability(Some(c), "volume_capabilities"))
        .collect()
}

/// A volume created by CreateVolume carries context the node side must be given back.
fn check_volume_context(
    volume: &VolumeRecord,
    given: &std::collections::HashMap<String, String>,
) -> Result<(), Status> {
    for (key, value) in &volume.context {
        if given.get(key) != Some(value) {
            return Err(Status::invalid_argument(format!(
                "`volume_context` must carry `{key}` as CreateVolume returned it for volume `{}`",
                volume.id
            )));
        }
    }
    Ok(())
}

impl Plugin {
    /// With PUBLISH_UNPUBLISH_VOLUME, node calls are valid only for a volume controller-
    /// published to this node, with the publish context that publication returned.
    fn check_controller_published(
        &self,
        volume_id: &str,
        publish_context: &std::collections::HashMap<String, String>,
    ) -> Result<Option<AttachmentRecord>, Status> {
        if !self.cfg.controller_publish {
            return Ok(None);
        }
        let attachment = self
            .backend
            .attachment(volume_id, &self.cfg.node_id)
            .map_err(|e| internal(e, "read attachments"))?
            .ok_or_else(|| {
                Status::failed_precondition(format!(
                    "volume `{volume_id}` is not controller-published to node `{}`; call ControllerPublishVolume first",
                    self.cfg.node_id
                ))
            })?;
        let given: BTreeMap<_, _> = publish_context.clone().into_iter().collect();
        if given != attachment.publish_context {
            return Err(Status::failed_precondition(format!(
                "`publish_context` for volume `{volume_id}` does not match the one ControllerPublishVolume returned"
            )));
        }
        Ok(Some(attachment))
    }
}

#[derive(Debug, Clone)]
pub struct Service(pub Arc<Plugin>);

#[tonic::async_trait]
impl csi::identity_server::Identity for Service {
    async fn get_plugin_info(
        &self,
        _: Request<csi::GetPluginInfoRequest>,
    ) -> Result<Response<csi::GetPluginInfoResponse>, Status> {
        self.0
            .call(Rpc::GetPluginInfo, String::new(), |_| {
                Ok(csi::GetPluginInfoResponse {
                    name: PLUGIN_NAME.into(),
                    vendor_version: env!("CARGO_PKG_VERSION").into(),
                    manifest: Default::default(),
                })
            })
            .await
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<csi::GetPluginCapabilitiesRequest>,
    ) -> Result<Response<csi::GetPluginCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::GetPluginCapabilities, String::new(), |_| {
                Ok(PluginCapabilities {
                    controller_service: true,
                    volume_accessibility_constraints: false,
                }
                .into())
            })
            .await
    }

    async fn probe(
        &self,
        _: Request<csi::ProbeRequest>,
    ) -> Result<Response<csi::ProbeResponse>, Status> {
        self.0
            .call(Rpc::Probe, String::new(), |_| {
                Ok(csi::ProbeResponse { ready: Some(true) })
            })
            .await
    }
}

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

#[tonic::async_trait]
impl csi::node_server::Node for Service {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeStageVolume, req.volume_id.clone(), move |p| {
                p.node_stage(req)
            })
            .await
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeUnstageVolume, req.volume_id.clone(), move |p| {
                p.node_unstage(req)
            })
            .await
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodePublishVolume, req.volume_id.clone(), move |p| {
                p.node_publish(req)
            })
            .await
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeUnpublishVolume, req.volume_id.clone(), move |p| {
                p.node_unpublish(req)
            })
            .await
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeGetVolumeStats, req.volume_id.clone(), move |p| {
                p.node_stats(req)
            })
            .await
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::NodeGetCapabilities, String::new(), |p| {
                Ok(NodeCapabilities {
                    stage_unstage_volume: p.cfg.stage,
                    get_volume_stats: true,
                    volume_condition: true,
                    single_node_multi_writer: true,
                }
                .into())
            })
            .await
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        self.0
            .call(Rpc::NodeGetInfo, String::new(), |p| {
                Ok(NodeInfo {
                    node_id: p.cfg.node_id.clone(),
                    max_volumes_per_node: p.cfg.max_volumes_per_node,
                    accessible_topology: None,
                }
                .into())
            })
            .await
    }
}

impl Plugin {
    /// The volume's record in the backend, or, for a volume deleted behind our back, proof
    /// that this node still holds something of it (so it can still be taken down).
    fn known_volume(&self, id: &str, state: &NodeState) -> Result<Option<VolumeRecord>, Status> {
        match self
            .backend
            .volume(id)
            .map_err(|e| internal(e, "read volume"))?
        {
            Some(v) => Ok(Some(v)),
            None if state.stagings.contains_key(id) || !state.published_targets(id).is_empty() => {
                Ok(None)
            }
            None => Err(Status::not_found(format!("volume `{id}` does not exist"))),
        }
    }

    fn node_stage(
        &self,
        req: csi::NodeStageVolumeRequest,
    ) -> Result<csi::NodeStageVolumeResponse, Status> {
        if !self.cfg.stage {
            return Err(Status::unimplemented(
                "this plugin does not advertise STAGE_UNSTAGE_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let path = require_path(&req.staging_target_path, "staging_target_path")?;
        let cap = capability(req.volume_capability.as_ref(), "volume_capability")?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
        self.check_controller_published(&volume.id, &req.publish_context)?;
        if !path.is_dir() {
            return Err(Status::invalid_argument(format!(
                "`staging_target_path` {} is not a directory; the CO must create it",
                path.display()
            )));
        }
        let mut state = self.node_state();
        if let Some(existing) = state.stagings.get(&volume.id) {
            if existing.path != path {
                return Err(Status::failed_precondition(format!(
                    "volume `{}` is already staged at {}",
                    volume.id,
                    existing.path.display()
                )));
            }
            if existing.capability != cap {
                return Err(Status::already_exists(format!(
                    "volume `{}` is staged at {} with a different capability",
                    volume.id,
                    path.display()
                )));
            }
        }
        // Attach unless already attached: after a crash between the mount and the state
        // write, the mount is there but the record is not.
        if !self
            .cfg
            .mount
            .is_attached(&path)
            .map_err(|e| internal(e, "read the mount table"))?
        {
            self.cfg
                .mount
                .attach(&self.backend.data_dir(&volume.id), &path, &volume.id, false)
                .map_err(|e| internal(e, &format!("mount {}", path.display())))?;
        }
        state.stagings.insert(
            volume.id.clone(),
            Staging {
                path,
                capability: cap,
            },
        );
        self.save_node(&state)?;
        Ok(csi::NodeStageVolumeResponse {})
    }

    fn node_unstage(
        &self,
        req: csi::NodeUnstageVolumeRequest,
    ) -> Result<csi::NodeUnstageVolumeResponse, Status> {
        if !self.cfg.stage {
            return Err(Status::unimplemented(
                "this plugin does not advertise STAGE_UNSTAGE_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let path = require_path(&req.staging_target_path, "staging_target_path")?;
        let mut state = self.node_state();
        self.known_volume(&req.volume_id, &state)?;
        let targets = state.published_targets(&req.volume_id);
        if let Some(target) = targets.first() {
            return Err(Status::failed_precondition(format!(
                "volume `{}` is still published at {}; call NodeUnpublishVolume first",
                req.volume_id,
                target.display()
            )));
        }
        if let Some(existing) = state.stagings.get(&req.volume_id)
            && existing.path != path
        {
            return Err(Status::failed_precondition(format!(
                "volume `{}` is staged at {}, not at {}",
                req.volume_id,
                existing.path.display(),
                path.display()
            )));
        }
        self.cfg
            .mount
            .detach(&path)
            .map_err(|e| internal(e, &format!("unmount {}", path.display())))?;
        if state.stagings.remove(&req.volume_id).is_some() {
            self.save_node(&state)?;
        }
        Ok(csi::NodeUnstageVolumeResponse {})
    }

    fn node_publish(
        &self,
        req: csi::NodePublishVolumeRequest,
    ) -> Result<csi::NodePublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let cap = capability(req.volume_capability.as_ref(), "volume_capability")?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
        let attachment = self.check_controller_published(&volume.id, &req.publish_context)?;
        let mut state = self.node_state();
        let source = if self.cfg.stage {
            let staging = require_path(&req.staging_target_path, "staging_target_path")?;
            match state.stagings.get(&volume.id) {
                // A staging unmounted behind the plugin's back (a crash, an operator's
                // umount) must not be bound to the target: that would publish an empty
                // local directory instead of the volume.
                Some(s)
                    if s.path == staging
                        && !self
                            .cfg
                            .mount
                            .is_attached(&staging)
                            .map_err(|e| internal(e, "read the mount table"))? =>
                {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is recorded as staged at {}, but nothing is mounted there; \
                         call NodeStageVolume again",
                        volume.id,
                        staging.display()
                    )));
                }
                Some(s) if s.path == staging => staging,
                Some(s) => {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is staged at {}, not at {}",
                        volume.id,
                        s.path.display(),
                        staging.display()
                    )));
                }
                None => {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is not staged on this node; call NodeStageVolume first",
                        volume.id
                    )));
                }
            }
        } else {
            self.backend.data_dir(&volume.id)
        };
        let readonly = req.readonly
            || cap.access_mode.max_writers() == Some(0)
            || attachment.is_some_and(|a| a.readonly);
        let wanted = Publication {
            volume_id: volume.id.clone(),
            readonly,
            capability: cap.clone(),
            staging_path: self.cfg.stage.then(|| source.clone()),
        };
        if let Some(existing) = state.publications.get(&target) {
            if *existing != wanted {
                return Err(Status::already_exists(format!(
                    "{} is already published for volume `{}` with other options",
                    target.display(),
                    existing.volume_id
                )));
            }
        } else if cap.access_mode == csivol_proto::domain::AccessMode::SingleNodeSingleWriter
            && let Some(other) = state.published_targets(&volume.id).first()
        {
            return Err(Status::failed_precondition(format!(
                "volume `{}` is single-node-single-writer and already published at {}",
                volume.id,
                other.display()
            )));
        }
        if self.cfg.publish_without_mount {
            return Ok(csi::NodePublishVolumeResponse {});
        }
        let parent = target.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(Status::invalid_argument(format!(
                "the parent of `target_path`, {}, does not exist; the CO must create it",
                parent.display()
            )));
        }
        match std::fs::create_dir(&target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(internal(e, &format!("create {}", target.display())));
            }
            _ => {}
        }
        if !self
            .cfg
            .mount
            .is_attached(&target)
            .map_err(|e| internal(e, "read the mount table"))?
        {
            self.cfg
                .mount
                .attach(&source, &target, &volume.id, readonly)
                .map_err(|e| internal(e, &format!("mount {}", target.display())))?;
        }
        state.publications.insert(target, wanted);
        self.save_node(&state)?;
        Ok(csi::NodePublishVolumeResponse {})
    }

    fn node_unpublish(
        &self,
        req: csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let mut state = self.node_state();
        self.known_volume(&req.volume_id, &state)?;
        if let Some(existing) = state.publications.get(&target)
            && existing.volume_id != req.volume_id
        {
            return Err(Status::failed_precondition(format!(
                "{} is published for volume `{}`, not `{}`",
                target.display(),
                existing.volume_id,
                req.volume_id
            )));
        }
        self.cfg
            .mount
            .detach(&target)
            .map_err(|e| internal(e, &format!("unmount {}", target.display())))?;
        match std::fs::remove_dir(&target) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(internal(e, &format!("remove {}", target.display())));
            }
            _ => {}
        }
        if state.publications.remove(&target).is_some() {
            self.save_node(&state)?;
        }
        Ok(csi::NodeUnpublishVolumeResponse {})
    }

    fn node_stats(
        &self,
        req: csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let path = require_path(&req.volume_path, "volume_path")?;
        let state = self.node_state();
        self.known_volume(&req.volume_id, &state)?;
        let ours = state
            .publications
            .get(&path)
            .is_some_and(|p| p.volume_id == req.volume_id)
            || state
                .stagings
                .get(&req.volume_id)
                .is_some_and(|s| s.path == path);
        if !ours {
            return Err(Status::not_found(format!(
                "volume `{}` is not published or staged at {}",
                req.volume_id,
                path.display()
            )));
        }
        let attached = self
            .cfg
            .mount
            .is_attached(&path)
            .map_err(|e| internal(e, "read the mount table"))?;
        let fs = rustix::fs::statvfs(&path)
            .map_err(|e| internal(e.into(), &format!("statvfs {}", path.display())))?;
        let frsize = fs.f_frsize as i64;
        let usage =
            |unit: csi::volume_usage::Unit, scale: i64, total: u64, free: u64| csi::VolumeUsage {
                available: free as i64 * scale,
                total: total as i64 * scale,
                used: total.saturating_sub(free) as i64 * scale,
                unit: unit.into(),
            };
        Ok(csi::NodeGetVolumeStatsResponse {
            usage: vec![
                usage(
                    csi::volume_usage::Unit::Bytes,
                    frsize,
                    fs.f_blocks,
                    fs.f_bavail,
                ),
                usage(csi::volume_usage::Unit::Inodes, 1, fs.f_files, fs.f_favail),
            ],
            volume_condition: Some(
                match std::fs::read_to_string(self.abnormal_dir.join(&req.volume_id)) {
                    Ok(injected) => csi::VolumeCondition {
                        abnormal: true,
                        message: injected.trim().to_owned(),
                    },
                    Err(_) if !attached => csi::VolumeCondition {
                        abnormal: true,
                        message: format!("{} is not mounted", path.display()),
                    },
                    Err(_) => csi::VolumeCondition {
                        abnormal: false,
                        message: "mounted".into(),
                    },
                },
            ),
        })
    }
}
