//! The state store: the narrow interface the lifecycle code reads and writes the cluster
//! state through, its one implementation over SQLite (`sqlite`), and that SQLite state
//! replicated between several servers through etcd (`replicated`, `--store etcd`).
//!
//! The lifecycle (`super::lifecycle`) holds the decisions; a store holds typed rows
//! (`super::model`) and nothing else. A second backend implements these two traits:
//!
//! - [`Snapshot`]: reads over one consistent view of the rows: a read connection's
//!   snapshot, or the rows as the current transaction left them (reads inside a write see
//!   that write's own changes).
//! - [`Txn`]: one request's write transaction. Every change a request makes through it
//!   commits together or not at all (a failed request's changes are rolled back, whatever
//!   else commits beside it); the request is answered only once the commit is durable.
//!   `index()` is the change index the commit gets (every row written carries it as its
//!   `modify_index`), `now()` the request's clock. The writer names the keys it changes
//!   with [`Txn::touch`]; once committed, the store publishes them (with the index) to the
//!   blocking queries waiting on them (`super::watch::Hub`), and runs the
//!   [`Txn::after_commit`] hooks. A rolled-back request touches nothing and logs nothing.
//!
//! Each write method is one change to rows named by their keys (a claim by volume and
//! alloc, an attachment by volume and node, an operation by id), so that a backend that
//! writes by comparing revisions (etcd) knows what it read and what it changes. Methods
//! that say "if" change nothing when the row is not as stated, and say so in their result
//! where the caller needs it.
//!
//! Every SQL statement of the server lives below this folder (a test fails otherwise).
//! `sqlite` implements both traits: its writer thread (`sqlite::writer`) runs each request
//! in a savepoint of a group transaction with one fsync per group (`WriteCtx`).
//! `replicated` is not a second implementation: each server keeps the SQLite state as a
//! mirror of what etcd holds, and its writer thread drives the same group commit on that
//! mirror (`sqlite::writer::run_group`), committing the changed rows to etcd first.

use std::collections::BTreeMap;

use csivol_api::domain::PublishContext;
use csivol_api::{
    self as api, AttachmentState, ClaimState, NodeStatus, PluginRegistration, Topology,
};

use super::error::{ApiError, ApiResult};
use super::model::listing::VolumeChunk;
use super::model::{
    AttachmentRow, ClaimRow, GroupSnapshotRow, Lifecycle, NewFence, NodeFenceRow, NodePluginRow,
    NodeRow, OpRow, PluginNodeRow, RunningOpRow, SnapshotRow, StateCounts, TokenRow, VolumeRow,
    WaitingOps,
};
use super::model::{JobVolumeRow, LingerRow, PoolClaimRow};
use super::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};

pub mod namespaces;
pub mod replicated;
pub mod sqlite;

/// How the event log is pruned: all but the newest `keep` events go; beyond `bytes` (the
/// text of the events, as stored), the oldest go too, except those whose kind is one of
/// `kept_by_count` (a JSON array of kinds). At most `batch` go in one transaction.
#[derive(Debug, Clone, Copy)]
pub struct Pruning<'a> {
    pub keep: i64,
    pub bytes: i64,
    pub kept_by_count: &'a str,
    pub batch: usize,
}

/// Who made a claim, as the state records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimer {
    /// The schema does not record claimers yet (a rolling upgrade over etcd before
    /// `upgrade finalize`): nobody's claims are told apart.
    NotRecorded,
    /// Recorded before the schema recorded claimers, or the claim is gone: no token's.
    Nobody,
    /// The token (its id) that made it.
    Token(String),
}

