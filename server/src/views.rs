//! Read-only views for the API: lists of volumes, nodes, plugins and events.

use std::collections::{BTreeMap, HashMap};

use csivol_api::{self as api, NodeStatus, VolumeState};
use rusqlite::{Connection, params};

use super::error::{ApiError, ApiResult};
use super::fence;
use super::liveness::Beats;
use super::model::{
    AttachmentRow, ClaimRow, LimitChangeRow, NodePluginRow, NodeRow, VolumeRow, claims_to_api, time,
};
use super::store::sqlite::{
    ATTACHMENT_COLUMNS, CLAIM_COLUMNS, NODE_COLUMNS, VOLUME_COLUMNS, needs_controller_publish,
    slots_used,
};
use csivol_rules::fence::FenceConfig;

/// What a volume listing selects.
#[derive(Debug, Clone, Default)]
pub struct VolumeFilter {
    pub state: Option<VolumeState>,
    pub node: Option<String>,
    pub plugin: Option<String>,
}

/// Volume rows read per step of a listing, with their claims and attachments: what a
/// listing holds in memory at once, whatever the inventory.
pub const LIST_CHUNK: usize = 500;

/// The volumes after `after` (by name) that pass `filter`, at most `limit`, with their
/// claims and attachments; each step reads [`LIST_CHUNK`] volumes and the claims and
/// attachments of that name range (three queries). Fewer than `limit` means the end.
pub fn list_volumes(
    conn: &Connection,
    filter: &VolumeFilter,
    after: Option<&str>,
    limit: usize,
) -> ApiResult<Vec<api::Volume>> {
    let mut out = Vec::new();
    let mut cursor = after.map(str::to_owned);
    while out.len() < limit {
        let (page, last) = volume_chunk(conn, filter, cursor.as_deref(), LIST_CHUNK)?;
        let Some(last) = last else {
            break;
        };
        out.extend(page);
        cursor = Some(last);
    }
    out.truncate(limit);
    Ok(out)
}

/// Every volume passing `filter`, `LIST_CHUNK` rows at a time, each step's volumes handed
/// to `emit` (all within the caller's read transaction: one consistent view).
pub fn each_volume_chunk(
    conn: &Connection,
    filter: &VolumeFilter,
    mut emit: impl FnMut(Vec<api::Volume>) -> ApiResult<()>,
) -> ApiResult<()> {
    let mut cursor: Option<String> = None;
    loop {
        let (page, last) = volume_chunk(conn, filter, cursor.as_deref(), LIST_CHUNK)?;
        let Some(last) = last else {
            return Ok(());
        };
        emit(page)?;
        cursor = Some(last);
    }
}

/// Up to `rows` volumes after `after` that pass the plugin filter, then the state and node
/// filters; with the name of the last row read (`None`: no row left).
fn volume_chunk(
    conn: &Connection,
    filter: &VolumeFilter,
    after: Option<&str>,
    rows: usize,
) -> ApiResult<(Vec<api::Volume>, Option<String>)> {
    let sql = format!(
        "SELECT {VOLUME_COLUMNS} FROM volumes WHERE name > ?1 \
         AND (?2 IS NULL OR plugin = ?2) ORDER BY name LIMIT ?3"
    );
    // A range on the primary key, so each chunk starts where the last ended: `OR ?1 IS
    // NULL` would make SQLite scan from the first name every time. No name is empty.
    let after = after.unwrap_or("");
    let volumes: Vec<VolumeRow> = conn
        .prepare_cached(&sql)?
        .query_map(
            params![after, filter.plugin, rows as i64],
            VolumeRow::from_row,
        )?
        .collect::<Result<_, _>>()?;
    let Some(last) = volumes.last().map(|v| v.name.clone()) else {
        return Ok((Vec::new(), None));
    };
    let mut claims: HashMap<String, Vec<ClaimRow>> = HashMap::new();
    let sql = format!(
        "SELECT {CLAIM_COLUMNS} FROM claims WHERE volume > ?1 AND volume <= ?2 \
         ORDER BY volume, created_at, alloc"
    );
    for c in conn
        .prepare_cached(&sql)?
        .query_map(params![after, last], ClaimRow::from_row)?
    {
        let c = c?;
        claims.entry(c.volume.clone()).or_default().push(c);
    }
    let mut atts: HashMap<String, Vec<AttachmentRow>> = HashMap::new();
    let sql = format!(
        "SELECT {ATTACHMENT_COLUMNS} FROM attachments WHERE volume > ?1 AND volume <= ?2 \
         ORDER BY volume, node"
    );
    for a in conn
        .prepare_cached(&sql)?
        .query_map(params![after, last], AttachmentRow::from_row)?
    {
        let a = a?;
        atts.entry(a.volume.clone()).or_default().push(a);
    }
    let empty_c = Vec::new();
    let empty_a = Vec::new();
    let mut out = Vec::with_capacity(volumes.len());
    for v in volumes {
        let c = claims.get(&v.name).unwrap_or(&empty_c);
        let a = atts.get(&v.name).unwrap_or(&empty_a);
        if let Some(n) = &filter.node
            && !c.iter().any(|c| c.node == *n)
            && !a.iter().any(|a| a.node == *n)
        {
            continue;
        }
        if filter.state.is_some_and(|s| s != v.state(c, a)) {
            continue;
        }
        out.push(v.to_api(c, a));
    }
    Ok((out, Some(last)))
}

