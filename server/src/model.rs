//! Rows of the cluster state as Rust values, and their API forms. How a store keeps them
//! is its own business (`super::store`; SQLite: `store/sqlite/rows.rs`).

use std::collections::BTreeMap;
use std::str::FromStr;

use csivol_api::domain::{AccessMode, AccessType, PublishContext, Topology, VolumeCapability};
use csivol_api::{
    self as api, AttachmentState, AttachmentStatus, ClaimMode, ClaimState, Eligibility, NodeStatus,
    Role, VolumeState,
};

use csivol_rules::kinds::OpKind;

mod linger;
pub mod listing;
mod times;

pub use linger::{LingerRow, show_lingers};
pub use times::time;

pub fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("plain data serialises")
}

/// Where a volume's own lifecycle stands (as opposed to its claims).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    Ready,
    Creating,
    Deleting,
    Failed,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Creating => "creating",
            Self::Deleting => "deleting",
            Self::Failed => "failed",
        }
    }
}

impl FromStr for Lifecycle {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ready" => Self::Ready,
            "creating" => Self::Creating,
            "deleting" => Self::Deleting,
            "failed" => Self::Failed,
            other => return Err(format!("unknown volume lifecycle `{other}`")),
        })
    }
}

#[derive(Clone, Debug)]
pub struct VolumeRow {
    pub name: String,
    pub plugin: String,
    pub external_id: String,
    pub access_mode: AccessMode,
    pub attachment: api::Attachment,
    pub fs_type: String,
    pub mount_flags: Vec<String>,
    pub context: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
    pub secrets: BTreeMap<String, String>,
    pub capacity_bytes: Option<u64>,
    pub lifecycle: Lifecycle,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
    /// An expansion in progress or failed (`csivol volume expand`).
    pub expansion: Option<api::Expansion>,
    /// The segments the volume is accessible from (empty: every node).
    pub accessible_topology: Vec<Topology>,
    /// What `volume create` asked CreateVolume for.
    pub topology_request: Option<api::TopologyRequest>,
    /// The mutable parameters the volume has.
    pub mutable_parameters: BTreeMap<String, String>,
    /// A change of them asked for and not applied yet, or refused.
    pub modification: Option<api::Modification>,
}

impl VolumeRow {
    pub fn capability(&self) -> VolumeCapability {
        let access_type = match self.attachment {
            api::Attachment::FileSystem => AccessType::FileSystem {
                fs_type: self.fs_type.clone(),
                mount_flags: self.mount_flags.clone(),
            },
            api::Attachment::BlockDevice => AccessType::BlockDevice,
        };
        VolumeCapability {
            access_type,
            access_mode: self.access_mode,
        }
    }

    /// The volume's state, given its claims and attachments.
    pub fn state(&self, claims: &[ClaimRow], attachments: &[AttachmentRow]) -> VolumeState {
        volume_state(self.lifecycle, claims, attachments)
    }

    /// The API's view of the volume, taking the row: its strings and maps move into the
    /// answer instead of being copied (a listing shapes every volume once), and of its
    /// secrets only the names are kept.
    pub fn into_api(self, claims: &[ClaimRow], attachments: &[AttachmentRow]) -> api::Volume {
        api::Volume {
            state: self.state(claims, attachments),
            accepts_claims: accepts_claims(self.lifecycle, self.access_mode, claims),
            namespace: api::namespace_of(&self.name).to_owned(),
            name: api::split_key(&self.name).1.to_owned(),
            plugin: self.plugin,
            external_id: self.external_id,
            access_mode: self.access_mode,
            attachment: self.attachment,
            capacity_bytes: self.capacity_bytes,
            expansion: self.expansion,
            mutable_parameters: self.mutable_parameters,
            modification: self.modification,
            // Kept beside the row (`volume_mounts`): the caller that read them adds them.
            claim_mount_flags: Vec::new(),
            selinux_context: None,
            ownership: None,
            availability: None,
            job: None,
            labels: BTreeMap::new(),
            fs_type: self.fs_type,
            mount_flags: self.mount_flags,
            context: self.context,
            parameters: self.parameters,
            secret_keys: self.secrets.into_keys().collect(),
            accessible_topology: self.accessible_topology,
            topology_request: self.topology_request,
            error: self.error,
            claims: claims_to_api(claims),
            attachments: attachments.iter().map(AttachmentRow::to_api).collect(),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            index: self.modify_index,
        }
    }
}

