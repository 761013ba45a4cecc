//! The agent's gRPC edge to its CSI plugins: connecting (Probe, identity and capabilities),
//! the node calls and the controller calls. This is the only part of the agent that builds
//! CSI wire messages; every call carries a deadline and waits for a per-plugin permit.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use csivol_api::domain::{ErrorClass, NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo};
use csivol_api::{
    DesiredExpand, DesiredPublish, NodePluginRegistration, NodeVolume, PluginError,
    PluginRegistration,
};
use csivol_csi::CsiEndpoint;
use csivol_csi::PluginConnection;
use csivol_csi::convert::{code_name, error_class};
use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::with_deadline;
use tokio::sync::Semaphore;
use tonic::Code;

use super::config::{CoreConfig, PluginSpec, ReadyCheck};

pub mod controller;

use controller::ControllerPlugin;

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
