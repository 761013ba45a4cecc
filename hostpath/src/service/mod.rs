//! The CSI Identity, Controller and Node services of the reference plugin.
//!
//! The plugin is deliberately strict: it checks every required field, refuses lifecycle
//! violations with the codes the spec's error tables name, and is idempotent, so that a
//! caller that gets the protocol wrong is caught here rather than forgiven.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use csivol_api::domain::VolumeCapability;
use csivol_csi::csi::v1 as csi;
use tonic::{Code, Response, Status};

use crate::faults::{CallLog, Faults, Rpc};
use crate::mounts::MountMode;
use crate::store::node::NodeState;
use crate::store::{AttachmentRecord, Backend, Segment, VolumeRecord};

/// Delegates an RPC to `Plugin::$method` through `Plugin::call`, logging `$id` as its volume.
macro_rules! delegate {
    ($self:ident, $request:ident, $rpc:ident, $method:ident, $id:expr) => {{
        let req = $request.into_inner();
        let id: String = $id(&req);
        $self
            .0
            .call(Rpc::$rpc, id, move |p| {
                // The Controller and GroupController calls of a plugin without the
                // Controller service are a caller's mistake.
                if !p.cfg.features.controller_service {
                    return Err(tonic::Status::unimplemented(
                        "this plugin does not advertise CONTROLLER_SERVICE",
                    ));
                }
                p.$method(req)
            })
            .await
    }};
}

mod controller;
mod groups;
mod identity;
mod modify;
mod mount_group;
mod node;
mod provision;
mod snapshots;

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
    pub shape: NodeShape,
    pub controller_publish: bool,
    pub max_volumes_per_node: u32,
    pub fsync: bool,
    /// `--publish-without-mount`: NodePublishVolume succeeds and does nothing.
    pub publish_without_mount: bool,
    pub features: Features,
    /// `--topology`: this node's segment; empty without topology.
    pub topology: Segment,
    /// `--capacity`: the pool's size in bytes.
    pub capacity: Option<i64>,
    /// `--segment-capacity`: the most GetCapacity reports for a topology lying in a segment.
    pub segment_capacity: Vec<(Segment, i64)>,
    pub expansion: Expansion,
    /// `--snapshot-ready-after`: how long after it is cut a snapshot becomes ready to use.
    pub snapshot_ready_after: std::time::Duration,
    /// `--list-page`: the most entries a listing page holds (0: the caller's `max_entries`).
    pub list_page: usize,
    /// `--stale-snapshot-tokens`: how many more ListSnapshots with a token are ABORTED.
    pub stale_snapshot_tokens: Arc<std::sync::atomic::AtomicU32>,
}

impl Config {
    /// The page size a listing asked for `max_entries` gets: `--list-page` makes it
    /// smaller, never larger.
    pub fn page_size(&self, max_entries: i32) -> i32 {
        let ours = i32::try_from(self.list_page).unwrap_or(i32::MAX);
        match (max_entries, ours) {
            // A negative `max_entries` is refused as it is.
            (m, 0) => m,
            (m, _) if m < 0 => m,
            (0, p) => p,
            (m, p) => m.min(p),
        }
    }
}

/// What NodeStageVolume and NodePublishVolume make on the node (`--node-shape`). The CSI
/// spec allows each: the volume "MAY be staged" at `staging_target_path`, and the plugin
/// "SHALL place the mounted directory at target_path" (block: "the block device") without
/// saying where it comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NodeShape {
    /// The volume mounted at the staging path, each target bound from the staging (block
    /// volumes: a loop device attached at stage, its node bound at each target).
    #[default]
    StageMount,
    /// Nothing made at the staging path; each target bound from the plugin's own copy of
    /// the volume (block volumes: the device node), as the Kubernetes reference driver
    /// (csi-driver-host-path) does.
    StageNothing,
    /// The volume mounted at the staging path, each target bound from a directory inside
    /// it (`published/`), as plugins that share one mount between volumes do.
    PublishSubdir,
    /// Block volumes: the device node bound onto a file inside the staging directory
    /// (`device`), each target bound from it, as Ceph's RBD plugin does. File-system
    /// volumes as `stage-mount`.
    StageDevice,
}

