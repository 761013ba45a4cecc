//! The agent's gRPC edge to its CSI plugins: connecting (Probe, identity and capabilities),
//! the node calls and the controller calls. This is the only part of the agent that builds
//! CSI wire messages; every call carries a deadline and waits for a per-plugin permit.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use csivol_api::domain::{
    ControllerCapabilities, ErrorClass, GroupControllerCapabilities, NodeCapabilities, NodeInfo,
    PluginCapabilities, PluginInfo, Topology, VolumeCapability,
};
use csivol_api::{
    ControllerOp, ControllerOpKind, DesiredExpand, DesiredPublish, GroupMember,
    NodePluginRegistration, NodeVolume, PluginError, PluginRegistration, Report,
};
use csivol_csi::CsiEndpoint;
use csivol_csi::PluginConnection;
use csivol_csi::convert::{code_name, error_class, timestamp_ms};
use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::with_deadline;
use tokio::sync::Semaphore;
use tonic::Code;

use super::config::{CoreConfig, PluginSpec, ReadyCheck};

/// How long one Probe may take while the agent waits for a plugin to come up.
const PROBE_DEADLINE: Duration = Duration::from_secs(5);
/// How often the agent says it is still waiting for a plugin.
const WAIT_LOG_EVERY: Duration = Duration::from_secs(10);

/// A failed plugin call: which RPC, the gRPC code and the plugin's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{rpc} failed with {}: {message}", code_name(*code))]
pub struct CallError {
    pub rpc: &'static str,
    pub code: Code,
    pub message: String,
}

impl CallError {
    fn new(rpc: &'static str, status: tonic::Status) -> Self {
        Self {
            rpc,
            code: status.code(),
            message: status.message().to_owned(),
        }
    }

    /// A response the spec does not allow; retried like a plugin fault.
    fn invalid_response(rpc: &'static str, what: impl std::fmt::Display) -> Self {
        Self {
            rpc,
            code: Code::Unknown,
            message: format!("invalid response: {what}"),
        }
    }

    pub fn class(&self) -> ErrorClass {
        error_class(self.code)
    }

    /// The report form: `final` tells the server whether the agent gave up.
    pub fn to_plugin_error(&self, is_final: bool, next_retry_at_ms: Option<u64>) -> PluginError {
        PluginError {
            code: code_name(self.code).to_owned(),
            message: format!("{}: {}", self.rpc, self.message),
            is_final,
            next_retry_at_ms,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "plugin `{id}` at {endpoint} did not answer Probe within {}: {last}",
        humantime::format_duration(*waited)
    )]
    NotReady {
        id: String,
        endpoint: CsiEndpoint,
        waited: Duration,
        last: String,
    },
    #[error("plugin `{id}` at {endpoint}: {source}")]
    Call {
        id: String,
        endpoint: CsiEndpoint,
        #[source]
        source: CallError,
    },
    #[error(
        "plugin `{id}` at {endpoint} does not advertise the controller service; drop --controller {id}=..."
    )]
    NoController { id: String, endpoint: CsiEndpoint },
}

/// What every plugin answers on its Identity service.
#[derive(Clone, Debug)]
pub struct Identity {
    pub info: PluginInfo,
    pub capabilities: PluginCapabilities,
}

/// A node plugin: its facts and a throttled, deadlined client.
#[derive(Debug)]
pub struct NodePlugin {
    pub id: String,
    pub endpoint: CsiEndpoint,
    pub identity: Identity,
    pub info: NodeInfo,
    pub capabilities: NodeCapabilities,
    /// The attach limit (`max_volumes_per_node`) as NodeGetInfo last said it.
    limit: std::sync::atomic::AtomicU32,
    client: csi::node_client::NodeClient<PluginConnection>,
    permits: Semaphore,
    timeout: Duration,
}

