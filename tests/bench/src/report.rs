//! The figures of a run: one JSON object (`--json`) or a text report, both on stdout.

use serde::Serialize;

use super::Config;
use super::floor::{self, CycleFloor, Floor};
use super::phases::{self, LoadFigures, Outcome};
use super::stats::{self, Dist, load_average};
use super::targets::{Target, targets};

/// Everything a run measured. Field names are the `--json` schema; the headline figures
/// (throughput, latency ratios, RSS, node loss, listing) are all top-level.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub mode: &'static str,
    pub nodes: u32,
    pub volumes: u32,
    pub concurrency: u32,
    pub duration_s: f64,
    pub mount: Option<&'static str>,
    pub controller_publish: bool,
    pub heartbeat_ttl_s: f64,
    pub cpus: usize,
    /// CPU model and memory, from `/proc`.
    pub machine: String,
    pub load_average_start: Option<f64>,
    pub load_average_end: Option<f64>,
    /// CPU seconds that other processes of the machine used during the load (noise).
    pub other_cpu_s: Option<f64>,
    /// CPU seconds the machine had during the load (duration × CPUs).
    pub cpu_available_s: f64,

    pub cycles: u64,
    pub cycles_per_second: f64,
    pub claim_ready_p50_ms: Option<f64>,
    pub claim_ready_p99_ms: Option<f64>,
    pub claim_ready_max_ms: Option<f64>,
    pub release_p50_ms: Option<f64>,
    pub release_p99_ms: Option<f64>,
    pub release_max_ms: Option<f64>,

    pub floor_commit_ms: f64,
    pub floor_http_ms: f64,
    pub floor_grpc_ms: f64,
    /// The claim → ready floor: the sum of the floor costs a claim cannot avoid.
    pub floor_cycle_ms: f64,
    pub floor_cycle_formula: String,
    pub floor_release_ms: f64,
    pub floor_release_formula: String,
    /// Claim → ready plus release → gone floors: one client's shortest possible cycle.
    pub floor_full_cycle_ms: f64,
    pub ratio_p50: Option<f64>,
    pub ratio_p99: Option<f64>,
    pub release_ratio_p50: Option<f64>,
    /// `concurrency / floor_full_cycle_ms`: what the floor allows this many clients.
    pub floor_cycles_per_second: f64,
    /// `cycles_per_second / floor_cycles_per_second`.
    pub throughput_ratio: f64,

    pub server_rss_mib: Option<f64>,
    /// The server's RSS once the nodes were connected and the volumes registered, before
    /// the load: the memory an idle cluster costs.
    pub server_idle_rss_mib: Option<f64>,
    /// What each connected node added to the server's RSS: (RSS with the nodes connected
    /// - RSS before them) / nodes, in KiB.
    pub server_kib_per_node: Option<f64>,
    /// The server's memory after each phase: where its peak grew.
    pub server_memory: Vec<MemoryPoint>,
    /// Full mode: the largest peak RSS of the agents.
    pub agent_rss_mib: Option<f64>,
    /// Full mode: the largest peak RSS of the plugins.
    pub plugin_rss_mib: Option<f64>,
    /// Full mode: the memory of the largest agent right after the load (the `--resident`
    /// load when there is one, so with its claims held).
    pub agent_memory: Option<stats::RssParts>,
    /// CPU seconds of every csivol process of the run (server; agents and plugins in full
    /// mode) per cycle, during the load.
    pub cpu_s_per_cycle: Option<f64>,
    /// csivol's own CPU per cycle: the server and the agents, without the plugins (a user's
    /// plugin has its own cost) and without the benchmark.
    pub own_cpu_s_per_cycle: Option<f64>,
    pub server_cpu_s_per_cycle: Option<f64>,
    /// The server's single database writer thread, per cycle: every write goes through it.
    pub server_writer_cpu_s_per_cycle: Option<f64>,
    /// How busy that thread was during the load (1.0: one core, all the time).
    pub server_writer_busy: Option<f64>,
    /// Full mode: all agents together, per cycle.
    pub agents_cpu_s_per_cycle: Option<f64>,
    /// Full mode: all plugins together, per cycle.
    pub plugins_cpu_s_per_cycle: Option<f64>,
    /// The benchmark's own CPU (clients, and simulated nodes in server mode) per cycle.
    pub bench_cpu_s_per_cycle: Option<f64>,
    /// HTTP requests the benchmark sent per cycle: the clients', and in server mode the
    /// simulated nodes' (heartbeats, blocking queries, reports) too.
    pub bench_requests_per_cycle: Option<f64>,

    /// `--resident N`: the same load again with N ready claims held on every node.
    pub resident: Option<ResidentFigures>,
    /// `--compare-volume-stats`: the agents' CPU per cycle with volume stats and without,
    /// and the first over the second.
    pub volume_stats: Option<VolumeStatsFigures>,

    pub list_volumes_ms: Option<f64>,
    pub list_volumes_max_ms: Option<f64>,
    pub list_volumes_count: Option<usize>,
    pub list_volumes_bytes: Option<usize>,
    /// The same list page by page (`?limit=1000&after=`), as the CLI reads it.
    pub list_volumes_paged_ms: Option<f64>,
    /// How much the server's peak RSS grew while the list was read, over its RSS before.
    pub list_volumes_growth_mib: Option<f64>,
    pub node_loss_blocked_s: Option<f64>,
    pub node_loss_excess_s: Option<f64>,
    pub node_loss_claims: Option<usize>,

    /// Acknowledged claims of the load (each must reach ready, then gone).
    pub acknowledged_claims: u64,
    pub lost_claims: u64,
    /// Volumes, attachments or plugin state still held after the run.
    pub orphans: Vec<String>,
    /// The first errors (each distinct); `error_count` counts them all.
    pub errors: Vec<String>,
    pub error_count: usize,
    /// The kill -9 check: acknowledged claims found after a restart / checked.
    pub kill_check: Option<KillCheck>,
    /// With the etcd store: a consistent read against a stale one.
    pub reads: Option<crate::reads::ReadCost>,
    pub ok: bool,
    /// csivol's targets that apply to this run's mode, each met or missed.
    pub targets: Vec<Target>,

    pub floor: Floor,
    pub cycle_floor: CycleFloor,
}

