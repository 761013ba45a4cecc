//! How the rows of `model` are stored in SQLite: their columns, decoders and loaders.

use std::str::FromStr;

use csivol_api::ClaimState;
use rusqlite::{Connection, Row, params};

use crate::db::optional;
use crate::error::ApiResult;
use crate::model::{AttachmentRow, ClaimRow, NodePluginRow, NodeRow, OpRow, VolumeRow};

fn parse<T: FromStr<Err = String>>(s: String) -> rusqlite::Result<T> {
    s.parse().map_err(|e: String| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
    })
}

fn json<T: serde::de::DeserializeOwned>(s: String) -> rusqlite::Result<T> {
    serde_json::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
    })
}

pub const VOLUME_COLUMNS: &str = "name, plugin, external_id, access_mode, attachment, fs_type, mount_flags, \
     context, parameters, secrets, capacity_bytes, lifecycle, error, created_at, updated_at, modify_index, \
     expansion, accessible_topology, topology_request";

impl VolumeRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let name: String = r.get(0)?;
        let secrets = crate::secrets::open(&name, &r.get::<_, String>(9)?).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(9, rusqlite::types::Type::Text, e.into())
        })?;
        Ok(Self {
            name,
            plugin: r.get(1)?,
            external_id: r.get(2)?,
            access_mode: parse(r.get(3)?)?,
            attachment: parse(r.get(4)?)?,
            fs_type: r.get(5)?,
            mount_flags: json(r.get(6)?)?,
            context: json(r.get(7)?)?,
            parameters: json(r.get(8)?)?,
            secrets,
            capacity_bytes: r.get::<_, Option<i64>>(10)?.map(|v| v as u64),
            lifecycle: parse(r.get(11)?)?,
            error: r.get(12)?,
            created_at: r.get(13)?,
            updated_at: r.get(14)?,
            modify_index: r.get::<_, i64>(15)? as u64,
            expansion: r.get::<_, Option<String>>(16)?.map(json).transpose()?,
            accessible_topology: json(r.get(17)?)?,
            topology_request: r.get::<_, Option<String>>(18)?.map(json).transpose()?,
        })
    }

    pub fn load(conn: &Connection, name: &str) -> ApiResult<Option<Self>> {
        let sql = format!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE name = ?1");
        optional(conn.prepare_cached(&sql)?.query_row([name], Self::from_row))
    }
}

pub const CLAIM_COLUMNS: &str = "volume, alloc, node, mode, state, target_path, error, next_retry_at, created_at, updated_at, modify_index, \
     waiting, waiting_since, waiting_timeout_ms, condition, ttl_ms, expires_at, labels, release_pending";

impl ClaimRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            volume: r.get(0)?,
            alloc: r.get(1)?,
            node: r.get(2)?,
            mode: parse(r.get(3)?)?,
            state: parse(r.get(4)?)?,
            target_path: r.get(5)?,
            error: r.get(6)?,
            next_retry_at: r.get(7)?,
            created_at: r.get(8)?,
            updated_at: r.get(9)?,
            modify_index: r.get::<_, i64>(10)? as u64,
            waiting: match (r.get(11)?, r.get(12)?, r.get(13)?) {
                (Some(reason), Some(since), Some(timeout)) => Some((reason, since, timeout)),
                _ => None,
            },
            condition: r.get(14)?,
            ttl_ms: r.get(15)?,
            expires_at: r.get(16)?,
            labels: serde_json::from_str(&r.get::<_, String>(17)?).unwrap_or_default(),
            release_pending: r.get(18)?,
        })
    }

    pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<Self>> {
        let sql = format!(
            "SELECT {CLAIM_COLUMNS} FROM claims WHERE volume = ?1 ORDER BY created_at, alloc"
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map([volume], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    pub fn load(conn: &Connection, volume: &str, alloc: &str) -> ApiResult<Option<Self>> {
        let sql = format!("SELECT {CLAIM_COLUMNS} FROM claims WHERE volume = ?1 AND alloc = ?2");
        optional(
            conn.prepare_cached(&sql)?
                .query_row([volume, alloc], Self::from_row),
        )
    }

    /// This claim's place in its volume's queue (1 first), when queued.
    pub fn queue_position(&self, conn: &Connection) -> ApiResult<Option<u32>> {
        if self.state != ClaimState::Queued {
            return Ok(None);
        }
        let ahead: u32 = conn
            .prepare_cached(
                "SELECT count(*) FROM claims WHERE volume = ?1 AND state = 'queued' \
                 AND (created_at < ?2 OR (created_at = ?2 AND alloc < ?3))",
            )?
            .query_row(params![self.volume, self.created_at, self.alloc], |r| {
                r.get(0)
            })?;
        Ok(Some(ahead + 1))
    }
}

pub const ATTACHMENT_COLUMNS: &str =
    "volume, node, state, publish_context, forced, error, next_retry_at, updated_at";

impl AttachmentRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            volume: r.get(0)?,
            node: r.get(1)?,
            state: parse(r.get(2)?)?,
            publish_context: json(r.get(3)?)?,
            forced: r.get(4)?,
            error: r.get(5)?,
            next_retry_at: r.get(6)?,
            updated_at: r.get(7)?,
        })
    }

    pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<Self>> {
        let sql =
            format!("SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE volume = ?1 ORDER BY node");
        let mut stmt = conn.prepare_cached(&sql)?;
        let rows = stmt
            .query_map([volume], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

pub const NODE_COLUMNS: &str = "name, status, registered_at, lost_at, fence_after_ms, fenced_at, \
     eligibility, stopped_at, stop_took_down";

impl NodeRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            name: r.get(0)?,
            status: parse(r.get(1)?)?,
            registered_at: r.get(2)?,
            lost_at: r.get(3)?,
            fence_after_ms: r.get(4)?,
            fenced_at: r.get(5)?,
            eligibility: parse(r.get(6)?)?,
            stopped_at: r.get(7)?,
            stop_took_down: r.get::<_, Option<bool>>(8)?.unwrap_or(false),
        })
    }

    pub fn load(conn: &Connection, name: &str) -> ApiResult<Option<Self>> {
        let sql = format!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = ?1");
        optional(conn.prepare_cached(&sql)?.query_row([name], Self::from_row))
    }
}

