//! Simulated nodes for `--mode server`: light clients of the agent endpoints that register,
//! heartbeat at a third of the TTL, follow their desired state and report success at once
//! for everything in it. They measure the control plane alone, without plugins. Like the
//! agent, they keep the node channel open where the server offers it (heartbeats on it,
//! the desired state fetched when it says so) and long-poll otherwise.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use csivol_api::domain::{
    ControllerCapabilities, NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo,
};
use csivol_api::{
    ControllerOpKind, DesiredState, HeartbeatResponse, NodePluginRegistration, NodeStatus,
    PluginRegistration, RegisterRequest, Report, ReportBatch, Role, TokenRequest, TokenResponse,
};
use csivol_client::channel::Shared;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use super::client::Http;
use super::stats::concurrently;

/// What a simulated node holds, as a real node would have it mounted.
#[derive(Debug, Default)]
struct Held {
    /// Published claims (volume, alloc).
    published: HashSet<(String, String)>,
    /// Staged volumes.
    staged: HashSet<String>,
    /// Controller operations already reported (id, attempt).
    done_ops: HashSet<(u64, u32)>,
}

#[derive(Debug)]
pub struct SimNode {
    pub name: String,
    http: Http,
    controller_host: bool,
    controller_publish: bool,
    ttl: Duration,
    held: Mutex<Held>,
    errors: Arc<Mutex<Vec<String>>>,
    /// Set while the server is deliberately down (the kill -9 check): errors are expected.
    quiet: Arc<AtomicBool>,
    /// Asks the heartbeat loop for one last heartbeat, then to stop.
    die: Notify,
    last_beat: Mutex<Option<oneshot::Sender<Instant>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    channel: Shared,
    /// The server does not offer the node channel.
    no_channel: AtomicBool,
    /// How long a controller operation takes on this host before it reports (0: at once),
    /// each on its own: the server's concurrency limit bounds how many run together.
    op_delay: Duration,
    /// While false, slow controller operations wait before they start (the backlog
    /// scenario holds them until its storm is queued).
    ops_open: tokio::sync::watch::Receiver<bool>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether a report answers a controller operation.
fn is_op_report(r: &Report) -> bool {
    matches!(
        r,
        Report::ControllerPublished { .. }
            | Report::ControllerUnpublished { .. }
            | Report::Created { .. }
            | Report::Deleted { .. }
            | Report::Expanded { .. }
            | Report::Modified { .. }
            | Report::SnapshotCreated { .. }
            | Report::SnapshotDeleted { .. }
            | Report::GroupSnapshotCreated { .. }
            | Report::GroupSnapshotDeleted { .. }
            | Report::OpError { .. }
    )
}

impl SimNode {
    fn error(&self, e: String) {
        if !self.quiet.load(Ordering::Relaxed) {
            let mut errors = self.errors.lock().expect("errors lock");
            if errors.len() < 1000 {
                errors.push(format!("simulated node {}: {e}", self.name));
            }
        }
    }

    fn registration(&self) -> RegisterRequest {
        let held = self.held.lock().expect("held lock");
        RegisterRequest {
            plugins: vec![PluginRegistration {
                id: super::PLUGIN.to_owned(),
                info: PluginInfo {
                    name: "hostpath.csivol.dev".to_owned(),
                    vendor_version: "simulated".to_owned(),
                },
                capabilities: PluginCapabilities {
                    controller_service: self.controller_publish,
                    volume_accessibility_constraints: false,
                    volume_expansion: None,
                    group_controller_service: false,
                },
                node: Some(NodePluginRegistration {
                    info: NodeInfo {
                        node_id: self.name.clone(),
                        max_volumes_per_node: 0,
                        accessible_topology: None,
                    },
                    capabilities: NodeCapabilities {
                        stage_unstage_volume: true,
                        ..NodeCapabilities::default()
                    },
                    ready_check: None,
                }),
                controller: (self.controller_host && self.controller_publish).then(|| {
                    ControllerCapabilities {
                        publish_unpublish_volume: true,
                        ..ControllerCapabilities::default()
                    }
                }),
            }],
            fence_after_ms: None,
            published: held
                .published
                .iter()
                .map(|(volume, alloc)| csivol_api::ClaimRef {
                    volume: volume.clone(),
                    alloc: alloc.clone(),
                })
                .collect(),
            staged: held.staged.iter().cloned().collect(),
            labels: Default::default(),
        }
    }

