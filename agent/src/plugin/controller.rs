//! The controller side of a plugin this agent hosts: connecting to its Controller (and
//! GroupController) service, its listing, and the controller operations the server hands
//! this agent. Each kind of operation is a file of `controller/` that makes its CSI call(s)
//! and says what the report of its success carries; [`ControllerPlugin::run`] is the table
//! that sends each kind to its file, one row per kind.

use std::time::Duration;

use csivol_api::domain::{ControllerCapabilities, GroupControllerCapabilities};
use csivol_api::{ControllerOp, ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::with_deadline;
use csivol_csi::{CsiEndpoint, PluginConnection};
use tokio::sync::Semaphore;

use super::{CallError, ConnectError, Identity, PROBE_DEADLINE, identity};
use crate::config::{CoreConfig, PluginSpec};

mod attach;
mod create;
mod delete;
mod detach;
mod expand;
mod group_snapshot;
mod modify;
mod snapshot;
mod validate;

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

impl ControllerPlugin {
    pub(super) async fn connect(
        spec: &PluginSpec,
        cfg: &CoreConfig,
        calls: Option<&std::sync::Arc<crate::stats::CallBook>>,
    ) -> Result<Self, ConnectError> {
        let conn = super::counted(
            spec.endpoint.connection(cfg.controller_call_timeout),
            spec,
            calls,
        );
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

    /// Every snapshot the plugin has, through all pages of ListSnapshots (`next_token`). A
    /// stale token is answered ABORTED (spec.md, ListSnapshots errors: "Invalid
    /// `starting_token` | 10 ABORTED | Indicates that `starting_token` is not valid. |
    /// Caller SHOULD start the `ListSnapshots` operation again with an empty
    /// `starting_token`."): the listing starts over, a few times at most.
    pub async fn list_snapshots(&self) -> Result<Vec<csivol_api::ListedSnapshot>, CallError> {
        /// A page of this size keeps each answer small ("the Plugin MUST NOT return more
        /// entries than this number"); a page with fewer is no end of the listing, only an
        /// empty `next_token` is.
        const PAGE: i32 = 100;
        /// Starts over after a stale token at most this often in one listing.
        const RESTARTS: u32 = 3;
        let mut client = self.client.clone();
        let _permit = self.permits.acquire().await.expect("never closed");
        let mut restarts = 0;
        let mut snapshots = Vec::new();
        let mut token = String::new();
        loop {
            let req = csi::ListSnapshotsRequest {
                max_entries: PAGE,
                starting_token: token.clone(),
                ..Default::default()
            };
            let r = match client
                .list_snapshots(with_deadline(req, self.timeout))
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s)
                    if s.code() == tonic::Code::Aborted
                        && !token.is_empty()
                        && restarts < RESTARTS =>
                {
                    restarts += 1;
                    snapshots.clear();
                    token.clear();
                    continue;
                }
                Err(s) => return Err(CallError::new("ListSnapshots", s)),
            };
            snapshots.extend(
                r.entries
                    .iter()
                    .filter_map(|e| e.snapshot.as_ref())
                    .map(csivol_api::ListedSnapshot::from),
            );
            if r.next_token.is_empty() {
                return Ok(snapshots);
            }
            token = r.next_token;
        }
    }

    /// Whether the plugin answers GetCapacity (ControllerGetCapabilities: GET_CAPACITY).
    pub fn reports_capacity(&self) -> bool {
        self.capabilities.get_capacity
    }

    /// One GetCapacity. Its topology is set only where the plugin has
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS (spec.md, GetCapacityRequest's
    /// `accessible_topology`: "This field is OPTIONAL; it SHALL NOT be set unless the plugin
    /// has the VOLUME_ACCESSIBILITY_CONSTRAINTS plugin capability"); a segment asked of a
    /// plugin without it is not asked at all (`None`).
    pub async fn get_capacity(
        &self,
        query: &csivol_api::CapacityQuery,
    ) -> Result<Option<csivol_api::CapacitySample>, CallError> {
        let topology = if query.segment.is_empty() {
            None
        } else if self.identity.capabilities.volume_accessibility_constraints {
            Some(csi::Topology {
                segments: query.segment.clone().into_iter().collect(),
            })
        } else {
            return Ok(None);
        };
        let req = csi::GetCapacityRequest {
            // OPTIONAL: the capacity for any capability the plugin serves.
            volume_capabilities: Vec::new(),
            parameters: query.parameters.clone().into_iter().collect(),
            accessible_topology: topology,
        };
        let mut client = self.client.clone();
        let _permit = self.permits.acquire().await.expect("never closed");
        let r = client
            .get_capacity(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("GetCapacity", s))?
            .into_inner();
        // "available_capacity ... This field is REQUIRED and MUST NOT be negative": a
        // negative figure is the plugin's mistake, read as nothing left. The two sizes are
        // OPTIONAL wrappers: absent is unknown, never 0.
        let size = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(Some(csivol_api::CapacitySample {
            query: query.clone(),
            available_bytes: size(r.available_capacity),
            maximum_volume_size: r.maximum_volume_size.map(size),
            minimum_volume_size: r.minimum_volume_size.map(size),
        }))
    }

    /// Runs one controller operation and returns the report of its success: the table of
    /// kinds, each row the file that runs it.
    pub async fn run(&self, op: &ControllerOp) -> Result<Report, CallError> {
        let _permit = self.permits.acquire().await.expect("never closed");
        let c = Call { plugin: self, op };
        match &op.kind {
            ControllerOpKind::Publish { .. } => attach::run(&c).await,
            ControllerOpKind::Unpublish { .. } => detach::run(&c).await,
            ControllerOpKind::Create { .. } => create::run(&c).await,
            ControllerOpKind::Delete { .. } => delete::run(&c).await,
            ControllerOpKind::Expand { .. } => expand::run(&c).await,
            ControllerOpKind::Modify { .. } => modify::run(&c).await,
            ControllerOpKind::CreateSnapshot { .. } => snapshot::create(&c).await,
            ControllerOpKind::DeleteSnapshot { .. } => snapshot::delete(&c).await,
            ControllerOpKind::CreateGroupSnapshot { .. } => group_snapshot::create(&c).await,
            ControllerOpKind::DeleteGroupSnapshot { .. } => group_snapshot::delete(&c).await,
            ControllerOpKind::ValidateVolume { .. } => validate::run(&c).await,
            ControllerOpKind::FindSnapshot { .. } => snapshot::find(&c).await,
        }
    }
}

/// One operation on its way to the plugin: what a kind's file needs to make its calls.
struct Call<'a> {
    plugin: &'a ControllerPlugin,
    op: &'a ControllerOp,
}

impl Call<'_> {
    /// The Controller service's client.
    fn client(&self) -> csi::controller_client::ControllerClient<PluginConnection> {
        self.plugin.client.clone()
    }

    /// The GroupController client, or the error a plugin without the service gives.
    fn group_client(
        &self,
        call: &'static str,
    ) -> Result<csi::group_controller_client::GroupControllerClient<PluginConnection>, CallError>
    {
        self.plugin.group.clone().ok_or_else(|| {
            CallError::new(
                call,
                tonic::Status::unimplemented(
                    "the plugin does not list GROUP_CONTROLLER_SERVICE in GetPluginCapabilities",
                ),
            )
        })
    }

    /// `req` with the plugin's deadline for controller calls.
    fn request<T>(&self, req: T) -> tonic::Request<T> {
        with_deadline(req, self.plugin.timeout)
    }

    fn capabilities(&self) -> &ControllerCapabilities {
        &self.plugin.capabilities
    }
}