/// The agents' CPU per cycle with volume stats against without, in one load: each half's
/// CPU over the cycles its nodes had.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeStatsFigures {
    pub cycles_with: u64,
    pub cycles_without: u64,
    pub agents_cpu_ms_per_cycle_with: Option<f64>,
    pub agents_cpu_ms_per_cycle_without: Option<f64>,
    /// With over without: 1.05 is stats costing the claim cycle 5%.
    pub ratio: Option<f64>,
}

impl VolumeStatsFigures {
    fn new([with, without]: [phases::AgentGroup; 2]) -> Self {
        let (w, wo) = (with.per_cycle_s(), without.per_cycle_s());
        Self {
            cycles_with: with.cycles,
            cycles_without: without.cycles,
            agents_cpu_ms_per_cycle_with: w.map(|v| v * 1000.0),
            agents_cpu_ms_per_cycle_without: wo.map(|v| v * 1000.0),
            ratio: w.zip(wo).filter(|(_, wo)| *wo > 0.0).map(|(w, wo)| w / wo),
        }
    }
}

/// The second load of a `--resident N` run, and its cost against the first load's.
#[derive(Debug, Clone, Serialize)]
pub struct ResidentFigures {
    /// Ready claims held on every node during this load.
    pub per_node: u32,
    pub cycles: u64,
    pub cycles_per_second: f64,
    pub claim_ready_p50_ms: Option<f64>,
    pub claim_ready_p99_ms: Option<f64>,
    pub cpu_s_per_cycle: Option<f64>,
    pub own_cpu_s_per_cycle: Option<f64>,
    pub server_cpu_s_per_cycle: Option<f64>,
    pub agents_cpu_s_per_cycle: Option<f64>,
    pub plugins_cpu_s_per_cycle: Option<f64>,
    pub bench_cpu_s_per_cycle: Option<f64>,
    /// CPU per cycle with the resident claims over the first load's: every csivol process
    /// in full mode, the server in server mode (the simulated nodes are the benchmark's).
    pub cpu_ratio: Option<f64>,
}