/// Reads of the cluster state.
pub trait Snapshot: namespaces::Namespaces {
    fn volume(&self, name: &str) -> ApiResult<Option<VolumeRow>>;
    /// Claims of a volume, in queue order (created_at, then alloc).
    fn claims_of_volume(&self, volume: &str) -> ApiResult<Vec<ClaimRow>>;
    fn claim(&self, volume: &str, alloc: &str) -> ApiResult<Option<ClaimRow>>;
    /// How many claims the token `token` made and still holds, queued ones included;
    /// `None` where the schema does not record claimers (before `upgrade finalize`).
    fn claims_held_by(&self, token: &str) -> ApiResult<Option<usize>>;
    /// Whether the state is at this release's schema: below it (a rolling upgrade over
    /// etcd before `upgrade finalize`) servers of the release before may still read it,
    /// and know none of this release's kinds of controller operation.
    fn release_schema(&self) -> ApiResult<bool>;
    /// Which token made the claim of `alloc` on `volume`: [`Claimer::NotRecorded`] where
    /// the schema does not record claimers (before `upgrade finalize`).
    fn claimer_of(&self, volume: &str, alloc: &str) -> ApiResult<Claimer>;
    /// Claims on a node (in one state, or all), by volume and alloc.
    fn claims_of_node(&self, node: &str, state: Option<ClaimState>) -> ApiResult<Vec<ClaimRow>>;
    /// A queued claim's place in its volume's queue (1 first); `None` when not queued.
    fn queue_position(&self, claim: &ClaimRow) -> ApiResult<Option<u32>>;
    /// Attachments of a volume, by node.
    fn attachments_of_volume(&self, volume: &str) -> ApiResult<Vec<AttachmentRow>>;
    fn attachment(&self, volume: &str, node: &str) -> ApiResult<Option<AttachmentRow>>;
    /// Attachments on a node, by volume.
    fn attachments_of_node(&self, node: &str) -> ApiResult<Vec<AttachmentRow>>;
    /// What a node must unstage: its attachments in `unstaging`, with their volumes' plugin
    /// and external id, by volume.
    fn unstaging_on(&self, node: &str) -> ApiResult<Vec<api::DesiredUnstage>>;
    fn node(&self, name: &str) -> ApiResult<Option<NodeRow>>;
    /// The status of every node that a claim or attachment of `volume` names, and of
    /// `also`.
    fn node_statuses(
        &self,
        volume: &str,
        also: Option<&str>,
    ) -> ApiResult<Vec<(String, NodeStatus)>>;
    /// The plugins a node registered, by plugin.
    fn node_plugins(&self, node: &str) -> ApiResult<Vec<NodePluginRow>>;
    /// The plugins whose controller `node` hosts and reports GET_CAPACITY there, by plugin
    /// (their rows not read).
    fn capacity_plugins(&self, node: &str) -> ApiResult<Vec<String>>;
    /// One plugin's registration on a node, if it registered there.
    fn node_plugin(&self, node: &str, plugin: &str) -> ApiResult<Option<NodePluginRow>>;
    /// The nodes whose registration of `plugin` names `node_id` (NodeGetInfo's), by name.
    fn nodes_with_plugin_id(&self, plugin: &str, node_id: &str) -> ApiResult<Vec<String>>;
    /// Whether volumes of `plugin` need ControllerPublish before a node may use them: yes
    /// when a controller host says it has PUBLISH_UNPUBLISH_VOLUME, or when no host has
    /// registered yet but the plugin announces a controller service (claims then wait for a
    /// host).
    fn needs_controller_publish(&self, plugin: &str) -> ApiResult<bool>;
    /// How many volumes of `plugin` occupy a slot on `node`: attached there (detaching ones
    /// included) or claimed there (queued claims not).
    fn slots_used(&self, node: &str, plugin: &str) -> ApiResult<u32>;
    /// Ready, eligible nodes that run the node service of `plugin`, by name, with the
    /// segments the plugin reports there.
    fn ready_plugin_nodes(&self, plugin: &str) -> ApiResult<Vec<(String, Topology)>>;
    /// Ready nodes that host the controller of `plugin`, by name.
    fn controller_hosts(&self, plugin: &str) -> ApiResult<Vec<String>>;
    fn op(&self, id: i64) -> ApiResult<Option<OpRow>>;
    /// The operation of `kind` on `volume` as a whole (not on one node), if one is queued.
    fn volume_op(&self, kind: OpKind, volume: &str) -> ApiResult<Option<OpRow>>;
    /// The plugin's volumes and csivol's nodes as the plugin names them, and every
    /// attachment of its volumes, for controller-side reconciliation.
    fn reconcile_facts(
        &self,
        plugin: &str,
    ) -> ApiResult<(
        csivol_rules::reconcile::Known,
        Vec<csivol_rules::reconcile::Recorded>,
    )>;
    /// What the last listings of `plugin` found (every plugin's when `None`).
    fn controller_findings(
        &self,
        plugin: Option<&str>,
    ) -> ApiResult<Vec<(String, csivol_rules::reconcile::Kept)>>;
    /// Operations assigned to `host`, by id.
    fn ops_of_host(&self, host: &str) -> ApiResult<Vec<OpRow>>;
    /// Operations of `plugin` assigned to a host.
    fn assigned_ops(&self, plugin: &str) -> ApiResult<Vec<OpSlot>>;
    /// Operations of `plugin` waiting for a host and due at `now`, oldest first, at most
    /// 1,000 of each kind (so that a burst of one kind hides none of the others).
    fn due_ops(&self, plugin: &str, now: i64) -> ApiResult<Vec<OpSlot>>;
    /// Plugins with operations waiting for a host and due at `now`.
    fn plugins_with_due_ops(&self, now: i64) -> ApiResult<Vec<String>>;
    /// The operation of `kind` queued for `volume` (a key) with no node, if any.
    fn key_op(&self, kind: OpKind, volume: &str) -> ApiResult<Option<OpRow>>;
    /// The operations held until the release of `volume` has finished: its own, and those
    /// of its snapshots being created, by id.
    fn held_ops(&self, volume: &str) -> ApiResult<Vec<OpRow>>;
    /// The volumes with operations held until their release has finished, by name.
    fn volumes_with_held_ops(&self) -> ApiResult<Vec<String>>;
    /// Every plugin some node registered (whatever the node's status now), by id.
    fn plugin_ids(&self) -> ApiResult<Vec<String>>;
    /// The volumes of `plugin` whose external id is `external_id`, by name.
    fn volumes_with_external_id(&self, plugin: &str, external_id: &str) -> ApiResult<Vec<String>>;
    /// External ids registered under more than one name (which only an older csivol let
    /// happen): plugin, external id and the names, by plugin and id.
    fn duplicate_external_ids(&self) -> ApiResult<Vec<DuplicateId>>;
    /// Every node's registration of `plugin` (node name, its status, what it reported).
    fn plugin_registrations(
        &self,
        plugin: &str,
    ) -> ApiResult<Vec<(String, NodeStatus, PluginRegistration)>>;

