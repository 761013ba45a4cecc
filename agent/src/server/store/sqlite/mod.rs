//! The SQLite store: [`Snapshot`] over a connection (a read connection's snapshot, or the
//! writer's transaction), [`Txn`] over the writer's [`WriteCtx`]. Every statement runs
//! through the connection's statement cache: the same few run for every claim, and
//! preparing them each time would cost more than running them.

mod rows;
mod snapshots;

use std::collections::BTreeMap;

use csivol_api::domain::PublishContext;
use csivol_api::{
    self as api, AttachmentState, ClaimState, NodeStatus, PluginRegistration, Topology,
};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Event, NewClaim, OpSlot, Snapshot, Txn};
use crate::server::db::{WriteCtx, optional};
use crate::server::error::{ApiError, ApiResult};
use crate::server::kinds::OpKind;
use crate::server::model::{
    AttachmentRow, ClaimRow, Lifecycle, NodePluginRow, NodeRow, OpRow, VolumeRow, to_json,
};
use crate::server::watch::Key;

pub use rows::{
    ATTACHMENT_COLUMNS, CLAIM_COLUMNS, NODE_COLUMNS, VOLUME_COLUMNS, needs_controller_publish,
    slots_used,
};

fn exec(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> ApiResult<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params)?)
}

fn strings(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> ApiResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt
        .query_map(params, |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn ops(conn: &Connection, filter: &str, params: impl rusqlite::Params) -> ApiResult<Vec<OpRow>> {
    let sql = format!("SELECT {} FROM ops WHERE {filter}", rows::OP_COLUMNS);
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params, rows::op_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

fn slots(conn: &Connection, filter: &str, params: impl rusqlite::Params) -> ApiResult<Vec<OpSlot>> {
    let sql = format!("SELECT id, volume, node, host FROM ops WHERE {filter}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params, |r| {
            Ok(OpSlot {
                id: r.get(0)?,
                volume: r.get(1)?,
                node: r.get(2)?,
                host: r.get(3)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

impl Snapshot for Connection {
    fn reconcile_facts(
        &self,
        plugin: &str,
    ) -> ApiResult<(
        crate::server::reconcile::Known,
        Vec<crate::server::reconcile::Recorded>,
    )> {
        reconcile_facts(self, plugin)
    }

    fn controller_findings(
        &self,
        plugin: Option<&str>,
    ) -> ApiResult<Vec<(String, crate::server::reconcile::Kept)>> {
        controller_findings(self, plugin)
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

    fn claims_of_node(&self, node: &str, state: Option<ClaimState>) -> ApiResult<Vec<ClaimRow>> {
        let sql = format!(
            "SELECT {CLAIM_COLUMNS} FROM claims WHERE node = ?1 AND (?2 IS NULL OR state = ?2) ORDER BY volume, alloc"
        );
        let mut stmt = self.prepare_cached(&sql)?;
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
        let sql = format!(
            "SELECT {} FROM attachments WHERE volume = ?1 AND node = ?2",
            ATTACHMENT_COLUMNS
        );
        optional(
            self.prepare_cached(&sql)?
                .query_row([volume, node], AttachmentRow::from_row),
        )
    }

    fn attachments_of_node(&self, node: &str) -> ApiResult<Vec<AttachmentRow>> {
        let sql = format!(
            "SELECT {} FROM attachments WHERE node = ?1 ORDER BY volume",
            ATTACHMENT_COLUMNS
        );
        let mut stmt = self.prepare_cached(&sql)?;
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

    fn ops_of_host(&self, host: &str) -> ApiResult<Vec<OpRow>> {
        ops(self, "host = ?1 ORDER BY id", [host])
    }

    fn assigned_ops(&self, plugin: &str) -> ApiResult<Vec<OpSlot>> {
        slots(self, "plugin = ?1 AND host IS NOT NULL", [plugin])
    }

    fn due_ops(&self, plugin: &str, now: i64) -> ApiResult<Vec<OpSlot>> {
        slots(
            self,
            "plugin = ?1 AND host IS NULL AND not_before <= ?2 ORDER BY id LIMIT 1000",
            params![plugin, now],
        )
    }

    fn plugins_with_due_ops(&self, now: i64) -> ApiResult<Vec<String>> {
        strings(
            self,
            "SELECT DISTINCT plugin FROM ops WHERE host IS NULL AND not_before <= ?1",
            [now],
        )
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

    fn snapshot(&self, name: &str) -> ApiResult<Option<crate::server::model::SnapshotRow>> {
        snapshots::snapshot(self, name)
    }

    fn snapshots(&self, volume: Option<&str>) -> ApiResult<Vec<crate::server::model::SnapshotRow>> {
        snapshots::snapshots(self, volume)
    }

    fn controller_capabilities(
        &self,
        plugin: &str,
    ) -> ApiResult<Option<api::ControllerCapabilities>> {
        snapshots::controller_capabilities(self, plugin)
    }
}

/// Reads inside a write see the transaction's own changes: they go to its connection.
macro_rules! reads_through_the_transaction {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        impl Snapshot for WriteCtx<'_> {
            $(fn $name(&self, $($arg: $ty),*) -> ApiResult<$ret> {
                <Connection as Snapshot>::$name(self.tx, $($arg),*)
            })*
        }
    };
}

reads_through_the_transaction! {
    volume(name: &str) -> Option<VolumeRow>;
    claims_of_volume(volume: &str) -> Vec<ClaimRow>;
    claim(volume: &str, alloc: &str) -> Option<ClaimRow>;
    claims_of_node(node: &str, state: Option<ClaimState>) -> Vec<ClaimRow>;
    queue_position(claim: &ClaimRow) -> Option<u32>;
    attachments_of_volume(volume: &str) -> Vec<AttachmentRow>;
    attachment(volume: &str, node: &str) -> Option<AttachmentRow>;
    attachments_of_node(node: &str) -> Vec<AttachmentRow>;
    unstaging_on(node: &str) -> Vec<api::DesiredUnstage>;
    node(name: &str) -> Option<NodeRow>;
    node_statuses(volume: &str, also: Option<&str>) -> Vec<(String, NodeStatus)>;
    node_plugins(node: &str) -> Vec<NodePluginRow>;
    needs_controller_publish(plugin: &str) -> bool;
    slots_used(node: &str, plugin: &str) -> u32;
    ready_plugin_nodes(plugin: &str) -> Vec<(String, Topology)>;
    controller_hosts(plugin: &str) -> Vec<String>;
    op(id: i64) -> Option<OpRow>;
    ops_of_host(host: &str) -> Vec<OpRow>;
    assigned_ops(plugin: &str) -> Vec<OpSlot>;
    due_ops(plugin: &str, now: i64) -> Vec<OpSlot>;
    plugins_with_due_ops(now: i64) -> Vec<String>;
    plugin_registrations(plugin: &str) -> Vec<(String, NodeStatus, PluginRegistration)>;
    reconcile_facts(plugin: &str) -> (crate::server::reconcile::Known, Vec<crate::server::reconcile::Recorded>);
    controller_findings(plugin: Option<&str>) -> Vec<(String, crate::server::reconcile::Kept)>;
    snapshot(name: &str) -> Option<crate::server::model::SnapshotRow>;
    snapshots(volume: Option<&str>) -> Vec<crate::server::model::SnapshotRow>;
    controller_capabilities(plugin: &str) -> Option<api::ControllerCapabilities>;
}

fn reconcile_facts(
    conn: &Connection,
    plugin: &str,
) -> ApiResult<(
    crate::server::reconcile::Known,
    Vec<crate::server::reconcile::Recorded>,
)> {
    use crate::server::reconcile::{Known, Recorded};
    let mut known = Known::default();
    let mut stmt = conn.prepare_cached(
        "SELECT external_id, name FROM volumes WHERE plugin = ?1 AND external_id != ''",
    )?;
    for row in stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?)))? {
        let (ext, name): (String, String) = row?;
        known.volumes.insert(ext, name);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT csi_node_id, node FROM node_plugins WHERE plugin = ?1 AND csi_node_id IS NOT NULL",
    )?;
    for row in stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?)))? {
        let (id, node): (String, String) = row?;
        known.nodes.insert(id, node);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT a.volume, v.external_id, a.node, np.csi_node_id, a.state, a.updated_at \
         FROM attachments a JOIN volumes v ON v.name = a.volume \
         LEFT JOIN node_plugins np ON np.node = a.node AND np.plugin = v.plugin \
         WHERE v.plugin = ?1 ORDER BY a.volume, a.node",
    )?;
    let rows = stmt.query_map([plugin], |r| {
        let state: String = r.get(4)?;
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, state, r.get(5)?))
    })?;
    let mut recorded = Vec::new();
    for row in rows {
        let (volume, external_id, node, node_id, state, updated_at): (
            String,
            String,
            String,
            Option<String>,
            String,
            i64,
        ) = row?;
        let state = serde_json::from_value(serde_json::Value::String(state))
            .map_err(|e| ApiError::internal(format!("attachment state in the database: {e}")))?;
        recorded.push(Recorded {
            volume,
            external_id,
            node,
            node_id,
            state,
            updated_at,
        });
    }
    Ok((known, recorded))
}

