//! Read-only views for the API: lists of volumes, nodes, plugins, controller hosts, claims
//! and events, shaped from what the store reads.

use std::collections::BTreeMap;

use csivol_api::{self as api, ControllerHost, ControllerHosts, NodeStatus, VolumeState};

use super::error::{ApiError, ApiResult};
use super::fence;
use super::liveness::Beats;
use super::model::listing::{VolumeChunk, VolumeFields};
use super::model::{
    AttachmentRow, ClaimRow, LimitChangeRow, StoredObservation, accepts_claims, claims_to_api,
    time, volume_state,
};
pub use super::store::EventFilter;
use super::store::Snapshot;
use csivol_api::domain::{AccessMode, Topology};
use csivol_rules::fence::FenceConfig;
use serde::Serialize;

/// What a volume listing selects.
#[derive(Debug, Clone, Default)]
pub struct VolumeFilter {
    pub state: Option<VolumeState>,
    pub node: Option<String>,
    pub plugin: Option<String>,
    /// Only volumes whose names match one of these patterns (a narrowed token's); none:
    /// every volume.
    pub names: Vec<String>,
    /// Only volumes of these namespaces (a narrowed token's); none: of every namespace.
    pub namespaces: Vec<String>,
    /// Only the volumes of this namespace; none: of every namespace.
    pub namespace: Option<String>,
}

/// Whether a narrowed token's scope holds the snapshot: its own name and its volume's.
pub fn snapshot_in_scope(scope: &api::TokenScope, s: &api::Snapshot) -> bool {
    scope.touches(&api::volume_key(&s.namespace, &s.name))
        && scope.touches(&api::volume_key(&s.namespace, &s.volume))
}

/// Whether the name matches one of a narrowed token's `patterns` (none: every name).
pub fn named_in(patterns: &[String], name: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| api::glob_matches(p, name))
}

/// Whether a narrowed token's namespaces and patterns hold the volume keyed `key`: of one
/// of its namespaces (none: every one), its name matching one of its patterns (none:
/// every name).
pub fn in_scope(patterns: &[String], namespaces: &[String], key: &str) -> bool {
    let (namespace, name) = api::split_key(key);
    (namespaces.is_empty() || namespaces.iter().any(|n| n == namespace)) && named_in(patterns, name)
}

/// Volume rows read per step of a listing, with their claims and attachments: what a
/// listing holds in memory at once, whatever the inventory.
pub const LIST_CHUNK: usize = 500;

/// The volumes after `after` (by name) that pass `filter`, at most `limit`, with their
/// claims and attachments, as a JSON array; each step reads [`LIST_CHUNK`] volumes and the
/// claims and attachments of that name range (three queries). Fewer than `limit` means
/// the end.
pub fn list_volumes(
    conn: &(impl Snapshot + ?Sized),
    filter: &VolumeFilter,
    after: Option<&str>,
    limit: usize,
    usage: &crate::usage::NodeSamples,
) -> ApiResult<Vec<u8>> {
    let mut out = vec![b'['];
    let mut listed = 0;
    let mut cursor = after.unwrap_or("").to_owned();
    while listed < limit {
        let chunk = conn.volume_chunk(&cursor, filter.plugin.as_deref(), LIST_CHUNK)?;
        for v in shape(&chunk, filter, usage).take(limit - listed) {
            write_listed(&mut out, listed == 0, &v?)?;
            listed += 1;
        }
        match chunk.last {
            Some(last) => cursor = last,
            None => break,
        }
    }
    out.push(b']');
    Ok(out)
}

/// Appends one listed volume to a JSON array being written (`first`: no comma before it).
pub fn write_listed(out: &mut Vec<u8>, first: bool, v: &ListedVolume<'_>) -> ApiResult<()> {
    if !first {
        out.push(b',');
    }
    serde_json::to_writer(&mut *out, v).map_err(|e| ApiError::internal(e.to_string()))
}

/// The listed volumes of a chunk the store read, those that pass the state and node
/// filters (the plugin filter is the store's), each decoded from the chunk in place, its
/// claims' usage from the nodes' samples.
pub fn shape<'c>(
    chunk: &'c VolumeChunk,
    filter: &'c VolumeFilter,
    usage: &'c crate::usage::NodeSamples,
) -> impl Iterator<Item = ApiResult<ListedVolume<'c>>> + 'c {
    chunk.volumes.rows().filter_map(move |row| {
        let fields = match (chunk.decode)(row) {
            Ok(f) => f,
            Err(e) => return Some(Err(ApiError::internal(format!("a stored volume: {e}")))),
        };
        if !in_scope(&filter.names, &filter.namespaces, fields.name)
            || filter
                .namespace
                .as_deref()
                .is_some_and(|ns| api::namespace_of(fields.name) != ns)
        {
            return None;
        }
        let c = chunk.claims.get(fields.name).map_or(&[][..], Vec::as_slice);
        let a = chunk
            .attachments
            .get(fields.name)
            .map_or(&[][..], Vec::as_slice);
        if let Some(n) = &filter.node
            && !c.iter().any(|c| c.node == *n)
            && !a.iter().any(|a| a.node == *n)
        {
            return None;
        }
        let state = volume_state(fields.lifecycle, c, a);
        if filter.state.is_some_and(|s| s != state) {
            return None;
        }
        let m = chunk.mounts.get(fields.name).cloned().unwrap_or_default();
        let availability = chunk.availability.get(fields.name).cloned();
        let job = chunk.jobs.get(fields.name).cloned();
        let labels = chunk.labels.get(fields.name).cloned().unwrap_or_default();
        let lingers = chunk
            .lingers
            .get(fields.name)
            .map_or(&[][..], Vec::as_slice);
        let mut listed = ListedVolume::new(fields, state, c, a, m, availability);
        listed.job = job;
        listed.labels = labels;
        crate::model::show_lingers(&mut listed.attachments, lingers);
        usage.fill(&mut listed.claims);
        Some(Ok(listed))
    })
}

