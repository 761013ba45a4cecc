//! One benchmark run, phase by phase: the floor, the cluster, the volumes, the load, the
//! node-loss figure, the accounting, the listing, the kill -9 check; then the report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::client::{self, Http};
use super::cluster::FullCluster;
use super::floor::{self, Floor};
use super::killcheck;
use super::load::{self, LoadResult, LoadSpec};
use super::nodeloss::{self, NodeLoss};
use super::procs::{self, Bins, Server};
use super::report::{self, KillCheck, MemoryPoint, Report};
use super::resident;
use super::sim::SimCluster;
use super::stats::{self, cpu_time, cpu_time_of, load_average, peak_rss_mib, rss_mib};
use super::volumes::{self, ListFigure};
use super::{COMMIT_SAMPLES, Config, MAX_REPORTED_ERRORS, MountArg, SETTLE_TIMEOUT, WRITER_THREAD};

/// Talk on stderr: what the run is doing, with the time since it started.
pub struct Say(Instant);

impl Say {
    /// The clock starts now.
    pub fn start() -> Self {
        Self(Instant::now())
    }

    pub fn say(&self, msg: impl std::fmt::Display) {
        eprintln!(
            "csivol-bench [{:>6.1}s] {msg}",
            self.0.elapsed().as_secs_f64()
        );
    }
}

/// The run's directory: a temp dir removed at the end, or `--keep-dir` (kept, but its
/// mounts undone).
pub enum WorkDir {
    Temp(csivol_tests::TestDir),
    Kept(PathBuf),
}

impl WorkDir {
    pub fn new(keep: Option<&Path>) -> anyhow::Result<Self> {
        match keep {
            None => Ok(Self::Temp(csivol_tests::TestDir::new("bench"))),
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("failed to create {}", dir.display()))?;
                if std::fs::read_dir(dir)?.next().is_some() {
                    bail!("--keep-dir {} is not empty", dir.display());
                }
                Ok(Self::Kept(dir.canonicalize()?))
            }
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Self::Temp(t) => t.path(),
            Self::Kept(p) => p,
        }
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if let Self::Kept(dir) = self {
            let mut mounts = csivol_tests::mounts_under(dir);
            mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
            for m in mounts {
                let _ = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH);
            }
        }
    }
}

/// The processes of a run, in the order they must stop: nodes (agents, then plugins)
/// before the server, the directory last.
pub struct Run {
    /// With `--store etcd`, the etcd cluster (stopped by pid when the run ends).
    _etcd: Option<csivol_tests::etcd::EtcdCluster>,
    sims: Option<SimCluster>,
    pub full: Option<FullCluster>,
    pub server: Server,
    _dir: WorkDir,
}

impl Drop for Run {
    fn drop(&mut self) {
        self.sims.take();
        self.full.take();
        self.server.proc.kill();
    }
}

impl Run {
    /// The server's memory now, recorded as the figure after phase `after`.
    fn memory(&self, after: &'static str) -> MemoryPoint {
        let pid = self.server.pid();
        MemoryPoint {
            after,
            peak_mib: peak_rss_mib(pid),
            rss_mib: rss_mib(pid),
            threads: stats::threads(pid),
            db_connections: stats::open_files(pid, |t| t.ends_with("/state.db")),
            sockets: stats::open_files(pid, |t| t.starts_with("socket:")),
        }
    }

    /// Peak RSS of the agents and of the plugins (full mode), the largest of each.
    fn node_peaks(&self) -> (Option<f64>, Option<f64>) {
        match &self.full {
            Some(full) => (
                max_of(full.agent_pids().iter().filter_map(|p| peak_rss_mib(*p))),
                max_of(full.plugin_pids().iter().filter_map(|p| peak_rss_mib(*p))),
            ),
            None => (None, None),
        }
    }
}

/// What the run found wrong: errors, and things left held at the end (orphans).
#[derive(Debug, Default)]
pub struct Findings {
    pub errors: Vec<String>,
    pub orphans: Vec<String>,
}

