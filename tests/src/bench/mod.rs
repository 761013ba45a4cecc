//! csivol's load benchmark (issue 7). One run:
//!
//! 1. measures the floor of this machine: a durable SQLite commit with the server's
//!    settings, a loopback HTTP round trip to the real server, a unix-socket gRPC round trip
//!    to the real plugin;
//! 2. builds a cluster: the real server plus N real agents and plugins (`full`), or N
//!    simulated nodes (`server`), and V volumes;
//! 3. runs C clients doing claim → ready → release → gone cycles for the duration;
//! 4. in server mode, kills a node holding ready claims and times its claims to `blocked`,
//!    and times `GET /v1/volumes` over the whole inventory (100,000 volumes by default);
//! 5. checks that every acknowledged claim was seen through and nothing is left attached,
//!    in the server and in the plugins;
//! 6. SIGKILLs the server under load, restarts it and checks that every acknowledged claim
//!    survived;
//! 7. prints the figures, and each as a multiple of the floor.
//!
//! Every process it starts is killed by pid when the run ends, however it ends; its files
//! live in a temp dir that is unmounted and removed.

mod chaos;
mod client;
mod cluster;
mod floor;
mod killcheck;
mod load;
mod procs;
mod report;
mod sim;
mod stats;
mod volumes;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState, NodeUnblockRequest};

use self::client::Http;
use self::cluster::FullCluster;
use self::load::LoadSpec;
use self::procs::{Bins, Server};
use self::report::{MemoryPoint, Report};
use self::sim::SimCluster;
use self::stats::{Dist, cpu_time, cpu_time_of, load_average, peak_rss_mib, rss_mib};

/// csivol's id for the plugin in every run.
pub const PLUGIN: &str = "hp";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The real server, N real node agents, each with a real csivol-hostpath.
    Full,
    /// The real server and N simulated nodes that answer at once: the control plane alone.
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MountArg {
    /// Marker files instead of mounts (`csivol-hostpath --mount none`).
    None,
    /// Real bind mounts (needs root).
    Bind,
}

/// csivol's load benchmark: claim throughput, latency and scale, measured against this
/// machine's own floor in the same run.
///
/// Build first: `cargo build --release --workspace` (csivol-bench runs csivol-agent and
/// csivol-hostpath from its own directory). Exits 0 when every claim was accounted for,
/// 1 when the run failed (a lost claim, an orphan, an error), never because of a slow
/// figure; 2 on a usage error.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "csivol-bench", version)]
pub struct Args {
    /// `full`: real agents and plugins; `server`: simulated nodes (the control plane alone).
    #[arg(long, value_enum, default_value = "full")]
    pub mode: Mode,
    /// Nodes [default: 10 in full mode, 1000 in server mode].
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Volumes the clients cycle through; each client owns its own share.
    #[arg(long, default_value_t = 1000)]
    pub volumes: u32,
    /// Concurrent clients, each cycling claims on its own volumes and random nodes.
    #[arg(long, default_value_t = 32)]
    pub concurrency: u32,
    /// How long the clients start new cycles (each finishes the one it is in).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Full mode: how the plugins present volumes.
    #[arg(long, value_enum, default_value = "none")]
    pub mount: MountArg,
    /// Print one JSON object on stdout instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// The server's heartbeat TTL; the node-loss figure is measured against it.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub heartbeat_ttl: Duration,
    /// Whether volumes need ControllerPublish/Unpublish before node staging [default: true
    /// in full mode, false in server mode].
    #[arg(long, value_name = "BOOL")]
    pub controller_publish: Option<bool>,
    /// Server mode: how many simulated nodes host the plugin's controller.
    #[arg(long, default_value_t = 3)]
    pub controller_hosts: u32,
    /// Volumes registered in all before `GET /v1/volumes` is timed (the cycled ones
    /// included); 0 skips the figure [default: 100000 in server mode, 0 in full mode].
    #[arg(long)]
    pub list_volumes: Option<u32>,
    /// The server's `--controller-concurrency` [default: the server's default].
    #[arg(long)]
    pub controller_concurrency: Option<u32>,
    /// Run the server under this command, e.g. `valgrind --tool=massif --vgdb=yes` (split
    /// at spaces). Valgrind runs the server in its own process; with a wrapper that forks
    /// it, the pid, CPU and memory figures are the wrapper's.
    #[arg(long, value_name = "COMMAND")]
    pub server_wrapper: Option<String>,
    /// Full mode: the agents' `node_concurrency` [default: the agent's default].
    #[arg(long)]
    pub node_concurrency: Option<u32>,
    /// Server mode: skip the node-loss figure.
    #[arg(long)]
    pub no_node_loss: bool,
    /// Skip the kill -9 durability check at the end.
    #[arg(long)]
    pub no_kill_check: bool,
    /// How long a claim may take from claim to gone before it counts as lost.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub cycle_timeout: Duration,
    /// Round trips measured for each of the HTTP and gRPC floors (SQLite: 200 commits).
    #[arg(long, default_value_t = 1000)]
    pub floor_samples: u32,
    /// Where csivol-agent and csivol-hostpath are [default: next to csivol-bench].
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Keep the run's files (databases, logs) in DIR instead of a temp dir that is removed.
    #[arg(long, value_name = "DIR")]
    pub keep_dir: Option<PathBuf>,
    /// Full mode: the fault campaign instead of the benchmark. For --duration, under the
    /// claim load on single-writer volumes: kill -9 of the server, agents and plugins,
    /// agents stopped across the TTL, the server's disk filled and freed (needs root: a
    /// tmpfs); invariants checked throughout. Exits 1 on any violation.
    #[arg(long)]
    pub chaos: bool,
    /// The chaos campaign's random seed [default: random, printed in the report].
    #[arg(long)]
    pub seed: Option<u64>,
}

