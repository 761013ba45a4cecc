//! Read-only views for the API: lists of volumes, nodes, plugins, controller hosts, claims
//! and events, shaped from what the store reads.

use std::collections::BTreeMap;

use csivol_api::{self as api, ControllerHost, ControllerHosts, NodeStatus, VolumeState};

use super::error::{ApiError, ApiResult};
use super::fence;
use super::liveness::Beats;
use super::model::{ClaimRow, LimitChangeRow, StoredObservation, VolumeChunk, claims_to_api, time};
pub use super::store::EventFilter;
use super::store::Snapshot;
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
    conn: &impl Snapshot,
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

/// Every volume passing the plugin filter, [`LIST_CHUNK`] rows at a time with their claims
/// and attachments, each step handed to `emit` as the store read it (all within the
/// caller's read transaction: one consistent view); [`shape`] makes a step the API's
/// volumes. Reading and shaping are apart so that a listing can do them on two threads.
pub fn each_volume_chunk(
    conn: &impl Snapshot,
    filter: &VolumeFilter,
    mut emit: impl FnMut(VolumeChunk) -> ApiResult<()>,
) -> ApiResult<()> {
    let mut cursor = String::new();
    loop {
        let chunk = conn.volume_chunk(&cursor, filter.plugin.as_deref(), LIST_CHUNK)?;
        let Some(last) = chunk.volumes.last().map(|v| v.name.clone()) else {
            return Ok(());
        };
        emit(chunk)?;
        cursor = last;
    }
}

/// Up to `rows` volumes after `after` that pass the plugin filter, then the state and node
/// filters; with the name of the last row read (`None`: no row left).
fn volume_chunk(
    conn: &impl Snapshot,
    filter: &VolumeFilter,
    after: Option<&str>,
    rows: usize,
) -> ApiResult<(Vec<api::Volume>, Option<String>)> {
    let chunk = conn.volume_chunk(after.unwrap_or(""), filter.plugin.as_deref(), rows)?;
    let last = chunk.volumes.last().map(|v| v.name.clone());
    Ok((shape(chunk, filter).collect(), last))
}

/// The API's volumes of a chunk the store read, those that pass the state and node
/// filters (the plugin filter is the store's), each row's strings and maps moved into its
/// volume.
pub fn shape(chunk: VolumeChunk, filter: &VolumeFilter) -> impl Iterator<Item = api::Volume> {
    let VolumeChunk {
        volumes,
        claims,
        attachments,
    } = chunk;
    volumes.into_iter().filter_map(move |v| {
        let c = claims.get(&v.name).map_or(&[][..], Vec::as_slice);
        let a = attachments.get(&v.name).map_or(&[][..], Vec::as_slice);
        if let Some(n) = &filter.node
            && !c.iter().any(|c| c.node == *n)
            && !a.iter().any(|a| a.node == *n)
        {
            return None;
        }
        if filter.state.is_some_and(|s| s != v.state(c, a)) {
            return None;
        }
        Some(v.into_api(c, a))
    })
}