fn controller_findings(
    conn: &Connection,
    plugin: Option<&str>,
) -> ApiResult<Vec<(String, crate::server::reconcile::Kept)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT plugin, findings FROM controller_findings \
         WHERE ?1 IS NULL OR plugin = ?1 ORDER BY plugin",
    )?;
    let rows = stmt.query_map([plugin], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (plugin, json): (String, String) = row?;
        let kept: Vec<crate::server::reconcile::Kept> = serde_json::from_str(&json)
            .map_err(|e| ApiError::internal(format!("controller findings in the database: {e}")))?;
        out.extend(kept.into_iter().map(|k| (plugin.clone(), k)));
    }
    Ok(out)
}

impl Txn for WriteCtx<'_> {
    fn index(&self) -> u64 {
        self.index
    }

    fn now(&self) -> i64 {
        self.now
    }

    fn touch(&mut self, key: Key) {
        WriteCtx::touch(self, key);
    }

    fn after_commit(&mut self, f: Box<dyn FnOnce() + Send>) {
        WriteCtx::after_commit(self, f);
    }

    fn append_event(&mut self, e: Event<'_>) -> ApiResult<()> {
        exec(
            self.tx,
            "INSERT INTO events (at, kind, volume, node, alloc, actor, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                self.now,
                e.kind.as_str(),
                e.volume,
                e.node,
                e.alloc,
                e.actor,
                e.message
            ],
        )?;
        Ok(())
    }

    fn put_volume(&mut self, v: &VolumeRow) -> ApiResult<()> {
        let secrets =
            crate::server::secrets::seal(&v.name, &v.secrets).map_err(ApiError::internal)?;
        exec(
            self.tx,
            "INSERT INTO volumes (name, plugin, external_id, access_mode, attachment, fs_type, mount_flags, context, \
             parameters, secrets, capacity_bytes, lifecycle, error, created_at, updated_at, modify_index, \
             accessible_topology, topology_request) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15, ?16, ?17) \
             ON CONFLICT (name) DO UPDATE SET plugin = ?2, external_id = ?3, access_mode = ?4, attachment = ?5, \
             fs_type = ?6, mount_flags = ?7, context = ?8, parameters = ?9, secrets = ?10, capacity_bytes = ?11, \
             lifecycle = ?12, error = ?13, updated_at = ?14, modify_index = ?15, accessible_topology = ?16, \
             topology_request = ?17",
            params![
                v.name,
                v.plugin,
                v.external_id,
                v.access_mode.as_str(),
                v.attachment.as_str(),
                v.fs_type,
                to_json(&v.mount_flags),
                to_json(&v.context),
                to_json(&v.parameters),
                secrets,
                v.capacity_bytes.map(|c| c as i64),
                v.lifecycle.as_str(),
                v.error,
                self.now,
                self.index as i64,
                to_json(&v.accessible_topology),
                v.topology_request.as_ref().map(to_json),
            ],
        )?;
        Ok(())
    }

    fn stamp_volume(&mut self, name: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE volumes SET modify_index = ?1, updated_at = ?2 WHERE name = ?3",
            params![self.index as i64, self.now, name],
        )?;
        Ok(())
    }

    fn set_volume_lifecycle(
        &mut self,
        name: &str,
        lifecycle: Lifecycle,
        error: Option<&str>,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE volumes SET lifecycle = ?1, error = ?2, updated_at = ?3, modify_index = ?4 WHERE name = ?5",
            params![lifecycle.as_str(), error, self.now, self.index as i64, name],
        )?;
        Ok(())
    }

    fn set_volume_error(&mut self, name: &str, error: &str, changed: bool) -> ApiResult<()> {
        if changed {
            exec(
                self.tx,
                "UPDATE volumes SET error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![error, self.now, self.index as i64, name],
            )?;
        } else {
            exec(
                self.tx,
                "UPDATE volumes SET error = ?1, modify_index = ?2 WHERE name = ?3",
                params![error, self.index as i64, name],
            )?;
        }
        Ok(())
    }

    fn volume_created(
        &mut self,
        name: &str,
        external_id: &str,
        capacity_bytes: u64,
        context: &BTreeMap<String, String>,
        accessible_topology: &[Topology],
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE volumes SET external_id = ?1, capacity_bytes = ?2, context = ?3, lifecycle = 'ready', error = NULL, \
             updated_at = ?4, modify_index = ?5, accessible_topology = ?7 WHERE name = ?6 AND lifecycle = 'creating'",
            params![
                external_id,
                capacity_bytes as i64,
                to_json(context),
                self.now,
                self.index as i64,
                name,
                to_json(&accessible_topology),
            ],
        )?;
        Ok(())
    }

    fn set_volume_expansion(
        &mut self,
        name: &str,
        capacity_bytes: Option<u64>,
        expansion: Option<&api::Expansion>,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE volumes SET capacity_bytes = COALESCE(?1, capacity_bytes), expansion = ?2, \
             updated_at = ?3, modify_index = ?4 WHERE name = ?5",
            params![
                capacity_bytes.map(|c| c as i64),
                expansion.map(to_json),
                self.now,
                self.index as i64,
                name
            ],
        )?;
        Ok(())
    }

    fn delete_volume(&mut self, name: &str) -> ApiResult<()> {
        exec(self.tx, "DELETE FROM volumes WHERE name = ?1", [name])?;
        exec(self.tx, "DELETE FROM ops WHERE volume = ?1", [name])?;
        Ok(())
    }

    fn delete_deleting_volume(&mut self, name: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM volumes WHERE name = ?1 AND lifecycle = 'deleting'",
            [name],
        )?;
        Ok(())
    }

    fn insert_claim(&mut self, c: NewClaim<'_>) -> ApiResult<()> {
        let req = c.request;
        exec(
            self.tx,
            "INSERT INTO claims (volume, alloc, node, mode, state, created_at, updated_at, modify_index, \
             ttl_ms, expires_at, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10)",
            params![
                c.volume,
                req.alloc,
                req.node,
                req.mode.as_str(),
                c.state.as_str(),
                self.now,
                self.index as i64,
                req.ttl_ms.map(|t| t as i64),
                c.expires_at,
                to_json(&req.labels)
            ],
        )?;
        Ok(())
    }

    fn set_claim_state(&mut self, volume: &str, alloc: &str, state: ClaimState) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET state = ?1, updated_at = ?2, modify_index = ?3, \
             error = CASE WHEN ?1 IN ('ready', 'releasing') THEN NULL ELSE error END, \
             next_retry_at = CASE WHEN ?1 IN ('ready', 'releasing', 'failed', 'blocked') THEN NULL ELSE next_retry_at END, \
             waiting = CASE WHEN ?1 = 'publishing' THEN waiting END, \
             waiting_since = CASE WHEN ?1 = 'publishing' THEN waiting_since END, \
             waiting_timeout_ms = CASE WHEN ?1 = 'publishing' THEN waiting_timeout_ms END, \
             condition = CASE WHEN ?1 IN ('ready', 'publishing', 'blocked') THEN condition END \
             WHERE volume = ?4 AND alloc = ?5",
            params![state.as_str(), self.now, self.index as i64, volume, alloc],
        )?;
        Ok(())
    }

    fn set_claim_target(&mut self, volume: &str, alloc: &str, target_path: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET target_path = ?1, updated_at = ?2, modify_index = ?3 WHERE volume = ?4 AND alloc = ?5",
            params![target_path, self.now, self.index as i64, volume, alloc],
        )?;
        Ok(())
    }

    fn set_claim_waiting(
        &mut self,
        volume: &str,
        alloc: &str,
        reason: &str,
        since_ms: i64,
        timeout_ms: i64,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET waiting = ?1, waiting_since = ?2, waiting_timeout_ms = ?3, \
             updated_at = ?4, modify_index = ?5 WHERE volume = ?6 AND alloc = ?7",
            params![
                reason,
                since_ms,
                timeout_ms,
                self.now,
                self.index as i64,
                volume,
                alloc
            ],
        )?;
        Ok(())
    }

    fn set_claim_condition(
        &mut self,
        volume: &str,
        alloc: &str,
        condition: Option<&str>,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET condition = ?1, updated_at = ?2, modify_index = ?3 \
             WHERE volume = ?4 AND alloc = ?5",
            params![condition, self.now, self.index as i64, volume, alloc],
        )?;
        Ok(())
    }

    fn set_claim_error(
        &mut self,
        volume: &str,
        alloc: &str,
        error: &str,
        next_retry_at: Option<i64>,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 WHERE volume = ?5 AND alloc = ?6",
            params![
                error,
                next_retry_at,
                self.now,
                self.index as i64,
                volume,
                alloc
            ],
        )?;
        Ok(())
    }

    fn set_claim_release_pending(&mut self, volume: &str, alloc: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE claims SET release_pending = 1 WHERE volume = ?1 AND alloc = ?2",
            params![volume, alloc],
        )?;
        Ok(())
    }

    fn delete_claim(&mut self, volume: &str, alloc: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM claims WHERE volume = ?1 AND alloc = ?2",
            params![volume, alloc],
        )?;
        Ok(())
    }

    fn insert_attachment(
        &mut self,
        volume: &str,
        node: &str,
        state: AttachmentState,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "INSERT INTO attachments (volume, node, state, publish_context, updated_at) \
             VALUES (?1, ?2, ?3, '{}', ?4)",
            params![volume, node, state.as_str(), self.now],
        )?;
        Ok(())
    }

    fn set_attachment_state(
        &mut self,
        volume: &str,
        node: &str,
        state: AttachmentState,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE attachments SET state = ?1, updated_at = ?2, error = NULL, next_retry_at = NULL \
             WHERE volume = ?3 AND node = ?4",
            params![state.as_str(), self.now, volume, node],
        )?;
        Ok(())
    }

    fn set_attachment_detaching(
        &mut self,
        volume: &str,
        node: &str,
        forced: bool,
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE attachments SET state = 'detaching', forced = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
             WHERE volume = ?3 AND node = ?4",
            params![forced, self.now, volume, node],
        )?;
        Ok(())
    }

    fn attachment_published(
        &mut self,
        volume: &str,
        node: &str,
        publish_context: &PublishContext,
    ) -> ApiResult<bool> {
        let updated = exec(
            self.tx,
            "UPDATE attachments SET state = 'attached', publish_context = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
             WHERE volume = ?3 AND node = ?4 AND state = 'attaching'",
            params![to_json(publish_context), self.now, volume, node],
        )?;
        Ok(updated > 0)
    }

    fn set_attachment_error(
        &mut self,
        volume: &str,
        node: &str,
        error: &str,
        next_retry_at: Option<i64>,
    ) -> ApiResult<bool> {
        let changed = exec(
            self.tx,
            "UPDATE attachments SET error = ?1, next_retry_at = ?2, updated_at = ?3 \
             WHERE volume = ?4 AND node = ?5",
            params![error, next_retry_at, self.now, volume, node],
        )?;
        Ok(changed > 0)
    }

    fn note_attach_waiting(&mut self, volume: &str, node: &str, why: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE attachments SET error = ?1 WHERE volume = ?2 AND node = ?3",
            params![why, volume, node],
        )?;
        exec(
            self.tx,
            "UPDATE claims SET error = ?1, modify_index = ?2 \
             WHERE volume = ?3 AND node = ?4 AND state IN ('attaching', 'pending')",
            params![why, self.index as i64, volume, node],
        )?;
        Ok(())
    }

    fn set_attach_retry(
        &mut self,
        volume: &str,
        node: &str,
        error: &str,
        next_retry_at: i64,
    ) -> ApiResult<()> {
        self.set_attachment_error(volume, node, error, Some(next_retry_at))?;
        exec(
            self.tx,
            "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 \
             WHERE volume = ?5 AND node = ?6 AND state IN ('attaching', 'pending')",
            params![
                error,
                next_retry_at,
                self.now,
                self.index as i64,
                volume,
                node
            ],
        )?;
        Ok(())
    }

    fn delete_attachment(&mut self, volume: &str, node: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM attachments WHERE volume = ?1 AND node = ?2",
            params![volume, node],
        )?;
        Ok(())
    }

    fn register_node(
        &mut self,
        name: &str,
        fence_after_ms: Option<u64>,
        labels: &BTreeMap<String, String>,
        plugins: &[PluginRegistration],
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "INSERT INTO nodes (name, status, registered_at, fence_after_ms, labels) VALUES (?1, 'ready', ?2, ?3, ?4) \
             ON CONFLICT (name) DO UPDATE SET status = 'ready', lost_at = NULL, fence_after_ms = ?3, labels = ?4, \
             fence_failures = 0, fence_error = NULL",
            params![
                name,
                self.now,
                fence_after_ms.map(|v| v as i64),
                to_json(labels)
            ],
        )?;
        exec(self.tx, "DELETE FROM node_plugins WHERE node = ?1", [name])?;
        for p in plugins {
            let node_part = p.node.as_ref();
            exec(
                self.tx,
                "INSERT INTO node_plugins (node, plugin, registration, csi_node_id, max_volumes, node_service, controller, \
                 controller_service, controller_publish, stage_unstage, topology) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    name,
                    p.id,
                    to_json(p),
                    node_part.map(|n| n.info.node_id.clone()),
                    node_part.map_or(0, |n| n.info.max_volumes_per_node),
                    node_part.is_some(),
                    p.controller.is_some(),
                    p.capabilities.controller_service,
                    p.controller.is_some_and(|c| c.publish_unpublish_volume),
                    node_part.is_some_and(|n| n.capabilities.stage_unstage_volume),
                    to_json(
                        &node_part
                            .and_then(|n| n.info.accessible_topology.clone())
                            .unwrap_or_default()
                    ),
                ],
            )?;
        }
        Ok(())
    }

    fn set_node_status(&mut self, name: &str, status: NodeStatus) -> ApiResult<()> {
        if status == NodeStatus::Lost {
            exec(
                self.tx,
                "UPDATE nodes SET status = 'lost', lost_at = ?1 WHERE name = ?2",
                params![self.now, name],
            )?;
        } else {
            exec(
                self.tx,
                "UPDATE nodes SET status = ?1 WHERE name = ?2",
                params![status.as_str(), name],
            )?;
        }
        Ok(())
    }

    fn set_node_fenced_at(&mut self, name: &str, at_ms: i64) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE nodes SET fenced_at = ?1 WHERE name = ?2",
            params![at_ms, name],
        )?;
        Ok(())
    }

    fn queue_op(
        &mut self,
        kind: OpKind,
        plugin: &str,
        volume: &str,
        node: Option<&str>,
        payload: &str,
    ) -> ApiResult<()> {
        let exists: Option<i64> = self
            .tx
            .prepare_cached("SELECT id FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS ?3")?
            .query_row(params![volume, kind.as_str(), node], |r| r.get(0))
            .optional()?;
        if exists.is_none() {
            exec(
                self.tx,
                "INSERT INTO ops (kind, plugin, volume, node, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![kind.as_str(), plugin, volume, node, payload, self.now],
            )?;
        }
        Ok(())
    }

    fn assign_op(&mut self, id: i64, host: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE ops SET host = ?1, assigned_at = ?2 WHERE id = ?3",
            params![host, self.now, id],
        )?;
        Ok(())
    }

    fn note_op_waiting(&mut self, id: i64, why: &str) -> ApiResult<bool> {
        let changed = exec(
            self.tx,
            "UPDATE ops SET error = ?1 WHERE id = ?2 AND error IS NOT ?1",
            params![why, id],
        )?;
        Ok(changed > 0)
    }

    fn retry_op(&mut self, id: i64, not_before: i64, error: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE ops SET attempt = attempt + 1, host = NULL, assigned_at = NULL, not_before = ?1, error = ?2 WHERE id = ?3",
            params![not_before, error, id],
        )?;
        Ok(())
    }

    fn unassign_ops_of(&mut self, host: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "UPDATE ops SET host = NULL, assigned_at = NULL WHERE host = ?1",
            [host],
        )?;
        Ok(())
    }

    fn delete_op(&mut self, id: i64) -> ApiResult<()> {
        exec(self.tx, "DELETE FROM ops WHERE id = ?1", [id])?;
        Ok(())
    }

    fn put_controller_findings(
        &mut self,
        plugin: &str,
        findings: &[crate::server::reconcile::Kept],
    ) -> ApiResult<()> {
        exec(
            self.tx,
            "INSERT INTO controller_findings (plugin, findings, listed_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (plugin) DO UPDATE SET findings = ?2, listed_at = ?3",
            params![plugin, to_json(&findings), self.now()],
        )?;
        Ok(())
    }

    fn delete_op_for(&mut self, kind: OpKind, volume: &str, node: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = ?2 AND node = ?3",
            params![volume, kind.as_str(), node],
        )?;
        Ok(())
    }

    fn put_snapshot(&mut self, s: &crate::server::model::SnapshotRow) -> ApiResult<()> {
        snapshots::put(self.tx, s, self.index, self.now)
    }

    fn delete_snapshot(&mut self, name: &str) -> ApiResult<()> {
        exec(self.tx, "DELETE FROM snapshots WHERE name = ?1", [name])?;
        Ok(())
    }

    fn delete_key_op(&mut self, kind: OpKind, key: &str) -> ApiResult<()> {
        exec(
            self.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS NULL",
            params![key, kind.as_str()],
        )?;
        Ok(())
    }
}