/// CPU time used so far, by group of processes (None where `/proc` did not say).
#[derive(Debug, Clone, Copy)]
pub struct Cpu {
    /// Every csivol process of the run: server, agents, plugins.
    pub csivol: Option<Duration>,
    pub server: Option<Duration>,
    /// The benchmark itself (clients, simulated nodes).
    pub bench: Option<Duration>,
    pub agents: Option<Duration>,
    pub plugins: Option<Duration>,
    /// Every busy CPU of the machine.
    pub machine: Option<Duration>,
    /// The server's database writer thread.
    pub writer: Option<Duration>,
}

impl Cpu {
    /// csivol's own processes: the server and the agents (none in server mode), without
    /// the plugins.
    pub fn own(&self) -> Option<Duration> {
        Some(self.server? + self.agents?)
    }
}

/// The load phase's figures.
#[derive(Debug)]
pub struct LoadFigures {
    pub result: LoadResult,
    pub before: Cpu,
    pub after: Cpu,
    /// HTTP requests the benchmark sent during the load.
    pub requests: u64,
    /// Full mode: the memory of the agent with the largest RSS, right after the load.
    pub agent_memory: Option<stats::RssParts>,
    /// `--compare-volume-stats`: the agents with volume stats, and those without.
    pub stats_split: Option<[AgentGroup; 2]>,
}

/// A group of agents during the load: the CPU they used and the cycles their nodes had.
#[derive(Debug, Clone, Copy)]
pub struct AgentGroup {
    pub cpu: Duration,
    pub cycles: u64,
}

impl AgentGroup {
    pub fn per_cycle_s(&self) -> Option<f64> {
        (self.cycles > 0).then(|| self.cpu.as_secs_f64() / self.cycles as f64)
    }
}

impl LoadFigures {
    pub fn cycles(&self) -> u64 {
        self.result.samples.len() as u64
    }

    /// CPU seconds per cycle of one group, from its two readings.
    pub fn per_cycle(&self, group: impl Fn(&Cpu) -> Option<Duration>) -> Option<f64> {
        let cycles = self.cycles();
        let used = group(&self.after)?.saturating_sub(group(&self.before)?);
        (cycles > 0).then(|| used.as_secs_f64() / cycles as f64)
    }

    /// CPU seconds one group used during the load.
    pub fn used(&self, group: impl Fn(&Cpu) -> Option<Duration>) -> Option<Duration> {
        Some(group(&self.after)?.saturating_sub(group(&self.before)?))
    }
}

/// Everything the phases measured, for the report.
#[derive(Debug)]
pub struct Outcome {
    pub cpus: usize,
    pub load_average_start: Option<f64>,
    pub floor: Floor,
    pub load: LoadFigures,
    /// The second load, with `--resident` claims held on every node.
    pub resident_load: Option<LoadFigures>,
    pub server_memory: Vec<MemoryPoint>,
    pub server_rss_mib: Option<f64>,
    pub agent_rss_mib: Option<f64>,
    pub plugin_rss_mib: Option<f64>,
    pub node_loss: Option<NodeLoss>,
    pub list: Option<ListFigure>,
    pub kill_check: Option<KillCheck>,
    /// With the etcd store: what a consistent read costs.
    pub reads: Option<crate::reads::ReadCost>,
    pub findings: Findings,
}