/// A volume as the API shows it ([`api::Volume`], serialised to the same JSON), its
/// strings borrowed from where the store read them: a listing of many volumes makes no
/// string per column and no timestamp string.
#[derive(Debug, Serialize)]
pub struct ListedVolume<'a> {
    name: &'a str,
    namespace: &'a str,
    plugin: &'a str,
    external_id: &'a str,
    access_mode: AccessMode,
    attachment: api::Attachment,
    state: VolumeState,
    accepts_claims: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "is_empty")]
    fs_type: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mount_flags: Vec<String>,
    context: BTreeMap<String, String>,
    parameters: BTreeMap<String, String>,
    secret_keys: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    accessible_topology: Vec<Topology>,
    #[serde(skip_serializing_if = "Option::is_none")]
    topology_request: Option<api::TopologyRequest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    expansion: Option<api::Expansion>,
    mutable_parameters: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    modification: Option<api::Modification>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    claim_mount_flags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    selinux_context: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ownership: Option<api::Ownership>,
    #[serde(skip_serializing_if = "Option::is_none")]
    availability: Option<api::VolumeAvailability>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<api::JobVolume>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    claims: Vec<api::Claim>,
    attachments: Vec<api::AttachmentStatus>,
    created_at: Rfc3339,
    updated_at: Rfc3339,
    index: u64,
}

fn is_empty(s: &&str) -> bool {
    s.is_empty()
}

/// Unix milliseconds serialised as [`time`] formats them, written straight into the
/// output.
#[derive(Debug)]
struct Rfc3339(i64);

impl Serialize for Rfc3339 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ms = (self.0.max(0) as u64).min(csivol_api::limits::MAX_TIME_MS);
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
        s.collect_str(&humantime::format_rfc3339_millis(t))
    }
}

impl<'a> ListedVolume<'a> {
    fn new(
        v: VolumeFields<'a>,
        state: VolumeState,
        claims: &[ClaimRow],
        attachments: &[AttachmentRow],
        mounts: api::VolumeMounts,
        availability: Option<api::VolumeAvailability>,
    ) -> Self {
        Self {
            availability,
            job: None,
            labels: BTreeMap::new(),
            claim_mount_flags: mounts.claim_mount_flags,
            selinux_context: mounts.selinux_context,
            ownership: mounts.ownership,
            accepts_claims: accepts_claims(v.lifecycle, v.access_mode, claims),
            state,
            name: api::split_key(v.name).1,
            namespace: api::split_key(v.name).0,
            plugin: v.plugin,
            external_id: v.external_id,
            access_mode: v.access_mode,
            attachment: v.attachment,
            capacity_bytes: v.capacity_bytes,
            fs_type: v.fs_type,
            mount_flags: v.mount_flags,
            context: v.context,
            parameters: v.parameters,
            secret_keys: v.secret_keys,
            accessible_topology: v.accessible_topology,
            topology_request: v.topology_request,
            error: v.error,
            expansion: v.expansion,
            mutable_parameters: v.mutable_parameters,
            modification: v.modification,
            claims: claims_to_api(claims),
            attachments: attachments.iter().map(AttachmentRow::to_api).collect(),
            created_at: Rfc3339(v.created_at),
            updated_at: Rfc3339(v.updated_at),
            index: v.modify_index,
        }
    }
}

/// Every field of [`api::Volume`], named: a field added there fails to compile here until
/// [`ListedVolume`] has it too (the listing and `GET /v1/volumes/NAME` must agree).
#[allow(dead_code)]
fn listed_volume_has_every_field(v: api::Volume) {
    let api::Volume {
        name: _,
        namespace: _,
        plugin: _,
        external_id: _,
        access_mode: _,
        attachment: _,
        state: _,
        accepts_claims: _,
        capacity_bytes: _,
        fs_type: _,
        mount_flags: _,
        context: _,
        parameters: _,
        secret_keys: _,
        accessible_topology: _,
        topology_request: _,
        error: _,
        expansion: _,
        mutable_parameters: _,
        modification: _,
        claim_mount_flags: _,
        selinux_context: _,
        ownership: _,
        availability: _,
        job: _,
        labels: _,
        claims: _,
        attachments: _,
        created_at: _,
        updated_at: _,
        index: _,
    } = v;
}