/// A controller this agent hosts.
#[derive(Debug)]
pub struct ControllerPlugin {
    pub id: String,
    pub endpoint: CsiEndpoint,
    pub identity: Identity,
    pub capabilities: ControllerCapabilities,
    client: csi::controller_client::ControllerClient<PluginConnection>,
    /// The GroupController service, where the plugin serves it.
    group: Option<csi::group_controller_client::GroupControllerClient<PluginConnection>>,
    permits: Semaphore,
    timeout: Duration,
}

/// Every plugin the agent was given, connected.
#[derive(Debug, Default)]
pub struct Plugins {
    pub node: BTreeMap<String, NodePlugin>,
    pub controller: BTreeMap<String, ControllerPlugin>,
}

impl Plugins {
    /// Waits for each plugin to answer Probe, then reads what it is and can do.
    pub async fn connect(cfg: &CoreConfig) -> Result<Self, ConnectError> {
        let mut plugins = Self::default();
        for spec in &cfg.plugins {
            let p = NodePlugin::connect(spec, cfg).await?;
            tracing::info!(
                plugin = p.id,
                endpoint = %p.endpoint,
                name = p.identity.info.name,
                version = p.identity.info.vendor_version,
                node_id = p.info.node_id,
                stage_unstage = p.capabilities.stage_unstage_volume,
                "node plugin ready"
            );
            plugins.node.insert(p.id.clone(), p);
        }
        for spec in &cfg.controllers {
            let p = ControllerPlugin::connect(spec, cfg).await?;
            tracing::info!(
                plugin = p.id,
                endpoint = %p.endpoint,
                name = p.identity.info.name,
                publish_unpublish = p.capabilities.publish_unpublish_volume,
                create_delete = p.capabilities.create_delete_volume,
                "controller plugin ready"
            );
            plugins.controller.insert(p.id.clone(), p);
        }
        Ok(plugins)
    }

    /// What the server is told about each plugin at registration, with the readiness
    /// check each node plugin's volumes get.
    pub fn registrations(
        &self,
        ready_check: impl Fn(&str) -> ReadyCheck,
    ) -> Vec<PluginRegistration> {
        let ids: std::collections::BTreeSet<&String> =
            self.node.keys().chain(self.controller.keys()).collect();
        ids.into_iter()
            .map(|id| {
                let node = self.node.get(id);
                let controller = self.controller.get(id);
                let identity = node
                    .map(|n| &n.identity)
                    .or(controller.map(|c| &c.identity))
                    .expect("the id comes from one of the maps");
                PluginRegistration {
                    id: id.clone(),
                    info: identity.info.clone(),
                    capabilities: identity.capabilities,
                    node: node.map(|n| NodePluginRegistration {
                        info: n.node_info(),
                        capabilities: n.capabilities,
                        ready_check: Some(ready_check(id).as_str().to_owned()),
                    }),
                    controller: controller.map(|c| c.capabilities),
                }
            })
            .collect()
    }
}