impl ResidentFigures {
    fn new(per_node: u32, full: bool, first: &LoadFigures, load: &LoadFigures) -> Self {
        let elapsed = load.result.elapsed.as_secs_f64();
        let claim = Dist::new(load.result.samples.iter().map(|s| s.claim_ready).collect());
        let group = |c: &phases::Cpu| if full { c.csivol } else { c.server };
        let cpu_ratio = (|| Some(load.per_cycle(group)? / first.per_cycle(group)?))();
        Self {
            per_node,
            cycles: load.cycles(),
            cycles_per_second: if elapsed > 0.0 {
                load.cycles() as f64 / elapsed
            } else {
                0.0
            },
            claim_ready_p50_ms: claim.p50(),
            claim_ready_p99_ms: claim.p99(),
            cpu_s_per_cycle: load.per_cycle(|c| c.csivol),
            own_cpu_s_per_cycle: load.per_cycle(phases::Cpu::own),
            server_cpu_s_per_cycle: load.per_cycle(|c| c.server),
            agents_cpu_s_per_cycle: full.then(|| load.per_cycle(|c| c.agents)).flatten(),
            plugins_cpu_s_per_cycle: full.then(|| load.per_cycle(|c| c.plugins)).flatten(),
            bench_cpu_s_per_cycle: load.per_cycle(|c| c.bench),
            cpu_ratio,
        }
    }
}

/// The server's peak and current RSS at the end of a phase of the run.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryPoint {
    pub after: &'static str,
    pub peak_mib: Option<f64>,
    pub rss_mib: Option<f64>,
    pub threads: Option<u64>,
    /// Open descriptors on `state.db`: one per SQLite connection.
    pub db_connections: Option<usize>,
    /// Open sockets: mostly HTTP connections (each pending blocking query holds one).
    pub sockets: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct KillCheck {
    /// Claims whose creation was acknowledged before the server was killed and that had
    /// not been seen gone.
    pub acknowledged: usize,
    /// Of those, the ones found after the restart, or gone after their release was sent
    /// (a release may commit without its answer reaching the client). Must equal
    /// `acknowledged`.
    pub survived: usize,
    /// Of `survived`, those gone because their release had been sent.
    pub gone_after_release: usize,
    /// Acknowledged releases that came back as something other than releasing or gone.
    pub release_undone: usize,
    pub cycles_before_kill: u64,
    pub restart_s: f64,
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}{unit}"))
}

fn ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}×"))
}