    async fn register(&self) -> anyhow::Result<()> {
        self.http
            .post(
                &format!("/v1/nodes/{}/register", self.name),
                &self.registration(),
            )
            .await?
            .expect(&format!("register {}", self.name), &[200])?;
        Ok(())
    }

    async fn heartbeat_loop(self: Arc<Self>) {
        // Spread the nodes' heartbeats over the interval instead of sending them together.
        let interval = self.ttl / 3;
        tokio::time::sleep(interval.mul_f64(rand::random_range(0.0..1.0))).await;
        let mut dying = false;
        loop {
            let sent = Instant::now();
            let answer = match self.channel.heartbeat(interval).await {
                Some(answer) => answer.map_err(anyhow::Error::from),
                None => self
                    .http
                    .post(&format!("/v1/nodes/{}/heartbeat", self.name), &())
                    .await
                    .and_then(|r| r.expect("heartbeat", &[200]))
                    .and_then(|r| r.json::<HeartbeatResponse>()),
            };
            match answer {
                Ok(hb) if hb.status == NodeStatus::Lost => {
                    self.error("the server marked this node lost; registering again".into());
                    if let Err(e) = self.register().await {
                        self.error(format!("{e:#}"));
                    }
                }
                Ok(_) => {
                    if dying {
                        if let Some(tx) = self.last_beat.lock().expect("lock").take() {
                            let _ = tx.send(sent);
                        }
                        return;
                    }
                }
                Err(e) => self.error(format!("{e:#}")),
            }
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = self.die.notified() => dying = true,
            }
        }
    }

    /// Keeps the node channel open; returns at once against a server without it.
    async fn channel_loop(self: Arc<Self>) {
        // Failures in a row: while the server is down (the kill -9 check) every node tries
        // again, and ten thousand of them must not try every few hundred milliseconds.
        let mut failures = 0u32;
        loop {
            match self.http.channel(&self.name).await {
                Ok(channel) => match channel.start().await {
                    Ok((reader, writer)) => {
                        failures = 0;
                        self.channel.serve(reader, writer).await;
                    }
                    Err(e) => self.error(format!("node channel: {e}")),
                },
                Err(csivol_client::Error::Refused { status, .. })
                    if status == 404 || status == 426 =>
                {
                    self.no_channel.store(true, Ordering::Relaxed);
                    return;
                }
                Err(e) => self.error(format!("node channel: {e}")),
            }
            let most = (200u64 << failures.min(5)).min(5_000);
            failures += 1;
            tokio::time::sleep(Duration::from_millis(rand::random_range(most / 2..=most))).await;
        }
    }