/// SQLite commits measured for the floor (each one fsyncs, so fewer than round trips).
const COMMIT_SAMPLES: u32 = 200;
/// Claims put on the node that the node-loss figure kills.
const NODE_LOSS_CLAIMS: u32 = 5;
/// The server's database writer thread (its name as the kernel keeps it, 15 bytes).
const WRITER_THREAD: &str = "csivol-db-write";
/// Errors listed in the report (all are counted).
const MAX_REPORTED_ERRORS: usize = 50;
/// How long the end-of-run checks wait for the last detaches.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The arguments with mode defaults applied and checked.
#[derive(Debug, Clone)]
struct Config {
    args: Args,
    nodes: u32,
    controller_publish: bool,
    list_volumes: u32,
}

impl Config {
    fn resolve(args: Args) -> anyhow::Result<Self> {
        let full = args.mode == Mode::Full;
        let nodes = args.nodes.unwrap_or(if full { 10 } else { 1000 });
        if nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        if full && nodes > 200 {
            bail!(
                "--nodes is at most 200 in full mode (two processes per node); use --mode server for more"
            );
        }
        if args.concurrency == 0 {
            bail!("--concurrency must be at least 1");
        }
        if args.volumes < args.concurrency {
            bail!(
                "--volumes ({}) must be at least --concurrency ({}): every client owns its own volumes",
                args.volumes,
                args.concurrency
            );
        }
        if args.heartbeat_ttl < Duration::from_millis(300) {
            bail!("--heartbeat-ttl must be at least 300ms");
        }
        let controller_publish = args.controller_publish.unwrap_or(full);
        if !full && controller_publish && args.controller_hosts == 0 {
            bail!("--controller-hosts must be at least 1 with --controller-publish true");
        }
        if args.chaos && !full {
            bail!("--chaos needs --mode full: the faults fall on real agents and plugins");
        }
        let list_volumes = args.list_volumes.unwrap_or(if full { 0 } else { 100_000 });
        Ok(Self {
            nodes,
            controller_publish,
            list_volumes,
            args,
        })
    }

    fn full(&self) -> bool {
        self.args.mode == Mode::Full
    }

    /// Every volume registered in the run.
    fn total_volumes(&self) -> u32 {
        self.args.volumes.max(self.list_volumes)
    }

    /// The longest a run may take before it stops itself.
    fn budget(&self) -> Duration {
        Duration::from_secs(600)
            + self.args.duration
            + self.args.cycle_timeout * 3
            + self.args.heartbeat_ttl * 3
            + Duration::from_millis(u64::from(self.total_volumes()) * 5)
            + Duration::from_millis(u64::from(self.nodes) * 20)
    }
}