pub async fn execute(cfg: &Config) -> anyhow::Result<Report> {
    let a = &cfg.args;
    let say = Say::start();
    let bins = Bins::find(a.bin_dir.as_deref(), a.agent_bin.as_deref())?;
    let dir = WorkDir::new(a.keep_dir.as_deref())?;
    let root = dir.path().to_owned();
    let load_average_start = load_average();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut findings = Findings::default();

    let (mut run, http, floor) = start(cfg, &bins, dir, &say).await?;
    let mut server_memory = vec![run.memory("start")];
    let node_names = start_nodes(cfg, &mut run, &bins, &http, &say).await?;
    server_memory.push(run.memory("nodes"));
    let cycled = populate(cfg, &http, &say).await?;
    server_memory.push(run.memory("volumes"));
    let reads = match (a.store, cycled.first()) {
        (crate::StoreArg::Etcd, Some(volume)) => {
            say.say(format!(
                "timing {} consistent and stale reads, one at a time and from {} clients",
                a.floor_samples, a.concurrency
            ));
            Some(crate::reads::measure(&http, volume, a.floor_samples, a.concurrency).await?)
        }
        _ => None,
    };

    let spec = LoadSpec {
        concurrency: a.concurrency,
        duration: a.duration,
        cycle_timeout: a.cycle_timeout,
        volumes: volumes::shared(cycled.clone()),
        nodes: Arc::new(node_names.clone()),
        alloc_prefix: "load".to_owned(),
    };
    let load = measure_load(&run, &http, &spec, &say).await;
    findings.errors.extend(load.result.errors.iter().cloned());
    server_memory.push(run.memory("load"));
    let resident_load = if a.resident > 0 {
        let figures = resident_phase(cfg, &run, &http, &spec, &node_names, &say).await?;
        findings
            .errors
            .extend(figures.result.errors.iter().cloned());
        findings
            .errors
            .extend((figures.result.lost.iter()).map(|l| format!("resident phase: lost {l}")));
        server_memory.push(run.memory("resident"));
        Some(figures)
    } else {
        None
    };

    // Node loss → blocked (server mode).
    let mut node_loss = None;
    if let Some(sims) = run.sims.as_ref()
        && !a.no_node_loss
    {
        match nodeloss::probe(&http, sims, cfg, &cycled, &say).await {
            Ok(figure) => node_loss = Some(figure),
            Err(e) => findings.errors.push(format!("node-loss figure: {e:#}")),
        }
    }

    say.say("checking that every volume is free and nothing is left attached");
    account(
        cfg,
        &mut run,
        &http,
        &root,
        node_loss.as_ref(),
        &mut findings,
    )
    .await?;

    let mut list = None;
    if cfg.list_volumes > 0 {
        say.say(format!(
            "timing GET /v1/volumes over {} volumes",
            cfg.total_volumes()
        ));
        let l = volumes::time_list(&http, 3).await?;
        findings.orphans.extend(l.held.iter().cloned());
        list = Some(l);
        server_memory.push(run.memory("list"));
    }
    // Peaks since each process started; read before the kill -9 check replaces the server.
    let server_rss_mib = peak_rss_mib(run.server.pid());
    let (agent_rss_mib, plugin_rss_mib) = run.node_peaks();

    let mut kill_check = None;
    if !a.no_kill_check {
        let alive: Vec<String> = node_names
            .iter()
            .filter(|n| node_loss.as_ref().is_none_or(|l| l.node != **n))
            .cloned()
            .collect();
        let spec = LoadSpec {
            alloc_prefix: "kill".to_owned(),
            nodes: Arc::new(alive),
            ..spec.clone()
        };
        kill_check = Some(
            kill_phase(
                cfg,
                &mut run,
                &http,
                &root,
                &spec,
                node_loss.as_ref(),
                &mut findings,
                &say,
            )
            .await?,
        );
    }
    findings.orphans.sort();
    findings.orphans.dedup();
    findings.errors.dedup();
    Ok(report::assemble(
        cfg,
        Outcome {
            cpus,
            load_average_start,
            floor,
            load,
            resident_load,
            server_memory,
            server_rss_mib,
            agent_rss_mib,
            plugin_rss_mib,
            node_loss,
            list,
            kill_check,
            reads,
            findings,
        },
    ))
}