/// The directory inside the staging that `publish-subdir` binds at each target.
pub const PUBLISH_SUBDIR: &str = "published";
/// The file inside the staging directory that `stage-device` binds the device onto.
pub const STAGED_DEVICE: &str = "device";

/// An optional capability, named for `--disable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Feature {
    /// LIST_VOLUMES (and with it LIST_VOLUMES_PUBLISHED_NODES).
    ListVolumes,
    /// LIST_VOLUMES_PUBLISHED_NODES only.
    ListVolumesPublishedNodes,
    /// GET_CAPACITY.
    GetCapacity,
    /// EXPAND_VOLUME on the controller and the node, and the VolumeExpansion capability.
    ExpandVolume,
    /// EXPAND_VOLUME on the node only (ControllerExpandVolume then needs no node step).
    NodeExpandVolume,
    /// EXPAND_VOLUME on the controller only: the node's NodeExpandVolume then grows the
    /// volume in storage itself (a node-only plugin, as local volumes are).
    ControllerExpandVolume,
    /// CREATE_DELETE_SNAPSHOT (and with it LIST_SNAPSHOTS).
    Snapshots,
    /// LIST_SNAPSHOTS only.
    ListSnapshots,
    /// CLONE_VOLUME.
    CloneVolume,
    /// GET_VOLUME_STATS on the node.
    VolumeStats,
    /// VOLUME_CONDITION on the node and the controller.
    VolumeCondition,
    /// GET_VOLUME (ControllerGetVolume).
    GetVolume,
    /// Block volumes (the block access type).
    Block,
    /// MODIFY_VOLUME (ControllerModifyVolume, and `mutable_parameters` in CreateVolume).
    ModifyVolume,
    /// GET_SNAPSHOT (GetSnapshot).
    GetSnapshot,
    /// The GroupController service with CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT.
    GroupSnapshots,
    /// VOLUME_MOUNT_GROUP on the node: a published volume's root gets the group the CO
    /// passes in `volume_mount_group`.
    VolumeMountGroup,
    /// The CONTROLLER_SERVICE plugin capability: a node-only plugin, whose Controller
    /// calls are refused with UNIMPLEMENTED (a CO must not make them).
    ControllerService,
}

/// Which optional capabilities this instance has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::struct_excessive_bools)] // reason: one switch per capability, as the flags are
pub struct Features {
    pub list_volumes: bool,
    pub published_nodes: bool,
    pub get_capacity: bool,
    pub expand: bool,
    pub controller_expand: bool,
    pub node_expand: bool,
    pub snapshots: bool,
    pub list_snapshots: bool,
    pub clone: bool,
    pub volume_stats: bool,
    pub volume_condition: bool,
    pub get_volume: bool,
    pub block: bool,
    pub modify_volume: bool,
    pub get_snapshot: bool,
    pub group_snapshots: bool,
    pub volume_mount_group: bool,
    pub controller_service: bool,
}