/// Probes until the plugin says it is ready, then reads its identity.
async fn identity(
    spec: &PluginSpec,
    conn: &PluginConnection,
    wait: Duration,
) -> Result<Identity, ConnectError> {
    let mut client = csi::identity_client::IdentityClient::new(conn.clone());
    let started = Instant::now();
    let mut last_log: Option<Instant> = None;
    loop {
        let last = match client
            .probe(with_deadline(csi::ProbeRequest {}, PROBE_DEADLINE))
            .await
        {
            // `ready` unset means ready, per the spec.
            Ok(r) if r.get_ref().ready != Some(false) => break,
            Ok(_) => "the plugin answered that it is not ready yet".to_owned(),
            Err(status) => CallError::new("Probe", status).to_string(),
        };
        if started.elapsed() >= wait {
            return Err(ConnectError::NotReady {
                id: spec.id.clone(),
                endpoint: spec.endpoint.clone(),
                waited: wait,
                last,
            });
        }
        if last_log.is_none_or(|t| t.elapsed() >= WAIT_LOG_EVERY) {
            tracing::info!(
                plugin = spec.id,
                endpoint = %spec.endpoint,
                waited = %humantime::format_duration(Duration::from_secs(started.elapsed().as_secs())),
                deadline = %humantime::format_duration(wait),
                "waiting for plugin `{}` to answer Probe: {last}",
                spec.id
            );
            last_log = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let call_err = |source| ConnectError::Call {
        id: spec.id.clone(),
        endpoint: spec.endpoint.clone(),
        source,
    };
    let info = client
        .get_plugin_info(with_deadline(csi::GetPluginInfoRequest {}, PROBE_DEADLINE))
        .await
        .map_err(|s| call_err(CallError::new("GetPluginInfo", s)))?
        .into_inner();
    let info = PluginInfo::try_from(info)
        .map_err(|e| call_err(CallError::invalid_response("GetPluginInfo", e)))?;
    let caps = client
        .get_plugin_capabilities(with_deadline(
            csi::GetPluginCapabilitiesRequest {},
            PROBE_DEADLINE,
        ))
        .await
        .map_err(|s| call_err(CallError::new("GetPluginCapabilities", s)))?;
    Ok(Identity {
        info,
        capabilities: PluginCapabilities::from(caps.get_ref()),
    })
}

fn wire_map(map: &BTreeMap<String, String>) -> HashMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// Paths under the data dir are UTF-8: the data dir is checked at start and every other
/// component is a validated name.
fn wire_path(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

impl NodePlugin {
    async fn connect(spec: &PluginSpec, cfg: &CoreConfig) -> Result<Self, ConnectError> {
        let conn = spec.endpoint.connection(cfg.node_call_timeout);
        let identity = identity(spec, &conn, cfg.plugin_wait_timeout).await?;
        let mut client = csi::node_client::NodeClient::new(conn);
        let call_err = |source| ConnectError::Call {
            id: spec.id.clone(),
            endpoint: spec.endpoint.clone(),
            source,
        };
        let caps = client
            .node_get_capabilities(with_deadline(
                csi::NodeGetCapabilitiesRequest {},
                PROBE_DEADLINE,
            ))
            .await
            .map_err(|s| call_err(CallError::new("NodeGetCapabilities", s)))?;
        let info = client
            .node_get_info(with_deadline(csi::NodeGetInfoRequest {}, PROBE_DEADLINE))
            .await
            .map_err(|s| call_err(CallError::new("NodeGetInfo", s)))?
            .into_inner();
        let info = NodeInfo::try_from(info)
            .map_err(|e| call_err(CallError::invalid_response("NodeGetInfo", e)))?;
        Ok(Self {
            id: spec.id.clone(),
            endpoint: spec.endpoint.clone(),
            identity,
            limit: std::sync::atomic::AtomicU32::new(info.max_volumes_per_node),
            info,
            capabilities: NodeCapabilities::from(caps.get_ref()),
            client,
            permits: Semaphore::new(cfg.node_concurrency),
            timeout: cfg.node_call_timeout,
        })
    }

    pub fn stages(&self) -> bool {
        self.capabilities.stage_unstage_volume
    }

    /// The node's facts as NodeGetInfo last said them (the attach limit read again).
    pub fn node_info(&self) -> NodeInfo {
        NodeInfo {
            max_volumes_per_node: self.limit(),
            ..self.info.clone()
        }
    }

    /// The attach limit as NodeGetInfo last said it (0: no limit).
    pub fn limit(&self) -> u32 {
        self.limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads the attach limit again with NodeGetInfo; returns it (the node id and topology
    /// the spec has the plugin keep are not taken again).
    pub async fn refresh_limit(&self) -> Result<u32, CallError> {
        let info = self
            .client
            .clone()
            .node_get_info(with_deadline(csi::NodeGetInfoRequest {}, PROBE_DEADLINE))
            .await
            .map_err(|s| CallError::new("NodeGetInfo", s))?
            .into_inner();
        let info =
            NodeInfo::try_from(info).map_err(|e| CallError::invalid_response("NodeGetInfo", e))?;
        self.limit.store(
            info.max_volumes_per_node,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(info.max_volumes_per_node)
    }

    pub async fn stage(&self, v: &NodeVolume, staging: &Path) -> Result<(), CallError> {
        let req = csi::NodeStageVolumeRequest {
            volume_id: v.external_id.clone(),
            publish_context: wire_map(&v.publish_context),
            staging_target_path: wire_path(staging),
            volume_capability: Some(csi::VolumeCapability::from(&v.capability)),
            secrets: wire_map(&v.secrets),
            volume_context: wire_map(&v.context),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_stage_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeStageVolume", s))?;
        Ok(())
    }

    pub async fn publish(
        &self,
        p: &DesiredPublish,
        staging: Option<&Path>,
        target: &Path,
    ) -> Result<(), CallError> {
        let v = &p.volume;
        let req = csi::NodePublishVolumeRequest {
            volume_id: v.external_id.clone(),
            publish_context: wire_map(&v.publish_context),
            staging_target_path: staging.map(wire_path).unwrap_or_default(),
            target_path: wire_path(target),
            volume_capability: Some(csi::VolumeCapability::from(&v.capability)),
            readonly: p.read_only,
            secrets: wire_map(&v.secrets),
            volume_context: wire_map(&v.context),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_publish_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodePublishVolume", s))?;
        Ok(())
    }

    pub async fn unpublish(&self, external_id: &str, target: &Path) -> Result<(), CallError> {
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id: external_id.to_owned(),
            target_path: wire_path(target),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_unpublish_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeUnpublishVolume", s))?;
        Ok(())
    }

    /// Whether the plugin can say how a published volume is (GET_VOLUME_STATS with
    /// VOLUME_CONDITION).
    pub fn reports_condition(&self) -> bool {
        self.capabilities.get_volume_stats && self.capabilities.volume_condition
    }

    /// NodeGetVolumeStats of a published volume: its condition, `(abnormal, message)`,
    /// when the plugin gave one.
    pub async fn condition(
        &self,
        external_id: &str,
        target: &Path,
        staging: Option<&Path>,
    ) -> Result<Option<(bool, String)>, CallError> {
        let req = csi::NodeGetVolumeStatsRequest {
            volume_id: external_id.to_owned(),
            volume_path: wire_path(target),
            staging_target_path: staging.map(wire_path).unwrap_or_default(),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        let resp = self
            .client
            .clone()
            .node_get_volume_stats(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeGetVolumeStats", s))?;
        Ok(resp
            .into_inner()
            .volume_condition
            .map(|c| (c.abnormal, c.message)))
    }

    /// NodeExpandVolume at `path` (a target, or the staging when nothing is published);
    /// returns the capacity the plugin reports (0: it did not say).
    pub async fn expand(
        &self,
        e: &DesiredExpand,
        path: &Path,
        staging: Option<&Path>,
    ) -> Result<u64, CallError> {
        let req = csi::NodeExpandVolumeRequest {
            volume_id: e.external_id.clone(),
            volume_path: wire_path(path),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: i64::try_from(e.capacity_bytes).unwrap_or(i64::MAX),
                limit_bytes: 0,
            }),
            staging_target_path: staging.map(wire_path).unwrap_or_default(),
            volume_capability: Some(csi::VolumeCapability::from(&e.capability)),
            secrets: wire_map(&e.secrets),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        let r = self
            .client
            .clone()
            .node_expand_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeExpandVolume", s))?;
        Ok(u64::try_from(r.into_inner().capacity_bytes).unwrap_or(0))
    }

    pub async fn unstage(&self, external_id: &str, staging: &Path) -> Result<(), CallError> {
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: external_id.to_owned(),
            staging_target_path: wire_path(staging),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_unstage_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeUnstageVolume", s))?;
        Ok(())
    }
}

impl ControllerPlugin {
    async fn connect(spec: &PluginSpec, cfg: &CoreConfig) -> Result<Self, ConnectError> {
        let conn = spec.endpoint.connection(cfg.controller_call_timeout);
        let identity = identity(spec, &conn, cfg.plugin_wait_timeout).await?;
        if !identity.capabilities.controller_service {
            return Err(ConnectError::NoController {
                id: spec.id.clone(),
                endpoint: spec.endpoint.clone(),
            });
        }
        let mut client = csi::controller_client::ControllerClient::new(conn.clone());
        let caps = client
            .controller_get_capabilities(with_deadline(
                csi::ControllerGetCapabilitiesRequest {},
                PROBE_DEADLINE,
            ))
            .await
            .map_err(|s| ConnectError::Call {
                id: spec.id.clone(),
                endpoint: spec.endpoint.clone(),
                source: CallError::new("ControllerGetCapabilities", s),
            })?;
        let mut capabilities = ControllerCapabilities::from(caps.get_ref());
        // The GroupController is a service of its own, asked only where the plugin lists
        // it (GetPluginCapabilities: GROUP_CONTROLLER_SERVICE "indicates that the Plugin
        // provides RPCs for operating on groups of volumes. Plugins MAY provide this
        // capability"), and whose calls need CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT.
        let group = if identity.capabilities.group_controller_service {
            let mut group = csi::group_controller_client::GroupControllerClient::new(conn);
            match group
                .group_controller_get_capabilities(with_deadline(
                    csi::GroupControllerGetCapabilitiesRequest {},
                    PROBE_DEADLINE,
                ))
                .await
            {
                Ok(r) => {
                    capabilities.group_snapshots = GroupControllerCapabilities::from(r.get_ref())
                        .create_delete_get_volume_group_snapshot;
                }
                // Its other services still serve: the plugin hosts its controller without
                // group snapshots, and the server refuses those.
                Err(s) => tracing::warn!(
                    plugin = spec.id,
                    error = %CallError::new("GroupControllerGetCapabilities", s),
                    "group snapshots unavailable"
                ),
            }
            Some(group)
        } else {
            None
        };
        Ok(Self {
            id: spec.id.clone(),
            endpoint: spec.endpoint.clone(),
            identity,
            capabilities,
            client,
            group,
            permits: Semaphore::new(cfg.controller_concurrency),
            timeout: cfg.controller_call_timeout,
        })
    }

    /// Whether the server can compare this plugin's publications with its attachments.
    pub fn lists_published_nodes(&self) -> bool {
        self.capabilities.list_volumes && self.capabilities.list_volumes_published_nodes
    }

    /// Every volume the plugin has, through all pages of ListVolumes (`next_token`).
    pub async fn list_volumes(&self) -> Result<Vec<csivol_api::ListedVolume>, CallError> {
        /// A page of this size keeps each answer small; the plugin may return fewer.
        const PAGE: i32 = 100;
        let mut client = self.client.clone();
        let _permit = self.permits.acquire().await.expect("never closed");
        let mut volumes = Vec::new();
        let mut token = String::new();
        loop {
            let req = csi::ListVolumesRequest {
                max_entries: PAGE,
                starting_token: token,
            };
            let r = client
                .list_volumes(with_deadline(req, self.timeout))
                .await
                .map_err(|s| CallError::new("ListVolumes", s))?
                .into_inner();
            volumes.extend(r.entries.iter().map(csivol_api::ListedVolume::from));
            if r.next_token.is_empty() {
                return Ok(volumes);
            }
            token = r.next_token;
        }
    }

    /// Runs one controller operation and returns the report of its success.
    pub async fn run(&self, op: &ControllerOp) -> Result<Report, CallError> {
        let cap = |c: &VolumeCapability| Some(csi::VolumeCapability::from(c));
        let mut client = self.client.clone();
        let _permit = self.permits.acquire().await.expect("never closed");
        let (id, attempt) = (op.id, op.attempt);
        Ok(match &op.kind {
            ControllerOpKind::Publish {
                external_id,
                node_id,
                capability,
                readonly,
                context,
                secrets,
                ..
            } => {
                let req = csi::ControllerPublishVolumeRequest {
                    volume_id: external_id.clone(),
                    node_id: node_id.clone(),
                    volume_capability: cap(capability),
                    readonly: *readonly,
                    secrets: wire_map(secrets),
                    volume_context: wire_map(context),
                };
                let r = client
                    .controller_publish_volume(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("ControllerPublishVolume", s))?;
                Report::ControllerPublished {
                    op: id,
                    attempt,
                    publish_context: r.into_inner().publish_context.into_iter().collect(),
                }
            }
            ControllerOpKind::Unpublish {
                external_id,
                node_id,
                secrets,
                ..
            } => {
                let req = csi::ControllerUnpublishVolumeRequest {
                    volume_id: external_id.clone(),
                    node_id: node_id.clone(),
                    secrets: wire_map(secrets),
                };
                client
                    .controller_unpublish_volume(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("ControllerUnpublishVolume", s))?;
                Report::ControllerUnpublished { op: id, attempt }
            }
            ControllerOpKind::Create {
                volume,
                capability,
                capacity_bytes,
                parameters,
                secrets,
                topology_request,
                source,
                mutable_parameters,
            } => {
                let req = csi::CreateVolumeRequest {
                    name: volume.clone(),
                    capacity_range: (*capacity_bytes > 0).then(|| csi::CapacityRange {
                        required_bytes: i64::try_from(*capacity_bytes).unwrap_or(i64::MAX),
                        limit_bytes: 0,
                    }),
                    volume_capabilities: vec![csi::VolumeCapability::from(capability)],
                    parameters: wire_map(parameters),
                    secrets: wire_map(secrets),
                    accessibility_requirements: topology_request
                        .as_ref()
                        .map(csi::TopologyRequirement::from),
                    volume_content_source: source.as_ref().map(csi::VolumeContentSource::from),
                    mutable_parameters: wire_map(mutable_parameters),
                };
                let r = client
                    .create_volume(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("CreateVolume", s))?;
                let v = r.into_inner().volume.ok_or_else(|| {
                    CallError::invalid_response("CreateVolume", "`volume` is missing")
                })?;
                if v.volume_id.is_empty() {
                    return Err(CallError::invalid_response(
                        "CreateVolume",
                        "`volume.volume_id` is empty",
                    ));
                }
                Report::Created {
                    op: id,
                    attempt,
                    external_id: v.volume_id,
                    // The spec: 0 means the capacity is unknown.
                    capacity_bytes: u64::try_from(v.capacity_bytes).unwrap_or(0),
                    context: v.volume_context.into_iter().collect(),
                    accessible_topology: v
                        .accessible_topology
                        .into_iter()
                        .map(Topology::from)
                        .collect(),
                }
            }
            ControllerOpKind::Delete {
                external_id,
                secrets,
                ..
            } => {
                let req = csi::DeleteVolumeRequest {
                    volume_id: external_id.clone(),
                    secrets: wire_map(secrets),
                };
                client
                    .delete_volume(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("DeleteVolume", s))?;
                Report::Deleted { op: id, attempt }
            }
            ControllerOpKind::Expand {
                external_id,
                capacity_bytes,
                capability,
                secrets,
                ..
            } => {
                let req = csi::ControllerExpandVolumeRequest {
                    volume_id: external_id.clone(),
                    capacity_range: Some(csi::CapacityRange {
                        required_bytes: i64::try_from(*capacity_bytes).unwrap_or(i64::MAX),
                        limit_bytes: 0,
                    }),
                    secrets: wire_map(secrets),
                    volume_capability: cap(capability),
                };
                let r = client
                    .controller_expand_volume(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("ControllerExpandVolume", s))?
                    .into_inner();
                Report::Expanded {
                    op: id,
                    attempt,
                    capacity_bytes: u64::try_from(r.capacity_bytes).unwrap_or(0),
                    node_expansion_required: r.node_expansion_required,
                }
            }
            ControllerOpKind::Modify {
                external_id,
                parameters,
                secrets,
                ..
            } => {
                let req = csi::ControllerModifyVolumeRequest {
                    volume_id: external_id.clone(),
                    secrets: wire_map(secrets),
                    mutable_parameters: wire_map(parameters),
                };
                client
                    .controller_modify_volume(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("ControllerModifyVolume", s))?;
                Report::Modified { op: id, attempt }
            }
            ControllerOpKind::CreateSnapshot {
                snapshot,
                source_volume_id,
                snapshot_id,
                parameters,
                secrets,
            } => {
                // Once the snapshot is cut, a plugin with GET_SNAPSHOT is asked about that one
                // snapshot (GetSnapshot: "Snapshots which were recently created and not yet
                // ready to use must be retrievable with this RPC"); a plugin without it is
                // asked CreateSnapshot again, as the spec advises ("calling CreateSnapshot
                // repeatedly is the preferred way to check if the processing is complete").
                let (call, s) = if !snapshot_id.is_empty() && self.capabilities.get_snapshot {
                    let req = csi::GetSnapshotRequest {
                        snapshot_id: snapshot_id.clone(),
                        secrets: wire_map(secrets),
                    };
                    let r = client
                        .get_snapshot(with_deadline(req, self.timeout))
                        .await
                        .map_err(|s| CallError::new("GetSnapshot", s))?;
                    ("GetSnapshot", r.into_inner().snapshot)
                } else {
                    let req = csi::CreateSnapshotRequest {
                        source_volume_id: source_volume_id.clone(),
                        name: snapshot.clone(),
                        secrets: wire_map(secrets),
                        parameters: wire_map(parameters),
                    };
                    let r = client
                        .create_snapshot(with_deadline(req, self.timeout))
                        .await
                        .map_err(|s| CallError::new("CreateSnapshot", s))?;
                    ("CreateSnapshot", r.into_inner().snapshot)
                };
                let s =
                    s.ok_or_else(|| CallError::invalid_response(call, "`snapshot` is missing"))?;
                if s.snapshot_id.is_empty() {
                    return Err(CallError::invalid_response(
                        call,
                        "`snapshot.snapshot_id` is empty",
                    ));
                }
                Report::SnapshotCreated {
                    op: id,
                    attempt,
                    snapshot_id: s.snapshot_id,
                    // The spec: 0 means the size is unknown.
                    size_bytes: u64::try_from(s.size_bytes).unwrap_or(0),
                    ready_to_use: s.ready_to_use,
                    creation_time_ms: timestamp_ms(s.creation_time.as_ref()),
                }
            }
            ControllerOpKind::DeleteSnapshot {
                snapshot_id,
                secrets,
                ..
            } => {
                let req = csi::DeleteSnapshotRequest {
                    snapshot_id: snapshot_id.clone(),
                    secrets: wire_map(secrets),
                };
                client
                    .delete_snapshot(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("DeleteSnapshot", s))?;
                Report::SnapshotDeleted { op: id, attempt }
            }
            ControllerOpKind::CreateGroupSnapshot {
                group,
                source_volume_ids,
                group_snapshot_id,
                snapshot_ids,
                parameters,
                secrets,
            } => {
                let mut client = self.group_client("CreateVolumeGroupSnapshot")?;
                // Once the group is cut, GetVolumeGroupSnapshot tells where it stands (the
                // spec: "This optional RPC MAY be called by the CO to fetch current
                // information about a volume group snapshot", implemented by every plugin
                // with the capability); before, CreateVolumeGroupSnapshot is asked again
                // ("The CO SHOULD issue the CreateVolumeGroupSnapshotRequest RPC with the
                // same arguments again periodically until the ready_to_use field has a
                // value of true").
                let (call, g) = if group_snapshot_id.is_empty() {
                    let req = csi::CreateVolumeGroupSnapshotRequest {
                        name: group.clone(),
                        source_volume_ids: source_volume_ids.clone(),
                        secrets: wire_map(secrets),
                        parameters: wire_map(parameters),
                    };
                    let r = client
                        .create_volume_group_snapshot(with_deadline(req, self.timeout))
                        .await
                        .map_err(|s| CallError::new("CreateVolumeGroupSnapshot", s))?;
                    ("CreateVolumeGroupSnapshot", r.into_inner().group_snapshot)
                } else {
                    let req = csi::GetVolumeGroupSnapshotRequest {
                        group_snapshot_id: group_snapshot_id.clone(),
                        snapshot_ids: snapshot_ids.clone(),
                        secrets: wire_map(secrets),
                    };
                    let r = client
                        .get_volume_group_snapshot(with_deadline(req, self.timeout))
                        .await
                        .map_err(|s| CallError::new("GetVolumeGroupSnapshot", s))?;
                    ("GetVolumeGroupSnapshot", r.into_inner().group_snapshot)
                };
                // "In the VolumeGroupSnapshot message, both snapshots and group_snapshot_id
                // are required fields."
                let g = g.ok_or_else(|| {
                    CallError::invalid_response(call, "`group_snapshot` is missing")
                })?;
                if g.group_snapshot_id.is_empty() {
                    return Err(CallError::invalid_response(
                        call,
                        "`group_snapshot.group_snapshot_id` is empty",
                    ));
                }
                if g.snapshots.is_empty() || g.snapshots.iter().any(|s| s.snapshot_id.is_empty()) {
                    return Err(CallError::invalid_response(
                        call,
                        "`group_snapshot.snapshots` is empty or names a snapshot without an id",
                    ));
                }
                Report::GroupSnapshotCreated {
                    op: id,
                    attempt,
                    group_snapshot_id: g.group_snapshot_id,
                    ready_to_use: g.ready_to_use,
                    creation_time_ms: timestamp_ms(g.creation_time.as_ref()),
                    snapshots: g
                        .snapshots
                        .into_iter()
                        .map(|s| GroupMember {
                            snapshot_id: s.snapshot_id,
                            source_volume_id: s.source_volume_id,
                            // The spec: 0 means the size is unknown.
                            size_bytes: u64::try_from(s.size_bytes).unwrap_or(0),
                            ready_to_use: s.ready_to_use,
                            creation_time_ms: timestamp_ms(s.creation_time.as_ref()),
                        })
                        .collect(),
                }
            }
            ControllerOpKind::DeleteGroupSnapshot {
                group_snapshot_id,
                snapshot_ids,
                secrets,
                ..
            } => {
                let req = csi::DeleteVolumeGroupSnapshotRequest {
                    group_snapshot_id: group_snapshot_id.clone(),
                    snapshot_ids: snapshot_ids.clone(),
                    secrets: wire_map(secrets),
                };
                self.group_client("DeleteVolumeGroupSnapshot")?
                    .delete_volume_group_snapshot(with_deadline(req, self.timeout))
                    .await
                    .map_err(|s| CallError::new("DeleteVolumeGroupSnapshot", s))?;
                Report::GroupSnapshotDeleted { op: id, attempt }
            }
        })
    }

    /// The GroupController client, or the error a plugin without the service gives.
    fn group_client(
        &self,
        call: &'static str,
    ) -> Result<csi::group_controller_client::GroupControllerClient<PluginConnection>, CallError>
    {
        self.group.clone().ok_or_else(|| {
            CallError::new(
                call,
                tonic::Status::unimplemented(
                    "the plugin does not list GROUP_CONTROLLER_SERVICE in GetPluginCapabilities",
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_call_and_code() {
        let e = CallError::new("NodeStageVolume", tonic::Status::unavailable("busy"));
        assert_eq!(
            e.to_string(),
            "NodeStageVolume failed with UNAVAILABLE: busy"
        );
        assert_eq!(e.class(), ErrorClass::Retry);
        let p = e.to_plugin_error(false, Some(7));
        assert_eq!(p.code, "UNAVAILABLE");
        assert_eq!(p.message, "NodeStageVolume: busy");
        assert_eq!(p.next_retry_at_ms, Some(7));
    }
}