/// Phase 1: the floor (a durable SQLite commit, an HTTP round trip to the real server, a
/// gRPC round trip to a real plugin), the server, and in full mode the plugins.
pub async fn start(
    cfg: &Config,
    bins: &Bins,
    dir: WorkDir,
    say: &Say,
) -> anyhow::Result<(Run, Http, Floor)> {
    let a = &cfg.args;
    let root = dir.path().to_owned();
    say.say(format!(
        "floor: {COMMIT_SAMPLES} durable SQLite commits in {}",
        root.display()
    ));
    let floor_dir = root.clone();
    let commit =
        tokio::task::spawn_blocking(move || floor::sqlite_commit(&floor_dir, COMMIT_SAMPLES))
            .await??;
    let (etcd, store_args, etcd_floor) = match a.store {
        crate::StoreArg::Sqlite => (None, Vec::new(), None),
        crate::StoreArg::Etcd => {
            say.say("starting a 3-member etcd cluster");
            let etcd_dir = root.clone();
            let etcd = tokio::task::spawn_blocking(move || {
                csivol_tests::etcd::EtcdCluster::start(&etcd_dir, 3)
            })
            .await?;
            let endpoints: Vec<String> =
                etcd.members.iter().map(|m| m.client_url.clone()).collect();
            say.say(format!("floor: {COMMIT_SAMPLES} etcd quorum transactions"));
            let txn = floor::etcd_txn(&endpoints, COMMIT_SAMPLES).await?;
            say.say(format!("floor: {COMMIT_SAMPLES} linearizable etcd reads"));
            let read = floor::etcd_read(&endpoints, COMMIT_SAMPLES).await?;
            let args = vec![
                "--store=etcd".to_owned(),
                format!("--etcd-endpoints={}", endpoints.join(",")),
            ];
            (Some(etcd), args, Some((txn, read)))
        }
    };
    say.say("starting the server");
    let server = Server::start(
        bins,
        &root.join("server"),
        a.heartbeat_ttl,
        a.controller_concurrency,
        &a.server_wrapper
            .as_deref()
            .map(|w| w.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .unwrap_or_default(),
        &store_args,
    )
    .await?;
    let mut run = Run {
        _etcd: etcd,
        sims: None,
        full: None,
        server,
        _dir: dir,
    };
    let http = Http::new(&run.server.url, &run.server.token)?;
    say.say(format!(
        "floor: {} HTTP round trips to {}",
        a.floor_samples, run.server.url
    ));
    let http_floor = floor::http_round_trip(&http, a.floor_samples).await?;

    let grpc_floor = if cfg.full() {
        say.say(format!(
            "starting {} plugins (--mount {})",
            cfg.nodes,
            cfg.mount()
        ));
        let full = FullCluster::start_plugins(bins, &root, cfg.nodes, cfg.mount()).await?;
        say.say(format!(
            "floor: {} gRPC round trips (Probe) to the plugin of node-1",
            a.floor_samples
        ));
        let f = floor::grpc_round_trip(&full.nodes[0].socket, a.floor_samples).await?;
        run.full = Some(full);
        f
    } else {
        // Simulated nodes call no plugin, but the floor is measured the same way in both
        // modes, on a plugin started for just that.
        let node_dir = root.join("floor-plugin");
        let (mut plugin, socket) =
            procs::start_plugin(bins, "floor", &node_dir, &node_dir.join("backend"), "none")?;
        procs::wait_socket(&mut plugin, &socket, &node_dir.join("plugin.log")).await?;
        say.say(format!(
            "floor: {} gRPC round trips (Probe) to a plugin",
            a.floor_samples
        ));
        let f = floor::grpc_round_trip(&socket, a.floor_samples).await?;
        plugin.kill();
        f
    };
    let floor = Floor {
        sqlite_commit: commit,
        etcd_txn: etcd_floor.map(|(txn, _)| txn),
        etcd_read: etcd_floor.map(|(_, read)| read),
        http_round_trip: http_floor,
        grpc_round_trip: grpc_floor,
    };
    Ok((run, http, floor))
}

/// Phase 2: the nodes, real agents (full mode) or simulated ones; returns their names.
pub async fn start_nodes(
    cfg: &Config,
    run: &mut Run,
    bins: &Bins,
    http: &Http,
    say: &Say,
) -> anyhow::Result<Vec<String>> {
    let a = &cfg.args;
    if let Some(full) = run.full.as_mut() {
        say.say(format!("starting {} agents", cfg.nodes));
        full.start_agents(
            bins,
            http,
            a.mount == MountArg::None,
            a.node_concurrency,
            a.compare_volume_stats,
        )
        .await?;
        return Ok(full.node_names());
    }
    say.say(format!(
        "registering {} simulated nodes (controller publish {})",
        cfg.nodes,
        if cfg.controller_publish { "on" } else { "off" }
    ));
    let sims = SimCluster::start(
        http,
        cfg.nodes,
        a.controller_hosts,
        cfg.controller_publish,
        a.heartbeat_ttl,
        Duration::ZERO,
    )
    .await?;
    let open = sims.channels_open(Duration::from_secs(60)).await;
    say.say(format!(
        "{open} of {} simulated nodes hold a node channel (the others long-poll)",
        cfg.nodes
    ));
    let names = sims.names();
    run.sims = Some(sims);
    Ok(names)
}

/// Phase 3: the volumes the clients cycle through (created through CreateVolume in full
/// mode, registered in server mode), and the extra ones for the list figure. Returns the
/// cycled ones.
async fn populate(cfg: &Config, http: &Http, say: &Say) -> anyhow::Result<Vec<String>> {
    let a = &cfg.args;
    let cycled: Vec<String> = (1..=a.volumes).map(volumes::volume_name).collect();
    if cfg.full() {
        say.say(format!(
            "creating {} volumes through csivol (CreateVolume)",
            a.volumes
        ));
        volumes::create(
            http,
            cycled.clone(),
            Duration::from_secs(60) + Duration::from_millis(u64::from(a.volumes) * 20),
        )
        .await?;
    } else {
        say.say(format!("registering {} volumes", a.volumes));
        volumes::register(http, cycled.clone(), 128).await?;
    }
    if cfg.list_volumes > a.volumes {
        say.say(format!(
            "registering {} more volumes ({} in all) for the list figure",
            cfg.list_volumes - a.volumes,
            cfg.list_volumes
        ));
        let more: Vec<String> = (a.volumes + 1..=cfg.list_volumes)
            .map(volumes::volume_name)
            .collect();
        volumes::register(http, more, 256).await?;
    }
    Ok(cycled)
}

/// Phase 4: the clients' claim cycles, with every group's CPU time read around them.
async fn measure_load(run: &Run, http: &Http, spec: &LoadSpec, say: &Say) -> LoadFigures {
    let mut csivol_pids = vec![run.server.pid()];
    let (agent_pids, plugin_pids) = run
        .full
        .as_ref()
        .map(|f| (f.agent_pids(), f.plugin_pids()))
        .unwrap_or_default();
    csivol_pids.extend(&agent_pids);
    csivol_pids.extend(&plugin_pids);
    let server = run.server.pid();
    let me = std::process::id();
    let cpu_now = || Cpu {
        csivol: Some(cpu_time_of(&csivol_pids)),
        server: cpu_time(server),
        bench: cpu_time(me),
        agents: Some(cpu_time_of(&agent_pids)),
        plugins: Some(cpu_time_of(&plugin_pids)),
        machine: stats::machine_busy(),
        writer: stats::thread_cpu_time(server, WRITER_THREAD),
    };
    // `--compare-volume-stats`: the two halves' agents, read around the load too.
    let groups = run
        .full
        .as_ref()
        .map(|f| [f.agents_with_stats(true), f.agents_with_stats(false)]);
    let groups = groups.filter(|[_, off]| !off.0.is_empty());
    let group_cpu = |g: &(Vec<u32>, Vec<String>)| cpu_time_of(&g.0);
    let groups_before = groups.as_ref().map(|gs| gs.each_ref().map(group_cpu));
    let before = cpu_now();
    let requests_before = client::requests_sent();
    say.say(format!(
        "load: {} clients for {}",
        spec.concurrency,
        humantime::format_duration(spec.duration)
    ));
    let result = load::run(http, spec).await;
    let after = cpu_now();
    let stats_split = groups.zip(groups_before).map(|(gs, before)| {
        let mut i = 0;
        gs.map(|g| {
            let cpu = group_cpu(&g).saturating_sub(before[i]);
            i += 1;
            let cycles = result
                .samples
                .iter()
                .filter(|s| g.1.contains(&s.node))
                .count();
            AgentGroup {
                cpu,
                cycles: cycles as u64,
            }
        })
    });
    let requests = client::requests_sent() - requests_before;
    let agent_memory = (agent_pids.iter())
        .filter_map(|p| stats::rss_parts(*p))
        .max_by(|a, b| (a.anon_mib + a.file_mib).total_cmp(&(b.anon_mib + b.file_mib)));
    say.say(format!(
        "load done: {} cycles in {:.1} s",
        result.samples.len(),
        result.elapsed.as_secs_f64()
    ));
    LoadFigures {
        result,
        before,
        after,
        requests,
        agent_memory,
        stats_split,
    }
}

/// Phase 4b (`--resident N`): N ready claims on every node, the same load again with them
/// held, then their release; returns the second load's figures.
async fn resident_phase(
    cfg: &Config,
    run: &Run,
    http: &Http,
    spec: &LoadSpec,
    nodes: &[String],
    say: &Say,
) -> anyhow::Result<LoadFigures> {
    let residents = resident::plan(nodes, cfg.args.resident);
    say.say(format!(
        "resident: {} ready claims on each of {} nodes ({} volumes)",
        cfg.args.resident,
        nodes.len(),
        residents.len()
    ));
    let timeout = Duration::from_secs(60) + Duration::from_millis(residents.len() as u64 * 20);
    resident::hold(http, &residents, cfg.full(), timeout).await?;
    let spec = LoadSpec {
        alloc_prefix: "resident-load".to_owned(),
        ..spec.clone()
    };
    let figures = measure_load(run, http, &spec, say).await;
    say.say("resident: releasing the resident claims");
    resident::release(http, &residents, timeout).await?;
    Ok(figures)
}

/// Phase 5: nothing held anywhere once the last detaches are through, in the server and on
/// the nodes.
async fn account(
    cfg: &Config,
    run: &mut Run,
    http: &Http,
    root: &Path,
    node_loss: Option<&NodeLoss>,
    findings: &mut Findings,
) -> anyhow::Result<()> {
    let total = cfg.total_volumes() as usize;
    findings
        .orphans
        .extend(volumes::wait_all_free(http, total, SETTLE_TIMEOUT).await?);
    check_nodes(run, root, node_loss, findings);
    Ok(())
}

/// Phase 6: SIGKILL the server under load, restart it, and look for every acknowledged
/// claim; then account again.
#[allow(clippy::too_many_arguments)] // reason: one call site, every argument a phase input
async fn kill_phase(
    cfg: &Config,
    run: &mut Run,
    http: &Http,
    root: &Path,
    spec: &LoadSpec,
    node_loss: Option<&NodeLoss>,
    findings: &mut Findings,
    say: &Say,
) -> anyhow::Result<KillCheck> {
    let a = &cfg.args;
    say.say(
        "kill -9 check: SIGKILL the server under load, restart, look for every acknowledged claim",
    );
    if let Some(s) = &run.sims {
        s.set_quiet(true);
    }
    let before = (a.duration / 4).clamp(Duration::from_millis(500), Duration::from_secs(3));
    let (k, problems) =
        killcheck::run(http, &mut run.server, spec, before, a.cycle_timeout).await?;
    findings.errors.extend(problems);
    if let Some(s) = &run.sims {
        s.set_quiet(false);
    }
    account(cfg, run, http, root, node_loss, findings).await?;
    Ok(k)
}

fn max_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

/// The nodes' side of the accounting: the plugins' and agents' state (full mode), the
/// simulated nodes' holdings (server mode; the node killed for the node-loss figure is
/// left out: an operator unblock declared it gone), and processes that died.
fn check_nodes(run: &mut Run, root: &Path, node_loss: Option<&NodeLoss>, findings: &mut Findings) {
    if let Some(full) = run.full.as_mut() {
        findings.orphans.extend(full.leftovers(root));
        findings.errors.extend(full.exited());
    }
    if let Some(sims) = &run.sims {
        for n in &sims.nodes {
            if node_loss.is_some_and(|l| l.node == n.name) {
                continue;
            }
            let (published, staged) = n.holds();
            if published + staged > 0 {
                findings.orphans.push(format!(
                    "simulated node {} still holds {published} publication(s) and {staged} staging(s)",
                    n.name
                ));
            }
        }
        findings.errors.extend(sims.errors());
    }
    let refused = run.server.log_count("Too many open files");
    if refused > 0 {
        findings.errors.push(format!(
            "the server could not accept connections {refused} time(s): too many open files \
             (limit {}; each node holds about two connections)",
            rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .map_or("unknown".to_owned(), |l| l.to_string())
        ));
    }
    if let Some(status) = run.server.proc.exited() {
        findings.errors.push(format!(
            "the server exited with {status}: {}",
            run.server.log_tail()
        ));
    }
}

/// Errors listed in the report are cut to this many (all are counted).
pub fn truncate_errors(errors: &mut Vec<String>) -> usize {
    let count = errors.len();
    errors.truncate(MAX_REPORTED_ERRORS);
    count
}
