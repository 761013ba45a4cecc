//! How the rows of `model` are stored in SQLite: their columns, decoders and loaders.

use std::str::FromStr;

use csivol_api::{self as api, ClaimState};
use rusqlite::types::{Type, ValueRef};
use rusqlite::{Connection, Row, params};

use crate::error::ApiResult;
use crate::model::listing::{StoredRow, VolumeFields};
use crate::model::{AttachmentRow, ClaimRow, NodePluginRow, NodeRow, OpRow, VolumeRow};
use crate::store::sqlite::db::optional;

/// Column `i` as text borrowed from the row: decoding a column this way makes no `String`
/// for a value that is only parsed (a listing decodes some 20 columns per volume).
fn text<'r>(r: &'r Row<'_>, i: usize) -> rusqlite::Result<&'r str> {
    r.get_ref(i)?
        .as_str()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, e.into()))
}

fn parse<T: FromStr<Err = String>>(r: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    text(r, i)?
        .parse()
        .map_err(|e: String| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, e.into()))
}

fn json<T: serde::de::DeserializeOwned>(r: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    serde_json::from_str(text(r, i)?)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, e.into()))
}

/// A JSON column holding a list or a map, most often stored empty: `empty` (`[]` for a
/// list, `{}` for a map) is the collection's empty value without a parser, which a listing
/// of many volumes would otherwise start five times a row.
fn collection<T: serde::de::DeserializeOwned + Default>(
    r: &Row<'_>,
    i: usize,
    empty: &str,
) -> rusqlite::Result<T> {
    match text(r, i)? {
        s if s == empty => Ok(T::default()),
        s => serde_json::from_str(s)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, e.into())),
    }
}

/// A nullable JSON column: NULL is `None`.
fn json_or_null<T: serde::de::DeserializeOwned>(
    r: &Row<'_>,
    i: usize,
) -> rusqlite::Result<Option<T>> {
    match r.get_ref(i)? {
        ValueRef::Null => Ok(None),
        _ => json(r, i).map(Some),
    }
}

pub const VOLUME_COLUMNS: &str = "name, plugin, external_id, access_mode, attachment, fs_type, mount_flags, \
     context, parameters, secrets, capacity_bytes, lifecycle, error, created_at, updated_at, modify_index, \
     expansion, accessible_topology, topology_request, mutable_parameters, modification";

impl VolumeRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let name: String = r.get(0)?;
        let secrets = crate::secrets::open(&name, text(r, 9)?)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(9, Type::Text, e.into()))?;
        Ok(Self {
            name,
            plugin: r.get(1)?,
            external_id: r.get(2)?,
            access_mode: parse(r, 3)?,
            attachment: parse(r, 4)?,
            fs_type: r.get(5)?,
            mount_flags: collection(r, 6, "[]")?,
            context: collection(r, 7, "{}")?,
            parameters: collection(r, 8, "{}")?,
            secrets,
            capacity_bytes: r.get::<_, Option<i64>>(10)?.map(|v| v as u64),
            lifecycle: parse(r, 11)?,
            error: r.get(12)?,
            created_at: r.get(13)?,
            updated_at: r.get(14)?,
            modify_index: r.get::<_, i64>(15)? as u64,
            expansion: json_or_null(r, 16)?,
            accessible_topology: collection(r, 17, "[]")?,
            topology_request: json_or_null(r, 18)?,
            mutable_parameters: collection(r, 19, "{}")?,
            modification: json_or_null(r, 20)?,
        })
    }

    pub fn load(conn: &Connection, name: &str) -> ApiResult<Option<Self>> {
        let sql = fixed_sql!("SELECT {VOLUME_COLUMNS} FROM volumes WHERE name = ?1");
        optional(conn.prepare_cached(sql)?.query_row([name], Self::from_row))
    }
}