/// Nodes with their plugins; `only` selects one.
pub fn list_nodes(
    conn: &impl Snapshot,
    beats: &Beats,
    only: Option<&str>,
    fencing: &FenceConfig,
) -> ApiResult<Vec<api::Node>> {
    let rows = conn.nodes(only)?;
    let mut out = Vec::with_capacity(rows.len());
    for n in rows {
        let fence = fence::node_fence(fencing, conn, &n)?;
        let fences = match only {
            Some(_) => conn.fence_history(&n.name)?,
            None => Vec::new(),
        };
        let mut plugins = Vec::new();
        for p in conn.node_plugins(&n.name)? {
            plugins.push(api::NodePlugin {
                topology: p.topology,
                ready_check: p.ready_check,
                observed: p.observed.as_ref().map(StoredObservation::to_api),
                used: conn.slots_used(&n.name, &p.plugin)?,
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
            stopped: n
                .stopped_at
                .filter(|_| n.status == NodeStatus::Stopped)
                .map(|at| api::NodeStop {
                    at: time(at),
                    took_down: n.stop_took_down,
                    lost_at: time(at + beats.planned_stop_grace.as_millis() as i64),
                }),
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
    conn: &(impl Snapshot + ?Sized),
    only: Option<&str>,
    limits: &crate::lifecycle::Limits,
) -> ApiResult<Vec<api::Plugin>> {
    let mut plugins: BTreeMap<String, api::Plugin> = BTreeMap::new();
    for row in conn.plugin_nodes(only)? {
        let reg = &row.registration;
        let id = row.plugin;
        let healthy = row.status == NodeStatus::Ready;
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
            group_snapshots: false,
            volumes: 0,
            nodes: Vec::new(),
            queue: api::ControllerQueue::default(),
        });
        if let Some(c) = &reg.controller {
            p.snapshots |= c.create_delete_snapshot;
            p.clone_volume |= c.clone_volume;
            p.modify_volume |= c.modify_volume;
            p.group_snapshots |= c.group_snapshots;
        }
        if row.node_service {
            p.nodes_expected += 1;
            p.nodes_healthy += u32::from(healthy);
            p.nodes.push(api::PluginNode {
                name: row.node,
                status: row.status,
                topology: row.topology,
                ready_check: reg.node.as_ref().and_then(|n| n.ready_check.clone()),
                observed: row.observed.as_ref().map(StoredObservation::to_api),
            });
        }
        if row.controller {
            p.controllers_expected += 1;
            p.controllers_healthy += u32::from(healthy);
        }
        p.stage_unstage |= row.stage_unstage;
    }
    for p in plugins.values_mut() {
        p.queue = controller_queue(conn, &p.id, limits)?;
        p.controller_publish = conn.needs_controller_publish(&p.id)?;
        p.volumes = conn.volumes_of_plugin(&p.id)?;
    }
    Ok(plugins.into_values().collect())
}

/// What a plugin's controller operations wait for and how long they waited, now.
fn controller_queue(
    conn: &(impl Snapshot + ?Sized),
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
    for w in conn.waiting_ops(Some(plugin), now)? {
        if w.due {
            q.oldest_wait_ms = Some(q.oldest_wait_ms.unwrap_or(0).max(ms(w.since)));
            q.waiting.insert(
                w.kind,
                api::QueuedKind {
                    count: w.count,
                    oldest_wait_ms: ms(w.since),
                },
            );
        } else {
            q.backing_off.insert(w.kind, w.count);
        }
    }
    q.running = conn
        .running_ops(plugin)?
        .into_iter()
        .map(|r| api::RunningOp {
            id: r.id as u64,
            kind: r.kind,
            volume: r.volume,
            node: r.node,
            host: r.host,
            waited_ms: r.assigned_at.map_or(0, |a| (a - r.since).max(0) as u64),
            running_ms: r.assigned_at.map_or(0, ms),
        })
        .collect();
    Ok(q)
}

/// Events after index `after`, oldest first.
pub fn events(
    conn: &impl Snapshot,
    after: u64,
    f: &EventFilter,
    limit: u32,
) -> ApiResult<Vec<api::Event>> {
    conn.events(after, f, limit)
}

/// `GET /v1/plugins/{id}/controllers`: who may host, and who does.
pub fn controller_hosts(conn: &impl Snapshot, plugin: &str) -> ApiResult<ControllerHosts> {
    let mut hosts: Vec<ControllerHost> = conn
        .controller_allowances(plugin)?
        .into_iter()
        .map(|(node, by, at)| ControllerHost {
            node,
            source: "operator".into(),
            by: Some(by),
            since: Some(time(at)),
        })
        .collect();
    let mut tokens: Vec<_> = conn
        .tokens()?
        .into_iter()
        .filter(|t| {
            t.role == api::Role::Node
                && t.revoked_at.is_none()
                && t.controllers.iter().any(|p| p == plugin)
        })
        .collect();
    tokens.sort_by(|a, b| (&a.node, &a.id).cmp(&(&b.node, &b.id)));
    hosts.extend(tokens.into_iter().filter_map(|t| {
        Some(ControllerHost {
            node: t.node?,
            source: "token".into(),
            by: Some(t.id),
            since: None,
        })
    }));
    Ok(ControllerHosts {
        plugin: plugin.to_owned(),
        allowed: hosts,
        hosting: conn.nodes_hosting_controller(plugin)?,
    })
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
pub fn list_claims(conn: &impl Snapshot, f: &ClaimFilter, now: i64) -> ApiResult<Vec<api::Claim>> {
    let rows = conn.claims(f.volume.as_deref(), f.node.as_deref())?;
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