/// A volume's state from its lifecycle, claims and attachments.
pub fn volume_state(
    lifecycle: Lifecycle,
    claims: &[ClaimRow],
    attachments: &[AttachmentRow],
) -> VolumeState {
    match lifecycle {
        Lifecycle::Creating => return VolumeState::Creating,
        Lifecycle::Deleting => return VolumeState::Deleting,
        Lifecycle::Failed => return VolumeState::Failed,
        Lifecycle::Ready => {}
    }
    if claims.iter().any(|c| c.state == ClaimState::Blocked)
        || attachments
            .iter()
            .any(|a| a.state == AttachmentState::Blocked)
    {
        VolumeState::Blocked
    } else if claims.iter().all(|c| c.state == ClaimState::Queued) && attachments.is_empty() {
        VolumeState::Free
    } else {
        VolumeState::Attached
    }
}

/// Whether a volume takes a new claim now, by its access mode and the claims it holds
/// (blocked ones included).
pub fn accepts_claims(lifecycle: Lifecycle, access_mode: AccessMode, claims: &[ClaimRow]) -> bool {
    lifecycle == Lifecycle::Ready && {
        let held: Vec<csivol_rules::claims::Held<'_>> = claims
            .iter()
            .filter(|c| c.state != ClaimState::Queued)
            .map(|c| csivol_rules::claims::Held {
                alloc: &c.alloc,
                node: &c.node,
                mode: c.mode,
                state: c.state,
            })
            .collect();
        csivol_rules::claims::accepts_new_claims(access_mode, &held)
    }
}