/// Nodes with their plugins; `only` selects one.
pub fn list_nodes(
    conn: &impl Snapshot,
    beats: &Beats,
    only: Option<&str>,
    fencing: &FenceConfig,
    now: i64,
) -> ApiResult<Vec<api::Node>> {
    let rows = conn.nodes(only)?;
    let mut out = Vec::with_capacity(rows.len());
    for n in rows {
        let fence = fence::node_fence(fencing, conn, &n, now)?;
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
                lingering: super::lifecycle::lingering_slots(conn, &n.name, &p.plugin)?,
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
    now: i64,
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
            capacity: api::PluginCapacity::default(),
            calls: Vec::new(),
        });
        if let Some(c) = &reg.controller {
            p.capacity.reported |= c.get_capacity;
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
        p.queue = controller_queue(conn, &p.id, limits, now)?;
        p.controller_publish = conn.needs_controller_publish(&p.id)?;
        p.volumes = conn.volumes_of_plugin(&p.id)?;
    }
    Ok(plugins.into_values().collect())
}

/// What a plugin's controller operations wait for and how long they waited, at `now`.
fn controller_queue(
    conn: &(impl Snapshot + ?Sized),
    plugin: &str,
    limits: &crate::lifecycle::Limits,
    now: i64,
) -> ApiResult<api::ControllerQueue> {
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

/// The index of the last event of the page [`events`] would return; `None` when empty.
pub fn event_page_end(
    conn: &impl Snapshot,
    after: u64,
    f: &EventFilter,
    limit: u32,
) -> ApiResult<Option<u64>> {
    conn.event_page_end(after, f, limit)
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
#[derive(Clone, Debug, Default)]
pub struct ClaimFilter {
    pub volume: Option<String>,
    pub node: Option<String>,
    pub state: Option<api::ClaimState>,
    /// Every label must match.
    pub labels: Vec<(String, String)>,
    /// Only claims created longer ago than this.
    pub older_than_ms: Option<u64>,
    /// Only claims of volumes whose names match one of these patterns (a narrowed
    /// token's); none: every volume's.
    pub names: Vec<String>,
    /// Only claims of volumes of these namespaces (a narrowed token's); none: of every one.
    pub namespaces: Vec<String>,
    /// Only claims of this namespace's volumes; none: of every namespace.
    pub namespace: Option<String>,
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
                    let ms: u64 = v.parse().map_err(|_| {
                        ApiError::invalid(format!(
                            "invalid `older_than_ms` `{v}`: expected milliseconds, 0 to {}",
                            api::limits::MAX_DURATION_MS
                        ))
                    })?;
                    api::limits::duration_ms("older_than_ms", ms)
                        .map_err(ApiError::out_of_range)?;
                    f.older_than_ms = Some(ms);
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

/// Volumes whose claims a page of `GET /v1/claims` holds.
pub const CLAIM_PAGE_VOLUMES: usize = 256;

/// `GET /v1/claims`, a page: the claims of the volumes after `after` by name, by volume,
/// creation and alloc, with queue positions, as JSON entries of an array (comma separated),
/// and the volume the next page starts after (`None`: this was the last). A volume's claims
/// are all in one page, so that its queue positions count as a whole listing's do.
pub fn claim_page(
    conn: &impl Snapshot,
    f: &ClaimFilter,
    now: i64,
    after: &str,
    usage: &crate::usage::NodeSamples,
) -> ApiResult<(Vec<u8>, Option<String>)> {
    let rows = conn.claim_page(
        f.volume.as_deref(),
        f.node.as_deref(),
        after,
        CLAIM_PAGE_VOLUMES,
    )?;
    let cutoff = f
        .older_than_ms
        .map(|ms| now.saturating_sub(i64::try_from(ms).unwrap_or(i64::MAX)));
    let mut out = Vec::new();
    let (mut volumes, mut last) = (0, None);
    for claims in rows.chunk_by(|a, b| a.volume == b.volume) {
        volumes += 1;
        last = Some(&claims[0].volume);
        if !in_scope(&f.names, &f.namespaces, &claims[0].volume)
            || f.namespace
                .as_deref()
                .is_some_and(|ns| api::namespace_of(&claims[0].volume) != ns)
        {
            continue;
        }
        let mut shaped = claims_to_api(claims);
        usage.fill(&mut shaped);
        for (row, c) in claims.iter().zip(shaped) {
            if f.state.is_some_and(|s| s != row.state)
                || cutoff.is_some_and(|t| row.created_at > t)
                || !f
                    .labels
                    .iter()
                    .all(|(k, v)| row.labels.get(k).is_some_and(|x| x == v))
            {
                continue;
            }
            if !out.is_empty() {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, &c).map_err(|e| ApiError::internal(e.to_string()))?;
        }
    }
    let next = last.filter(|_| volumes == CLAIM_PAGE_VOLUMES).cloned();
    Ok((out, next))
}