/// A volume row of [`VOLUME_COLUMNS`] as a listing copied it ([`StoredRows`]), read in
/// place: the same columns as [`VolumeRow::from_row`], the secrets' names only.
pub fn volume_fields(r: StoredRow<'_>) -> Result<VolumeFields<'_>, String> {
    fn parsed<T: FromStr<Err = String>>(r: &StoredRow<'_>, i: usize) -> Result<T, String> {
        r.text(i)?.parse().map_err(|e| format!("column {i}: {e}"))
    }
    fn collection<T: serde::de::DeserializeOwned + Default>(
        r: &StoredRow<'_>,
        i: usize,
        empty: &str,
    ) -> Result<T, String> {
        match r.text(i)? {
            s if s == empty => Ok(T::default()),
            s => serde_json::from_str(s).map_err(|e| format!("column {i}: {e}")),
        }
    }
    fn json_or_null<T: serde::de::DeserializeOwned>(
        r: &StoredRow<'_>,
        i: usize,
    ) -> Result<Option<T>, String> {
        r.text_or_null(i)?
            .map(|s| serde_json::from_str(s).map_err(|e| format!("column {i}: {e}")))
            .transpose()
    }
    let name = r.text(0)?;
    let secret_keys = match r.text(9)? {
        "{}" => Vec::new(),
        sealed => crate::secrets::open(name, sealed)
            .map_err(|e| format!("column 9: {e}"))?
            .into_keys()
            .collect(),
    };
    Ok(VolumeFields {
        name,
        plugin: r.text(1)?,
        external_id: r.text(2)?,
        access_mode: parsed(&r, 3)?,
        attachment: parsed(&r, 4)?,
        fs_type: r.text(5)?,
        mount_flags: collection(&r, 6, "[]")?,
        context: collection(&r, 7, "{}")?,
        parameters: collection(&r, 8, "{}")?,
        secret_keys,
        capacity_bytes: r.int_or_null(10)?.map(|v| v as u64),
        lifecycle: parsed(&r, 11)?,
        error: r.text_or_null(12)?,
        created_at: r.int(13)?,
        updated_at: r.int(14)?,
        modify_index: r.int(15)? as u64,
        expansion: json_or_null(&r, 16)?,
        accessible_topology: collection(&r, 17, "[]")?,
        topology_request: json_or_null(&r, 18)?,
        mutable_parameters: collection(&r, 19, "{}")?,
        modification: json_or_null(&r, 20)?,
    })
}

impl ClaimRow {
    /// A row of [`super::drift::CLAIM_COLUMNS`] or
    /// [`super::drift::CLAIM_COLUMNS_WITH_DRIFT`].
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        let updated_at = r.get(9)?;
        let column = if r.as_ref().column_count() > 19 {
            Some(r.get(19)?)
        } else {
            None
        };
        let (drift, error) = super::drift::decode(column, r.get(6)?, updated_at);
        Ok(Self {
            volume: r.get(0)?,
            alloc: r.get(1)?,
            node: r.get(2)?,
            mode: parse(r, 3)?,
            state: parse(r, 4)?,
            target_path: r.get(5)?,
            error,
            next_retry_at: r.get(7)?,
            created_at: r.get(8)?,
            updated_at,
            modify_index: r.get::<_, i64>(10)? as u64,
            drift,
            waiting: match (r.get(11)?, r.get(12)?, r.get(13)?) {
                (Some(reason), Some(since), Some(timeout)) => Some((reason, since, timeout)),
                _ => None,
            },
            condition: r.get(14)?,
            ttl_ms: r.get(15)?,
            expires_at: r.get(16)?,
            labels: serde_json::from_str(&r.get::<_, String>(17)?).unwrap_or_default(),
            release_pending: r.get(18)?,
            mount: if r.as_ref().column_count() > 20 {
                r.get::<_, Option<String>>(20)?
                    .and_then(|m| serde_json::from_str(&m).ok())
                    .unwrap_or_default()
            } else {
                api::ClaimMount::default()
            },
        })
    }

    pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<Self>> {
        let sql = claims_sql!(
            conn,
            "SELECT {columns} FROM claims WHERE volume = ?1 ORDER BY created_at, alloc"
        );
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt
            .query_map([volume], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    pub fn load(conn: &Connection, volume: &str, alloc: &str) -> ApiResult<Option<Self>> {
        let sql = claims_sql!(
            conn,
            "SELECT {columns} FROM claims WHERE volume = ?1 AND alloc = ?2"
        );
        optional(
            conn.prepare_cached(sql)?
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
            state: parse(r, 2)?,
            publish_context: json(r, 3)?,
            forced: r.get(4)?,
            error: r.get(5)?,
            next_retry_at: r.get(6)?,
            updated_at: r.get(7)?,
        })
    }

    pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<Self>> {
        let sql = fixed_sql!(
            "SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE volume = ?1 ORDER BY node"
        );
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt
            .query_map([volume], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }
}

pub const NODE_COLUMNS: &str = "name, status, registered_at, lost_at, fence_after_ms, fenced_at, \
     eligibility, limits_refresh_at, stopped_at, stop_took_down";

impl NodeRow {
    pub fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            name: r.get(0)?,
            status: parse(r, 1)?,
            registered_at: r.get(2)?,
            lost_at: r.get(3)?,
            fence_after_ms: r.get(4)?,
            fenced_at: r.get(5)?,
            eligibility: parse(r, 6)?,
            limits_refresh_at: r.get(7)?,
            stopped_at: r.get(8)?,
            stop_took_down: r.get::<_, Option<bool>>(9)?.unwrap_or(false),
        })
    }

    pub fn load(conn: &Connection, name: &str) -> ApiResult<Option<Self>> {
        let sql = fixed_sql!("SELECT {NODE_COLUMNS} FROM nodes WHERE name = ?1");
        optional(conn.prepare_cached(sql)?.query_row([name], Self::from_row))
    }
}