impl Report {
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "csivol-bench --mode {}: {} nodes, {} volumes, concurrency {}, {:.0} s{}, controller publish {}, heartbeat TTL {:.1} s",
            self.mode,
            self.nodes,
            self.volumes,
            self.concurrency,
            self.duration_s,
            self.mount
                .map_or(String::new(), |m| format!(", --mount {m}")),
            if self.controller_publish { "on" } else { "off" },
            self.heartbeat_ttl_s,
        ));
        line(format!(
            "machine: {}; {} CPUs, load average {} before the run; other processes used {} of the {:.1} CPU-s the load had",
            self.machine,
            self.cpus,
            opt(self.load_average_start, ""),
            opt(self.other_cpu_s, " CPU-s"),
            self.cpu_available_s,
        ));
        line(String::new());
        line("floor (this machine, this run; median of each):".into());
        line(format!(
            "  durable SQLite commit (WAL, synchronous=FULL)  {:>8.3} ms   (p99 {:.3} ms)",
            self.floor.sqlite_commit.p50_ms, self.floor.sqlite_commit.p99_ms
        ));
        if let Some(e) = &self.floor.etcd_txn {
            line(format!(
                "  etcd quorum transaction (3 members, loopback) {:>8.3} ms   (p99 {:.3} ms; the store's commit)",
                e.p50_ms, e.p99_ms
            ));
        }
        if let Some(e) = &self.floor.etcd_read {
            line(format!(
                "  etcd linearizable read (3 members, loopback)  {:>8.3} ms   (p99 {:.3} ms; a consistent read)",
                e.p50_ms, e.p99_ms
            ));
        }
        line(format!(
            "  loopback HTTP round trip (GET /v1/health)      {:>8.3} ms   (p99 {:.3} ms)",
            self.floor.http_round_trip.p50_ms, self.floor.http_round_trip.p99_ms
        ));
        line(format!(
            "  unix-socket gRPC round trip (CSI Probe)        {:>8.3} ms   (p99 {:.3} ms)",
            self.floor.grpc_round_trip.p50_ms, self.floor.grpc_round_trip.p99_ms
        ));
        let c = &self.cycle_floor;
        line(format!(
            "  claim → ready floor   = {}",
            c.claim_ready.sum_text()
        ));
        line(format!("      {}", c.claim_ready.steps_text()));
        line(format!(
            "  release → gone floor  = {}",
            c.release_gone.sum_text()
        ));
        line(format!("      {}", c.release_gone.steps_text()));
        line(
            "      (not counted: the server's long-poll answers telling an agent what to do)"
                .into(),
        );
        line(String::new());
        line("results:".into());
        line(format!(
            "  cycles                 {} in {:.1} s = {:.0} cycles/s   (floor allows {} / {:.3} ms = {:.0}/s; ratio {:.3})",
            self.cycles,
            self.duration_s,
            self.cycles_per_second,
            self.concurrency,
            self.floor_full_cycle_ms,
            self.floor_cycles_per_second,
            self.throughput_ratio,
        ));
        line(format!(
            "  claim → ready          p50 {}  p99 {}  max {}   (p50 = {} floor, p99 = {} floor)",
            opt(self.claim_ready_p50_ms, " ms"),
            opt(self.claim_ready_p99_ms, " ms"),
            opt(self.claim_ready_max_ms, " ms"),
            ratio(self.ratio_p50),
            ratio(self.ratio_p99),
        ));
        line(format!(
            "  release → gone         p50 {}  p99 {}  max {}   (p50 = {} floor)",
            opt(self.release_p50_ms, " ms"),
            opt(self.release_p99_ms, " ms"),
            opt(self.release_max_ms, " ms"),
            ratio(self.release_ratio_p50),
        ));
        line(format!(
            "  CPU per cycle          {} csivol's own (server + agents): server {}, agents {}; plugins {}; benchmark {}",
            opt(self.own_cpu_s_per_cycle.map(|v| v * 1000.0), " ms"),
            opt(self.server_cpu_s_per_cycle.map(|v| v * 1000.0), " ms"),
            opt(self.agents_cpu_s_per_cycle.map(|v| v * 1000.0), " ms"),
            opt(self.plugins_cpu_s_per_cycle.map(|v| v * 1000.0), " ms"),
            opt(self.bench_cpu_s_per_cycle.map(|v| v * 1000.0), " ms"),
        ));
        if let Some(v) = &self.volume_stats {
            line(format!(
                "  volume stats           agents' CPU per cycle {} with ({} cycles), {} without ({} cycles): {}",
                opt(v.agents_cpu_ms_per_cycle_with, " ms"),
                v.cycles_with,
                opt(v.agents_cpu_ms_per_cycle_without, " ms"),
                v.cycles_without,
                ratio(v.ratio),
            ));
        }
        line(format!(
            "  HTTP requests          {} per cycle from the benchmark{}",
            opt(self.bench_requests_per_cycle, ""),
            if self.mode == "server" {
                " (clients and simulated nodes)"
            } else {
                " (clients; the agents' are not counted)"
            },
        ));
        line(format!(
            "  server's writer thread {} CPU per cycle, busy {} of the time",
            opt(
                self.server_writer_cpu_s_per_cycle.map(|v| v * 1000.0),
                " ms"
            ),
            self.server_writer_busy
                .map_or("-".to_owned(), |b| format!("{:.0}%", b * 100.0)),
        ));
        line(format!(
            "  peak RSS               server {}, agent {}, plugin {}",
            opt(self.server_rss_mib, " MiB"),
            opt(self.agent_rss_mib, " MiB"),
            opt(self.plugin_rss_mib, " MiB"),
        ));
        if let Some(m) = self.agent_memory {
            line(format!(
                "  agent memory           {:.2} MiB resident after the load{}: anonymous {:.2} MiB, \
                 file-backed {:.2} MiB ({} of its own binary's code, the rest shared libraries; shared with every process that maps them)",
                m.anon_mib + m.file_mib,
                self.resident.as_ref().map_or(String::new(), |r| format!(
                    " with {} claims resident",
                    r.per_node
                )),
                m.anon_mib,
                m.file_mib,
                opt(m.exe_mib, " MiB"),
            ));
        }
        line(format!(
            "  server RSS idle        {} with the nodes connected and the volumes registered; {} per connected node",
            opt(self.server_idle_rss_mib, " MiB"),
            opt(self.server_kib_per_node, " KiB"),
        ));
        line(format!(
            "  server memory          {}",
            self.server_memory
                .iter()
                .map(|m| format!(
                    "after {}: peak {} / now {}, {} threads, {} db connections, {} sockets",
                    m.after,
                    opt(m.peak_mib, " MiB"),
                    opt(m.rss_mib, " MiB"),
                    m.threads.map_or("-".to_owned(), |t| t.to_string()),
                    m.db_connections.map_or("-".to_owned(), |t| t.to_string()),
                    m.sockets.map_or("-".to_owned(), |t| t.to_string()),
                ))
                .collect::<Vec<_>>()
                .join("\n                         ")
        ));
        if let Some(r) = &self.resident {
            let ms = |v: Option<f64>| opt(v.map(|v| v * 1000.0), " ms");
            line(format!(
                "  with {} ready claims resident per node: {} cycles = {:.0} cycles/s; claim → ready p50 {} p99 {}",
                r.per_node,
                r.cycles,
                r.cycles_per_second,
                opt(r.claim_ready_p50_ms, " ms"),
                opt(r.claim_ready_p99_ms, " ms"),
            ));
            line(format!(
                "                         CPU per cycle {} csivol's own: server {}, agents {}; plugins {}; benchmark {}; all csivol processes {} the figure without them",
                ms(r.own_cpu_s_per_cycle),
                ms(r.server_cpu_s_per_cycle),
                ms(r.agents_cpu_s_per_cycle),
                ms(r.plugins_cpu_s_per_cycle),
                ms(r.bench_cpu_s_per_cycle),
                ratio(r.cpu_ratio),
            ));
        }
        if let Some(ms) = self.list_volumes_ms {
            line(format!(
                "  GET /v1/volumes        {ms:.1} ms for {} volumes ({:.1} MiB; max {}); in pages of 1,000: {}; server peak RSS +{}",
                self.list_volumes_count.unwrap_or(0),
                self.list_volumes_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0),
                opt(self.list_volumes_max_ms, " ms"),
                opt(self.list_volumes_paged_ms, " ms"),
                opt(self.list_volumes_growth_mib, " MiB"),
            ));
        }
        if let Some(s) = self.node_loss_blocked_s {
            line(format!(
                "  node loss → blocked    {s:.2} s for {} claims (TTL {:.1} s, {:+.2} s over it)",
                self.node_loss_claims.unwrap_or(0),
                self.heartbeat_ttl_s,
                self.node_loss_excess_s.unwrap_or(0.0),
            ));
        }
        line(String::new());
        line(format!(
            "correctness: {} acknowledged claims, {} lost, {} orphaned, {} errors",
            self.acknowledged_claims,
            self.lost_claims,
            self.orphans.len(),
            self.error_count
        ));
        if let Some(r) = &self.reads {
            line(format!(
                "reads ({}): consistent {:.3} ms p50 ({:.3} p99), stale {:.3} ms p50 ({:.3} p99): \
                 +{:.3} ms per read; {} clients at once: {:.0} consistent reads/s, {:.0} stale",
                r.path,
                r.consistent.p50_ms,
                r.consistent.p99_ms,
                r.stale.p50_ms,
                r.stale.p99_ms,
                r.added_p50_ms,
                r.clients,
                r.consistent_per_second,
                r.stale_per_second
            ));
        }
        if let Some(k) = &self.kill_check {
            line(format!(
                "kill -9 check: {} of {} acknowledged claims accounted for after a SIGKILL of the server under load \
                 ({} there, {} gone after their release was sent; {} acknowledged releases undone; restart {:.2} s)",
                k.survived,
                k.acknowledged,
                k.survived - k.gone_after_release,
                k.gone_after_release,
                k.release_undone,
                k.restart_s
            ));
        }
        line(String::new());
        line("targets (each with this run's figure and its ratio to the target):".into());
        for t in &self.targets {
            line(t.text());
        }
        for o in self.orphans.iter().take(20) {
            line(format!("  orphan: {o}"));
        }
        for e in self.errors.iter().take(20) {
            line(format!("  error: {e}"));
        }
        line(format!("result: {}", if self.ok { "OK" } else { "FAILED" }));
        s
    }
}

