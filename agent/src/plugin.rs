//! The agent's gRPC edge to its CSI plugins: connecting (Probe, identity and capabilities),
//! the node calls (`node`) and the controller calls (`controller`). This is the only part
//! of the agent that builds CSI wire messages; every call carries a deadline and waits for
//! a per-plugin permit.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use csivol_api::domain::{ErrorClass, NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo};
use csivol_api::{NodePluginRegistration, PluginError, PluginRegistration};
use csivol_csi::CsiEndpoint;
use csivol_csi::PluginConnection;
use csivol_csi::convert::{code_name, error_class};
use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::with_deadline;
use tokio::sync::Semaphore;
use tonic::Code;

use super::config::{CoreConfig, PluginSpec, ReadyCheck};
use crate::stats::{CallBook, PluginMeter};

pub mod controller;
mod node;

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

/// The plugin's connection, its calls counted in `calls` when given.
fn counted(
    conn: PluginConnection,
    spec: &PluginSpec,
    calls: Option<&std::sync::Arc<CallBook>>,
) -> PluginConnection {
    match calls {
        Some(book) => conn.metered(std::sync::Arc::new(PluginMeter {
            plugin: spec.id.clone(),
            book: std::sync::Arc::clone(book),
        })),
        None => conn,
    }
}

impl Plugins {
    /// Waits for each plugin to answer Probe, then reads what it is and can do.
    pub async fn connect(cfg: &CoreConfig) -> Result<Self, ConnectError> {
        Self::connect_with(cfg, None).await
    }

    /// [`Plugins::connect`], every call to the plugins counted in `calls` (for the server's
    /// CSI call metrics).
    pub async fn connect_counted(
        cfg: &CoreConfig,
        calls: &std::sync::Arc<CallBook>,
    ) -> Result<Self, ConnectError> {
        Self::connect_with(cfg, Some(calls)).await
    }

    async fn connect_with(
        cfg: &CoreConfig,
        calls: Option<&std::sync::Arc<CallBook>>,
    ) -> Result<Self, ConnectError> {
        let mut plugins = Self::default();
        for spec in &cfg.plugins {
            let p = NodePlugin::connect(spec, cfg, calls).await?;
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
            let p = ControllerPlugin::connect(spec, cfg, calls).await?;
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