impl NodePluginRow {
    pub fn of_node(conn: &Connection, node: &str) -> ApiResult<Vec<Self>> {
        let mut stmt = conn.prepare_cached(
            "SELECT plugin, csi_node_id, max_volumes, node_service, controller, topology, \
             json_extract(registration, '$.node.ready_check'), observed \
             FROM node_plugins WHERE node = ?1 ORDER BY plugin",
        )?;
        let rows = stmt
            .query_map([node], |r| {
                Ok(Self {
                    plugin: r.get(0)?,
                    csi_node_id: r.get(1)?,
                    max_volumes: r.get(2)?,
                    node_service: r.get(3)?,
                    controller: r.get(4)?,
                    topology: json(r.get(5)?)?,
                    ready_check: r.get(6)?,
                    observed: r
                        .get::<_, Option<String>>(7)?
                        .and_then(|o| serde_json::from_str(&o).ok()),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

/// Whether volumes of `plugin` need ControllerPublish before a node may use them: yes when
/// a controller host says it has PUBLISH_UNPUBLISH_VOLUME, or when no host has registered yet
/// but the plugin announces a controller service (claims then wait for a host).
pub fn needs_controller_publish(conn: &Connection, plugin: &str) -> ApiResult<bool> {
    let mut stmt = conn.prepare_cached(
        // Three index probes (node_plugins_caps, node_plugins_service), whatever the number
        // of nodes.
        "SELECT EXISTS (SELECT 1 FROM node_plugins WHERE plugin = ?1 AND controller = 1), \
                EXISTS (SELECT 1 FROM node_plugins WHERE plugin = ?1 AND controller = 1 AND controller_publish = 1), \
                EXISTS (SELECT 1 FROM node_plugins WHERE plugin = ?1 AND controller_service = 1)",
    )?;
    let (hosted, publish, service): (bool, bool, bool) =
        stmt.query_row([plugin], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(if hosted { publish } else { service })
}

/// How many volumes of `plugin` occupy a slot on `node`: attached there (detaching ones
/// included) or claimed there.
pub fn slots_used(conn: &Connection, node: &str, plugin: &str) -> ApiResult<u32> {
    let mut stmt = conn.prepare_cached(
        // From the node's few attachments and claims to their volumes by primary key: a join
        // the other way scans every volume of the plugin, which grows with the inventory.
        "SELECT count(*) FROM ( \
           SELECT a.volume FROM attachments a WHERE a.node = ?1 \
             AND (SELECT plugin FROM volumes WHERE name = a.volume) = ?2 \
           UNION SELECT c.volume FROM claims c WHERE c.node = ?1 AND c.state != 'queued' \
             AND (SELECT plugin FROM volumes WHERE name = c.volume) = ?2)",
    )?;
    Ok(stmt.query_row(params![node, plugin], |r| r.get(0))?)
}

pub const OP_COLUMNS: &str =
    "id, kind, plugin, volume, node, host, attempt, not_before, payload, created_at";

pub fn op_from_row(r: &Row<'_>) -> rusqlite::Result<OpRow> {
    Ok(OpRow {
        id: r.get(0)?,
        kind: parse(r.get(1)?)?,
        plugin: r.get(2)?,
        volume: r.get(3)?,
        node: r.get(4)?,
        host: r.get(5)?,
        attempt: r.get(6)?,
        not_before: r.get(7)?,
        payload: r.get(8)?,
        created_at: r.get(9)?,
    })
}