    // ---- snapshots ----

    fn snapshot(&self, name: &str) -> ApiResult<Option<SnapshotRow>>;
    /// Every snapshot, or those taken of `volume`, by name.
    fn snapshots(&self, volume: Option<&str>) -> ApiResult<Vec<SnapshotRow>>;
    /// At most `limit` snapshots by name after `after` (of `volume`, when given): a page of
    /// a listing. Fewer than `limit`: the end.
    fn snapshot_page(
        &self,
        volume: Option<&str>,
        after: &str,
        limit: usize,
    ) -> ApiResult<Vec<SnapshotRow>>;
    /// The controller capabilities of `plugin` as its controller hosts registered them
    /// (any host's), or `None` when no agent hosts its controller.
    fn controller_capabilities(
        &self,
        plugin: &str,
    ) -> ApiResult<Option<api::ControllerCapabilities>>;
    fn group_snapshot(&self, name: &str) -> ApiResult<Option<GroupSnapshotRow>>;
    /// Every group snapshot, by name.
    fn group_snapshots(&self) -> ApiResult<Vec<GroupSnapshotRow>>;
    /// The member snapshots of group snapshot `group`, by name.
    fn group_members(&self, group: &str) -> ApiResult<Vec<SnapshotRow>>;

    // ---- tokens and controller hosts ----

    /// Every token, oldest first.
    fn tokens(&self) -> ApiResult<Vec<TokenRow>>;
    /// The nodes an operator allowed to host `plugin`'s controller: node, by whom, when;
    /// by node.
    fn controller_allowances(&self, plugin: &str) -> ApiResult<Vec<(String, String, i64)>>;
    /// The nodes whose registration hosts `plugin`'s controller, whatever their status, by
    /// name.
    fn nodes_hosting_controller(&self, plugin: &str) -> ApiResult<Vec<String>>;
    /// The newest event about `node`: its kind and message.
    fn last_event_of_node(&self, node: &str) -> ApiResult<Option<(String, String)>>;

    // ---- nodes, fences, leases ----

    /// Every node (or the one named), by name.
    fn nodes(&self, only: Option<&str>) -> ApiResult<Vec<NodeRow>>;
    fn node_fence_facts(&self, node: &str) -> ApiResult<NodeFenceRow>;
    /// A node's last 20 fence runs, newest first.
    fn fence_history(&self, node: &str) -> ApiResult<Vec<api::FenceRecord>>;
    /// Claims whose lease ran out at `now` and that expiry may release, by expiry.
    fn expired_claims(&self, now: i64) -> ApiResult<Vec<ClaimRow>>;
    /// Whether any lease ran out at `now` (a cheap read before the write that expires).
    fn any_lease_expired(&self, now: i64) -> ApiResult<bool>;

    // ---- listings ----

    /// Up to `rows` volumes after `after` by name (of `plugin` when given), with the claims
    /// and attachments of that name range; no volume: the end.
    fn volume_chunk(
        &self,
        after: &str,
        plugin: Option<&str>,
        rows: usize,
    ) -> ApiResult<VolumeChunk>;
    /// Claims (of a volume, on a node, or every one), by volume, creation and alloc.
    fn claims(&self, volume: Option<&str>, node: Option<&str>) -> ApiResult<Vec<ClaimRow>>;
    /// The claims of the first `volumes` volumes by name after `after` that have claims
    /// passing the filters ([`Snapshot::claims`]'): a page of a listing, every claim of a
    /// volume in one page. An empty page is the end.
    fn claim_page(
        &self,
        volume: Option<&str>,
        node: Option<&str>,
        after: &str,
        volumes: usize,
    ) -> ApiResult<Vec<ClaimRow>>;
    /// Every node's registration of every plugin (or of `only`), by plugin and node.
    fn plugin_nodes(&self, only: Option<&str>) -> ApiResult<Vec<PluginNodeRow>>;
    /// How many volumes `plugin` has.
    fn volumes_of_plugin(&self, plugin: &str) -> ApiResult<u32>;
    /// The distinct creation parameters of `plugin`'s volumes, at most `limit` of them.
    fn parameter_sets(
        &self,
        plugin: &str,
        limit: usize,
    ) -> ApiResult<Vec<BTreeMap<String, String>>>;
    /// Events after index `after` that pass `f`, oldest first, at most `limit`.
    fn events(&self, after: u64, f: &EventFilter, limit: u32) -> ApiResult<Vec<api::Event>>;
    /// The index of the last event [`Snapshot::events`] would return; `None` when none.
    fn event_page_end(&self, after: u64, f: &EventFilter, limit: u32) -> ApiResult<Option<u64>>;
    /// How many claims, nodes and operations are in each state.
    fn state_counts(&self) -> ApiResult<StateCounts>;
    /// The controller operations no host holds, of every plugin (or of `plugin`), by
    /// plugin, kind and whether they are due at `now`.
    fn waiting_ops(&self, plugin: Option<&str>, now: i64) -> ApiResult<Vec<WaitingOps>>;
    /// The controller operations of `plugin` handed to a host, first handed out first.
    fn running_ops(&self, plugin: &str) -> ApiResult<Vec<RunningOpRow>>;
    /// Every volume's secrets as stored (sealed, or plain from an older csivol), of the
    /// volumes that have any.
    fn stored_secrets(&self) -> ApiResult<Vec<(String, String)>>;
    /// The value sealed with the cluster's key that tells whether a key is the cluster's.
    fn secrets_check(&self) -> ApiResult<Option<String>>;
    /// The server's own small facts (`meta`) whose keys begin with `prefix`, in key order:
    /// what the state says of itself, such as where it stands after a restore
    /// (`lifecycle::settle`).
    fn meta(&self, prefix: &str) -> ApiResult<Vec<(String, i64)>>;