/// Nodes with their plugins; `only` selects one.
pub fn list_nodes(
    conn: &Connection,
    beats: &Beats,
    only: Option<&str>,
    fencing: &FenceConfig,
) -> ApiResult<Vec<api::Node>> {
    let sql =
        format!("SELECT {NODE_COLUMNS} FROM nodes WHERE (?1 IS NULL OR name = ?1) ORDER BY name");
    let rows: Vec<NodeRow> = conn
        .prepare(&sql)?
        .query_map([only], NodeRow::from_row)?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for n in rows {
        let fence = fence::node_fence(fencing, conn, &n)?;
        let fences = match only {
            Some(_) => fence::history(conn, &n.name)?,
            None => Vec::new(),
        };
        let mut plugins = Vec::new();
        for p in NodePluginRow::of_node(conn, &n.name)? {
            plugins.push(api::NodePlugin {
                topology: p.topology,
                used: slots_used(conn, &n.name, &p.plugin)?,
                id: p.plugin,
                node_id: p.csi_node_id.unwrap_or_default(),
                max_volumes: p.max_volumes,
                controller: p.controller,
                limit_change: p.limit_change.as_ref().map(LimitChangeRow::to_api),
                limit_read_at: p.limit_read_at.map(time),
            });
        }
        let mut node = api::Node {
            status: n.status,
            last_heartbeat: beats.nodes.get(&n.name).and_then(|b| b.last_ms).map(time),
            heartbeat_ttl_ms: u64::try_from(beats.ttl.as_millis()).unwrap_or(u64::MAX),
            silent_ms: beats
                .nodes
                .get(&n.name)
                .and_then(|b| b.silent)
                .filter(|_| n.status == NodeStatus::Ready)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            eligibility: n.eligibility,
            lost_at: n.lost_at.map(time),
            fence_after: n.fence_after_ms.map(|ms| {
                humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64))
                    .to_string()
            }),
            fenced_at: n.fenced_at.map(time),
            registered_at: time(n.registered_at),
            plugins,
            name: n.name,
            labels: Default::default(),
            agent_labels: Default::default(),
            fence_method: None,
            fence_lacks: None,
            fence_failures: 0,
            fence_error: None,
            next_fence_at: None,
            fences,
        };
        fence::to_api(fence, &mut node);
        out.push(node);
    }
    Ok(out)
}

