//! The SQLite store: [`Snapshot`] over a connection (a read connection's snapshot, or the
//! writer's transaction), [`Txn`] over the writer's [`WriteCtx`]. Every statement runs
//! through the connection's statement cache: the same few run for every claim, and
//! preparing them each time would cost more than running them.

#[macro_use]
mod sql;

mod access;
pub mod backup;
mod claim_mounts;
mod claimers;
mod connection;
pub mod db;
mod drift;
mod held;
mod job_volumes;
mod lingers;
mod listings;
pub mod maintenance;
pub mod migrations;
pub mod namespaces;
mod nodes;
mod ops;
mod pool_waiters;
mod pools;
pub mod quotas;
mod read_pool;
mod reconcile;
pub mod restore;
mod retries;
mod rows;
mod shape;
mod snapshots;
mod statement;
mod txn;
mod volume_availability;
mod volume_mounts;
pub mod writer;

use std::collections::HashMap;

use csivol_api::{self as api, ClaimState, NodeStatus, PluginRegistration, Topology};
use rusqlite::{Connection, params};

use super::{EventFilter, OpSlot, Snapshot};
use crate::error::{ApiError, ApiResult};
use crate::model::listing::VolumeChunk;
use crate::model::{
    AttachmentRow, ClaimRow, NodeFenceRow, NodePluginRow, NodeRow, OpRow, PluginNodeRow,
    RunningOpRow, StateCounts, TokenRow, VolumeRow, WaitingOps,
};
use crate::model::{Labels, LingerRow, PoolClaimRow, PoolRow};
use crate::store::sqlite::db::optional;
use crate::store::sqlite::rows::ops;
use crate::store::sqlite::statement::{exec, strings};
use crate::store::sqlite::writer::WriteCtx;
use csivol_rules::kinds::OpKind;

pub use rows::{ATTACHMENT_COLUMNS, needs_controller_publish, slots_used};

impl From<rusqlite::Error> for ApiError {
    fn from(e: rusqlite::Error) -> Self {
        tracing::error!(error = %e, "database error");
        Self::internal(format!("database error: {e}"))
    }
}

/// The columns of an [`OpSlot`], as `slot_from_row` reads them.
const SLOT_COLUMNS: &str = "id, kind, volume, node, host, MAX(created_at, not_before)";
/// The most waiting operations of one kind [`Snapshot::due_ops`] returns.
const DUE_PER_KIND: usize = 1000;

fn slot_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OpSlot> {
    let kind: String = r.get(1)?;
    Ok(OpSlot {
        id: r.get(0)?,
        kind: kind.parse().map_err(|e: String| {
            rusqlite::Error::FromSqlConversionFailure(1, rusqlite::types::Type::Text, e.into())
        })?,
        volume: r.get(2)?,
        node: r.get(3)?,
        host: r.get(4)?,
        due_since: r.get(5)?,
    })
}

