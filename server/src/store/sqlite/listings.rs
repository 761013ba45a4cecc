//! The event log and the reads behind the API's listings and the metrics.

use std::collections::HashMap;

use csivol_api as api;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};

use super::rows::{ATTACHMENT_COLUMNS, VOLUME_COLUMNS, volume_fields};
use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::listing::{StoredRows, VolumeChunk};
use crate::model::{
    AttachmentRow, ClaimRow, PluginNodeRow, RunningOpRow, StateCounts, WaitingOps, time,
};
use crate::store::EventFilter;
use crate::store::sqlite::writer::WriteCtx;

// ---- the event log ----

pub fn events(
    conn: &Connection,
    after: u64,
    f: &EventFilter,
    limit: u32,
) -> ApiResult<Vec<api::Event>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT idx, at, kind, volume, node, alloc, actor, message FROM events \
         WHERE {EVENTS_PASSING} ORDER BY idx LIMIT ?5"
    ))?;
    let until = f.until.map(|u| u as i64);
    let (only, volumeless) = (f.namespaces.only_json(), f.namespaces.volumeless);
    let rows = stmt.query_map(
        params![
            after as i64,
            f.volume,
            f.node,
            f.alloc,
            limit,
            until,
            only,
            volumeless
        ],
        |r| {
            let key: Option<String> = r.get(3)?;
            let (namespace, volume) = match key.as_deref().map(api::split_key) {
                Some((ns, name)) => (Some(ns.to_owned()), Some(name.to_owned())),
                None => (None, None),
            };
            Ok(api::Event {
                index: r.get::<_, i64>(0)? as u64,
                at: time(r.get(1)?),
                kind: r.get(2)?,
                volume,
                namespace,
                node: r.get(4)?,
                alloc: r.get(5)?,
                actor: r.get(6)?,
                message: r.get(7)?,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The events an [`EventFilter`] passes: after `?1`, of volume `?2`, node `?3` and alloc
/// `?4` where given, up to `?6`; of the namespaces `?7` (a JSON array of them, or NULL for
/// every one: a volume's namespace is the part of its key before `~`, or `default`, as
/// `api::split_key` reads it), and of no volume where `?8`.
const EVENTS_PASSING: &str = "idx > ?1 AND (?2 IS NULL OR volume = ?2) \
     AND (?3 IS NULL OR node = ?3) AND (?4 IS NULL OR alloc = ?4) AND (?6 IS NULL OR idx <= ?6) \
     AND (?7 IS NULL OR (volume IS NULL AND ?8) OR (volume IS NOT NULL \
     AND (CASE WHEN instr(volume, '~') > 0 THEN substr(volume, 1, instr(volume, '~') - 1) \
     ELSE 'default' END) IN (SELECT value FROM json_each(?7))))";

/// What an event takes, as the byte bound of the log counts it: its text as stored.
const EVENT_BYTES: &str = "(octet_length(kind) + octet_length(actor) + octet_length(message) \
     + ifnull(octet_length(volume), 0) + ifnull(octet_length(node), 0) \
     + ifnull(octet_length(alloc), 0))";

/// The index of the last event [`events`] would return, read from the index alone.
pub fn event_page_end(
    conn: &Connection,
    after: u64,
    f: &EventFilter,
    limit: u32,
) -> ApiResult<Option<u64>> {
    let last: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT MAX(idx) FROM (SELECT idx FROM events WHERE {EVENTS_PASSING} \
             ORDER BY idx LIMIT ?5)"
        ))?
        .query_row(
            params![
                after as i64,
                f.volume,
                f.node,
                f.alloc,
                limit,
                f.until.map(|u| u as i64),
                f.namespaces.only_json(),
                f.namespaces.volumeless
            ],
            |r| r.get(0),
        )?;
    Ok(last.map(|i| i as u64))
}

/// Drops at most `p.batch` events: first those older than the newest `p.keep`, then,
/// while the log holds more than `p.bytes`, the oldest events whose kind is not in
/// `p.kept_by_count` (a JSON array of kinds), which only the count drops.
pub fn prune_events(ctx: &WriteCtx<'_>, p: &crate::store::Pruning<'_>) -> ApiResult<usize> {
    let batch = i64::try_from(p.batch).unwrap_or(i64::MAX);
    let by_count = exec(
        ctx.tx,
        "DELETE FROM events WHERE idx IN (SELECT idx FROM events \
         WHERE idx <= (SELECT MAX(idx) FROM events) - ?1 ORDER BY idx LIMIT ?2)",
        params![p.keep, batch],
    )?;
    let left = batch - by_count as i64;
    if left <= 0 {
        return Ok(by_count);
    }
    let total: i64 = ctx
        .tx
        .prepare_cached(&format!("SELECT ifnull(SUM({EVENT_BYTES}), 0) FROM events"))?
        .query_row([], |r| r.get(0))?;
    if total <= p.bytes {
        return Ok(by_count);
    }
    // The newest events that fit beside those only the count drops stay; the rest of
    // those the bytes may drop go, oldest first.
    let sql = format!(
        "DELETE FROM events WHERE idx IN (\
           SELECT idx FROM (\
             SELECT idx, SUM({EVENT_BYTES}) OVER (ORDER BY idx DESC) AS newer FROM events \
             WHERE kind NOT IN (SELECT value FROM json_each(?2))) \
           WHERE newer > ?1 - (SELECT ifnull(SUM({EVENT_BYTES}), 0) FROM events \
             WHERE kind IN (SELECT value FROM json_each(?2))) \
           ORDER BY idx LIMIT ?3)"
    );
    let by_bytes = exec(ctx.tx, &sql, params![p.bytes, p.kept_by_count, left])?;
    Ok(by_count + by_bytes)
}

// ---- listings ----

pub fn volume_chunk(
    conn: &Connection,
    after: &str,
    plugin: Option<&str>,
    rows: usize,
) -> ApiResult<VolumeChunk> {
    let sql = format!(
        "SELECT {VOLUME_COLUMNS} FROM volumes WHERE name > ?1 \
         AND (?2 IS NULL OR plugin = ?2) ORDER BY name LIMIT ?3"
    );
    // A range on the primary key, so each chunk starts where the last ended: `OR ?1 IS
    // NULL` would make SQLite scan from the first name every time. No name is empty.
    let mut stmt = conn.prepare_cached(&sql)?;
    let columns = stmt.column_count();
    let mut volumes = StoredRows::new(columns);
    let mut found = stmt.query(params![after, plugin, rows as i64])?;
    while let Some(r) = found.next()? {
        // Copied as stored; the listing decodes them where it shapes them.
        for i in 0..columns {
            match r.get_ref(i)? {
                ValueRef::Null => volumes.push_null(),
                ValueRef::Integer(v) => volumes.push_int(v),
                ValueRef::Text(t) => volumes.push_text(t),
                ValueRef::Real(_) | ValueRef::Blob(_) => volumes.push_other(),
            }
        }
    }
    drop(found);
    let last = volumes.rows().last().map(|r| r.text(0).map(str::to_owned));
    let Some(last) = last.transpose().map_err(ApiError::internal)? else {
        return Ok(VolumeChunk {
            volumes,
            decode: volume_fields,
            last: None,
            claims: HashMap::new(),
            attachments: HashMap::new(),
            mounts: HashMap::new(),
            availability: HashMap::new(),
            jobs: HashMap::new(),
            labels: HashMap::new(),
            lingers: HashMap::new(),
        });
    };
    let mut claims: HashMap<String, Vec<ClaimRow>> = HashMap::new();
    let sql = format!(
        "SELECT {} FROM claims WHERE volume > ?1 AND volume <= ?2 \
         ORDER BY volume, created_at, alloc",
        super::drift::claim_columns(conn)?
    );
    for c in conn
        .prepare_cached(&sql)?
        .query_map(params![after, last], ClaimRow::from_row)?
    {
        let c = c?;
        claims.entry(c.volume.clone()).or_default().push(c);
    }
    let mut attachments: HashMap<String, Vec<AttachmentRow>> = HashMap::new();
    let sql = format!(
        "SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE volume > ?1 AND volume <= ?2 \
         ORDER BY volume, node"
    );
    for a in conn
        .prepare_cached(&sql)?
        .query_map(params![after, last], AttachmentRow::from_row)?
    {
        let a = a?;
        attachments.entry(a.volume.clone()).or_default().push(a);
    }
    let mounts = super::volume_mounts::between(conn, after, &last)?;
    let availability = super::volume_availability::between(conn, after, &last)?;
    let jobs = super::job_volumes::between(conn, after, &last)?;
    let labels = super::pools::labels_between(conn, after, &last)?;
    let mut lingers: HashMap<String, Vec<crate::model::LingerRow>> = HashMap::new();
    for l in super::lingers::between(conn, after, &last)? {
        lingers.entry(l.volume.clone()).or_default().push(l);
    }
    Ok(VolumeChunk {
        volumes,
        decode: volume_fields,
        last: Some(last),
        claims,
        attachments,
        mounts,
        availability,
        jobs,
        labels,
        lingers,
    })
}

pub fn claims(
    conn: &Connection,
    volume: Option<&str>,
    node: Option<&str>,
) -> ApiResult<Vec<ClaimRow>> {
    let sql = format!(
        "SELECT {} FROM claims WHERE (?1 IS NULL OR volume = ?1) AND (?2 IS NULL OR node = ?2) \
         ORDER BY volume, created_at, alloc",
        super::drift::claim_columns(conn)?
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params![volume, node], ClaimRow::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The claims of the first `volumes` volumes after `after` by name that have claims (of
/// `volume`, on `node`, when given), by volume, creation and alloc: a page of a listing,
/// which holds every claim of a volume that passes the filters, so that their queue
/// positions are counted as the whole listing counts them.
pub fn claim_page(
    conn: &Connection,
    volume: Option<&str>,
    node: Option<&str>,
    after: &str,
    volumes: usize,
) -> ApiResult<Vec<ClaimRow>> {
    let filter = "volume > ?3 AND (?1 IS NULL OR volume = ?1) AND (?2 IS NULL OR node = ?2)";
    let sql = format!(
        "SELECT {} FROM claims WHERE {filter} AND volume <= \
         (SELECT MAX(volume) FROM (SELECT DISTINCT volume FROM claims WHERE {filter} \
         ORDER BY volume LIMIT ?4)) \
         ORDER BY volume, created_at, alloc",
        // With the drift and mount columns where the schema has them: a listed claim
        // shows what `GET` of its volume shows of it.
        super::drift::claim_columns(conn)?
    );
    let volumes = i64::try_from(volumes).unwrap_or(i64::MAX);
    let rows = conn
        .prepare_cached(&sql)?
        .query_map(params![volume, node, after, volumes], ClaimRow::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn plugin_nodes(conn: &Connection, only: Option<&str>) -> ApiResult<Vec<PluginNodeRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT np.plugin, np.registration, np.node_service, np.controller, np.stage_unstage, n.status, \
         np.node, np.topology, np.observed FROM node_plugins np JOIN nodes n ON n.name = np.node WHERE (?1 IS NULL OR np.plugin = ?1) ORDER BY np.plugin, np.node",
    )?;
    let rows = stmt.query_map([only], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, bool>(3)?,
            r.get::<_, bool>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, String>(6)?,
            r.get::<_, String>(7)?,
            r.get::<_, Option<String>>(8)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (
            plugin,
            registration,
            node_service,
            controller,
            stage_unstage,
            status,
            node,
            topology,
            observed,
        ) = row?;
        out.push(PluginNodeRow {
            plugin,
            node,
            status: status.parse().map_err(ApiError::internal)?,
            registration: serde_json::from_str(&registration)?,
            node_service,
            controller,
            stage_unstage,
            topology: serde_json::from_str(&topology)?,
            // An observation this server cannot read (a newer agent's shape) is left out
            // rather than failing the whole listing.
            observed: observed.and_then(|o| serde_json::from_str(&o).ok()),
        });
    }
    Ok(out)
}

pub fn volumes_of_plugin(conn: &Connection, plugin: &str) -> ApiResult<u32> {
    Ok(conn.query_row(
        "SELECT count(*) FROM volumes WHERE plugin = ?1",
        [plugin],
        |r| r.get(0),
    )?)
}

/// The first `?2` distinct parameter sets of plugin `?1`'s volumes in order, each the
/// least above the one before: with the index `volumes_parameters (plugin, parameters)` one
/// seek per set, where `SELECT DISTINCT` walked every volume of the plugin (a third of the
/// server's CPU in a claim cycle once every node hosts the controller). Below the schema
/// with that index (a rolling upgrade's servers before it is finalized) each step walks
/// the plugin's volumes instead.
const PARAMETER_SETS_SQL: &str = "WITH RECURSIVE sets (parameters, n) AS ( \
         SELECT (SELECT min(parameters) FROM volumes WHERE plugin = ?1), 1 \
         UNION ALL \
         SELECT (SELECT min(v.parameters) FROM volumes v \
                 WHERE v.plugin = ?1 AND v.parameters > sets.parameters), n + 1 \
         FROM sets WHERE sets.parameters IS NOT NULL AND n < ?2) \
     SELECT parameters FROM sets WHERE parameters IS NOT NULL";

pub fn parameter_sets(
    conn: &Connection,
    plugin: &str,
    limit: usize,
) -> ApiResult<Vec<std::collections::BTreeMap<String, String>>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(PARAMETER_SETS_SQL)?;
    let texts: Vec<String> = stmt
        .query_map(params![plugin, limit as i64], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    // An empty map is stored as `{}`; a set that does not parse is not one to ask about.
    Ok(texts
        .iter()
        .filter_map(|t| serde_json::from_str(t).ok())
        .collect())
}

pub fn state_counts(conn: &Connection) -> ApiResult<StateCounts> {
    let by = |sql: &str| -> ApiResult<Vec<(String, i64)>> {
        let mut stmt = conn.prepare_cached(sql)?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        Ok(rows)
    };
    let count = |sql: &str| -> ApiResult<i64> { Ok(conn.query_row(sql, [], |r| r.get(0))?) };
    Ok(StateCounts {
        claims: by("SELECT state, count(*) FROM claims GROUP BY state")?,
        nodes: by("SELECT status, count(*) FROM nodes GROUP BY status")?,
        ops: by(
            "SELECT CASE WHEN host IS NULL THEN 'queued' ELSE 'in_flight' END, count(*) FROM ops GROUP BY 1",
        )?,
        nodes_fence_failing: count(
            "SELECT count(*) FROM nodes WHERE status = 'lost' AND fence_failures > 0",
        )?,
        claims_with_error: count("SELECT count(*) FROM claims WHERE error IS NOT NULL")?,
        claims_abnormal: count("SELECT count(*) FROM claims WHERE condition IS NOT NULL")?,
        blocked: blocked_since(conn)?,
        unsettled: unsettled_claims(conn)?,
    })
}

/// Every volume blocked on a lost node (a blocked claim or attachment), with since when:
/// the node's loss, which is what blocked it (a row of a node without `lost_at` counts
/// from its own last write).
fn blocked_since(conn: &Connection) -> ApiResult<Vec<(String, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT volume, node, min(since) FROM ( \
           SELECT c.volume, c.node, COALESCE(n.lost_at, c.updated_at) AS since \
           FROM claims c LEFT JOIN nodes n ON n.name = c.node WHERE c.state = 'blocked' \
           UNION ALL \
           SELECT a.volume, a.node, COALESCE(n.lost_at, a.updated_at) AS since \
           FROM attachments a LEFT JOIN nodes n ON n.name = a.node WHERE a.state = 'blocked' \
         ) GROUP BY volume, node ORDER BY volume, node",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Claims between recorded and ready, or being released, with their last write.
fn unsettled_claims(conn: &Connection) -> ApiResult<Vec<(String, String, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT volume, alloc, state, updated_at FROM claims \
         WHERE state IN ('pending', 'attaching', 'publishing', 'releasing')",
    )?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

// ---- the controller queues ----

pub fn waiting_ops(
    conn: &Connection,
    plugin: Option<&str>,
    now: i64,
) -> ApiResult<Vec<WaitingOps>> {
    // Due since: queued, or due again after a retry's backoff. An operation held for its
    // volume's release waits for no plugin and no backoff: it is not counted here.
    let mut stmt = conn.prepare_cached(
        "SELECT plugin, kind, count(*), min(MAX(created_at, not_before)), not_before <= ?2 AS due \
         FROM ops WHERE host IS NULL AND (?1 IS NULL OR plugin = ?1) AND not_before < ?3 \
         GROUP BY plugin, kind, due ORDER BY plugin, kind",
    )?;
    let rows = stmt
        .query_map(params![plugin, now, crate::model::HELD_FOR_RELEASE], |r| {
            Ok(WaitingOps {
                plugin: r.get(0)?,
                kind: r.get(1)?,
                count: r.get(2)?,
                since: r.get(3)?,
                due: r.get(4)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

pub fn running_ops(conn: &Connection, plugin: &str) -> ApiResult<Vec<RunningOpRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, volume, node, host, MAX(created_at, not_before), assigned_at FROM ops \
         WHERE plugin = ?1 AND host IS NOT NULL ORDER BY assigned_at, id",
    )?;
    let rows = stmt
        .query_map([plugin], |r| {
            Ok(RunningOpRow {
                id: r.get(0)?,
                kind: r.get(1)?,
                volume: r.get(2)?,
                node: r.get(3)?,
                host: r.get(4)?,
                since: r.get(5)?,
                assigned_at: r.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use rusqlite::params;

    use super::{PARAMETER_SETS_SQL, parameter_sets};
    use crate::store::sqlite::db::open;

    fn add(conn: &rusqlite::Connection, name: &str, plugin: &str, parameters: &str) {
        conn.execute(
            "INSERT INTO volumes (name, plugin, external_id, access_mode, attachment, fs_type, \
             mount_flags, context, parameters, secrets, lifecycle, created_at, updated_at, \
             modify_index) VALUES (?1, ?2, ?1, 'single-node-writer', 'file-system', '', \
             '[]', '{}', ?3, '{}', 'ready', 1, 1, 1)",
            params![name, plugin, parameters],
        )
        .unwrap();
    }

    #[test]
    fn a_plugins_parameter_sets_are_its_own_distinct_ones_in_order_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, _) = open(&dir.path().join("state.db")).unwrap();
        assert!(parameter_sets(&conn, "hp", 8).unwrap().is_empty());
        for (i, p) in [
            r#"{"tier":"b"}"#,
            "{}",
            r#"{"tier":"a"}"#,
            "{}",
            r#"{"tier":"b"}"#,
        ]
        .iter()
        .enumerate()
        {
            add(&conn, &format!("v{i}"), "hp", p);
        }
        add(&conn, "other", "nfs", r#"{"tier":"z"}"#);
        // A set that does not parse is not one to ask about.
        add(&conn, "broken", "hp", "~ not json");
        let tiers = |limit| -> Vec<Option<String>> {
            parameter_sets(&conn, "hp", limit)
                .unwrap()
                .into_iter()
                .map(|p| p.get("tier").cloned())
                .collect()
        };
        let (a, b) = (Some("a".to_owned()), Some("b".to_owned()));
        // In the order of their stored text: `{"` before `{}`.
        assert_eq!(tiers(8), vec![a.clone(), b.clone(), None]);
        assert_eq!(tiers(2), vec![a, b]);
        assert!(tiers(0).is_empty());
    }

    #[test]
    fn a_plugins_parameter_sets_cost_a_seek_each_not_a_walk_of_its_volumes() {
        let dir = tempfile::tempdir().unwrap();
        let (conn, _) = open(&dir.path().join("state.db")).unwrap();
        // 2,000 volumes in three sets: a walk of them takes thousands of SQLite steps.
        for i in 0..2_000 {
            let set = match i % 100 {
                0 => r#"{"tier":"a"}"#,
                1 => r#"{"tier":"b"}"#,
                _ => "{}",
            };
            add(&conn, &format!("v{i}"), "hp", set);
        }
        let mut stmt = conn.prepare(PARAMETER_SETS_SQL).unwrap();
        let sets: Vec<String> = stmt
            .query_map(params!["hp", 8], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(sets.len(), 3);
        let steps = stmt.get_status(rusqlite::StatementStatus::VmStep);
        assert!(
            steps < 500,
            "{steps} SQLite steps for 3 sets of 2,000 volumes: the query walks the volumes"
        );
    }
}