/// Plugins across the cluster with their controller queues; `only` selects one.
pub fn list_plugins(
    conn: &Connection,
    only: Option<&str>,
    limits: &crate::lifecycle::Limits,
) -> ApiResult<Vec<api::Plugin>> {
    let mut stmt = conn.prepare(
        "SELECT np.plugin, np.registration, np.node_service, np.controller, np.stage_unstage, n.status, \
         np.node, np.topology FROM node_plugins np JOIN nodes n ON n.name = np.node WHERE (?1 IS NULL OR np.plugin = ?1) ORDER BY np.plugin, np.node",
    )?;
    let mut plugins: BTreeMap<String, api::Plugin> = BTreeMap::new();
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
        ))
    })?;
    for row in rows {
        let (id, registration, node_service, controller, stage, status, node, topology) = row?;
        let reg: api::PluginRegistration = serde_json::from_str(&registration)?;
        let healthy = status == NodeStatus::Ready.as_str();
        let p = plugins.entry(id.clone()).or_insert_with(|| api::Plugin {
            id: id.clone(),
            name: reg.info.name.clone(),
            version: reg.info.vendor_version.clone(),
            nodes_healthy: 0,
            nodes_expected: 0,
            controllers_healthy: 0,
            controllers_expected: 0,
            controller_publish: false,
            stage_unstage: false,
            snapshots: false,
            clone_volume: false,
            modify_volume: false,
            volumes: 0,
            nodes: Vec::new(),
            queue: api::ControllerQueue::default(),
        });
        if let Some(c) = &reg.controller {
            p.snapshots |= c.create_delete_snapshot;
            p.clone_volume |= c.clone_volume;
            p.modify_volume |= c.modify_volume;
        }
        if node_service {
            p.nodes_expected += 1;
            p.nodes_healthy += u32::from(healthy);
            p.nodes.push(api::PluginNode {
                name: node,
                status: status.parse().map_err(ApiError::internal)?,
                topology: serde_json::from_str(&topology)?,
            });
        }
        if controller {
            p.controllers_expected += 1;
            p.controllers_healthy += u32::from(healthy);
        }
        p.stage_unstage |= stage;
    }
    for p in plugins.values_mut() {
        p.queue = controller_queue(conn, &p.id, limits)?;
        p.controller_publish = needs_controller_publish(conn, &p.id)?;
        p.volumes = conn.query_row(
            "SELECT count(*) FROM volumes WHERE plugin = ?1",
            [&p.id],
            |r| r.get(0),
        )?;
    }
    Ok(plugins.into_values().collect())
}

/// What a plugin's controller operations wait for and how long they waited, now.
fn controller_queue(
    conn: &Connection,
    plugin: &str,
    limits: &crate::lifecycle::Limits,
) -> ApiResult<api::ControllerQueue> {
    let now = crate::db::now_ms();
    let ms = |t: i64| (now - t).max(0) as u64;
    let mut q = api::ControllerQueue {
        concurrency: limits.controller_concurrency,
        warn_after_ms: limits.controller_queue_warning.as_millis() as u64,
        ..Default::default()
    };
    // Due since: queued, or due again after a retry's backoff.
    let mut stmt = conn.prepare_cached(
        "SELECT kind, count(*), min(MAX(created_at, not_before)), not_before <= ?2 AS due \
         FROM ops WHERE plugin = ?1 AND host IS NULL GROUP BY kind, due",
    )?;
    let rows = stmt.query_map(params![plugin, now], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, u32>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, bool>(3)?,
        ))
    })?;
    for row in rows {
        let (kind, count, since, due) = row?;
        if due {
            q.oldest_wait_ms = Some(q.oldest_wait_ms.unwrap_or(0).max(ms(since)));
            q.waiting.insert(
                kind,
                api::QueuedKind {
                    count,
                    oldest_wait_ms: ms(since),
                },
            );
        } else {
            q.backing_off.insert(kind, count);
        }
    }
    let mut stmt = conn.prepare_cached(
        "SELECT id, kind, volume, node, host, MAX(created_at, not_before), assigned_at FROM ops \
         WHERE plugin = ?1 AND host IS NOT NULL ORDER BY assigned_at, id",
    )?;
    let rows = stmt.query_map([plugin], |r| {
        Ok(api::RunningOp {
            id: r.get::<_, i64>(0)? as u64,
            kind: r.get(1)?,
            volume: r.get(2)?,
            node: r.get(3)?,
            host: r.get(4)?,
            waited_ms: {
                let since: i64 = r.get(5)?;
                let at: Option<i64> = r.get(6)?;
                at.map_or(0, |a| (a - since).max(0) as u64)
            },
            running_ms: r.get::<_, Option<i64>>(6)?.map_or(0, ms),
        })
    })?;
    q.running = rows.collect::<Result<_, _>>()?;
    Ok(q)
}

/// Which events to return.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub volume: Option<String>,
    pub node: Option<String>,
    pub alloc: Option<String>,
}

