//! The snapshots and group snapshots tables, and the controller capabilities snapshots
//! and clones need.

use csivol_api as api;
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::ApiResult;
use crate::model::{GroupSnapshotRow, SnapshotRow, to_json};

const COLUMNS: &str = "name, volume, plugin, snapshot_id, state, ready_to_use, size_bytes, \
     creation_time, parameters, error, created_at, updated_at, modify_index, group_name";

fn state_at(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<api::SnapshotState> {
    let state: String = r.get(i)?;
    state.parse::<api::SnapshotState>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, e.into())
    })
}

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SnapshotRow> {
    let state = state_at(r, 4)?;
    Ok(SnapshotRow {
        name: r.get(0)?,
        volume: r.get(1)?,
        plugin: r.get(2)?,
        snapshot_id: r.get(3)?,
        state,
        ready_to_use: r.get(5)?,
        size_bytes: r.get::<_, i64>(6)?.max(0) as u64,
        creation_time: r.get(7)?,
        parameters: serde_json::from_str(&r.get::<_, String>(8)?).unwrap_or_default(),
        error: r.get(9)?,
        created_at: r.get(10)?,
        updated_at: r.get(11)?,
        modify_index: r.get::<_, i64>(12)? as u64,
        group: r.get(13)?,
    })
}

pub fn snapshot(conn: &Connection, name: &str) -> ApiResult<Option<SnapshotRow>> {
    let sql = format!("SELECT {COLUMNS} FROM snapshots WHERE name = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([name], from_row)
        .optional()?)
}

pub fn snapshots(conn: &Connection, volume: Option<&str>) -> ApiResult<Vec<SnapshotRow>> {
    let sql =
        format!("SELECT {COLUMNS} FROM snapshots WHERE (?1 IS NULL OR volume = ?1) ORDER BY name");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([volume], from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// At most `limit` snapshots after `after` by name (those taken of `volume`, when given):
/// a page of a listing.
pub fn snapshot_page(
    conn: &Connection,
    volume: Option<&str>,
    after: &str,
    limit: usize,
) -> ApiResult<Vec<SnapshotRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM snapshots WHERE name > ?2 AND (?1 IS NULL OR volume = ?1) \
         ORDER BY name LIMIT ?3"
    );
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params![volume, after, limit], from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn put(conn: &Connection, s: &SnapshotRow, index: u64, now: i64) -> ApiResult<()> {
    let sql = format!(
        "INSERT OR REPLACE INTO snapshots ({COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
    );
    conn.prepare_cached(&sql)?.execute(params![
        s.name,
        s.volume,
        s.plugin,
        s.snapshot_id,
        s.state.as_str(),
        s.ready_to_use,
        i64::try_from(s.size_bytes).unwrap_or(i64::MAX),
        s.creation_time,
        to_json(&s.parameters),
        s.error,
        s.created_at,
        now,
        index as i64,
        s.group,
    ])?;
    Ok(())
}

/// The members of group snapshot `group`, by name.
pub fn members(conn: &Connection, group: &str) -> ApiResult<Vec<SnapshotRow>> {
    let sql = format!("SELECT {COLUMNS} FROM snapshots WHERE group_name = ?1 ORDER BY name");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([group], from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

const GROUP_COLUMNS: &str = "name, plugin, volumes, group_snapshot_id, state, ready_to_use, \
     creation_time, parameters, error, created_at, updated_at, modify_index";

fn group_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GroupSnapshotRow> {
    Ok(GroupSnapshotRow {
        name: r.get(0)?,
        plugin: r.get(1)?,
        volumes: serde_json::from_str(&r.get::<_, String>(2)?).unwrap_or_default(),
        group_snapshot_id: r.get(3)?,
        state: state_at(r, 4)?,
        ready_to_use: r.get(5)?,
        creation_time: r.get(6)?,
        parameters: serde_json::from_str(&r.get::<_, String>(7)?).unwrap_or_default(),
        error: r.get(8)?,
        created_at: r.get(9)?,
        updated_at: r.get(10)?,
        modify_index: r.get::<_, i64>(11)? as u64,
    })
}

pub fn group_snapshot(conn: &Connection, name: &str) -> ApiResult<Option<GroupSnapshotRow>> {
    let sql = format!("SELECT {GROUP_COLUMNS} FROM group_snapshots WHERE name = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([name], group_from_row)
        .optional()?)
}

pub fn group_snapshots(conn: &Connection) -> ApiResult<Vec<GroupSnapshotRow>> {
    let sql = format!("SELECT {GROUP_COLUMNS} FROM group_snapshots ORDER BY name");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([], group_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn put_group(conn: &Connection, g: &GroupSnapshotRow, index: u64, now: i64) -> ApiResult<()> {
    let sql = format!(
        "INSERT OR REPLACE INTO group_snapshots ({GROUP_COLUMNS}) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    );
    conn.prepare_cached(&sql)?.execute(params![
        g.name,
        g.plugin,
        to_json(&g.volumes),
        g.group_snapshot_id,
        g.state.as_str(),
        g.ready_to_use,
        g.creation_time,
        to_json(&g.parameters),
        g.error,
        g.created_at,
        now,
        index as i64,
    ])?;
    Ok(())
}

/// Any controller host's registered capabilities, each flag set if one host has it: the
/// hosts of one plugin run the same plugin, and an operation goes to any of them.
pub fn controller_capabilities(
    conn: &Connection,
    plugin: &str,
) -> ApiResult<Option<api::ControllerCapabilities>> {
    // Each host's `controller` object alone: every desired state pushed to a controller
    // host asks, and parsing each host's whole registration (its node service, topology
    // and plugin info) was a twentieth of the server's CPU in a claim cycle. A
    // registration that is not JSON, or has no controller, names no capabilities.
    let mut stmt = conn.prepare_cached(
        "SELECT CASE WHEN json_valid(registration) THEN json_extract(registration, '$.controller') END \
         FROM node_plugins WHERE plugin = ?1 AND controller = 1",
    )?;
    let regs: Vec<Option<String>> = stmt
        .query_map([plugin], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut found: Option<api::ControllerCapabilities> = None;
    for reg in regs.into_iter().flatten() {
        let Ok(c) = serde_json::from_str::<api::ControllerCapabilities>(&reg) else {
            continue;
        };
        let f = found.get_or_insert_with(Default::default);
        f.create_delete_snapshot |= c.create_delete_snapshot;
        f.list_snapshots |= c.list_snapshots;
        f.clone_volume |= c.clone_volume;
        f.create_delete_volume |= c.create_delete_volume;
        f.modify_volume |= c.modify_volume;
        f.get_snapshot |= c.get_snapshot;
        f.group_snapshots |= c.group_snapshots;
        f.get_capacity |= c.get_capacity;
        f.list_volumes |= c.list_volumes;
        f.list_volumes_published_nodes |= c.list_volumes_published_nodes;
        f.volume_condition |= c.volume_condition;
    }
    Ok(found)
}