impl Features {
    /// Every capability except the ones named, and those that depend on them.
    pub fn without(disabled: &[Feature]) -> Self {
        let off = |f| disabled.contains(&f);
        let list_volumes = !off(Feature::ListVolumes);
        let expand = !off(Feature::ExpandVolume);
        let snapshots = !off(Feature::Snapshots);
        Self {
            list_volumes,
            published_nodes: list_volumes && !off(Feature::ListVolumesPublishedNodes),
            get_capacity: !off(Feature::GetCapacity),
            expand,
            controller_expand: expand && !off(Feature::ControllerExpandVolume),
            node_expand: expand && !off(Feature::NodeExpandVolume),
            snapshots,
            list_snapshots: snapshots && !off(Feature::ListSnapshots),
            clone: !off(Feature::CloneVolume),
            volume_stats: !off(Feature::VolumeStats),
            volume_condition: !off(Feature::VolumeCondition),
            get_volume: !off(Feature::GetVolume),
            block: !off(Feature::Block),
            modify_volume: !off(Feature::ModifyVolume),
            // Both read snapshots, which a plugin without CREATE_DELETE_SNAPSHOT has none of.
            get_snapshot: snapshots && !off(Feature::GetSnapshot),
            group_snapshots: snapshots && !off(Feature::GroupSnapshots),
            volume_mount_group: !off(Feature::VolumeMountGroup),
            controller_service: !off(Feature::ControllerService),
        }
    }
}

/// `--expansion`: the VolumeExpansion plugin capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Expansion {
    /// Volumes may be expanded while published.
    Online,
    /// ControllerExpandVolume is refused (FAILED_PRECONDITION) while a node has the volume.
    Offline,
}