    async fn desired_loop(self: Arc<Self>) {
        let path = format!("/v1/nodes/{}/desired", self.name);
        let mut channel = self.channel.subscribe();
        let mut index = 0;
        let mut failures = 0u32;
        // Off against a server that does not know `since` (an older csivol-server run with
        // `--bin-dir`, for before/after figures).
        let mut changes = true;
        loop {
            // Like an agent, ask for the changes since the state last seen (index 0: the
            // whole state). Planning is idempotent over what the node holds, so a node that
            // acted on every earlier answer needs only the changes.
            let path = match index {
                since if since > 0 && changes => format!("{path}?since={since}"),
                _ => path.clone(),
            };
            let chan = *channel.borrow_and_update();
            if chan.open && index != 0 && chan.pushed <= index {
                // Nothing new until the channel says so (or closes).
                let _ = channel.changed().await;
                continue;
            }
            if !chan.open && !self.no_channel.load(Ordering::Relaxed) {
                // The channel is being opened (or again, after the server restarted): wait
                // for it rather than open a long-poll beside it, which would take ten
                // thousand nodes two connections each while they reconnect.
                tokio::select! {
                    _ = channel.changed() => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                continue;
            }
            // Changes the channel pushed that follow what was planned are planned as they
            // came, without a request.
            let pushed = (chan.open && index > 0 && changes)
                .then(|| self.channel.take_pushed(index, None))
                .flatten();
            let desired = match pushed {
                Some(pushed) => Ok(pushed),
                None => {
                    let answer = match (chan.open, chan.pushed) {
                        (false, _) => tokio::select! {
                            answer = self.http.get_blocking(&path, index) => answer,
                            // The channel opened: it says when to ask.
                            Ok(()) = channel.changed() => continue,
                        },
                        (true, pushed @ 1..) => self.http.get_blocking(&path, pushed - 1).await,
                        (true, 0) => self.http.get(&path).await,
                    };
                    if changes && index > 0 && answer.as_ref().is_ok_and(|r| r.status == 400) {
                        changes = false;
                        continue;
                    }
                    answer
                        .and_then(|r| r.expect("desired state", &[200]))
                        .and_then(|r| r.json::<DesiredState>())
                }
            };
            let desired = match desired {
                Ok(d) => d,
                Err(e) => {
                    self.error(format!("{e:#}"));
                    failures += 1;
                    // Start afresh: the server may have restarted.
                    index = 0;
                    let pause = Duration::from_millis(50 * u64::from(failures.min(20)));
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            failures = 0;
            index = desired.index;
            let (mut reports, published, later) = self.plan(&desired);
            if !self.op_delay.is_zero() {
                // Slow controller calls: each reports on its own once it has taken its time.
                let (slow, now): (Vec<Report>, Vec<Report>) =
                    reports.into_iter().partition(is_op_report);
                reports = now;
                for r in slow {
                    let node = Arc::clone(&self);
                    let mut open = self.ops_open.clone();
                    tokio::spawn(async move {
                        let _ = open.wait_for(|o| *o).await;
                        tokio::time::sleep(node.op_delay).await;
                        node.send(vec![r]).await;
                    });
                }
            }
            if !reports.is_empty() && !self.send(reports).await {
                // Nothing reported: forget, so that the next desired state reports again.
                let mut held = self.held.lock().expect("held lock");
                for key in published {
                    held.published.remove(&key);
                }
                held.done_ops.clear();
                index = 0;
            }
            if let Some(at) = later {
                // An operation in backoff: look again when it is due.
                let wait = Duration::from_millis(at.saturating_sub(now_ms()));
                tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
                index = 0;
            }
        }
    }

    /// The reports for a desired state, the claims newly published, and when the first
    /// operation still in backoff is due.
    fn plan(&self, d: &DesiredState) -> (Vec<Report>, Vec<(String, String)>, Option<u64>) {
        let mut held = self.held.lock().expect("held lock");
        let mut reports = Vec::new();
        let mut new = Vec::new();
        for p in &d.publish {
            let key = (p.volume.volume.clone(), p.alloc.clone());
            if held.published.insert(key.clone()) {
                held.staged.insert(key.0.clone());
                reports.push(Report::Published {
                    volume: key.0.clone(),
                    alloc: key.1.clone(),
                    target_path: format!("/sim/{}/{}/{}", self.name, key.0, key.1),
                    observed: None,
                    ownership: None,
                });
                new.push(key);
            }
        }
        for u in &d.unpublish {
            held.published.remove(&(u.volume.clone(), u.alloc.clone()));
            reports.push(Report::Unpublished {
                volume: u.volume.clone(),
                alloc: u.alloc.clone(),
            });
        }
        for s in &d.unstage {
            if !held.published.iter().any(|(v, _)| *v == s.volume) {
                held.staged.remove(&s.volume);
                reports.push(Report::Unstaged {
                    volume: s.volume.clone(),
                });
            }
        }
        let now = now_ms();
        let mut later: Option<u64> = None;
        let current: HashSet<(u64, u32)> =
            d.controller_ops.iter().map(|o| (o.id, o.attempt)).collect();
        held.done_ops.retain(|k| current.contains(k));
        for op in &d.controller_ops {
            if op.not_before_ms > now {
                later = Some(later.map_or(op.not_before_ms, |l| l.min(op.not_before_ms)));
                continue;
            }
            if !held.done_ops.insert((op.id, op.attempt)) {
                continue;
            }
            let (id, attempt) = (op.id, op.attempt);
            reports.push(match &op.kind {
                ControllerOpKind::Publish { volume, .. } => Report::ControllerPublished {
                    op: id,
                    attempt,
                    publish_context: BTreeMap::from([(
                        "hostpath.csivol.dev/device".to_owned(),
                        format!("/dev/sim/{volume}"),
                    )]),
                },
                ControllerOpKind::Unpublish { .. } => {
                    Report::ControllerUnpublished { op: id, attempt }
                }
                ControllerOpKind::Create {
                    volume,
                    capacity_bytes,
                    ..
                } => Report::Created {
                    op: id,
                    attempt,
                    external_id: format!("sim-{volume}"),
                    capacity_bytes: *capacity_bytes,
                    context: BTreeMap::new(),
                    accessible_topology: Vec::new(),
                    made_for: None,
                },
                ControllerOpKind::Delete { .. } => Report::Deleted { op: id, attempt },
                ControllerOpKind::Expand { capacity_bytes, .. } => Report::Expanded {
                    op: id,
                    attempt,
                    capacity_bytes: *capacity_bytes,
                    node_expansion_required: false,
                },
                ControllerOpKind::Modify { .. } => Report::Modified { op: id, attempt },
                ControllerOpKind::CreateSnapshot { snapshot, .. } => Report::SnapshotCreated {
                    op: id,
                    attempt,
                    snapshot_id: format!("sim-{snapshot}"),
                    size_bytes: 0,
                    ready_to_use: true,
                    creation_time_ms: None,
                },
                ControllerOpKind::DeleteSnapshot { .. } => {
                    Report::SnapshotDeleted { op: id, attempt }
                }
                ControllerOpKind::CreateGroupSnapshot {
                    group,
                    source_volume_ids,
                    ..
                } => Report::GroupSnapshotCreated {
                    op: id,
                    attempt,
                    group_snapshot_id: format!("sim-{group}"),
                    ready_to_use: true,
                    creation_time_ms: None,
                    snapshots: source_volume_ids
                        .iter()
                        .map(|v| csivol_api::GroupMember {
                            snapshot_id: format!("sim-{group}-{v}"),
                            source_volume_id: v.clone(),
                            size_bytes: 0,
                            ready_to_use: true,
                            creation_time_ms: None,
                        })
                        .collect(),
                },
                ControllerOpKind::DeleteGroupSnapshot { .. } => {
                    Report::GroupSnapshotDeleted { op: id, attempt }
                }
                ControllerOpKind::ValidateVolume { .. } => Report::Validated {
                    op: id,
                    attempt,
                    not_confirmed: Vec::new(),
                    message: String::new(),
                },
                ControllerOpKind::FindSnapshot { snapshot_id, .. } => Report::SnapshotFound {
                    op: id,
                    attempt,
                    snapshot: Some(csivol_api::ListedSnapshot {
                        snapshot_id: snapshot_id.clone(),
                        ready_to_use: true,
                        ..Default::default()
                    }),
                },
            });
        }
        (reports, new, later)
    }

    /// Sends a batch of reports, with a few retries; whether it got through.
    async fn send(&self, reports: Vec<Report>) -> bool {
        let batch = ReportBatch { reports };
        let path = format!("/v1/nodes/{}/reports", self.name);
        // On the channel when it takes reports, as an agent sends them.
        match self.channel.report(&batch, Duration::from_secs(10)).await {
            Some(Ok(())) => return true,
            Some(Err(e)) => self.error(format!("reports on the node channel: {e:#}")),
            None => {}
        }
        for attempt in 1..=3u64 {
            match self
                .http
                .post(&path, &batch)
                .await
                .and_then(|r| r.expect("reports", &[200]))
            {
                Ok(_) => return true,
                Err(e) => {
                    self.error(format!("{e:#}"));
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
            }
        }
        false
    }

    /// What the node still holds: published claims and staged volumes.
    pub fn holds(&self) -> (usize, usize) {
        let held = self.held.lock().expect("held lock");
        (held.published.len(), held.staged.len())
    }
}

/// The simulated nodes of a run; their loops stop when it is dropped.
#[derive(Debug)]
pub struct SimCluster {
    pub nodes: Vec<Arc<SimNode>>,
    /// Opens and closes the slow controller operations' gate (`hold_ops`).
    ops_open: tokio::sync::watch::Sender<bool>,
    errors: Arc<Mutex<Vec<String>>>,
    quiet: Arc<AtomicBool>,
}

impl SimCluster {
    /// Creates a token for each of `count` nodes, registers them (the first
    /// `controller_hosts` host the plugin's controller) and starts their loops.
    pub async fn start(
        http: &Http,
        count: u32,
        controller_hosts: u32,
        controller_publish: bool,
        ttl: Duration,
        op_delay: Duration,
    ) -> anyhow::Result<Self> {
        let errors = Arc::new(Mutex::new(Vec::new()));
        let quiet = Arc::new(AtomicBool::new(false));
        let (ops_open, ops_gate) = tokio::sync::watch::channel(true);
        let names: Vec<String> = (1..=count).map(node_name).collect();
        let operator = http.clone();
        let tokens = concurrently(names.clone(), 64, move |node| {
            let http = operator.clone();
            async move {
                let req = TokenRequest {
                    role: Role::Node,
                    node: Some(node.clone()),
                    name: None,
                    ttl_ms: None,
                    controllers: vec![super::PLUGIN.to_owned()],
                    capabilities: Vec::new(),
                    volumes: Vec::new(),
                    namespaces: Vec::new(),
                };
                let t: TokenResponse = http
                    .post("/v1/tokens", &req)
                    .await?
                    .expect(&format!("token for {node}"), &[201])?
                    .json()?;
                anyhow::Ok(t.token)
            }
        })
        .await;
        let mut nodes = Vec::with_capacity(names.len());
        for (i, (name, token)) in names.into_iter().zip(tokens).enumerate() {
            nodes.push(Arc::new(SimNode {
                http: http.with_token(&token?),
                name,
                controller_host: (i as u32) < controller_hosts,
                controller_publish,
                ttl,
                held: Mutex::new(Held::default()),
                errors: Arc::clone(&errors),
                quiet: Arc::clone(&quiet),
                die: Notify::new(),
                last_beat: Mutex::new(None),
                tasks: Mutex::new(Vec::new()),
                channel: Shared::default(),
                no_channel: AtomicBool::new(false),
                op_delay,
                ops_open: ops_gate.clone(),
            }));
        }
        // Each node starts heartbeating as soon as it is registered: the server's TTL runs
        // from the registration.
        let registered = concurrently(nodes.clone(), 64, |n: Arc<SimNode>| async move {
            n.register()
                .await
                .with_context(|| format!("failed to register {}", n.name))?;
            let beat = tokio::spawn(Arc::clone(&n).heartbeat_loop());
            let poll = tokio::spawn(Arc::clone(&n).desired_loop());
            let channel = tokio::spawn(Arc::clone(&n).channel_loop());
            n.tasks
                .lock()
                .expect("tasks lock")
                .extend([beat, poll, channel]);
            anyhow::Ok(())
        })
        .await;
        for r in registered {
            r?;
        }
        Ok(Self {
            nodes,
            ops_open,
            errors,
            quiet,
        })
    }

    /// Holds the slow controller operations before they start (`true`), or lets them go.
    pub fn hold_ops(&self, hold: bool) {
        self.ops_open.send_replace(!hold);
    }

    /// Waits, at most `within`, until every node's channel is open or known not offered;
    /// returns how many are open.
    pub async fn channels_open(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let open = self.nodes.iter().filter(|n| n.channel.is_open()).count();
            let off = (self.nodes.iter())
                .filter(|n| n.no_channel.load(Ordering::Relaxed))
                .count();
            if open + off >= self.nodes.len() || Instant::now() >= deadline {
                return open;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    pub fn errors(&self) -> Vec<String> {
        self.errors.lock().expect("errors lock").clone()
    }

    /// While set, connection errors are expected (the server is being killed).
    pub fn set_quiet(&self, quiet: bool) {
        self.quiet.store(quiet, Ordering::Relaxed);
    }

    /// Stops `node` the way a crash would, right after a heartbeat the server answered;
    /// returns when that heartbeat was sent (the server's TTL runs from no earlier).
    pub async fn kill(&self, node: &SimNode) -> anyhow::Result<Instant> {
        let (tx, rx) = oneshot::channel();
        *node.last_beat.lock().expect("lock") = Some(tx);
        node.die.notify_one();
        let sent = tokio::time::timeout(node.ttl, rx)
            .await
            .context("the node's last heartbeat did not get through")?
            .context("the heartbeat loop stopped early")?;
        for t in node.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
        Ok(sent)
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        for n in &self.nodes {
            for t in n.tasks.lock().expect("tasks lock").drain(..) {
                t.abort();
            }
        }
    }
}

pub fn node_name(i: u32) -> String {
    format!("node-{i}")
}