/// Parses the arguments' defaults, runs the benchmark, prints the report.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cfg = match Config::resolve(args) {
        Ok(cfg) => cfg,
        Err(e) => {
            // Flags that do not fit together: a usage error, like clap's own.
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Some(limit) = raise_fd_limit()
        && u64::from(cfg.nodes) * 2 + 1000 > limit
    {
        eprintln!(
            "csivol-bench: warning: {} nodes need about {} open files on each side, but the limit is {limit}; \
             the server may refuse connections when many nodes reconnect at once (raise the hard limit, `ulimit -Hn`, which needs CAP_SYS_RESOURCE)",
            cfg.nodes,
            u64::from(cfg.nodes) * 2 + 1000
        );
    }
    if cfg.args.chaos {
        return chaos::run(&cfg);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let budget = cfg.budget();
    let report = runtime.block_on(async {
        tokio::select! {
            r = tokio::time::timeout(budget, execute(&cfg)) => r.map_err(|_| {
                anyhow::anyhow!("the run took longer than its budget of {}; stopped it", humantime::format_duration(budget))
            })?,
            () = interrupted() => bail!("interrupted; stopped every process the run started"),
        }
    })?;
    runtime.shutdown_timeout(Duration::from_secs(1));
    if cfg.args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Open files the run wants: every node holds two connections to the server (its blocking
/// query and its heartbeats and reports), on both sides. The server inherits the limit, as
/// it would get a `LimitNOFILE=` from its service manager.
const WANTED_FILES: u64 = 65_536;

/// Lifts the limit on open files: to [`WANTED_FILES`] where allowed (root), else to the hard
/// limit. Returns the limit in force.
fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = Rlimit {
        current: Some(WANTED_FILES.max(limit.maximum.unwrap_or(0))),
        maximum: Some(WANTED_FILES.max(limit.maximum.unwrap_or(0))),
    };
    if limit.maximum.is_some() && setrlimit(Resource::Nofile, wanted).is_err() {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: limit.maximum,
                maximum: limit.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current
}

/// Talk on stderr: what the run is doing, with the time since it started.
struct Say(Instant);

impl Say {
    fn say(&self, msg: impl std::fmt::Display) {
        eprintln!(
            "csivol-bench [{:>6.1}s] {msg}",
            self.0.elapsed().as_secs_f64()
        );
    }
}

/// The run's directory: a temp dir removed at the end, or `--keep-dir` (kept, but its
/// mounts undone).
enum WorkDir {
    Temp(csivol_tests::TestDir),
    Kept(PathBuf),
}

impl WorkDir {
    fn new(keep: Option<&Path>) -> anyhow::Result<Self> {
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

    fn path(&self) -> &Path {
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
struct Run {
    sims: Option<SimCluster>,
    full: Option<FullCluster>,
    server: Server,
    _dir: WorkDir,
}

impl Drop for Run {
    fn drop(&mut self) {
        self.sims.take();
        self.full.take();
        self.server.proc.kill();
    }
}

async fn execute(cfg: &Config) -> anyhow::Result<Report> {
    let a = &cfg.args;
    let say = Say(Instant::now());
    let bins = Bins::find(a.bin_dir.as_deref())?;
    let dir = WorkDir::new(a.keep_dir.as_deref())?;
    let root = dir.path().to_owned();
    let load_average_start = load_average();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut errors: Vec<String> = Vec::new();
    let mut orphans: Vec<String> = Vec::new();

    say.say(format!(
        "floor: {COMMIT_SAMPLES} durable SQLite commits in {}",
        root.display()
    ));
    let floor_dir = root.clone();
    let commit =
        tokio::task::spawn_blocking(move || floor::sqlite_commit(&floor_dir, COMMIT_SAMPLES))
            .await??;
    say.say("starting the server");
    let server = Server::start(
        &bins,
        &root.join("server"),
        a.heartbeat_ttl,
        a.controller_concurrency,
        &a.server_wrapper
            .as_deref()
            .map(|w| w.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .unwrap_or_default(),
    )
    .await?;
    let mut run = Run {
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

    let mount = match a.mount {
        MountArg::None => "none",
        MountArg::Bind => "bind",
    };
    let grpc_floor = if cfg.full() {
        say.say(format!("starting {} plugins (--mount {mount})", cfg.nodes));
        let full = FullCluster::start_plugins(&bins, &root, cfg.nodes, mount).await?;
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
            procs::start_plugin(&bins, "floor", &node_dir, &node_dir.join("backend"), "none")?;
        procs::wait_socket(&mut plugin, &socket, &node_dir.join("plugin.log")).await?;
        say.say(format!(
            "floor: {} gRPC round trips (Probe) to a plugin",
            a.floor_samples
        ));
        let f = floor::grpc_round_trip(&socket, a.floor_samples).await?;
        plugin.kill();
        f
    };
    let floor = floor::Floor {
        sqlite_commit: commit,
        http_round_trip: http_floor,
        grpc_round_trip: grpc_floor,
    };
    let cycle_floor = floor::cycle_floor(&floor, cfg.full(), cfg.controller_publish);

    let node_names: Vec<String> = if let Some(full) = run.full.as_mut() {
        say.say(format!("starting {} agents", cfg.nodes));
        full.start_agents(&bins, &http, a.mount == MountArg::None, a.node_concurrency)
            .await?;
        full.node_names()
    } else {
        say.say(format!(
            "registering {} simulated nodes (controller publish {})",
            cfg.nodes,
            if cfg.controller_publish { "on" } else { "off" }
        ));
        let sims = SimCluster::start(
            &http,
            cfg.nodes,
            a.controller_hosts,
            cfg.controller_publish,
            a.heartbeat_ttl,
        )
        .await?;
        let names = sims.names();
        run.sims = Some(sims);
        names
    };

    let mut server_memory = Vec::new();
    let memory = |after: &'static str, pid: u32| MemoryPoint {
        after,
        peak_mib: peak_rss_mib(pid),
        rss_mib: rss_mib(pid),
        threads: stats::threads(pid),
        db_connections: stats::open_files(pid, |t| t.ends_with("/state.db")),
        sockets: stats::open_files(pid, |t| t.starts_with("socket:")),
    };
    server_memory.push(memory("nodes", run.server.pid()));

    let cycled: Vec<String> = (1..=a.volumes).map(volumes::volume_name).collect();
    if cfg.full() {
        say.say(format!(
            "creating {} volumes through csivol (CreateVolume)",
            a.volumes
        ));
        volumes::create(
            &http,
            cycled.clone(),
            Duration::from_secs(60) + Duration::from_millis(u64::from(a.volumes) * 20),
        )
        .await?;
    } else {
        say.say(format!("registering {} volumes", a.volumes));
        volumes::register(&http, cycled.clone(), 128).await?;
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
        volumes::register(&http, more, 256).await?;
    }

    server_memory.push(memory("volumes", run.server.pid()));

    // The load.
    let spec = LoadSpec {
        concurrency: a.concurrency,
        duration: a.duration,
        cycle_timeout: a.cycle_timeout,
        volumes: volumes::shared(cycled.clone()),
        nodes: Arc::new(node_names.clone()),
        alloc_prefix: "load".to_owned(),
    };
    let mut csivol_pids = vec![run.server.pid()];
    if let Some(full) = &run.full {
        csivol_pids.extend(full.agent_pids());
        csivol_pids.extend(full.plugin_pids());
    }
    let me = std::process::id();
    let (agent_pids, plugin_pids) = run
        .full
        .as_ref()
        .map(|f| (f.agent_pids(), f.plugin_pids()))
        .unwrap_or_default();
    let cpu_now = |server: u32| {
        [
            Some(cpu_time_of(&csivol_pids)),
            cpu_time(server),
            cpu_time(me),
            Some(cpu_time_of(&agent_pids)),
            Some(cpu_time_of(&plugin_pids)),
            stats::machine_busy(),
            stats::thread_cpu_time(server, WRITER_THREAD),
        ]
    };
    let cpu_before = cpu_now(run.server.pid());
    let requests_before = client::requests_sent();
    say.say(format!(
        "load: {} clients for {}",
        a.concurrency,
        humantime::format_duration(a.duration)
    ));
    let result = load::run(&http, &spec).await;
    let cpu_after = cpu_now(run.server.pid());
    let requests = client::requests_sent() - requests_before;
    let cycles = result.samples.len() as u64;
    // What else ran on the machine during the load: all busy CPU time minus csivol's and
    // the benchmark's own.
    let delta = |i: usize| Some(cpu_after[i]?.saturating_sub(cpu_before[i]?));
    let other_cpu_s = (|| {
        let ours = delta(0)? + delta(2)?;
        Some(delta(5)?.saturating_sub(ours).as_secs_f64())
    })();
    let per_cycle = |before: Option<Duration>, after: Option<Duration>| {
        let (b, a) = (before?, after?);
        (cycles > 0).then(|| a.saturating_sub(b).as_secs_f64() / cycles as f64)
    };
    say.say(format!(
        "load done: {cycles} cycles in {:.1} s",
        result.elapsed.as_secs_f64()
    ));
    errors.extend(result.errors.iter().cloned());
    server_memory.push(memory("load", run.server.pid()));

    // Node loss → blocked (server mode).
    let mut node_loss = None;
    if let Some(sims) = run.sims.as_ref()
        && !a.no_node_loss
    {
        match node_loss_probe(&http, sims, cfg, &cycled, &say).await {
            Ok(figure) => node_loss = Some(figure),
            Err(e) => errors.push(format!("node-loss figure: {e:#}")),
        }
    }

    // Accounting: nothing held anywhere once the last detaches are through.
    say.say("checking that every volume is free and nothing is left attached");
    let total = cfg.total_volumes() as usize;
    orphans.extend(volumes::wait_all_free(&http, total, SETTLE_TIMEOUT).await?);
    check_nodes(
        &mut run,
        &root,
        node_loss.as_ref(),
        &mut orphans,
        &mut errors,
    );

    let mut list = None;
    if cfg.list_volumes > 0 {
        say.say(format!("timing GET /v1/volumes over {total} volumes"));
        let l = volumes::time_list(&http, 3).await?;
        orphans.extend(l.held.iter().cloned());
        list = Some(l);
        server_memory.push(memory("list", run.server.pid()));
    }
    // Peaks since each process started; read before the kill -9 check replaces the server.
    let server_rss_mib = peak_rss_mib(run.server.pid());
    let (agent_rss_mib, plugin_rss_mib) = match &run.full {
        Some(full) => (
            max_of(full.agent_pids().iter().filter_map(|p| peak_rss_mib(*p))),
            max_of(full.plugin_pids().iter().filter_map(|p| peak_rss_mib(*p))),
        ),
        None => (None, None),
    };

    let mut kill_check = None;
    if !a.no_kill_check {
        say.say("kill -9 check: SIGKILL the server under load, restart, look for every acknowledged claim");
        if let Some(s) = &run.sims {
            s.set_quiet(true);
        }
        // The node killed for the node-loss figure stays lost: claims there are refused.
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
        let before = (a.duration / 4).clamp(Duration::from_millis(500), Duration::from_secs(3));
        let (k, problems) =
            killcheck::run(&http, &mut run.server, &spec, before, a.cycle_timeout).await?;
        errors.extend(problems);
        orphans.extend(volumes::wait_all_free(&http, total, SETTLE_TIMEOUT).await?);
        if let Some(s) = &run.sims {
            s.set_quiet(false);
        }
        check_nodes(
            &mut run,
            &root,
            node_loss.as_ref(),
            &mut orphans,
            &mut errors,
        );
        kill_check = Some(k);
    }
    orphans.sort();
    orphans.dedup();
    errors.dedup();
    let error_count = errors.len();
    errors.truncate(MAX_REPORTED_ERRORS);

    let claim = Dist::new(result.samples.iter().map(|s| s.claim_ready).collect());
    let release = Dist::new(result.samples.iter().map(|s| s.release_gone).collect());
    let elapsed = result.elapsed.as_secs_f64();
    let cycles_per_second = if elapsed > 0.0 {
        cycles as f64 / elapsed
    } else {
        0.0
    };
    let floor_cycles_per_second = f64::from(a.concurrency) / (cycle_floor.full_cycle_ms / 1000.0);
    let over = |v: Option<f64>, floor: f64| v.map(|v| v / floor);
    let lost_claims = result.lost.len() as u64;
    let kill_ok = kill_check
        .as_ref()
        .is_none_or(|k| k.survived == k.acknowledged && k.release_undone == 0);
    let ok = lost_claims == 0 && orphans.is_empty() && errors.is_empty() && kill_ok;
    let mut report = Report {
        mode: if cfg.full() { "full" } else { "server" },
        nodes: cfg.nodes,
        volumes: a.volumes,
        concurrency: a.concurrency,
        duration_s: elapsed,
        mount: cfg.full().then_some(mount),
        controller_publish: cfg.controller_publish,
        heartbeat_ttl_s: a.heartbeat_ttl.as_secs_f64(),
        cpus,
        machine: stats::machine(),
        load_average_start,
        load_average_end: load_average(),
        other_cpu_s,
        cpu_available_s: result.elapsed.as_secs_f64() * cpus as f64,
        cycles,
        cycles_per_second,
        claim_ready_p50_ms: claim.p50(),
        claim_ready_p99_ms: claim.p99(),
        claim_ready_max_ms: claim.max(),
        release_p50_ms: release.p50(),
        release_p99_ms: release.p99(),
        release_max_ms: release.max(),
        floor_commit_ms: floor.sqlite_commit.p50_ms,
        floor_http_ms: floor.http_round_trip.p50_ms,
        floor_grpc_ms: floor.grpc_round_trip.p50_ms,
        floor_cycle_ms: cycle_floor.claim_ready.ms,
        floor_cycle_formula: cycle_floor.claim_ready.sum_text(),
        floor_release_ms: cycle_floor.release_gone.ms,
        floor_release_formula: cycle_floor.release_gone.sum_text(),
        floor_full_cycle_ms: cycle_floor.full_cycle_ms,
        ratio_p50: over(claim.p50(), cycle_floor.claim_ready.ms),
        ratio_p99: over(claim.p99(), cycle_floor.claim_ready.ms),
        release_ratio_p50: over(release.p50(), cycle_floor.release_gone.ms),
        floor_cycles_per_second,
        throughput_ratio: cycles_per_second / floor_cycles_per_second,
        server_rss_mib,
        server_memory,
        agent_rss_mib,
        plugin_rss_mib,
        cpu_s_per_cycle: per_cycle(cpu_before[0], cpu_after[0]),
        server_cpu_s_per_cycle: per_cycle(cpu_before[1], cpu_after[1]),
        server_writer_cpu_s_per_cycle: per_cycle(cpu_before[6], cpu_after[6]),
        server_writer_busy: delta(6).map(|d| d.as_secs_f64() / elapsed.max(f64::EPSILON)),
        bench_cpu_s_per_cycle: per_cycle(cpu_before[2], cpu_after[2]),
        bench_requests_per_cycle: (cycles > 0).then(|| requests as f64 / cycles as f64),
        agents_cpu_s_per_cycle: run
            .full
            .is_some()
            .then(|| per_cycle(cpu_before[3], cpu_after[3]))
            .flatten(),
        plugins_cpu_s_per_cycle: run
            .full
            .is_some()
            .then(|| per_cycle(cpu_before[4], cpu_after[4]))
            .flatten(),
        list_volumes_ms: list.as_ref().map(|l| l.p50_ms),
        list_volumes_max_ms: list.as_ref().map(|l| l.max_ms),
        list_volumes_count: list.as_ref().map(|l| l.count),
        list_volumes_bytes: list.as_ref().map(|l| l.bytes),
        node_loss_blocked_s: node_loss.as_ref().map(|n| n.blocked_s),
        node_loss_excess_s: node_loss
            .as_ref()
            .map(|n| n.blocked_s - a.heartbeat_ttl.as_secs_f64()),
        node_loss_claims: node_loss.as_ref().map(|n| n.claims),
        acknowledged_claims: result.acknowledged,
        lost_claims,
        orphans,
        errors,
        error_count,
        kill_check,
        ok,
        targets: Vec::new(),
        floor,
        cycle_floor,
    };
    report.targets = report::targets(&report);
    Ok(report)
}

fn max_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

/// The nodes' side of the accounting: the plugins' and agents' state (full mode), the
/// simulated nodes' holdings (server mode; the node killed for the node-loss figure is
/// left out: an operator unblock declared it gone), and processes that died.
fn check_nodes(
    run: &mut Run,
    root: &Path,
    node_loss: Option<&NodeLoss>,
    orphans: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    if let Some(full) = run.full.as_mut() {
        orphans.extend(full.leftovers(root));
        errors.extend(full.exited());
    }
    if let Some(sims) = &run.sims {
        for n in &sims.nodes {
            if node_loss.is_some_and(|l| l.node == n.name) {
                continue;
            }
            let (published, staged) = n.holds();
            if published + staged > 0 {
                orphans.push(format!(
                    "simulated node {} still holds {published} publication(s) and {staged} staging(s)",
                    n.name
                ));
            }
        }
        errors.extend(sims.errors());
    }
    let refused = run.server.log_count("Too many open files");
    if refused > 0 {
        errors.push(format!(
            "the server could not accept connections {refused} time(s): too many open files \
             (limit {}; each node holds about two connections)",
            rustix::process::getrlimit(rustix::process::Resource::Nofile)
                .current
                .map_or("unknown".to_owned(), |l| l.to_string())
        ));
    }
    if let Some(status) = run.server.proc.exited() {
        errors.push(format!(
            "the server exited with {status}: {}",
            run.server.log_tail()
        ));
    }
}

#[derive(Debug)]
struct NodeLoss {
    node: String,
    blocked_s: f64,
    claims: usize,
}

/// Puts ready claims on one simulated node, stops it right after a heartbeat, and times
/// until the server shows its claims `blocked`; then unblocks it as an operator would.
async fn node_loss_probe(
    http: &Http,
    sims: &SimCluster,
    cfg: &Config,
    volumes: &[String],
    say: &Say,
) -> anyhow::Result<NodeLoss> {
    let a = &cfg.args;
    let hosts = if cfg.controller_publish {
        a.controller_hosts
    } else {
        0
    };
    if sims.nodes.len() as u32 <= hosts {
        bail!("needs a node that does not host the controller: use more --nodes");
    }
    let victim = sims.nodes.last().expect("at least one node");
    let count = NODE_LOSS_CLAIMS.min(a.volumes) as usize;
    say.say(format!(
        "node loss: {count} ready claims on {}, then it stops heartbeating (TTL {})",
        victim.name,
        humantime::format_duration(a.heartbeat_ttl)
    ));
    let mut claims = Vec::new();
    for (i, volume) in volumes.iter().take(count).enumerate() {
        let alloc = format!("node-loss-{i}");
        let req = ClaimRequest::new(alloc.clone(), victim.name.clone(), ClaimMode::Write);
        let r = http
            .post(&format!("/v1/volumes/{volume}/claims"), &req)
            .await?
            .expect("node-loss claim", &[201])?;
        let c: api::Claim = r.json()?;
        claims.push((
            format!("/v1/volumes/{volume}/claims/{alloc}"),
            r.index.unwrap_or(c.index),
        ));
    }
    let deadline = Instant::now() + a.cycle_timeout;
    for (path, index) in &mut claims {
        wait_state(http, path, index, ClaimState::Ready, deadline).await?;
    }
    let killed = sims.kill(victim).await?;
    let deadline = Instant::now() + a.heartbeat_ttl + a.cycle_timeout;
    for (path, index) in &mut claims {
        wait_state(http, path, index, ClaimState::Blocked, deadline).await?;
    }
    let blocked_s = killed.elapsed().as_secs_f64();
    say.say(format!(
        "node loss: claims blocked {blocked_s:.2} s after the last heartbeat; unblocking {}",
        victim.name
    ));
    let req = NodeUnblockRequest {
        reason: "csivol-bench: node-loss figure, the simulated node is gone".to_owned(),
        dry_run: false,
    };
    http.post(&format!("/v1/nodes/{}/unblock", victim.name), &req)
        .await?
        .expect("unblock", &[200])?;
    Ok(NodeLoss {
        node: victim.name.clone(),
        blocked_s,
        claims: count,
    })
}

/// Blocks on a claim until it reaches `want`.
async fn wait_state(
    http: &Http,
    path: &str,
    index: &mut u64,
    want: ClaimState,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{path} did not become {want} in time"
        );
        match load::watch(http, path, *index).await? {
            Some((c, i)) => {
                *index = i;
                if c.state == want {
                    return Ok(());
                }
            }
            None => bail!("{path} vanished while waiting for {want}"),
        }
    }
}
