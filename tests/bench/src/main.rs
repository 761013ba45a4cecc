//! csivol's load benchmark. One run:
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
//! live in a temp dir that is unmounted and removed. `phases` runs these steps, one
//! function each; `report` turns their figures into the report.

mod backlog;
mod chaos;
mod ci;
mod client;
mod cluster;
mod floor;
mod history;
mod killcheck;
mod load;
mod nodeloss;
mod phases;
mod procs;
mod reads;
mod report;
mod resident;
mod sim;
mod stats;
mod targets;
mod volumes;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;

/// csivol's id for the plugin in every run.
pub const PLUGIN: &str = "hp";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// The real server, N real node agents, each with a real csivol-hostpath.
    Full,
    /// The real server and N simulated nodes that answer at once: the control plane alone.
    Server,
}

/// Where the server keeps the cluster state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StoreArg {
    /// `state.db` in the server's data dir.
    Sqlite,
    /// A 3-member etcd cluster on loopback started for the run (`/usr/bin/etcd`); the
    /// commit floor is then one etcd quorum transaction.
    Etcd,
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
/// Build first: `cargo build --release --workspace` (csivol-bench runs csivol-server,
/// csivol-agent and csivol-hostpath from its own directory). Exits 0 when every claim was
/// accounted for, 1 when the run failed (a lost claim, an orphan, an error), never because
/// of a slow figure; 2 on a usage error.
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
    /// Where the server keeps the cluster state.
    #[arg(long, value_enum, default_value = "sqlite")]
    pub store: StoreArg,
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
    /// Ready claims held on every node during a second load phase: the report compares
    /// the CPU per cycle of the two phases (0: one phase, none held).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub resident: u32,
    /// Full mode: every second node's agent (node 2, 4, ...) runs with `volume_stats =
    /// false`, and the report compares the agents' CPU per cycle with volume stats against
    /// without, in this one run under one load.
    #[arg(long)]
    pub compare_volume_stats: bool,
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
    /// Where csivol-server, csivol-agent and csivol-hostpath are [default: next to csivol-bench].
    #[arg(long, value_name = "DIR")]
    pub bin_dir: Option<PathBuf>,
    /// The csivol-agent to run instead of the one in the binaries' directory: the build a
    /// node installs (`cargo build --profile dist-agent -p csivol-agent`), for its memory.
    #[arg(long, value_name = "PATH")]
    pub agent_bin: Option<PathBuf>,
    /// Keep the run's files (databases, logs) in DIR instead of a temp dir that is removed.
    #[arg(long, value_name = "DIR")]
    pub keep_dir: Option<PathBuf>,
    /// Full mode: the fault campaign instead of the benchmark. For --duration, under the
    /// claim load on single-writer volumes: kill -9 of the server, agents and plugins,
    /// agents stopped across the TTL, the server's disk filled and freed (needs root: a
    /// tmpfs); invariants checked throughout, and the clients' history checked for
    /// linearizability at the end. With `--store etcd`, HA mode: two servers over a
    /// 3-member etcd in network namespaces (needs root), faults overlapping on three
    /// lanes, servers and members also stopped and cut off, nodes cut off from a server.
    /// Exits 1 on any violation.
    #[arg(long)]
    pub chaos: bool,
    /// The random seed of the chaos campaign and of the CI scenario's jobs [default:
    /// random, printed in the report].
    #[arg(long)]
    pub seed: Option<u64>,
    /// The chaos campaign's fault kinds, comma-separated [default: every kind the mode has;
    /// those of several servers over etcd need --store etcd].
    #[arg(long, value_enum, value_delimiter = ',', value_name = "KIND")]
    pub faults: Vec<chaos::faults::Fault>,
    /// The backlog scenario instead of the benchmark: on simulated nodes whose one
    /// controller host takes --backlog-op-time per call, --backlog-detaches claims are
    /// released at once, then one claim on a fresh node needs an attach; prints how long
    /// that attach waited in the controller queue against how long the detaches took to
    /// drain.
    #[arg(long)]
    pub backlog: bool,
    /// The backlog scenario's detaches queued on the plugin.
    #[arg(long, default_value_t = 500)]
    pub backlog_detaches: u32,
    /// How long each controller call takes on the backlog scenario's controller host.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    pub backlog_op_time: Duration,
    /// The CI scenario instead of the benchmark (full mode): N jobs, each with a branch
    /// key drawn from a Zipf distribution and a node at random, claim a member of a pool
    /// of caches by key (`POST /v1/pools/NAME/claims`), write, and release as succeeded;
    /// the same jobs run at once on a second pool whose member is picked at random, the
    /// baseline. Prints how often each got a member last released with the job's key or
    /// still staged on its node, and claim → ready of warm members against cold ones;
    /// then --fresh-jobs per-job volumes from a snapshot against the floor of their
    /// plugin calls. Use `--mount bind` for real mounts.
    #[arg(long, value_name = "N")]
    pub ci_jobs: Option<u32>,
    /// The CI scenario: volumes in each pool.
    #[arg(long, default_value_t = 8)]
    pub pool_size: u32,
    /// The CI scenario: both pools linger this long (`pool create --linger`): a node keeps
    /// a released member staged for its next job there. Without it, nothing lingers.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub pool_linger: Option<Duration>,
    /// The CI scenario: branch keys the jobs draw from (rank k with weight 1/k).
    #[arg(long, default_value_t = 12)]
    pub cache_keys: u32,
    /// The CI scenario: keys that share no prefix (`a-branch`, `b-branch`, ...) instead of
    /// `branch-01`, `branch-02`, ..., which share `branch-0` and so are each other's
    /// prefix matches (at most 26).
    #[arg(long)]
    pub distinct_keys: bool,
    /// The CI scenario: clients per arm, each running one job at a time (at most
    /// --pool-size: a client holds one member).
    #[arg(long, default_value_t = 3)]
    pub ci_clients: u32,
    /// The CI scenario: jobs on fresh volumes from a snapshot, one at a time, and as many
    /// samples of the floor of their plugin calls.
    #[arg(long, default_value_t = 20)]
    pub fresh_jobs: u32,
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
        if !args.faults.is_empty() && !args.chaos {
            bail!("--faults chooses the fault campaign's faults: use it with --chaos");
        }
        if let Some(f) = args.faults.iter().find(|f| f.ha_only())
            && args.store != StoreArg::Etcd
        {
            bail!(
                "--faults {}: it needs several servers over etcd\nhint: add --store etcd, or leave it out",
                clap::ValueEnum::to_possible_value(f)
                    .map_or_else(String::new, |v| v.get_name().to_owned())
            );
        }
        if args.backlog && (args.chaos || args.mode != Mode::Server) {
            bail!("--backlog runs on simulated nodes: use it with --mode server, without --chaos");
        }
        if args.backlog && args.backlog_detaches == 0 {
            bail!("--backlog-detaches must be at least 1");
        }
        if args.ci_jobs.is_some() && (args.chaos || args.backlog || !full) {
            bail!(
                "--ci-jobs runs on real agents and plugins: use it with --mode full, without --chaos or --backlog"
            );
        }
        if args.ci_jobs.is_some()
            && (args.ci_jobs == Some(0) || args.fresh_jobs == 0 || args.cache_keys == 0)
        {
            bail!("--ci-jobs, --fresh-jobs and --cache-keys must be at least 1");
        }
        if args.ci_jobs.is_some() && args.distinct_keys && args.cache_keys > 26 {
            bail!(
                "--distinct-keys names at most 26 keys, one per letter; --cache-keys is {}",
                args.cache_keys
            );
        }
        if args.ci_jobs.is_some() && (args.ci_clients == 0 || args.ci_clients > args.pool_size) {
            bail!(
                "--ci-clients ({}) must be between 1 and --pool-size ({}): each client holds one member at a time",
                args.ci_clients,
                args.pool_size
            );
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

    /// The fault campaign's kinds: those given, else every kind of the mode (`ha`: over
    /// etcd).
    fn fault_kinds(&self, ha: bool) -> Vec<chaos::faults::Fault> {
        use chaos::faults::Fault;
        match (&self.args.faults[..], ha) {
            ([], false) => Fault::SINGLE.to_vec(),
            ([], true) => Fault::HA.to_vec(),
            (given, _) => {
                let mut kinds = given.to_vec();
                kinds.sort();
                kinds.dedup();
                kinds
            }
        }
    }

    /// The plugins' `--mount` in full mode.
    fn mount(&self) -> &'static str {
        match self.args.mount {
            MountArg::None => "none",
            MountArg::Bind => "bind",
        }
    }

    /// Every volume registered in the run.
    fn total_volumes(&self) -> u32 {
        self.args.volumes.max(self.list_volumes) + self.resident_volumes()
    }

    /// The volumes `--resident` adds: its claims each hold one.
    fn resident_volumes(&self) -> u32 {
        self.args.resident * self.nodes
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
fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Parses the arguments' defaults, runs the benchmark, prints the report.
fn run(args: Args) -> anyhow::Result<ExitCode> {
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
    if cfg.args.backlog {
        let budget =
            Duration::from_secs(900) + cfg.args.backlog_op_time * cfg.args.backlog_detaches * 4;
        let report = run_bounded("backlog scenario", budget, backlog::run(&cfg))?;
        return emit(cfg.args.json, &report, || report.text(), true);
    }
    if let Some(jobs) = cfg.args.ci_jobs {
        let budget = Duration::from_secs(600)
            + cfg.args.cycle_timeout * 3
            + Duration::from_secs(2) * (jobs + cfg.args.fresh_jobs * 2);
        let report = run_bounded("CI scenario", budget, ci::run(&cfg))?;
        return emit(cfg.args.json, &report, || report.text(), report.ok);
    }
    let report = run_bounded("run", cfg.budget(), phases::execute(&cfg))?;
    emit(cfg.args.json, &report, || report.text(), report.ok)
}

/// Runs `work` on a fresh runtime; past `budget`, or on SIGINT/SIGTERM, stops it (its
/// processes are killed as its values drop) and says so.
fn run_bounded<T>(
    what: &str,
    budget: Duration,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let out = runtime.block_on(async {
        tokio::select! {
            r = tokio::time::timeout(budget, work) => r.map_err(|_| {
                anyhow::anyhow!("the {what} took longer than its budget of {}; stopped it", humantime::format_duration(budget))
            })?,
            () = interrupted() => bail!("interrupted; stopped every process the {what} started"),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(1));
    out
}

/// Prints a report (JSON with `--json`, else its text) and the exit status it means.
fn emit<R: serde::Serialize>(
    json: bool,
    report: &R,
    text: impl FnOnce() -> String,
    ok: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{}", text());
    }
    Ok(if ok {
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