/// A volume's claims, in queue order (created_at, alloc), with queue positions.
pub fn claims_to_api(claims: &[ClaimRow]) -> Vec<api::Claim> {
    let mut position = 0;
    claims
        .iter()
        .map(|c| {
            let mut a = c.to_api();
            if c.state == ClaimState::Queued {
                position += 1;
                a.queue_position = Some(position);
            }
            a
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRow {
    pub volume: String,
    pub alloc: String,
    pub node: String,
    pub mode: ClaimMode,
    pub state: ClaimState,
    pub target_path: Option<String>,
    /// Its last error as shown: a step's, or while no later error replaced it, its drift
    /// in words ([`Drift::said`]).
    pub error: Option<String>,
    pub next_retry_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
    /// Found not mounted as its plugin made it, and published again until repaired.
    pub drift: Option<Drift>,
    /// What the node says the claim waits for, since when, and its readiness timeout.
    pub waiting: Option<(String, i64, i64)>,
    /// The plugin's abnormal volume condition, if any.
    pub condition: Option<String>,
    pub ttl_ms: Option<i64>,
    pub expires_at: Option<i64>,
    pub labels: BTreeMap<String, String>,
    /// Blocked while it was being released: released, not resumed, when its node returns.
    pub release_pending: bool,
    /// Its group and how it is applied (empty below the schema that records it).
    pub mount: api::ClaimMount,
}

impl ClaimRow {
    pub fn to_api(&self) -> api::Claim {
        api::Claim {
            volume: api::split_key(&self.volume).1.to_owned(),
            namespace: api::namespace_of(&self.volume).to_owned(),
            alloc: self.alloc.clone(),
            node: self.node.clone(),
            mode: self.mode,
            state: self.state,
            target_path: self.target_path.clone(),
            error: self.error.clone(),
            next_retry_at: self.next_retry_at.map(time),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            index: self.modify_index,
            waiting: self
                .waiting
                .as_ref()
                .map(|(reason, since, timeout)| api::ClaimWaiting {
                    reason: reason.clone(),
                    since: time(*since),
                    timeout_ms: (*timeout).max(0) as u64,
                }),
            condition: self.condition.clone(),
            drift: self.drift.as_ref().map(Drift::to_api),
            expires_at: self.expires_at.map(time),
            ttl_ms: self.ttl_ms.map(|t| t.max(0) as u64),
            queue_position: None,
            usage: None,
            pool: None,
            labels: self.labels.clone(),
            mount: self.mount.clone(),
        }
    }
}

/// A claim's drift as stored (the claim's `drift` column, JSON): what found it, when
/// (unix ms) and why.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Drift {
    pub found: api::DriftFound,
    pub at: i64,
    pub reason: String,
}

/// How a claim's error says its drift; before drift was a field of its own, the error was
/// where it was kept.
const DRIFT_SAID: &str = "drift: ";

impl Drift {
    pub fn to_api(&self) -> api::ClaimDrift {
        api::ClaimDrift {
            found: self.found,
            since: time(self.at),
            reason: self.reason.clone(),
        }
    }

    /// The drift in words, as the claim's error shows it: `drift: WHY`.
    pub fn said(&self) -> String {
        format!("{DRIFT_SAID}{}", self.reason)
    }

    /// The drift a claim's error says in that form, as the schema before the field kept
    /// it (with the etcd store, until `upgrade finalize`): found by what its reason names
    /// (csivol's own words when a registration or a return found it, the agent's
    /// otherwise), recorded at the claim's last change `at`.
    pub fn from_said(error: &str, at: i64) -> Option<Self> {
        let reason = error.strip_prefix(DRIFT_SAID)?;
        let found = if reason.starts_with("node ")
            && reason.ends_with(" registered without it mounted")
        {
            api::DriftFound::Registration
        } else if reason.starts_with("node ") && reason.ends_with(" came back without it mounted") {
            api::DriftFound::Return
        } else {
            api::DriftFound::Check
        };
        Some(Self {
            found,
            at,
            reason: reason.to_owned(),
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachmentRow {
    pub volume: String,
    pub node: String,
    pub state: AttachmentState,
    pub publish_context: PublishContext,
    pub forced: bool,
    pub error: Option<String>,
    pub next_retry_at: Option<i64>,
    pub updated_at: i64,
}

impl AttachmentRow {
    pub fn to_api(&self) -> AttachmentStatus {
        AttachmentStatus {
            volume: self.volume.clone(),
            node: self.node.clone(),
            state: self.state,
            publish_context: self.publish_context.clone(),
            forced: self.forced,
            error: self.error.clone(),
            next_retry_at: self.next_retry_at.map(time),
            updated_at: time(self.updated_at),
            linger: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct NodeRow {
    pub name: String,
    pub status: NodeStatus,
    pub registered_at: i64,
    pub lost_at: Option<i64>,
    pub fence_after_ms: Option<i64>,
    pub fenced_at: Option<i64>,
    pub eligibility: Eligibility,
    /// When the server last asked the node to read its attach limits again (0: never).
    pub limits_refresh_at: i64,
    /// A planned stop: when its agent said it stopped, and whether it took its volumes down.
    pub stopped_at: Option<i64>,
    pub stop_took_down: bool,
}

/// What the server knows of a plugin on one node.
#[derive(Clone, Debug)]
pub struct NodePluginRow {
    pub plugin: String,
    pub csi_node_id: Option<String>,
    pub max_volumes: u32,
    pub node_service: bool,
    pub controller: bool,
    /// The node's segments as the plugin reports them (empty: none).
    pub topology: Topology,
    /// The last change of `max_volumes` (NodeGetInfo read again).
    pub limit_change: Option<LimitChangeRow>,
    /// When the limit was last read again while the node ran.
    pub limit_read_at: Option<i64>,
    /// How the node's agent checks the plugin's volumes ready, as it registered it.
    pub ready_check: Option<String>,
    /// What the agent last observed the plugin make for a claim.
    pub observed: Option<StoredObservation>,
    /// The plugin's VOLUME_MOUNT_GROUP node capability, as registered.
    pub volume_mount_group: bool,
    /// The plugin's STAGE_UNSTAGE_VOLUME node capability, as registered.
    pub stage_unstage: bool,
}

/// What a node's agent last observed a plugin make for a claim, as `node_plugins.observed`
/// keeps it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredObservation {
    pub volume: String,
    pub alloc: String,
    pub at_ms: i64,
    #[serde(flatten)]
    pub shape: csivol_api::ObservedShape,
}

impl StoredObservation {
    pub fn to_api(&self) -> csivol_api::PluginObservation {
        csivol_api::PluginObservation {
            volume: self.volume.clone(),
            alloc: self.alloc.clone(),
            at: time(self.at_ms),
            shape: self.shape.clone(),
        }
    }
}

/// A node plugin's attach limit changed, as stored (`node_plugins.limit_change`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitChangeRow {
    pub from: u32,
    pub to: u32,
    pub at_ms: i64,
    pub reason: String,
}

impl LimitChangeRow {
    pub fn to_api(&self) -> csivol_api::LimitChange {
        csivol_api::LimitChange {
            from: self.from,
            to: self.to,
            at: time(self.at_ms),
            reason: self.reason.clone(),
        }
    }

    /// `its limit was lowered from 3 to 1 at T (NodeGetInfo read again: read every 5m)`.
    pub fn describe(&self) -> String {
        use csivol_api::limit_text;
        format!(
            "its limit was {} from {} to {} at {} (NodeGetInfo read again: {})",
            self.to_api().direction(),
            limit_text(self.from),
            limit_text(self.to),
            time(self.at_ms),
            self.reason
        )
    }
}

/// The `not_before` of an operation held until its volume's release has finished: never
/// due until the lifecycle releases it (`lifecycle::after_release`). Past every time a
/// clock can show, so every query for due operations passes it over as it is.
pub const HELD_FOR_RELEASE: i64 = i64::MAX;

/// A controller operation as stored.
#[derive(Clone, Debug)]
pub struct OpRow {
    pub id: i64,
    pub kind: OpKind,
    pub plugin: String,
    pub volume: String,
    pub node: Option<String>,
    pub host: Option<String>,
    pub attempt: u32,
    pub not_before: i64,
    pub payload: String,
    pub created_at: i64,
}

impl OpRow {
    /// Whether it waits for its volume's release to finish (queued with `--wait` while only
    /// that release stood in its way).
    pub fn held(&self) -> bool {
        self.not_before == HELD_FOR_RELEASE
    }
}

/// A snapshot as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRow {
    pub name: String,
    pub volume: String,
    pub plugin: String,
    pub snapshot_id: String,
    pub state: api::SnapshotState,
    pub ready_to_use: bool,
    pub size_bytes: u64,
    pub creation_time: Option<i64>,
    pub parameters: BTreeMap<String, String>,
    pub error: Option<String>,
    /// The group snapshot it is a member of.
    pub group: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
}

impl SnapshotRow {
    pub fn to_api(&self) -> api::Snapshot {
        api::Snapshot {
            name: api::split_key(&self.name).1.to_owned(),
            namespace: api::namespace_of(&self.name).to_owned(),
            volume: api::split_key(&self.volume).1.to_owned(),
            plugin: self.plugin.clone(),
            snapshot_id: self.snapshot_id.clone(),
            state: self.state,
            ready_to_use: self.ready_to_use,
            size_bytes: self.size_bytes,
            creation_time: self.creation_time.map(time),
            parameters: self.parameters.clone(),
            error: self.error.clone(),
            group: self
                .group
                .as_deref()
                .map(|g| api::split_key(g).1.to_owned()),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            index: self.modify_index,
            // Known only from its operation: `lifecycle::snapshots` fills it in.
            after_release: false,
        }
    }
}

/// A group snapshot as stored; its members are [`SnapshotRow`]s naming it in `group`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSnapshotRow {
    pub name: String,
    pub plugin: String,
    /// csivol volume names, in the order asked.
    pub volumes: Vec<String>,
    pub group_snapshot_id: String,
    pub state: api::SnapshotState,
    pub ready_to_use: bool,
    pub creation_time: Option<i64>,
    pub parameters: BTreeMap<String, String>,
    pub error: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub modify_index: u64,
}

impl GroupSnapshotRow {
    pub fn to_api(&self, members: &[SnapshotRow]) -> api::GroupSnapshot {
        api::GroupSnapshot {
            name: api::split_key(&self.name).1.to_owned(),
            namespace: api::namespace_of(&self.name).to_owned(),
            plugin: self.plugin.clone(),
            volumes: self
                .volumes
                .iter()
                .map(|v| api::split_key(v).1.to_owned())
                .collect(),
            group_snapshot_id: self.group_snapshot_id.clone(),
            state: self.state,
            ready_to_use: self.ready_to_use,
            creation_time: self.creation_time.map(time),
            parameters: self.parameters.clone(),
            members: members.iter().map(SnapshotRow::to_api).collect(),
            error: self.error.clone(),
            created_at: time(self.created_at),
            updated_at: time(self.updated_at),
            index: self.modify_index,
        }
    }
}

/// A bearer token as stored: its hash, never its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRow {
    pub id: String,
    pub hash: String,
    pub role: Role,
    pub node: Option<String>,
    /// Plugins whose controller a node token's node may host.
    pub controllers: Vec<String>,
    pub name: Option<String>,
    /// What it may do and touch when that is more or less than its role's preset (none:
    /// the preset, over every volume; always none below the schema that keeps scopes).
    pub scope: Option<csivol_api::TokenScope>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
}

impl TokenRow {
    /// What the token may do and touch.
    pub fn effective_scope(&self) -> csivol_api::TokenScope {
        self.scope
            .clone()
            .unwrap_or_else(|| csivol_api::TokenScope::preset(self.role))
    }
}

/// A node's fence facts as stored: the labels an operator set (`csivol node label`), those
/// its agent reported, and the policy's failed attempts.
#[derive(Clone, Debug, Default)]
pub struct NodeFenceRow {
    pub operator_labels: BTreeMap<String, String>,
    pub reported_labels: BTreeMap<String, String>,
    pub failures: u32,
    pub error: Option<String>,
    pub failed_at: Option<i64>,
}

/// One node's registration of a plugin, with the node's status, for the plugin list.
#[derive(Clone, Debug)]
pub struct PluginNodeRow {
    pub plugin: String,
    pub node: String,
    pub status: NodeStatus,
    pub registration: api::PluginRegistration,
    pub node_service: bool,
    pub controller: bool,
    pub stage_unstage: bool,
    pub topology: Topology,
    /// What the node's agent last observed the plugin make for a claim.
    pub observed: Option<StoredObservation>,
}

/// How many rows are in each state, for the metrics' gauges.
#[derive(Clone, Debug, Default)]
pub struct StateCounts {
    pub claims: Vec<(String, i64)>,
    pub nodes: Vec<(String, i64)>,
    /// `queued` (no host yet) and `in_flight`.
    pub ops: Vec<(String, i64)>,
    pub nodes_fence_failing: i64,
    pub claims_with_error: i64,
    pub claims_abnormal: i64,
    /// Volumes blocked on a lost node: volume, node, and since when (the node's loss).
    pub blocked: Vec<(String, String, i64)>,
    /// Claims on their way to ready or gone (`pending`, `attaching`, `publishing`,
    /// `releasing`): volume, alloc, state, and the claim's last write.
    pub unsettled: Vec<(String, String, String, i64)>,
}

/// Controller operations of one plugin and kind that no host holds, counted by whether
/// they are due now (queued, or their retry's backoff over) or still backing off.
#[derive(Clone, Debug)]
pub struct WaitingOps {
    pub plugin: String,
    pub kind: String,
    pub count: u32,
    /// The earliest time one of them became due (queued, or due again after a backoff).
    pub since: i64,
    pub due: bool,
}

/// A controller operation handed to a controller host.
#[derive(Clone, Debug)]
pub struct RunningOpRow {
    pub id: i64,
    pub kind: String,
    pub volume: String,
    /// The node it is for, where it is for one (attach, detach).
    pub node: Option<String>,
    pub host: String,
    /// When it became due (queued, or due again after a backoff).
    pub since: i64,
    pub assigned_at: Option<i64>,
}

/// A fence method's run, as recorded.
#[derive(Clone, Debug)]
pub struct NewFence<'a> {
    pub node: &'a str,
    pub at: i64,
    pub method: &'a str,
    pub command: &'a [String],
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    pub output: &'a str,
    pub duration_ms: u64,
    pub actor: &'a str,
    pub reason: &'a str,
    pub ok: bool,
}

/// A volume an operator took out of service (`volume_availability`): since `at` (unix
/// ms), by `actor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeAvailabilityRow {
    pub eligibility: Eligibility,
    pub reason: Option<String>,
    pub actor: String,
    pub at: i64,
}

impl VolumeAvailabilityRow {
    /// As the API shows it.
    pub fn to_api(&self) -> csivol_api::VolumeAvailability {
        csivol_api::VolumeAvailability {
            eligibility: self.eligibility,
            reason: self.reason.clone(),
            actor: self.actor.clone(),
            since: time(self.at),
        }
    }
}

/// A per-job volume (`job_volumes`): made for `alloc`'s claim on `node`, under the `name`
/// the job gave it; kept until `kept_until` (unix ms) after a failed job that asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobVolumeRow {
    pub volume: String,
    pub alloc: String,
    pub name: String,
    pub node: String,
    pub created_at: i64,
    pub kept_until: Option<i64>,
}

impl JobVolumeRow {
    /// As the API shows it.
    pub fn to_api(&self) -> csivol_api::JobVolume {
        csivol_api::JobVolume {
            alloc: self.alloc.clone(),
            name: self.name.clone(),
            node: self.node.clone(),
            kept_until: self.kept_until.map(time),
        }
    }
}

/// An operator's labels on a volume, or a pool's selector.
pub type Labels = BTreeMap<String, String>;

/// A pool (`pools`): the volumes whose labels carry every pair of `selector`; created at
/// `created_at` (unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRow {
    pub name: String,
    pub selector: BTreeMap<String, String>,
    pub linger_ms: Option<u64>,
    pub created_at: i64,
}