    // ---- exact retries (see `KeptAnswer`, `Tombstone`) ----

    /// Whether the state's schema keeps request keys and claim tombstones: not before the
    /// cluster's `upgrade finalize` with the etcd store, and below that schema the methods
    /// of this section read nothing and write nothing.
    fn retries_kept(&self) -> ApiResult<bool>;
    /// Whether the state's schema records a claim's mount (its group): not before the
    /// cluster's `upgrade finalize` with the etcd store, when a claim asking for a group
    /// is refused.
    fn mounts_recorded(&self) -> ApiResult<bool>;
    /// What a volume allows its claims to ask of their mounts, and its default SELinux
    /// context (none below the schema that keeps them).
    fn volume_mounts(&self, volume: &str) -> ApiResult<api::VolumeMounts>;
    /// Whether an operator took the volume out of service (none: it takes claims, or the
    /// schema does not keep it).
    fn volume_availability(
        &self,
        volume: &str,
    ) -> ApiResult<Option<crate::model::VolumeAvailabilityRow>>;
    /// The per-job record of a volume (none: not a per-job volume, or the schema does not
    /// keep them).
    fn job_volume(&self, volume: &str) -> ApiResult<Option<JobVolumeRow>>;
    /// The per-job volumes made for `alloc` under the name its job gave, oldest first.
    fn job_volumes_of(&self, alloc: &str, name: &str) -> ApiResult<Vec<JobVolumeRow>>;
    /// Every per-job volume.
    fn job_volumes(&self) -> ApiResult<Vec<JobVolumeRow>>;
    /// Whether the schema keeps volume labels and pools (none of either below it).
    fn pools_kept(&self) -> ApiResult<bool>;
    /// An operator's labels on a volume.
    fn volume_labels(&self, volume: &str) -> ApiResult<BTreeMap<String, String>>;
    /// Every labelled volume with its labels, by name.
    fn all_volume_labels(&self) -> ApiResult<Vec<(String, BTreeMap<String, String>)>>;
    /// Every pool, by name.
    fn pools(&self) -> ApiResult<Vec<crate::model::PoolRow>>;
    /// One pool.
    fn pool(&self, name: &str) -> ApiResult<Option<crate::model::PoolRow>>;
    /// A volume's last cache key and when (recorded at a successful job's release).
    fn cache_key(&self, volume: &str) -> ApiResult<Option<(String, i64)>>;
    /// A pool's last `n` claims, newest first.
    fn recent_pool_claims(&self, pool: &str, n: u32) -> ApiResult<Vec<PoolClaimRow>>;
    /// The claim from a pool `alloc` holds on `volume`, not released yet.
    fn open_pool_claim(&self, volume: &str, alloc: &str) -> ApiResult<Option<PoolClaimRow>>;
    /// The stagings kept after a release, of a volume, of a node, or both; those run out by
    /// `now`.
    fn lingers(&self, volume: Option<&str>, node: Option<&str>) -> ApiResult<Vec<LingerRow>>;
    fn lingers_due(&self, now: i64) -> ApiResult<Vec<LingerRow>>;
    /// The claims waiting in `pool`'s line (every pool's, without one), first in line first.
    fn pool_line(&self, pool: Option<&str>) -> ApiResult<Vec<crate::model::PoolWaiterRow>>;
    /// The first answer kept for `token`'s request `key`.
    fn kept_answer(&self, token: &str, key: &str) -> ApiResult<Option<KeptAnswer>>;
    /// The tombstone of `alloc`'s claim on `volume`: its last release.
    fn tombstone(&self, volume: &str, alloc: &str) -> ApiResult<Option<Tombstone>>;
    /// The volumes named `PREFIX…` on which `alloc`'s claim left a tombstone (a job's
    /// per-job volumes of one name, which may be deleted by now).
    fn tombstoned_under(&self, prefix: &str, alloc: &str) -> ApiResult<Vec<String>>;