/// State shared by the three services.
#[derive(Debug)]
pub struct Plugin {
    cfg: Config,
    backend: Backend,
    node: Mutex<NodeState>,
    state_dir: PathBuf,
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
        let node = NodeState::load(state_dir, cfg.fsync)?;
        backend.announce_node(
            &cfg.node_id,
            &crate::store::NodeRecord {
                max_volumes_per_node: cfg.max_volumes_per_node,
                topology: cfg.topology.clone(),
            },
        )?;
        let calls = CallLog::open(&state_dir.join("calls.jsonl"))?;
        Ok(Self {
            cfg,
            backend,
            node: Mutex::new(node),
            state_dir: state_dir.to_owned(),
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
        self.call_on(rpc, volume_id, None, f).await
    }

    /// [`Plugin::call`] for a call on a target path (a publication), which the call log
    /// names.
    async fn call_on<T, F>(
        self: &Arc<Self>,
        rpc: Rpc,
        volume_id: String,
        target_path: Option<String>,
        f: F,
    ) -> Result<Response<T>, Status>
    where
        T: Send + 'static,
        F: FnOnce(&Plugin) -> Result<T, Status> + Send + 'static,
    {
        let started_ms = crate::faults::now_ms();
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
        let called = crate::faults::Called {
            rpc,
            volume_id: &volume_id,
            node_id: &self.cfg.node_id,
            target_path: target_path.as_deref(),
            started_ms,
        };
        self.calls.record(&called, code, in_flight.concurrent);
        if code != Code::Ok {
            tracing::info!(%rpc, volume_id, ?code, "call refused");
        }
        result.map(Response::new)
    }

    /// Saves what a call changed: one volume's part of the node's state.
    fn save_node(&self, state: &NodeState, volume_id: &str) -> Result<(), Status> {
        state
            .save_volume(&self.state_dir, volume_id, self.cfg.fsync)
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

    /// A volume condition injected for this instance with `<state-dir>/abnormal/<id>`.
    fn injected_condition(&self, volume_id: &str) -> Option<csi::VolumeCondition> {
        let message = std::fs::read_to_string(self.abnormal_dir.join(volume_id)).ok()?;
        Some(csi::VolumeCondition {
            abnormal: true,
            message: message.trim().to_owned(),
        })
    }

    /// This node's attach limit now: the storage system's (`limits/<node>` in the
    /// backend) where it changed, else `--max-volumes-per-node`.
    fn node_limit(&self) -> Result<u32, Status> {
        self.backend
            .node_limit(&self.cfg.node_id, self.cfg.max_volumes_per_node)
            .map_err(|e| internal(e, "read the node's attach limit"))
    }

    fn lock(&self) -> Result<crate::store::BackendLock, Status> {
        self.backend
            .lock()
            .map_err(|e| internal(e, "lock the backend"))
    }

    /// Converts and checks a volume capability: block access only where enabled.
    fn capability(
        &self,
        cap: Option<&csi::VolumeCapability>,
        field: &'static str,
    ) -> Result<VolumeCapability, Status> {
        let cap = cap.ok_or_else(|| Status::invalid_argument(format!("`{field}` is required")))?;
        let cap = VolumeCapability::try_from(cap)
            .map_err(|e| Status::invalid_argument(format!("`{field}`: {e}")))?;
        if cap.access_type.is_block() && !self.cfg.features.block {
            return Err(Status::invalid_argument(
                "block access is not supported by this csivol-hostpath (started with `--disable block`); \
                 use a file-system (mount) capability",
            ));
        }
        Ok(cap)
    }

    fn capabilities(
        &self,
        caps: &[csi::VolumeCapability],
    ) -> Result<Vec<VolumeCapability>, Status> {
        if caps.is_empty() {
            return Err(Status::invalid_argument(
                "`volume_capabilities` is required",
            ));
        }
        caps.iter()
            .map(|c| self.capability(Some(c), "volume_capabilities"))
            .collect()
    }
}

/// Why `cap` cannot be used with `volume`: block access to a file-system volume or the
/// reverse. Each call maps this to the code its error table names.
fn kind_mismatch(volume: &VolumeRecord, cap: &VolumeCapability) -> Option<String> {
    match (volume.block, cap.access_type.is_block()) {
        (true, false) => Some(format!(
            "volume `{}` is a block volume; use a block capability",
            volume.id
        )),
        (false, true) => Some(format!(
            "volume `{}` is a file-system volume; use a mount capability",
            volume.id
        )),
        _ => None,
    }
}

/// The required and limit bytes of a capacity range (0: unset), checked.
fn capacity_range(range: Option<&csi::CapacityRange>) -> Result<(i64, i64), Status> {
    match range {
        Some(r) if r.required_bytes < 0 || r.limit_bytes < 0 => Err(Status::invalid_argument(
            "`capacity_range` must not be negative",
        )),
        Some(r) if r.limit_bytes > 0 && r.limit_bytes < r.required_bytes => {
            Err(Status::out_of_range(format!(
                "`capacity_range`: limit_bytes {} is below required_bytes {}",
                r.limit_bytes, r.required_bytes
            )))
        }
        Some(r) => Ok((r.required_bytes, r.limit_bytes)),
        None => Ok((0, 0)),
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

/// Checks a CO-chosen name (of a volume or snapshot): present, without the control
/// characters the spec bans, and short enough to be a file name in the backend.
fn check_name(name: &str) -> Result<(), Status> {
    require(name, "name")?;
    let banned = |c: char| matches!(c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}'..='\u{9f}');
    if name.chars().any(banned) {
        return Err(Status::invalid_argument(
            "`name` contains a control character the spec bans (U+0000-U+0008, U+000B, U+000C, \
             U+000E-U+001F, U+007F-U+009F)",
        ));
    }
    if crate::store::file_safe(name).len() > 240 {
        return Err(Status::invalid_argument(
            "`name` is too long for csivol-hostpath (at most 120 bytes of non-alphanumeric text)",
        ));
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

/// A volume created by CreateVolume carries context the node side must be given back: the
/// spec has the CO pass it to publishing calls. The controller does not need it (it reads
/// the volume's record), so there an absent context is accepted and only a wrong one is
/// refused ([`check_given_context`]).
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

/// A volume context, where it is OPTIONAL, must match the volume's when it is given.
fn check_given_context(
    volume: &VolumeRecord,
    given: &std::collections::HashMap<String, String>,
) -> Result<(), Status> {
    if given.is_empty() {
        return Ok(());
    }
    let given: BTreeMap<_, _> = given.clone().into_iter().collect();
    if given != volume.context {
        return Err(Status::invalid_argument(format!(
            "`volume_context` does not match the one CreateVolume returned for volume `{}`",
            volume.id
        )));
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