impl PoolRow {
    /// Whether volume `volume` (a key) with `labels` is a member: a volume of the pool's
    /// own namespace whose labels its selector takes. A pool never takes another
    /// namespace's volume, so no pool claim hands one team's volume to another's job.
    pub fn selects(&self, volume: &str, labels: &BTreeMap<String, String>) -> bool {
        csivol_api::namespace_of(volume) == csivol_api::namespace_of(&self.name)
            && !self.selector.is_empty()
            && self
                .selector
                .iter()
                .all(|(k, v)| labels.get(k).is_some_and(|l| l == v))
    }
}

/// A claim made from a pool (`pool_claims`): its member, alloc, node, cache key and why
/// that member; `released_at` once released (unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolClaimRow {
    pub id: i64,
    pub pool: String,
    pub volume: String,
    pub alloc: String,
    pub node: String,
    pub cache_key: Option<String>,
    pub choice: csivol_api::PoolChoice,
    pub why: String,
    pub at: i64,
    pub released_at: Option<i64>,
}

impl PoolClaimRow {
    /// As a claim's answer shows it.
    pub fn to_api(&self) -> csivol_api::ClaimPool {
        csivol_api::ClaimPool {
            // Named within its namespace, the claim's own.
            pool: csivol_api::split_key(&self.pool).1.to_owned(),
            choice: self.choice,
            why: self.why.clone(),
            cache_key: self.cache_key.clone(),
        }
    }
}

/// A claim waiting in a pool's line (`pool_waiters`): the claim as asked, who asked, when
/// it joined (unix ms), its lease and the member held for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolWaiterRow {
    pub pool: String,
    pub request: csivol_api::PoolClaimRequest,
    pub claimer: String,
    pub actor: String,
    pub bounded: bool,
    pub at: i64,
    pub expires_at: Option<i64>,
    pub held: Option<String>,
}