    fn require_volume(&self, name: &str) -> ApiResult<VolumeRow> {
        self.volume(name)?.ok_or_else(|| {
            ApiError::not_found(format!("volume `{name}` is not registered"))
                .with_hint("list volumes with `csivol volume list`")
        })
    }

    fn require_node(&self, name: &str) -> ApiResult<NodeRow> {
        self.node(name)?.ok_or_else(|| {
            ApiError::not_found(format!("node `{name}` is not registered")).with_hint(
                "list nodes with `csivol node list`; a node registers when its agent starts",
            )
        })
    }

    /// A claim's API form, with its queue position and, for a claim made from a pool, the
    /// pool and why this member.
    fn claim_to_api(&self, claim: &ClaimRow) -> ApiResult<api::Claim> {
        let mut c = claim.to_api();
        c.queue_position = self.queue_position(claim)?;
        // A row older than the claim is an earlier claim's of the alloc, released without
        // a word to its pool (a lease that ran out).
        c.pool = self
            .open_pool_claim(&claim.volume, &claim.alloc)?
            .filter(|r| r.at >= claim.created_at)
            .map(|r| r.to_api());
        Ok(c)
    }
}

/// One backend volume registered as several csivol volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateId {
    pub plugin: String,
    pub external_id: String,
    pub volumes: Vec<String>,
}

/// Which events to read.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub volume: Option<String>,
    pub node: Option<String>,
    pub alloc: Option<String>,
    /// Only events at or below this index (a page whose end is fixed).
    pub until: Option<u64>,
    pub namespaces: namespaces::NamespaceFilter,
}

/// Where a controller operation stands in the queue: what scheduling reads of it (every
/// claim cycle does, so it reads no more).
#[derive(Clone, Debug)]
pub struct OpSlot {
    pub id: i64,
    pub kind: OpKind,
    pub volume: String,
    pub node: Option<String>,
    pub host: Option<String>,
    /// Since when it waits to run: queued, or due again after a retry's backoff.
    pub due_since: i64,
}

/// A new claim as recorded.
#[derive(Clone, Debug)]
pub struct NewClaim<'a> {
    pub volume: &'a str,
    pub request: &'a api::ClaimRequest,
    pub state: ClaimState,
    pub expires_at: Option<i64>,
    /// The token that asked for it (none for a claim found on a node), recorded where the
    /// schema has the column.
    pub claimer: Option<&'a str>,
    /// Its group and how it is applied; a non-empty one is written only where the schema
    /// has the column ([`Snapshot::mounts_recorded`]).
    pub mount: &'a api::ClaimMount,
}

/// An entry of the event log.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub kind: EventKind,
    pub volume: Option<&'a str>,
    pub node: Option<&'a str>,
    pub alloc: Option<&'a str>,
    pub actor: &'a str,
    pub message: &'a str,
}

/// One request's write transaction (see the module's documentation for the contract).
pub trait Txn: Snapshot + namespaces::NamespaceWrites {
    /// The change index this transaction commits at.
    fn index(&self) -> u64;
    /// The request's clock, in unix milliseconds.
    fn now(&self) -> i64;
    /// Marks `key` changed: its blocking queries wake once this commits.
    fn touch(&mut self, key: Key);
    /// Runs `f` once this request's changes are committed, never if they are rolled back.
    fn after_commit(&mut self, f: Box<dyn FnOnce() + Send>);