/// The columns [`NodePluginRow::from_row`] reads.
const NODE_PLUGIN_COLUMNS: &str = "plugin, csi_node_id, max_volumes, node_service, controller, \
     topology, limit_change, limit_read_at, json_extract(registration, '$.node.ready_check'), observed, \
     coalesce(json_extract(registration, '$.node.capabilities.volume_mount_group'), 0), stage_unstage";

impl NodePluginRow {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            plugin: r.get(0)?,
            csi_node_id: r.get(1)?,
            max_volumes: r.get(2)?,
            node_service: r.get(3)?,
            controller: r.get(4)?,
            topology: json(r, 5)?,
            limit_change: json_or_null(r, 6)?,
            limit_read_at: r.get(7)?,
            ready_check: r.get(8)?,
            observed: r
                .get::<_, Option<String>>(9)?
                .and_then(|o| serde_json::from_str(&o).ok()),
            volume_mount_group: r.get(10)?,
            stage_unstage: r.get(11)?,
        })
    }

    pub fn of_node(conn: &Connection, node: &str) -> ApiResult<Vec<Self>> {
        let sql = fixed_sql!(
            "SELECT {NODE_PLUGIN_COLUMNS} FROM node_plugins WHERE node = ?1 ORDER BY plugin"
        );
        let rows = conn
            .prepare_cached(sql)?
            .query_map([node], Self::from_row)?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// The plugins whose controller `node` hosts and whose controller there reports
    /// GET_CAPACITY: their names only, where a node's desired state asks at every push for
    /// the GetCapacity calls it carries. Each row's `controller` object is read alone, not
    /// the whole registration; a registration that is not JSON names no capability.
    pub fn capacity_hosted_on(conn: &Connection, node: &str) -> ApiResult<Vec<String>> {
        let rows = conn
            .prepare_cached(
                "SELECT plugin FROM node_plugins WHERE node = ?1 AND controller = 1 \
                 AND json_valid(registration) \
                 AND json_extract(registration, '$.controller.get_capacity') = 1 \
                 ORDER BY plugin",
            )?
            .query_map([node], |r| r.get(0))?
            .collect::<Result<Vec<_>, _>>()?;
        Ok(rows)
    }

    /// One plugin's registration on `node`: one row by its key, where every claim and
    /// every controller operation asks for one (the other plugins' rows are not read, nor
    /// their registrations parsed).
    pub fn load(conn: &Connection, node: &str, plugin: &str) -> ApiResult<Option<Self>> {
        let sql = fixed_sql!(
            "SELECT {NODE_PLUGIN_COLUMNS} FROM node_plugins WHERE node = ?1 AND plugin = ?2"
        );
        optional(
            conn.prepare_cached(sql)?
                .query_row([node, plugin], Self::from_row),
        )
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
        kind: parse(r, 1)?,
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

/// The controller operations `filter` selects.
pub(super) fn ops(
    conn: &Connection,
    filter: &str,
    params: impl rusqlite::Params,
) -> ApiResult<Vec<OpRow>> {
    let sql = format!("SELECT {OP_COLUMNS} FROM ops WHERE {filter}");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params, op_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Decodes column 0 of `SELECT value` with `decode`.
    fn decoded<T>(
        value: &str,
        decode: impl Fn(&Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        let conn = Connection::open_in_memory().unwrap();
        conn.query_row("SELECT ?1", [value], |r| decode(r))
    }

    #[test]
    fn a_collection_column_decodes_empty_without_a_parser_and_anything_else_with_one() {
        let list = |v: &str| decoded(v, |r| collection::<Vec<String>>(r, 0, "[]"));
        let map = |v: &str| decoded(v, |r| collection::<BTreeMap<String, String>>(r, 0, "{}"));
        assert_eq!(list("[]").unwrap(), Vec::<String>::new());
        assert_eq!(list(r#"["ro","noatime"]"#).unwrap(), ["ro", "noatime"]);
        assert_eq!(map("{}").unwrap(), BTreeMap::new());
        assert_eq!(
            map(r#"{"a":"b"}"#).unwrap(),
            BTreeMap::from([("a".into(), "b".into())])
        );
        // The other kind's empty text is not taken for this one's.
        assert!(list("{}").is_err());
        assert!(map("[]").is_err());
        assert!(map("not json").is_err());
    }

    #[test]
    fn a_nullable_json_column_is_none_when_null() {
        let conn = Connection::open_in_memory().unwrap();
        let null: Option<Vec<u32>> = conn
            .query_row("SELECT NULL", [], |r| json_or_null(r, 0))
            .unwrap();
        assert_eq!(null, None);
        assert_eq!(
            decoded("[1,2]", |r| json_or_null::<Vec<u32>>(r, 0)).unwrap(),
            Some(vec![1, 2])
        );
    }
}