/// Events after index `after`, oldest first.
pub fn events(
    conn: &Connection,
    after: u64,
    f: &EventFilter,
    limit: u32,
) -> ApiResult<Vec<api::Event>> {
    let mut stmt = conn.prepare_cached(
        "SELECT idx, at, kind, volume, node, alloc, actor, message FROM events \
         WHERE idx > ?1 AND (?2 IS NULL OR volume = ?2) AND (?3 IS NULL OR node = ?3) \
         AND (?4 IS NULL OR alloc = ?4) ORDER BY idx LIMIT ?5",
    )?;
    let rows = stmt.query_map(
        params![after as i64, f.volume, f.node, f.alloc, limit],
        |r| {
            Ok(api::Event {
                index: r.get::<_, i64>(0)? as u64,
                at: time(r.get(1)?),
                kind: r.get(2)?,
                volume: r.get(3)?,
                node: r.get(4)?,
                alloc: r.get(5)?,
                actor: r.get(6)?,
                message: r.get(7)?,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// What `GET /v1/claims` selects.
#[derive(Debug, Default)]
pub struct ClaimFilter {
    pub volume: Option<String>,
    pub node: Option<String>,
    pub state: Option<api::ClaimState>,
    /// Every label must match.
    pub labels: Vec<(String, String)>,
    /// Only claims created longer ago than this.
    pub older_than_ms: Option<u64>,
}

impl ClaimFilter {
    pub fn from_query(pairs: &[(String, String)]) -> ApiResult<Self> {
        let mut f = Self::default();
        for (k, v) in pairs {
            match k.as_str() {
                "volume" => f.volume = Some(v.clone()),
                "node" => f.node = Some(v.clone()),
                "state" => {
                    f.state =
                        Some(v.parse().map_err(|e: String| {
                            ApiError::invalid(format!("invalid `state`: {e}"))
                        })?);
                }
                "label" => {
                    let (key, value) = v.split_once('=').ok_or_else(|| {
                        ApiError::invalid(format!("invalid `label` `{v}`: expected KEY=VALUE"))
                    })?;
                    f.labels.push((key.to_owned(), value.to_owned()));
                }
                "older_than_ms" => {
                    f.older_than_ms = Some(v.parse().map_err(|_| {
                        ApiError::invalid(format!(
                            "invalid `older_than_ms` `{v}`: expected milliseconds, 0 to {}",
                            u64::MAX
                        ))
                    })?);
                }
                other => {
                    return Err(
                        ApiError::invalid(format!("unknown query parameter `{other}`")).with_hint(
                            "filters: volume, node, state, label (KEY=VALUE), older_than_ms",
                        ),
                    );
                }
            }
        }
        Ok(f)
    }
}

/// Claims across volumes, oldest first, with queue positions.
pub fn list_claims(conn: &Connection, f: &ClaimFilter, now: i64) -> ApiResult<Vec<api::Claim>> {
    let sql = format!(
        "SELECT {CLAIM_COLUMNS} FROM claims WHERE (?1 IS NULL OR volume = ?1) AND (?2 IS NULL OR node = ?2) \
         ORDER BY volume, created_at, alloc"
    );
    let rows: Vec<ClaimRow> = conn
        .prepare(&sql)?
        .query_map(params![f.volume, f.node], ClaimRow::from_row)?
        .collect::<Result<_, _>>()?;
    let mut by_volume: BTreeMap<&str, Vec<&ClaimRow>> = BTreeMap::new();
    for r in &rows {
        by_volume.entry(&r.volume).or_default().push(r);
    }
    let cutoff = f
        .older_than_ms
        .map(|ms| now.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)));
    let mut out = Vec::new();
    for claims in by_volume.values() {
        let owned: Vec<ClaimRow> = claims.iter().map(|c| (*c).clone()).collect();
        for (row, c) in owned.iter().zip(claims_to_api(&owned)) {
            if f.state.is_some_and(|s| s != row.state)
                || cutoff.is_some_and(|t| row.created_at > t)
                || !f
                    .labels
                    .iter()
                    .all(|(k, v)| row.labels.get(k).is_some_and(|x| x == v))
            {
                continue;
            }
            out.push(c);
        }
    }
    Ok(out)
}