    fn append_event(&mut self, e: Event<'_>) -> ApiResult<()>;

    // ---- volumes ----

    /// Records a volume, replacing one of that name (its secrets sealed at rest).
    fn put_volume(&mut self, v: &VolumeRow) -> ApiResult<()>;
    /// Stamps the volume changed (its `modify_index` and `updated_at`).
    fn stamp_volume(&mut self, name: &str) -> ApiResult<()>;
    fn set_volume_lifecycle(
        &mut self,
        name: &str,
        lifecycle: Lifecycle,
        error: Option<&str>,
    ) -> ApiResult<()>;
    /// Sets the volume's error, with (`changed`) or without its `updated_at`.
    fn set_volume_error(&mut self, name: &str, error: &str, changed: bool) -> ApiResult<()>;
    /// A `creating` volume is created: its plugin's id, capacity, context and the segments
    /// it is accessible from; it is ready.
    fn volume_created(
        &mut self,
        name: &str,
        external_id: &str,
        capacity_bytes: u64,
        context: &BTreeMap<String, String>,
        accessible_topology: &[Topology],
    ) -> ApiResult<()>;
    /// Sets the volume's expansion and, when given, its capacity; stamps it changed.
    fn set_volume_expansion(
        &mut self,
        name: &str,
        capacity_bytes: Option<u64>,
        expansion: Option<&api::Expansion>,
    ) -> ApiResult<()>;
    /// Sets the volume's modification and, when given, its mutable parameters; stamps it
    /// changed.
    fn set_volume_modification(
        &mut self,
        name: &str,
        mutable_parameters: Option<&BTreeMap<String, String>>,
        modification: Option<&api::Modification>,
    ) -> ApiResult<()>;
    /// Removes a volume and its queued operations.
    fn delete_volume(&mut self, name: &str) -> ApiResult<()>;
    /// Sets a volume's mount settings (refused below the schema that keeps them, unless
    /// empty).
    fn put_volume_mounts(&mut self, volume: &str, m: &api::VolumeMounts) -> ApiResult<()>;
    /// Takes a volume out of service, or back into it with none (refused below the schema
    /// that keeps it, unless none).
    fn set_volume_availability(
        &mut self,
        volume: &str,
        a: Option<&crate::model::VolumeAvailabilityRow>,
    ) -> ApiResult<()>;
    /// Records a per-job volume or changes its record (refused below the schema that keeps
    /// them).
    fn put_job_volume(&mut self, j: &JobVolumeRow) -> ApiResult<()>;
    /// Sets a volume's labels (refused below the schema that keeps them, unless none).
    fn put_volume_labels(
        &mut self,
        volume: &str,
        labels: &BTreeMap<String, String>,
    ) -> ApiResult<()>;
    /// Records a pool (refused below the schema that keeps pools).
    fn put_pool(&mut self, p: &crate::model::PoolRow) -> ApiResult<()>;
    /// Removes a pool and its claims' history.
    fn delete_pool(&mut self, name: &str) -> ApiResult<()>;
    /// Records a volume's cache key.
    fn set_cache_key(&mut self, volume: &str, key: &str) -> ApiResult<()>;
    /// Records a claim made from a pool.
    fn insert_pool_claim(&mut self, c: &PoolClaimRow) -> ApiResult<()>;
    /// Marks `alloc`'s claims from a pool on `volume` released.
    fn close_pool_claims(&mut self, volume: &str, alloc: &str) -> ApiResult<()>;
    /// Records a staging kept after a release (nothing below the schema that keeps them).
    fn put_linger(&mut self, l: &LingerRow) -> ApiResult<()>;
    /// Ends a staging kept after a release.
    fn delete_linger(&mut self, volume: &str, node: &str) -> ApiResult<()>;
    /// Records a claim in its pool's line, or its lease and held member; `None` takes it out.
    fn put_pool_waiter(
        &mut self,
        pool: &str,
        alloc: &str,
        w: Option<&crate::model::PoolWaiterRow>,
    ) -> ApiResult<()>;
    /// Removes a volume if it is `deleting`.
    fn delete_deleting_volume(&mut self, name: &str) -> ApiResult<()>;

    // ---- claims ----

    fn insert_claim(&mut self, c: NewClaim<'_>) -> ApiResult<()>;
    /// Moves a claim to `state`, stamped. Leaving for `ready` or `releasing` clears its
    /// error; for `ready`, `releasing`, `failed` or `blocked` its next retry; anything but
    /// `publishing` clears what it waits for; anything but `ready`, `publishing` or
    /// `blocked` its condition.
    fn set_claim_state(&mut self, volume: &str, alloc: &str, state: ClaimState) -> ApiResult<()>;
    fn set_claim_target(&mut self, volume: &str, alloc: &str, target_path: &str) -> ApiResult<()>;
    fn set_claim_waiting(
        &mut self,
        volume: &str,
        alloc: &str,
        reason: &str,
        since_ms: i64,
        timeout_ms: i64,
    ) -> ApiResult<()>;
    fn set_claim_condition(
        &mut self,
        volume: &str,
        alloc: &str,
        condition: Option<&str>,
    ) -> ApiResult<()>;
    /// Records what csivol's ownership change did for a claim (in its mount, which only a
    /// claim asking for a group has: never below the schema that keeps it).
    fn set_claim_ownership_change(
        &mut self,
        volume: &str,
        alloc: &str,
        mount: &api::ClaimMount,
    ) -> ApiResult<()>;
    /// Sets a claim's error and next retry, stamped.
    fn set_claim_error(
        &mut self,
        volume: &str,
        alloc: &str,
        error: &str,
        next_retry_at: Option<i64>,
    ) -> ApiResult<()>;
    /// Records a claim's drift, which stands in for its error (cleared, with its next
    /// retry) until another error replaces it; the drift itself lasts until the claim
    /// leaves for `ready` or `releasing`.
    fn set_claim_drift(
        &mut self,
        volume: &str,
        alloc: &str,
        drift: &crate::model::Drift,
    ) -> ApiResult<()>;
    /// Marks a claim released while its node was lost (taken down, not resumed, at return).
    fn set_claim_release_pending(&mut self, volume: &str, alloc: &str) -> ApiResult<()>;
    fn delete_claim(&mut self, volume: &str, alloc: &str) -> ApiResult<()>;

    // ---- attachments ----

    fn insert_attachment(
        &mut self,
        volume: &str,
        node: &str,
        state: AttachmentState,
    ) -> ApiResult<()>;
    /// Moves an attachment to `state`, clearing its error and next retry.
    fn set_attachment_state(
        &mut self,
        volume: &str,
        node: &str,
        state: AttachmentState,
    ) -> ApiResult<()>;
    /// Starts detaching: `detaching`, `forced` recorded, error and next retry cleared.
    fn set_attachment_detaching(&mut self, volume: &str, node: &str, forced: bool)
    -> ApiResult<()>;
    /// An `attaching` attachment is attached with its publish context; whether it was.
    fn attachment_published(
        &mut self,
        volume: &str,
        node: &str,
        publish_context: &PublishContext,
    ) -> ApiResult<bool>;
    /// Sets an attachment's error and next retry; whether the attachment exists.
    fn set_attachment_error(
        &mut self,
        volume: &str,
        node: &str,
        error: &str,
        next_retry_at: Option<i64>,
    ) -> ApiResult<bool>;
    /// Says why attaching `volume` to `node` waits: on the attachment and on the claims
    /// there that wait for it (`attaching`, `pending`), without stamping the attachment.
    fn note_attach_waiting(&mut self, volume: &str, node: &str, why: &str) -> ApiResult<()>;
    /// An attach or detach of `volume` on `node` failed and is retried at `next_retry_at`:
    /// the error and retry time on the attachment and on the claims waiting for it.
    fn set_attach_retry(
        &mut self,
        volume: &str,
        node: &str,
        error: &str,
        next_retry_at: i64,
    ) -> ApiResult<()>;
    fn delete_attachment(&mut self, volume: &str, node: &str) -> ApiResult<()>;

    // ---- nodes ----

    /// Records a registration: the node is `ready` (lost time and fence failures cleared,
    /// its eligibility kept) with its fence time and labels, and exactly these plugins.
    fn register_node(
        &mut self,
        name: &str,
        fence_after_ms: Option<u64>,
        labels: &BTreeMap<String, String>,
        plugins: &[PluginRegistration],
    ) -> ApiResult<()>;
    /// Sets a node's status; `lost` also records when.
    fn set_node_status(&mut self, name: &str, status: NodeStatus) -> ApiResult<()>;
    /// The node's agent fenced itself at `at_ms`.
    fn set_node_fenced_at(&mut self, name: &str, at_ms: i64) -> ApiResult<()>;
    /// Asks the node's agent to read its plugins' attach limits again (its desired state
    /// carries when).
    fn ask_node_limits(&mut self, name: &str) -> ApiResult<()>;
    /// Records a node plugin's attach limit as NodeGetInfo read it again (`reason`: why it
    /// was read); returns the limit before when it changed. Nothing for a plugin the node
    /// did not register with a node service.
    fn set_node_limit(
        &mut self,
        node: &str,
        plugin: &str,
        limit: u32,
        reason: &str,
    ) -> ApiResult<Option<u32>>;
    /// The node's agent stopped in order now (`node-stopping`): the node is `stopped`.
    fn set_node_stopped(&mut self, name: &str, took_down: bool) -> ApiResult<()>;
    /// What the node's agent observed a plugin make for a claim (`ObservedShape` JSON with
    /// the claim and the time), kept across registrations.
    fn set_plugin_observed(&mut self, node: &str, plugin: &str, observed: &str) -> ApiResult<()>;

    // ---- controller operations ----

    /// Queues an operation, unless one of that kind is queued for the same volume and node.
    fn queue_op(
        &mut self,
        kind: OpKind,
        plugin: &str,
        volume: &str,
        node: Option<&str>,
        payload: &str,
    ) -> ApiResult<()>;
    /// Queues an operation held until its volume's release has finished (never due until
    /// [`Txn::release_held_op`]), with why it waits, unless one of that kind is queued for
    /// the same volume already.
    fn queue_held_op(
        &mut self,
        kind: OpKind,
        plugin: &str,
        volume: &str,
        payload: &str,
        why: &str,
    ) -> ApiResult<()>;
    /// Makes a held operation due now; its attempt is unchanged (it never ran).
    fn release_held_op(&mut self, id: i64) -> ApiResult<()>;
    fn assign_op(&mut self, id: i64, host: &str) -> ApiResult<()>;
    /// Sets why an operation waits; whether that changed it.
    fn note_op_waiting(&mut self, id: i64, why: &str) -> ApiResult<bool>;
    /// Hands an operation back to the queue for its next attempt, due at `not_before`.
    fn retry_op(&mut self, id: i64, not_before: i64, error: &str) -> ApiResult<()>;
    /// Gives a waiting operation a new payload for its next attempt, due now: its
    /// attempt is bumped, so a report of the one before is not taken for it.
    fn retarget_op(&mut self, id: i64, payload: &str) -> ApiResult<()>;
    /// Hands every operation assigned to `host` back to the queue.
    fn unassign_ops_of(&mut self, host: &str) -> ApiResult<()>;
    fn delete_op(&mut self, id: i64) -> ApiResult<()>;
    /// Drops the queued operation of `kind` for `volume` on `node`, if any.
    fn delete_op_for(&mut self, kind: OpKind, volume: &str, node: &str) -> ApiResult<()>;
    /// Replaces what the listings of `plugin` found.
    fn put_controller_findings(
        &mut self,
        plugin: &str,
        findings: &[csivol_rules::reconcile::Kept],
    ) -> ApiResult<()>;

    // ---- snapshots ----

    /// Inserts or replaces a snapshot (stamped with the write's index and time).
    fn put_snapshot(&mut self, s: &SnapshotRow) -> ApiResult<()>;
    fn delete_snapshot(&mut self, name: &str) -> ApiResult<()>;
    /// Inserts or replaces a group snapshot (stamped with the write's index and time).
    fn put_group_snapshot(&mut self, g: &GroupSnapshotRow) -> ApiResult<()>;
    /// Removes a group snapshot and its member snapshots.
    fn delete_group_snapshot(&mut self, name: &str) -> ApiResult<()>;
    /// Drops the operation of `kind` queued under `key` with no node, if any.
    fn delete_key_op(&mut self, kind: OpKind, key: &str) -> ApiResult<()>;

    // ---- tokens and controller hosts ----

    fn insert_token(&mut self, t: &TokenRow) -> ApiResult<()>;
    fn set_token_revoked(&mut self, id: &str, at: i64) -> ApiResult<()>;
    /// Records a use at `at` unless a later one is recorded.
    fn set_token_last_used(&mut self, id: &str, at: i64) -> ApiResult<()>;
    /// Lets `node` host `plugin`'s controller; whether it could not before.
    fn allow_controller_host(&mut self, plugin: &str, node: &str, actor: &str) -> ApiResult<bool>;
    /// Whether `node` could host `plugin`'s controller by an operator's leave before.
    fn disallow_controller_host(&mut self, plugin: &str, node: &str) -> ApiResult<bool>;

    // ---- nodes, fences, leases, the event log ----

    fn set_node_eligibility(&mut self, name: &str, eligibility: api::Eligibility) -> ApiResult<()>;
    /// Forgets a node and its plugins.
    fn delete_node(&mut self, name: &str) -> ApiResult<()>;
    /// Replaces the labels an operator set on a node.
    fn set_node_operator_labels(
        &mut self,
        node: &str,
        labels: &BTreeMap<String, String>,
    ) -> ApiResult<()>;
    /// Records a fence method's run; its id.
    fn insert_fence(&mut self, f: &NewFence<'_>) -> ApiResult<u64>;
    /// Counts a failed automatic fence of `node`, with why, at `now`.
    fn note_fence_failure(&mut self, node: &str, why: &str) -> ApiResult<()>;
    /// The node is `fenced`; the policy's failed attempts are cleared.
    fn set_node_fenced(&mut self, node: &str) -> ApiResult<()>;
    /// A claim's lease runs `ttl_ms` and ends at `expires_at`; stamped.
    fn set_claim_lease(
        &mut self,
        volume: &str,
        alloc: &str,
        ttl_ms: i64,
        expires_at: i64,
    ) -> ApiResult<()>;
    /// Drops old events as `p` says, at most `p.batch` of them; how many went.
    fn prune_events(&mut self, p: &Pruning<'_>) -> ApiResult<usize>;
    /// Replaces a volume's stored secrets with `sealed` (sealing what an older csivol kept
    /// in clear).
    fn put_stored_secrets(&mut self, volume: &str, sealed: &str) -> ApiResult<()>;
    fn put_secrets_check(&mut self, sealed: &str) -> ApiResult<()>;

    // ---- exact retries ----

    /// Keeps a request's first answer under its token and key (stamped with the write's
    /// time), replacing what the key kept before (an answer past the request memory, which
    /// counts as none: the caller asks [`Snapshot::kept_answer`] first).
    fn keep_answer(&mut self, a: &KeptAnswer) -> ApiResult<()>;
    /// Leaves (or moves forward to this write's time and index) the tombstone of `alloc`'s
    /// claim on `volume`.
    fn put_tombstone(&mut self, volume: &str, alloc: &str) -> ApiResult<()>;
    /// Drops up to `most` kept answers and up to `most` tombstones older than `before`
    /// (unix ms); how many went. Bounded, so that one prune fits one etcd transaction.
    fn prune_retries(&mut self, before: i64, most: usize) -> ApiResult<usize>;
    /// Sets one of the server's own facts (`None`: forgets it). The change index is kept
    /// by the store itself, never through this.
    fn put_meta(&mut self, key: &str, value: Option<i64>) -> ApiResult<()>;
}

/// A mutating request's first answer, kept under the `Idempotency-Key` it carried, scoped to
/// the token that sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptAnswer {
    /// The token's id.
    pub token: String,
    pub key: String,
    /// The request it answered: method, path and the query that changes what it does.
    pub request: String,
    /// SHA-256 of the request's body as the server parsed it, in hex.
    pub digest: String,
    /// The answer: HTTP status, body (JSON, or empty) and change index, as first sent.
    pub status: u16,
    pub answer: String,
    pub index: Option<u64>,
    /// When it was kept (unix ms); it is pruned after the server's `request_memory`.
    pub at: i64,
}

/// What is remembered of a claim's release: when and at which change index it began (or
/// the claim was last removed), so that a claim request sent before it is not recorded again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tombstone {
    pub released_at: i64,
    pub index: u64,
}