/// The server's current RSS at the end of phase `after`.
fn rss_after(points: &[MemoryPoint], after: &str) -> Option<f64> {
    points.iter().find(|m| m.after == after)?.rss_mib
}

/// The growth of the server's peak RSS during the listing phase, over its RSS before it.
fn list_growth(points: &[MemoryPoint]) -> Option<f64> {
    let at = points.iter().position(|m| m.after == "list")?;
    Some(points[at].peak_mib? - points[at.checked_sub(1)?].rss_mib?)
}

/// The report of a run from what its phases measured.
pub fn assemble(cfg: &Config, o: Outcome) -> Report {
    let a = &cfg.args;
    let Outcome {
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
    } = o;
    let phases::Findings {
        mut errors,
        orphans,
    } = findings;
    let error_count = phases::truncate_errors(&mut errors);
    let cycle_floor = floor::cycle_floor(&floor, cfg.full(), cfg.controller_publish);
    let result = &load.result;
    let cycles = load.cycles();
    let elapsed = result.elapsed.as_secs_f64();
    // What else ran on the machine during the load: all busy CPU time minus csivol's and
    // the benchmark's own.
    let other_cpu_s = (|| {
        let ours = load.used(|c| c.csivol)? + load.used(|c| c.bench)?;
        Some(load.used(|c| c.machine)?.saturating_sub(ours).as_secs_f64())
    })();
    let claim = Dist::new(result.samples.iter().map(|s| s.claim_ready).collect());
    let release = Dist::new(result.samples.iter().map(|s| s.release_gone).collect());
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
    let full = cfg.full();
    let list_volumes_growth_mib = list_growth(&server_memory);
    let mut report = Report {
        mode: if full { "full" } else { "server" },
        nodes: cfg.nodes,
        volumes: a.volumes,
        concurrency: a.concurrency,
        duration_s: elapsed,
        mount: full.then_some(cfg.mount()),
        controller_publish: cfg.controller_publish,
        heartbeat_ttl_s: a.heartbeat_ttl.as_secs_f64(),
        cpus,
        machine: stats::machine(),
        load_average_start,
        load_average_end: load_average(),
        other_cpu_s,
        cpu_available_s: elapsed * cpus as f64,
        cycles,
        cycles_per_second,
        claim_ready_p50_ms: claim.p50(),
        claim_ready_p99_ms: claim.p99(),
        claim_ready_max_ms: claim.max(),
        release_p50_ms: release.p50(),
        release_p99_ms: release.p99(),
        release_max_ms: release.max(),
        floor_commit_ms: floor.commit().p50_ms,
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
        server_idle_rss_mib: rss_after(&server_memory, "volumes"),
        server_kib_per_node: (|| {
            let grown = rss_after(&server_memory, "nodes")? - rss_after(&server_memory, "start")?;
            Some(grown * 1024.0 / f64::from(cfg.nodes.max(1)))
        })(),
        server_memory,
        agent_rss_mib,
        plugin_rss_mib,
        agent_memory: (resident_load.as_ref()).map_or(load.agent_memory, |l| l.agent_memory),
        cpu_s_per_cycle: load.per_cycle(|c| c.csivol),
        own_cpu_s_per_cycle: load.per_cycle(phases::Cpu::own),
        server_cpu_s_per_cycle: load.per_cycle(|c| c.server),
        server_writer_cpu_s_per_cycle: load.per_cycle(|c| c.writer),
        server_writer_busy: load
            .used(|c| c.writer)
            .map(|d| d.as_secs_f64() / elapsed.max(f64::EPSILON)),
        bench_cpu_s_per_cycle: load.per_cycle(|c| c.bench),
        bench_requests_per_cycle: (cycles > 0).then(|| load.requests as f64 / cycles as f64),
        agents_cpu_s_per_cycle: full.then(|| load.per_cycle(|c| c.agents)).flatten(),
        plugins_cpu_s_per_cycle: full.then(|| load.per_cycle(|c| c.plugins)).flatten(),
        resident: resident_load
            .as_ref()
            .map(|l| ResidentFigures::new(a.resident, full, &load, l)),
        volume_stats: load.stats_split.map(VolumeStatsFigures::new),
        list_volumes_ms: list.as_ref().map(|l| l.p50_ms),
        list_volumes_max_ms: list.as_ref().map(|l| l.max_ms),
        list_volumes_count: list.as_ref().map(|l| l.count),
        list_volumes_bytes: list.as_ref().map(|l| l.bytes),
        list_volumes_paged_ms: list.as_ref().and_then(|l| l.paged_ms),
        list_volumes_growth_mib,
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
        reads,
        ok,
        targets: Vec::new(),
        floor,
        cycle_floor,
    };
    report.targets = targets(&report);
    report
}