fn slots(conn: &Connection, filter: &str, params: impl rusqlite::Params) -> ApiResult<Vec<OpSlot>> {
    let sql = format!("SELECT {SLOT_COLUMNS} FROM ops WHERE {filter}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params, slot_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

impl Snapshot for Connection {
    fn reconcile_facts(
        &self,
        plugin: &str,
    ) -> ApiResult<(
        csivol_rules::reconcile::Known,
        Vec<csivol_rules::reconcile::Recorded>,
    )> {
        reconcile::facts(self, plugin)
    }

    fn controller_findings(
        &self,
        plugin: Option<&str>,
    ) -> ApiResult<Vec<(String, csivol_rules::reconcile::Kept)>> {
        reconcile::findings(self, plugin)
    }

    fn volume(&self, name: &str) -> ApiResult<Option<VolumeRow>> {
        VolumeRow::load(self, name)
    }

    fn claims_of_volume(&self, volume: &str) -> ApiResult<Vec<ClaimRow>> {
        ClaimRow::of_volume(self, volume)
    }

    fn claim(&self, volume: &str, alloc: &str) -> ApiResult<Option<ClaimRow>> {
        ClaimRow::load(self, volume, alloc)
    }

    fn claims_held_by(&self, token: &str) -> ApiResult<Option<usize>> {
        claimers::held_by(self, token)
    }

    fn release_schema(&self) -> ApiResult<bool> {
        // The claims' `claimer` column came with this release's schema.
        claimers::recorded(self)
    }

    fn claimer_of(&self, volume: &str, alloc: &str) -> ApiResult<crate::store::Claimer> {
        claimers::of(self, volume, alloc)
    }

    fn claims_of_node(&self, node: &str, state: Option<ClaimState>) -> ApiResult<Vec<ClaimRow>> {
        let sql = claims_sql!(
            self,
            "SELECT {columns} FROM claims WHERE node = ?1 AND (?2 IS NULL OR state = ?2) ORDER BY volume, alloc"
        );
        let mut stmt = self.prepare_cached(sql)?;
        let rows = stmt
            .query_map(params![node, state.map(|s| s.as_str())], ClaimRow::from_row)?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn queue_position(&self, claim: &ClaimRow) -> ApiResult<Option<u32>> {
        claim.queue_position(self)
    }

    fn attachments_of_volume(&self, volume: &str) -> ApiResult<Vec<AttachmentRow>> {
        AttachmentRow::of_volume(self, volume)
    }

    fn attachment(&self, volume: &str, node: &str) -> ApiResult<Option<AttachmentRow>> {
        let sql = fixed_sql!(
            "SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE volume = ?1 AND node = ?2"
        );
        optional(
            self.prepare_cached(sql)?
                .query_row([volume, node], AttachmentRow::from_row),
        )
    }

    fn attachments_of_node(&self, node: &str) -> ApiResult<Vec<AttachmentRow>> {
        let sql = fixed_sql!(
            "SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE node = ?1 ORDER BY volume"
        );
        let mut stmt = self.prepare_cached(sql)?;
        let rows = stmt
            .query_map([node], AttachmentRow::from_row)?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn unstaging_on(&self, node: &str) -> ApiResult<Vec<api::DesiredUnstage>> {
        let mut stmt = self.prepare_cached(
            "SELECT a.volume, v.plugin, v.external_id FROM attachments a JOIN volumes v ON v.name = a.volume \
             WHERE a.node = ?1 AND a.state = 'unstaging' ORDER BY a.volume",
        )?;
        let rows = stmt
            .query_map([node], |r| {
                Ok(api::DesiredUnstage {
                    volume: r.get(0)?,
                    plugin: r.get(1)?,
                    external_id: r.get(2)?,
                })
            })?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    }

    fn node(&self, name: &str) -> ApiResult<Option<NodeRow>> {
        NodeRow::load(self, name)
    }

    fn node_statuses(
        &self,
        volume: &str,
        also: Option<&str>,
    ) -> ApiResult<Vec<(String, NodeStatus)>> {
        let mut stmt = self.prepare_cached(
            "SELECT name, status FROM nodes WHERE name = ?2 OR name IN \
             (SELECT node FROM claims WHERE volume = ?1 UNION SELECT node FROM attachments WHERE volume = ?1)",
        )?;
        let rows = stmt
            .query_map(params![volume, also], |r| {
                Ok((r.get(0)?, r.get::<_, String>(1)?))
            })?
            .map(|r| {
                let (name, status) = r?;
                Ok((name, status.parse().map_err(ApiError::internal)?))
            })
            .collect::<ApiResult<_>>()?;
        Ok(rows)
    }

    fn node_plugins(&self, node: &str) -> ApiResult<Vec<NodePluginRow>> {
        NodePluginRow::of_node(self, node)
    }

    fn node_plugin(&self, node: &str, plugin: &str) -> ApiResult<Option<NodePluginRow>> {
        NodePluginRow::load(self, node, plugin)
    }

    fn capacity_plugins(&self, node: &str) -> ApiResult<Vec<String>> {
        NodePluginRow::capacity_hosted_on(self, node)
    }

    fn needs_controller_publish(&self, plugin: &str) -> ApiResult<bool> {
        needs_controller_publish(self, plugin)
    }

    fn slots_used(&self, node: &str, plugin: &str) -> ApiResult<u32> {
        slots_used(self, node, plugin)
    }

    fn ready_plugin_nodes(&self, plugin: &str) -> ApiResult<Vec<(String, Topology)>> {
        let mut stmt = self.prepare_cached(
            "SELECT np.node, np.topology FROM node_plugins np JOIN nodes n ON n.name = np.node \
             WHERE np.plugin = ?1 AND np.node_service = 1 AND n.status = 'ready' \
             AND n.eligibility = 'eligible' ORDER BY np.node",
        )?;
        let rows = stmt
            .query_map([plugin], |r| {
                let topology: String = r.get(1)?;
                Ok((r.get(0)?, topology))
            })?
            .collect::<Result<Vec<(String, String)>, _>>()?;
        rows.into_iter()
            .map(|(node, t)| Ok((node, serde_json::from_str(&t)?)))
            .collect()
    }

    fn nodes_with_plugin_id(&self, plugin: &str, node_id: &str) -> ApiResult<Vec<String>> {
        strings(
            self,
            "SELECT node FROM node_plugins WHERE plugin = ?1 AND csi_node_id = ?2 ORDER BY node",
            [plugin, node_id],
        )
    }

    fn controller_hosts(&self, plugin: &str) -> ApiResult<Vec<String>> {
        strings(
            self,
            "SELECT np.node FROM node_plugins np JOIN nodes n ON n.name = np.node \
             WHERE np.plugin = ?1 AND np.controller = 1 AND n.status = 'ready' ORDER BY np.node",
            [plugin],
        )
    }

    fn op(&self, id: i64) -> ApiResult<Option<OpRow>> {
        Ok(ops(self, "id = ?1", [id])?.pop())
    }

    fn volume_op(&self, kind: OpKind, volume: &str) -> ApiResult<Option<OpRow>> {
        Ok(ops(
            self,
            "volume = ?1 AND kind = ?2 AND node IS NULL",
            params![volume, kind.as_str()],
        )?
        .pop())
    }

    fn ops_of_host(&self, host: &str) -> ApiResult<Vec<OpRow>> {
        ops(self, "host = ?1 ORDER BY id", [host])
    }

    fn assigned_ops(&self, plugin: &str) -> ApiResult<Vec<OpSlot>> {
        slots(self, "plugin = ?1 AND host IS NOT NULL", [plugin])
    }

    fn due_ops(&self, plugin: &str, now: i64) -> ApiResult<Vec<OpSlot>> {
        // The index `ops_plugin (plugin, host)` holds the waiting operations of a plugin in
        // id order, so this is one ordered scan with no sort; the cap per kind is counted
        // here (a window function numbering the rows sorted them twice, at every slot
        // freed).
        let sql = fixed_sql!(
            "SELECT {SLOT_COLUMNS} FROM ops WHERE plugin = ?1 AND host IS NULL AND not_before <= ?2 \
             ORDER BY id"
        );
        let mut stmt = self.prepare_cached(sql)?;
        let mut seen: HashMap<OpKind, usize> = HashMap::new();
        let mut due = Vec::new();
        for slot in stmt.query_map(params![plugin, now], slot_from_row)? {
            let slot = slot?;
            let n = seen.entry(slot.kind).or_default();
            *n += 1;
            if *n <= DUE_PER_KIND {
                due.push(slot);
            }
        }
        Ok(due)
    }

    fn key_op(&self, kind: OpKind, volume: &str) -> ApiResult<Option<OpRow>> {
        Ok(ops(
            self,
            "volume = ?1 AND kind = ?2 AND node IS NULL",
            params![volume, kind.as_str()],
        )?
        .pop())
    }

    fn held_ops(&self, volume: &str) -> ApiResult<Vec<OpRow>> {
        held::of_volume(self, volume)
    }

    fn volumes_with_held_ops(&self) -> ApiResult<Vec<String>> {
        held::volumes(self)
    }

    fn plugins_with_due_ops(&self, now: i64) -> ApiResult<Vec<String>> {
        strings(
            self,
            "SELECT DISTINCT plugin FROM ops WHERE host IS NULL AND not_before <= ?1",
            [now],
        )
    }

    fn plugin_ids(&self) -> ApiResult<Vec<String>> {
        strings(
            self,
            "SELECT DISTINCT plugin FROM node_plugins ORDER BY plugin",
            [],
        )
    }

    fn volumes_with_external_id(&self, plugin: &str, external_id: &str) -> ApiResult<Vec<String>> {
        strings(
            self,
            "SELECT name FROM volumes WHERE plugin = ?1 AND external_id = ?2 ORDER BY name",
            [plugin, external_id],
        )
    }

    fn duplicate_external_ids(&self) -> ApiResult<Vec<super::DuplicateId>> {
        // A volume being created has no external id yet: the empty id is no duplicate.
        let mut stmt = self.prepare_cached(
            "SELECT plugin, external_id, json_group_array(name) FROM \
             (SELECT plugin, external_id, name FROM volumes WHERE external_id <> '' \
              ORDER BY plugin, external_id, name) \
             GROUP BY plugin, external_id HAVING COUNT(*) > 1 ORDER BY plugin, external_id",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        rows.map(|row| {
            let (plugin, external_id, names) = row?;
            Ok(super::DuplicateId {
                plugin,
                external_id,
                volumes: serde_json::from_str(&names)?,
            })
        })
        .collect()
    }

    fn plugin_registrations(
        &self,
        plugin: &str,
    ) -> ApiResult<Vec<(String, NodeStatus, PluginRegistration)>> {
        let mut stmt = self.prepare_cached(
            "SELECT np.node, n.status, np.registration FROM node_plugins np \
             JOIN nodes n ON n.name = np.node WHERE np.plugin = ?1 ORDER BY np.node",
        )?;
        let rows = stmt
            .query_map([plugin], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?
            .collect::<Result<Vec<_>, _>>()?;
        rows.into_iter()
            .map(|(node, status, reg)| {
                let status = status.parse().map_err(ApiError::internal)?;
                let reg =
                    serde_json::from_str(&reg).map_err(|e| ApiError::internal(e.to_string()))?;
                Ok((node, status, reg))
            })
            .collect()
    }

    fn snapshot(&self, name: &str) -> ApiResult<Option<crate::model::SnapshotRow>> {
        snapshots::snapshot(self, name)
    }

    fn snapshots(&self, volume: Option<&str>) -> ApiResult<Vec<crate::model::SnapshotRow>> {
        snapshots::snapshots(self, volume)
    }

    fn snapshot_page(
        &self,
        volume: Option<&str>,
        after: &str,
        limit: usize,
    ) -> ApiResult<Vec<crate::model::SnapshotRow>> {
        snapshots::snapshot_page(self, volume, after, limit)
    }

    fn controller_capabilities(
        &self,
        plugin: &str,
    ) -> ApiResult<Option<api::ControllerCapabilities>> {
        snapshots::controller_capabilities(self, plugin)
    }

    fn group_snapshot(&self, name: &str) -> ApiResult<Option<crate::model::GroupSnapshotRow>> {
        snapshots::group_snapshot(self, name)
    }

    fn group_snapshots(&self) -> ApiResult<Vec<crate::model::GroupSnapshotRow>> {
        snapshots::group_snapshots(self)
    }

    fn group_members(&self, group: &str) -> ApiResult<Vec<crate::model::SnapshotRow>> {
        snapshots::members(self, group)
    }

    fn tokens(&self) -> ApiResult<Vec<TokenRow>> {
        access::tokens(self)
    }

    fn controller_allowances(&self, plugin: &str) -> ApiResult<Vec<(String, String, i64)>> {
        access::controller_allowances(self, plugin)
    }

    fn nodes_hosting_controller(&self, plugin: &str) -> ApiResult<Vec<String>> {
        access::nodes_hosting_controller(self, plugin)
    }

    fn last_event_of_node(&self, node: &str) -> ApiResult<Option<(String, String)>> {
        access::last_event_of_node(self, node)
    }

    fn nodes(&self, only: Option<&str>) -> ApiResult<Vec<NodeRow>> {
        nodes::nodes(self, only)
    }

    fn node_fence_facts(&self, node: &str) -> ApiResult<NodeFenceRow> {
        nodes::node_fence_facts(self, node)
    }

    fn fence_history(&self, node: &str) -> ApiResult<Vec<api::FenceRecord>> {
        nodes::fence_history(self, node)
    }

    fn expired_claims(&self, now: i64) -> ApiResult<Vec<ClaimRow>> {
        nodes::expired_claims(self, now)
    }

    fn any_lease_expired(&self, now: i64) -> ApiResult<bool> {
        nodes::any_lease_expired(self, now)
    }

    fn volume_chunk(
        &self,
        after: &str,
        plugin: Option<&str>,
        rows: usize,
    ) -> ApiResult<VolumeChunk> {
        listings::volume_chunk(self, after, plugin, rows)
    }

    fn claims(&self, volume: Option<&str>, node: Option<&str>) -> ApiResult<Vec<ClaimRow>> {
        listings::claims(self, volume, node)
    }

    fn claim_page(
        &self,
        volume: Option<&str>,
        node: Option<&str>,
        after: &str,
        volumes: usize,
    ) -> ApiResult<Vec<ClaimRow>> {
        listings::claim_page(self, volume, node, after, volumes)
    }

    fn plugin_nodes(&self, only: Option<&str>) -> ApiResult<Vec<PluginNodeRow>> {
        listings::plugin_nodes(self, only)
    }

    fn volumes_of_plugin(&self, plugin: &str) -> ApiResult<u32> {
        listings::volumes_of_plugin(self, plugin)
    }

    fn parameter_sets(
        &self,
        plugin: &str,
        limit: usize,
    ) -> ApiResult<Vec<std::collections::BTreeMap<String, String>>> {
        listings::parameter_sets(self, plugin, limit)
    }

    fn events(&self, after: u64, f: &EventFilter, limit: u32) -> ApiResult<Vec<api::Event>> {
        listings::events(self, after, f, limit)
    }

    fn event_page_end(&self, after: u64, f: &EventFilter, limit: u32) -> ApiResult<Option<u64>> {
        listings::event_page_end(self, after, f, limit)
    }

    fn state_counts(&self) -> ApiResult<StateCounts> {
        listings::state_counts(self)
    }

    fn waiting_ops(&self, plugin: Option<&str>, now: i64) -> ApiResult<Vec<WaitingOps>> {
        listings::waiting_ops(self, plugin, now)
    }

    fn running_ops(&self, plugin: &str) -> ApiResult<Vec<RunningOpRow>> {
        listings::running_ops(self, plugin)
    }

    fn stored_secrets(&self) -> ApiResult<Vec<(String, String)>> {
        access::stored_secrets(self)
    }

    fn secrets_check(&self) -> ApiResult<Option<String>> {
        access::secrets_check(self)
    }

    fn retries_kept(&self) -> ApiResult<bool> {
        retries::kept(self)
    }

    fn mounts_recorded(&self) -> ApiResult<bool> {
        claim_mounts::recorded(self)
    }

    fn volume_mounts(&self, volume: &str) -> ApiResult<csivol_api::VolumeMounts> {
        volume_mounts::get(self, volume)
    }

    fn volume_availability(
        &self,
        volume: &str,
    ) -> ApiResult<Option<crate::model::VolumeAvailabilityRow>> {
        volume_availability::get(self, volume)
    }

    fn job_volume(&self, volume: &str) -> ApiResult<Option<crate::model::JobVolumeRow>> {
        job_volumes::get(self, volume)
    }

    fn job_volumes_of(
        &self,
        alloc: &str,
        name: &str,
    ) -> ApiResult<Vec<crate::model::JobVolumeRow>> {
        job_volumes::of_alloc(self, alloc, name)
    }

    fn job_volumes(&self) -> ApiResult<Vec<crate::model::JobVolumeRow>> {
        job_volumes::all(self)
    }

    fn pools_kept(&self) -> ApiResult<bool> {
        pools::kept(self)
    }

    fn volume_labels(&self, volume: &str) -> ApiResult<Labels> {
        pools::labels(self, volume)
    }

    fn all_volume_labels(&self) -> ApiResult<Vec<(String, Labels)>> {
        pools::all_labels(self)
    }

    fn pools(&self) -> ApiResult<Vec<PoolRow>> {
        pools::pools(self)
    }

    fn pool(&self, name: &str) -> ApiResult<Option<PoolRow>> {
        pools::pool(self, name)
    }

    fn cache_key(&self, volume: &str) -> ApiResult<Option<(String, i64)>> {
        pools::cache_key(self, volume)
    }

    fn recent_pool_claims(&self, pool: &str, n: u32) -> ApiResult<Vec<PoolClaimRow>> {
        pools::recent_claims(self, pool, n)
    }

    fn open_pool_claim(&self, volume: &str, alloc: &str) -> ApiResult<Option<PoolClaimRow>> {
        pools::open_claim(self, volume, alloc)
    }

    fn lingers(&self, volume: Option<&str>, node: Option<&str>) -> ApiResult<Vec<LingerRow>> {
        lingers::of(self, volume, node)
    }

    fn lingers_due(&self, now: i64) -> ApiResult<Vec<LingerRow>> {
        lingers::due(self, now)
    }

    fn pool_line(&self, pool: Option<&str>) -> ApiResult<Vec<crate::model::PoolWaiterRow>> {
        pool_waiters::line(self, pool)
    }

    fn kept_answer(&self, token: &str, key: &str) -> ApiResult<Option<crate::store::KeptAnswer>> {
        retries::kept_answer(self, token, key)
    }

    fn tombstone(&self, volume: &str, alloc: &str) -> ApiResult<Option<crate::store::Tombstone>> {
        retries::tombstone(self, volume, alloc)
    }

    fn tombstoned_under(&self, prefix: &str, alloc: &str) -> ApiResult<Vec<String>> {
        retries::tombstoned_under(self, prefix, alloc)
    }

    fn meta(&self, prefix: &str) -> ApiResult<Vec<(String, i64)>> {
        access::meta(self, prefix)
    }
}

/// Reads inside a write see the transaction's own changes: they go to its connection.
macro_rules! reads_through_the_transaction {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl Snapshot for WriteCtx<'_> {
            $(fn $name(&self, $($arg: $ty),*) -> ApiResult<$ret> {
                <Connection as Snapshot>::$name(self.tx, $($arg),*)
            })*

            /// Asked by every step of a claim's and an attachment's way; read once per
            /// request until `node_plugins` is written.
            fn needs_controller_publish(&self, plugin: &str) -> ApiResult<bool> {
                if let Some((_, needs)) = self
                    .memo
                    .controller_publish
                    .borrow()
                    .iter()
                    .find(|(p, _)| p == plugin)
                {
                    return Ok(*needs);
                }
                let needs = needs_controller_publish(self.tx, plugin)?;
                self.memo
                    .controller_publish
                    .borrow_mut()
                    .push((plugin.to_owned(), needs));
                Ok(needs)
            }
        }
    };
}

reads_through_the_transaction! {
    volume(name: &str) -> Option<VolumeRow>;
    claims_of_volume(volume: &str) -> Vec<ClaimRow>;
    claim(volume: &str, alloc: &str) -> Option<ClaimRow>;
    claims_held_by(token: &str) -> Option<usize>;
    release_schema() -> bool;
    claimer_of(volume: &str, alloc: &str) -> crate::store::Claimer;
    claims_of_node(node: &str, state: Option<ClaimState>) -> Vec<ClaimRow>;
    queue_position(claim: &ClaimRow) -> Option<u32>;
    attachments_of_volume(volume: &str) -> Vec<AttachmentRow>;
    attachment(volume: &str, node: &str) -> Option<AttachmentRow>;
    attachments_of_node(node: &str) -> Vec<AttachmentRow>;
    unstaging_on(node: &str) -> Vec<api::DesiredUnstage>;
    node(name: &str) -> Option<NodeRow>;
    node_statuses(volume: &str, also: Option<&str>) -> Vec<(String, NodeStatus)>;
    node_plugins(node: &str) -> Vec<NodePluginRow>;
    capacity_plugins(node: &str) -> Vec<String>;
    node_plugin(node: &str, plugin: &str) -> Option<NodePluginRow>;
    nodes_with_plugin_id(plugin: &str, node_id: &str) -> Vec<String>;
    slots_used(node: &str, plugin: &str) -> u32;
    ready_plugin_nodes(plugin: &str) -> Vec<(String, Topology)>;
    controller_hosts(plugin: &str) -> Vec<String>;
    op(id: i64) -> Option<OpRow>;
    volume_op(kind: OpKind, volume: &str) -> Option<OpRow>;
    plugin_ids() -> Vec<String>;
    volumes_with_external_id(plugin: &str, external_id: &str) -> Vec<String>;
    duplicate_external_ids() -> Vec<super::DuplicateId>;
    ops_of_host(host: &str) -> Vec<OpRow>;
    assigned_ops(plugin: &str) -> Vec<OpSlot>;
    due_ops(plugin: &str, now: i64) -> Vec<OpSlot>;
    plugins_with_due_ops(now: i64) -> Vec<String>;
    key_op(kind: OpKind, volume: &str) -> Option<OpRow>;
    held_ops(volume: &str) -> Vec<OpRow>;
    volumes_with_held_ops() -> Vec<String>;
    plugin_registrations(plugin: &str) -> Vec<(String, NodeStatus, PluginRegistration)>;
    reconcile_facts(plugin: &str) -> (csivol_rules::reconcile::Known, Vec<csivol_rules::reconcile::Recorded>);
    controller_findings(plugin: Option<&str>) -> Vec<(String, csivol_rules::reconcile::Kept)>;
    snapshot(name: &str) -> Option<crate::model::SnapshotRow>;
    snapshots(volume: Option<&str>) -> Vec<crate::model::SnapshotRow>;
    snapshot_page(volume: Option<&str>, after: &str, limit: usize) -> Vec<crate::model::SnapshotRow>;
    controller_capabilities(plugin: &str) -> Option<api::ControllerCapabilities>;
    group_snapshot(name: &str) -> Option<crate::model::GroupSnapshotRow>;
    group_snapshots() -> Vec<crate::model::GroupSnapshotRow>;
    group_members(group: &str) -> Vec<crate::model::SnapshotRow>;
    tokens() -> Vec<TokenRow>;
    controller_allowances(plugin: &str) -> Vec<(String, String, i64)>;
    nodes_hosting_controller(plugin: &str) -> Vec<String>;
    last_event_of_node(node: &str) -> Option<(String, String)>;
    nodes(only: Option<&str>) -> Vec<NodeRow>;
    node_fence_facts(node: &str) -> NodeFenceRow;
    fence_history(node: &str) -> Vec<api::FenceRecord>;
    expired_claims(now: i64) -> Vec<ClaimRow>;
    any_lease_expired(now: i64) -> bool;
    volume_chunk(after: &str, plugin: Option<&str>, rows: usize) -> VolumeChunk;
    claims(volume: Option<&str>, node: Option<&str>) -> Vec<ClaimRow>;
    claim_page(volume: Option<&str>, node: Option<&str>, after: &str, volumes: usize) -> Vec<ClaimRow>;
    plugin_nodes(only: Option<&str>) -> Vec<PluginNodeRow>;
    volumes_of_plugin(plugin: &str) -> u32;
    parameter_sets(plugin: &str, limit: usize) -> Vec<std::collections::BTreeMap<String, String>>;
    events(after: u64, f: &EventFilter, limit: u32) -> Vec<api::Event>;
    event_page_end(after: u64, f: &EventFilter, limit: u32) -> Option<u64>;
    state_counts() -> StateCounts;
    waiting_ops(plugin: Option<&str>, now: i64) -> Vec<WaitingOps>;
    running_ops(plugin: &str) -> Vec<RunningOpRow>;
    stored_secrets() -> Vec<(String, String)>;
    secrets_check() -> Option<String>;
    retries_kept() -> bool;
    mounts_recorded() -> bool;
    volume_mounts(volume: &str) -> csivol_api::VolumeMounts;
    volume_availability(volume: &str) -> Option<crate::model::VolumeAvailabilityRow>;
    job_volume(volume: &str) -> Option<crate::model::JobVolumeRow>;
    job_volumes_of(alloc: &str, name: &str) -> Vec<crate::model::JobVolumeRow>;
    job_volumes() -> Vec<crate::model::JobVolumeRow>;
    pools_kept() -> bool;
    volume_labels(volume: &str) -> Labels;
    all_volume_labels() -> Vec<(String, Labels)>;
    pools() -> Vec<PoolRow>;
    pool(name: &str) -> Option<PoolRow>;
    cache_key(volume: &str) -> Option<(String, i64)>;
    recent_pool_claims(pool: &str, n: u32) -> Vec<PoolClaimRow>;
    open_pool_claim(volume: &str, alloc: &str) -> Option<PoolClaimRow>;
    lingers(volume: Option<&str>, node: Option<&str>) -> Vec<LingerRow>;
    lingers_due(now: i64) -> Vec<LingerRow>;
    pool_line(pool: Option<&str>) -> Vec<crate::model::PoolWaiterRow>;
    kept_answer(token: &str, key: &str) -> Option<crate::store::KeptAnswer>;
    tombstone(volume: &str, alloc: &str) -> Option<crate::store::Tombstone>;
    tombstoned_under(prefix: &str, alloc: &str) -> Vec<String>;
    meta(prefix: &str) -> Vec<(String, i64)>;
}

/// Every queued operation, by id (for tests that check the whole queue).
#[cfg(test)]
pub fn every_op(conn: &Connection) -> ApiResult<Vec<OpRow>> {
    ops(conn, "1 ORDER BY id", [])
}
