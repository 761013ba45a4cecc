//! `csivol-bench --mode full --chaos`: the fault campaign. Under a steady claim load on
//! single-writer volumes, faults fall at random moments for the run's duration (kill -9 of
//! the server, agents and plugins; agents stopped across the heartbeat TTL and continued;
//! the server's disk filled and freed; a backup restored; released claims' requests sent
//! again late; daemons stopped by SIGTERM while they start), while observers check the
//! invariants continuously;
//! then the faults stop, everything is healed, the load drains, and the end checks run.
//! With `--store etcd` it runs in HA mode: two servers over a 3-member etcd, each server,
//! member and agent on a host of its own in network namespaces, and faults that overlap
//! (servers and members killed, stopped and cut off, nodes cut off from a server, besides
//! the others). Every client operation goes into a history that the checker
//! (`crate::history`) judges at the end. It prints the faults injected by kind, the
//! operations checked and the violations found, and exits 1 on any violation (or a cycle
//! that never finished, or a process that died on its own).

mod cluster;
mod duplicate;
pub(crate) mod faults;
mod invariants;
mod job_checks;
mod jobs;
mod leaks;
mod ledger;
mod load;
mod restore;
mod slowbody;
mod starts;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use csivol_api::domain::AccessMode;
use serde::Serialize;

use self::cluster::ChaosCluster;
use self::faults::Fault;
use self::ledger::Ledger;
use self::load::{Spec, Tally, Unsure};
use super::client::Http;
use super::history::{Checked, Input, Output, Recorder};
use super::phases::{Say, WorkDir};
use super::procs::Bins;
use super::{Config, StoreArg, stats, volumes};
use csivol_tests::netns::Net;

/// How long the end of the run waits for every volume to be free again.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);

/// How long after the heal the drain watches the claims of which an attempt got no
/// answer: a stopped server reads the request waiting in its socket when it runs again,
/// and a server sends an etcd commit that got no answer again for up to 10 s, then runs it
/// once more if another server committed first; the rest is margin. A claim whose cycle
/// saw it refused or released must not turn up in that time; one whose cycle could not
/// tell may, and is released.
const UNSURE_SETTLE: Duration = Duration::from_secs(20);

#[derive(Debug, Serialize)]
pub struct ChaosReport {
    pub mode: &'static str,
    pub duration_s: f64,
    pub nodes: u32,
    pub volumes: u32,
    pub concurrency: u32,
    pub heartbeat_ttl_s: f64,
    pub mount: String,
    /// Servers (2 in HA mode, over etcd) and etcd members (0: SQLite).
    pub servers: usize,
    pub etcd_members: usize,
    /// Fault lanes: how many faults may be under way at once.
    pub fault_lanes: u32,
    pub seed: u64,
    pub machine: String,
    pub faults: BTreeMap<Fault, u64>,
    pub faults_total: u64,
    /// What happened within the faults, counted: a daemon stopped before or after it bound
    /// its port or registered, how the server answered a delayed duplicate, a claim come
    /// back with a restore and released.
    pub fault_notes: BTreeMap<String, u64>,
    pub cycles: u64,
    pub acknowledged_claims: u64,
    pub failed_claims: u64,
    /// Claims released by the server's rule for a lost node that came back (event logged).
    pub released_on_node_return: u64,
    /// Acknowledged claims a restore forgot (made after its backup), as their cycle saw.
    pub forgotten_by_restore: u64,
    /// Claims of a cycle that was over, back with a restore, released by their cycle.
    pub released_after_restore: u64,
    /// Publications made between a restore's backup and its end that the storage kept
    /// (the restored state never knew them), detached in the drain as an operator would.
    pub forgotten_publications_detached: usize,
    pub client_retries: u64,
    /// Claims with labels past the limits that the servers refused, as they must; of
    /// those, how many a read afterwards found not recorded.
    pub oversized_refused: u64,
    pub oversized_unrecorded: u64,
    /// Each server's `--max-connections`; the slow-body client runs twice as many
    /// anonymous talkers per server.
    pub max_connections: usize,
    /// The slow-body client's connections; of those, how many were answered 401 from
    /// their headers, closed by the server before an answer (to make room, or by a
    /// fault), answered 502/503; and its connections refused (a server down) or not
    /// taken within 5 s.
    pub slow_body_connections: u64,
    pub slow_body_refused: u64,
    pub slow_body_closed: u64,
    pub slow_body_unavailable: u64,
    pub slow_body_unreachable: u64,
    pub slow_body_not_accepted: u64,
    /// How many times a server logged that it reached its connection limit.
    pub connection_limit_reached: u64,
    /// Claims of which an attempt went unanswered; of those, how many the drain found
    /// left to release although their cycle could not tell (each an error), and how many
    /// whose cycle saw them refused or released turned up again (each a violation). The
    /// drain must find none.
    pub unsure_claims: usize,
    pub unsure_left: usize,
    pub unsure_reappeared: usize,
    pub observations: u64,
    /// Client operations in the history, and the volumes they touched.
    pub history_operations: usize,
    pub history_volumes: usize,
    /// Volumes whose history no order explains (each also a violation).
    pub anomalies: usize,
    /// Volumes whose history the checker could not decide within its budget (each an
    /// error: a history not known to be linearizable fails the run).
    pub undecided: usize,
    /// Per-job volumes and pools (one-server mode only): their cycles and end checks.
    #[serde(flatten)]
    pub jobs: jobs::JobsReport,
    pub violations: Vec<String>,
    pub violation_count: usize,
    /// Cycles that did not finish in time, processes that died on their own, faults that
    /// could not be injected or healed: not invariants, but the run fails on them too.
    pub errors: Vec<String>,
    pub ok: bool,
}

impl ChaosReport {
    fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |l: String| {
            s.push_str(&l);
            s.push('\n');
        };
        line(format!(
            "csivol-bench --chaos: {:.0} s of faults, {} nodes, {} single-writer volumes, {} clients, heartbeat TTL {} s, --mount {}, seed {}",
            self.duration_s,
            self.nodes,
            self.volumes,
            self.concurrency,
            self.heartbeat_ttl_s,
            self.mount,
            self.seed
        ));
        line(format!(
            "servers: {}, etcd members: {}, fault lanes: {}",
            self.servers, self.etcd_members, self.fault_lanes
        ));
        line(format!("machine: {}", self.machine));
        line(format!("faults injected: {}", self.faults_total));
        for (f, n) in &self.faults {
            line(format!("  {:<30} {n}", f.describe()));
        }
        for (what, n) in &self.fault_notes {
            line(format!("    {what}: {n}"));
        }
        line(format!(
            "load: {} claim cycles completed, {} claims acknowledged, {} failed by a plugin, {} released by their lost node's return, {} requests retried",
            self.cycles,
            self.acknowledged_claims,
            self.failed_claims,
            self.released_on_node_return,
            self.client_retries
        ));
        line(format!(
            "careless client: {} claims with labels past the limits refused (422), {} of them read back and not recorded",
            self.oversized_refused, self.oversized_unrecorded
        ));
        line(format!(
            "slow-body client: {} anonymous connections, {} answered 401 from their headers, {} closed unanswered (for room, or by a fault), {} answered 502/503; {} refused (a server down), {} not taken within 5 s; --max-connections {} per server, reached {} times",
            self.slow_body_connections,
            self.slow_body_refused,
            self.slow_body_closed,
            self.slow_body_unavailable,
            self.slow_body_unreachable,
            self.slow_body_not_accepted,
            self.max_connections,
            self.connection_limit_reached
        ));
        if self.faults.get(&Fault::Restore).is_some_and(|n| *n > 0) {
            line(format!(
                "restores: {} acknowledged claims forgotten (made after the backup), {} claims back after their release and released again by their cycle, {} publications the storage kept detached in the drain",
                self.forgotten_by_restore,
                self.released_after_restore,
                self.forgotten_publications_detached
            ));
        }
        if self.unsure_claims > 0 {
            line(format!(
                "unsure: {} claim(s) with an attempt that got no answer; found in the drain: {} left to release, {} back after their cycle saw them refused or released (the drain must find none)",
                self.unsure_claims, self.unsure_left, self.unsure_reappeared
            ));
        }
        line(format!(
            "observations: {} scans of the nodes' mounts and the plugins' records",
            self.observations
        ));
        line(format!(
            "history: {} operations on {} volumes checked, anomalies: {}, undecided: {}",
            self.history_operations, self.history_volumes, self.anomalies, self.undecided
        ));
        line(self.jobs.text());
        line(format!("violations: {}", self.violation_count));
        for v in &self.violations {
            line(format!("  {v}"));
        }
        line(format!("errors: {}", self.errors.len()));
        for e in &self.errors {
            line(format!("  {e}"));
        }
        line(if self.ok {
            "ok".to_owned()
        } else {
            "FAILED".to_owned()
        });
        s
    }
}

/// Runs the campaign and prints its report.
pub fn run(cfg: &Config) -> anyhow::Result<ExitCode> {
    let budget = cfg.args.duration + DRAIN_TIMEOUT * 3 + Duration::from_secs(300);
    let report = if cfg.args.store == StoreArg::Etcd {
        // The network lives as long as the run may; the clients run in its router.
        let net_dir = csivol_tests::TestDir::new("chaos-net");
        let lifetime = budget + Duration::from_secs(60);
        let net = Arc::new(cluster::ha_net(net_dir.path(), cfg.nodes, lifetime));
        let n = Arc::clone(&net);
        net.in_router(move || super::run_bounded("campaign", budget, execute(cfg, Some(n))))?
    } else {
        super::run_bounded("campaign", budget, execute(cfg, None))?
    };
    super::emit(cfg.args.json, &report, || report.text(), report.ok)
}

async fn execute(cfg: &Config, net: Option<Arc<Net>>) -> anyhow::Result<ChaosReport> {
    let a = &cfg.args;
    let say = Say::start();
    let bins = Bins::find(a.bin_dir.as_deref(), a.agent_bin.as_deref())?;
    let dir = WorkDir::new(a.keep_dir.as_deref())?;
    let root = dir.path().to_owned();
    let mount = cfg.mount();
    let seed = a.seed.unwrap_or_else(rand::random);
    let ttl = a.heartbeat_ttl;
    let cycle_timeout = a.cycle_timeout.max(ttl * 4 + Duration::from_secs(60));
    let ha = net.is_some();
    say.say(format!(
        "chaos: starting {} on tmpfs and {} nodes (--mount {mount}), seed {seed}",
        if ha {
            "a 3-member etcd and two servers in network namespaces,"
        } else {
            "the server"
        },
        cfg.nodes
    ));
    let max_connections = slowbody::max_connections(a.concurrency, cfg.nodes);
    let cluster =
        ChaosCluster::start(&bins, &root, cfg.nodes, mount, ttl, max_connections, net).await?;
    let http = cluster.http()?;
    let names: Vec<String> = (1..=a.volumes).map(volumes::volume_name).collect();
    say.say(format!("creating {} single-node-writer volumes", a.volumes));
    volumes::create_with(
        &http,
        names.clone(),
        Duration::from_secs(60) + Duration::from_millis(u64::from(a.volumes) * 20),
        AccessMode::SingleNodeWriter,
    )
    .await?;
    // Per-job volumes and pools need schema 20, which an etcd store may not run yet.
    let job_volumes = if ha {
        Vec::new()
    } else {
        jobs::setup(&http, Duration::from_secs(60)).await?
    };
    let storage_before = jobs::storage_volumes(&cluster.backend);

    let nodes = cluster.node_dirs();
    let (stop_observing, observing) = tokio::sync::watch::channel(false);
    let observer = tokio::spawn(invariants::observe(
        nodes.clone(),
        mount.to_owned(),
        observing,
    ));

    let started = Instant::now();
    let until = started + a.duration;
    let node_names = Arc::new(nodes.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
    let recorder = Arc::new(Recorder::default());
    let ledger = Arc::new(Ledger::default());
    let clients: Vec<_> = (0..a.concurrency)
        .map(|c| {
            let spec = Spec {
                client: c,
                volumes: volumes_of(&names, c, a.concurrency, ha),
                nodes: Arc::clone(&node_names),
                until,
                cycle_timeout,
                mount: mount.to_owned(),
                seed,
                history: Arc::clone(&recorder),
                ledger: Arc::clone(&ledger),
            };
            tokio::spawn(load::client(http.clone(), spec))
        })
        .collect();

    // Beside them, per-job and pool clients (two of each).
    let job_clients: Vec<_> = (0..if ha { 0 } else { 4 })
        .map(|c| {
            let spec = jobs::Spec {
                kind: [jobs::Kind::Fresh, jobs::Kind::Pool][c as usize % 2],
                client: c,
                nodes: Arc::clone(&node_names),
                until,
                cycle_timeout,
                seed,
                mount: mount.to_owned(),
                ledger: Arc::clone(&ledger),
            };
            tokio::spawn(jobs::client(http.clone(), spec))
        })
        .collect();
    // And a careless client whose every claim is far too large.
    let careless = tokio::spawn(load::oversized_labels(
        http.clone(),
        names.clone(),
        Arc::clone(&node_names),
        until,
        seed,
    ));
    // And anonymous slow bodies crowding each server's connection limit.
    let crowd = tokio::spawn(slowbody::crowd(
        cluster.slow_targets()?,
        2 * max_connections,
        names.clone(),
        until,
        seed,
    ));
    say.say(format!(
        "chaos: {} clients, {} anonymous slow-body talkers per server and faults for {}",
        a.concurrency,
        2 * max_connections,
        humantime::format_duration(a.duration)
    ));
    let (stop_faults, faults_stopped) = tokio::sync::watch::channel(false);
    let talk = |m: String| say.say(m);
    let lanes = if ha { faults::MAX_LANES } else { 1 };
    let kinds = cfg.fault_kinds(ha);
    let cluster = tokio::sync::Mutex::new(cluster);
    let load = faults::Load {
        http: &http,
        history: &recorder,
        ledger: &ledger,
        root: &root,
    };
    let (counts, findings) = {
        let timer = async {
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            let _ = stop_faults.send(true);
        };
        let (r, ()) = tokio::join!(
            faults::inject(
                &cluster,
                &load,
                &kinds,
                seed,
                lanes,
                ttl,
                &faults_stopped,
                &talk
            ),
            timer
        );
        r
    };
    let mut errors = findings.problems;
    let mut cluster = cluster.into_inner();
    let duration_s = started.elapsed().as_secs_f64();

    say.say("chaos: faults stopped; healing every process and draining the load");
    errors.extend(cluster.heal().await?);
    let healed = Instant::now();
    let mut tally = Tally::default();
    for c in clients {
        tally.add(c.await.context("a load client panicked")?);
    }
    let mut job_outcomes = Vec::new();
    for c in job_clients {
        job_outcomes.push(c.await.context("a job client panicked")?);
    }
    let mut jobs = jobs::sum(job_outcomes);
    let mut violations = tally.violations.clone();
    violations.append(&mut jobs.violations);
    errors.append(&mut jobs.stuck);
    violations.extend(findings.violations);
    let careless = careless.await.context("the careless client panicked")?;
    violations.extend(careless.violations.iter().cloned());
    let mut slow = crowd.await.context("the slow-body client panicked")?;
    violations.append(&mut slow.violations);
    errors.extend(tally.stuck.iter().cloned());
    let drained = if tally.unsure.is_empty() {
        Drained::default()
    } else {
        say.say(format!(
            "chaos: watching {} claim(s) with an attempt that got no answer",
            tally.unsure.len()
        ));
        let d = release_unsure(
            &http,
            &tally.unsure,
            &recorder,
            &ledger,
            healed + UNSURE_SETTLE,
        )
        .await;
        violations.extend(d.reappeared.iter().cloned());
        errors.extend(d.left.iter().cloned());
        errors.extend(d.errors.iter().cloned());
        d
    };

    say.say("chaos: checking that every volume is free and nothing is left over");
    let (jobs_report, backend) = (&mut jobs.report, &cluster.backend);
    let before = &storage_before;
    // Per-job volumes a restore forgot stay in the storage with what was published of them.
    let forgotten = job_checks::check_left(
        &http,
        backend,
        before,
        &ledger,
        DRAIN_TIMEOUT,
        jobs_report,
        &mut violations,
    )
    .await;
    let expected = names.len() + job_volumes.len();
    violations.extend(
        volumes::wait_all_free(&http, expected, DRAIN_TIMEOUT)
            .await?
            .into_iter()
            .map(|o| format!("orphan after the drain: {o}")),
    );
    // What a restore forgot and the storage keeps: taken down as an operator would.
    let leaks =
        leaks::detach_forgotten(&http, &cluster.backend, &ledger, &forgotten, DRAIN_TIMEOUT).await;
    errors.extend(leaks.errors);
    violations.extend(
        super::cluster::leftovers(&cluster.backend, &nodes, &root)
            .into_iter()
            .filter(|o| !forgotten.iter().any(|id| o.contains(id.as_str())))
            .map(|o| format!("orphan after the drain: {o}")),
    );
    let _ = stop_observing.send(true);
    let observed = observer.await.context("the observer panicked")?;
    jobs.report.observed(&observed);
    violations.extend(observed.violations);
    violations.extend(invariants::call_log_overlaps(&nodes));
    let events = invariants::all_events(&http).await?;
    // Beside the history, for a look at what the servers recorded when a check fails.
    if let Err(e) = super::history::save_lines(&root.join("events.jsonl"), &events) {
        errors.push(format!("failed to save the event log: {e}"));
    }
    violations.extend(invariants::unattributed_force(&events));
    let vanished = std::mem::take(&mut jobs.vanished);
    job_checks::judge_vanished(&events, &vanished, &mut jobs.report, &mut violations);
    let blocked = job_checks::deleted_while_blocked(&events);
    jobs.report.deleted_while_blocked = blocked.len();
    jobs.report.job_volumes_blocked = job_checks::blocks(&events);
    violations.extend(blocked);
    violations.extend(invariants::recorded_allocs(&events, load::OVERSIZED_ALLOC));
    for (i, s) in cluster.servers.iter_mut().enumerate() {
        if let Some(status) = s.proc.exited() {
            errors.push(format!("server {} exited with {status}", i + 1));
        }
    }

    say.say("chaos: reading who holds each volume, and checking the history");
    final_holders(&http, &names, &recorder).await;
    if let Err(e) = recorder.save(&root.join("history.jsonl")) {
        errors.push(format!("failed to save the history: {e}"));
    }
    let checked = tokio::task::spawn_blocking({
        let r = Arc::clone(&recorder);
        move || r.check()
    })
    .await
    .context("the history checker panicked")?;
    judge_history(&checked, &mut violations, &mut errors);

    cluster.save_server_log(&root);
    let connection_limit_reached = cluster.connection_limit_reached();
    let faults_total = counts.values().sum();
    let ok = passed(&violations, &errors);
    Ok(ChaosReport {
        mode: "full --chaos",
        duration_s,
        nodes: cfg.nodes,
        volumes: a.volumes,
        concurrency: a.concurrency,
        heartbeat_ttl_s: ttl.as_secs_f64(),
        mount: mount.to_owned(),
        servers: cluster.servers.len(),
        etcd_members: cluster.ha.as_ref().map_or(0, |h| h.etcd.members.len()),
        fault_lanes: lanes,
        seed,
        machine: stats::machine(),
        faults: counts,
        faults_total,
        fault_notes: findings.notes,
        cycles: tally.cycles,
        acknowledged_claims: tally.acknowledged,
        failed_claims: tally.failed,
        released_on_node_return: tally.released_on_return,
        forgotten_by_restore: tally.forgotten_by_restore,
        released_after_restore: tally.released_after_restore,
        forgotten_publications_detached: leaks.detached,
        client_retries: tally.retries,
        oversized_refused: careless.refused,
        oversized_unrecorded: careless.unrecorded,
        max_connections,
        slow_body_connections: slow.connections,
        slow_body_refused: slow.refused_from_headers,
        slow_body_closed: slow.closed_unanswered,
        slow_body_unavailable: slow.unavailable,
        slow_body_unreachable: slow.unreachable,
        slow_body_not_accepted: slow.not_accepted,
        connection_limit_reached,
        unsure_claims: tally.unsure.len(),
        unsure_left: drained.left.len(),
        unsure_reappeared: drained.reappeared.len(),
        observations: observed.scans,
        history_operations: checked.operations,
        history_volumes: checked.volumes,
        anomalies: checked.anomalies.len(),
        undecided: checked.undecided.len(),
        jobs: jobs.report,
        violation_count: violations.len(),
        violations,
        errors,
        ok,
    })
}

/// The checker's verdict in the run's lists: each anomaly a violation; each volume the
/// search could not decide an error, for a history not known to be linearizable is no
/// pass.
fn judge_history(checked: &Checked, violations: &mut Vec<String>, errors: &mut Vec<String>) {
    violations.extend(checked.anomalies.iter().cloned());
    errors.extend(checked.undecided.iter().cloned());
}

/// Whether the run passed: nothing broken, nothing that went wrong.
fn passed(violations: &[String], errors: &[String]) -> bool {
    violations.is_empty() && errors.is_empty()
}

/// Client `c`'s volumes: every `n`th; in HA mode also its neighbour's, so that two
/// clients race for each volume and the single-writer rule is tried under the faults.
fn volumes_of(names: &[String], c: u32, n: u32, shared: bool) -> Vec<String> {
    let next = (c + 1) % n;
    names
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            let owner = *i as u32 % n;
            owner == c || (shared && owner == next)
        })
        .map(|(_, v)| v.clone())
        .collect()
}

/// What the drain found of the claims with an attempt that got no answer. It must find
/// none: each one found fails the run, and is released so that the end checks can run.
#[derive(Debug, Default)]
struct Drained {
    /// Claims whose cycle saw them refused or released, found again: released claims
    /// come back (violations).
    reappeared: Vec<String>,
    /// Claims whose cycle could not tell (no attempt answered, a release not seen
    /// through), found left to release: the drain must have nothing unsure left to
    /// release (errors, beside the cycle's own).
    left: Vec<String>,
    /// Releases that did not go through.
    errors: Vec<String>,
}

impl Drained {
    /// `u`, found in the drain: a failure either way (once per claim).
    fn found(&mut self, u: &Unsure) {
        let (list, what) = if u.over {
            (
                &mut self.reappeared,
                "released claim come back: {v}/{a}, whose cycle saw it refused or released, is there again after the faults",
            )
        } else {
            (
                &mut self.left,
                "unsure claim left to release in the drain: {v}/{a}, whose cycle could not tell whether it was made, is there after the faults",
            )
        };
        let line = what.replace("{v}", &u.volume).replace("{a}", &u.alloc);
        if !list.contains(&line) {
            list.push(line);
        }
    }
}

/// Watches each claim of `unsure` until `settle` has passed: a read that finds one goes
/// into the history, and fails the run ([`Drained::found`]); it is then released, so that
/// the end checks can run. One whose cycle saw it refused or released ([`Unsure::over`])
/// is a released claim come back: the server carries out no claim request sent before
/// its alloc's release and answers a repeat of a key with its first answer. One whose
/// cycle could not tell is left to release: its cycle already failed the run, and the
/// drain says what it left behind.
async fn release_unsure(
    http: &Http,
    unsure: &[Unsure],
    history: &Recorder,
    ledger: &Ledger,
    settle: Instant,
) -> Drained {
    let deadline = Instant::now().max(settle) + DRAIN_TIMEOUT;
    let mut out = Drained::default();
    loop {
        for u in unsure {
            let path = format!("/v1/volumes/{}/claims/{}", u.volume, u.alloc);
            let at = history.now();
            // No answer, or any other answer: asked again on the next round.
            let Ok(200) = http.get(&path).await.map(|r| r.status) else {
                continue;
            };
            history.completed(&u.volume, at, Input::Read(u.alloc.clone()), Output::Present);
            out.found(u);
            let mut retries = 0;
            if let Err(e) = load::release(
                http,
                history,
                ledger,
                &u.volume,
                &u.alloc,
                deadline,
                &mut retries,
            )
            .await
            {
                out.errors
                    .push(format!("drain: release of {}/{}: {e}", u.volume, u.alloc));
            }
        }
        let now = Instant::now();
        if now >= settle || now >= deadline {
            return out;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The last operation of each volume's history: who holds it now, read from the volume.
/// (A read that fails is left out: an unknown read constrains nothing.)
async fn final_holders(http: &Http, names: &[String], history: &Recorder) {
    for name in names {
        let at = history.now();
        let Ok(r) = http.get(&format!("/v1/volumes/{name}")).await else {
            continue;
        };
        let Ok(v) = r.json::<csivol_api::Volume>() else {
            continue;
        };
        let writer = v
            .claims
            .iter()
            .find(|c| c.mode == csivol_api::ClaimMode::Write)
            .map(|c| c.alloc.clone());
        history.completed(name, at, Input::Holder, Output::Held(writer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Record, check_within};

    fn unsure(alloc: &str, over: bool) -> Unsure {
        Unsure {
            volume: "v1".to_owned(),
            alloc: alloc.to_owned(),
            over,
        }
    }

    /// The drain must have nothing unsure left to release: a claim found there fails the
    /// run whether its cycle saw it gone (a released claim come back, a violation) or
    /// could not tell (left to release, an error), each named once however many rounds
    /// find it.
    #[test]
    fn the_drain_fails_the_run_on_any_claim_it_finds() {
        let mut d = Drained::default();
        assert!(passed(&d.reappeared, &d.left));
        d.found(&unsure("a", false));
        d.found(&unsure("a", false));
        assert_eq!(d.left.len(), 1, "{d:?}");
        assert!(d.left[0].contains("v1/a"), "{d:?}");
        assert!(d.reappeared.is_empty(), "{d:?}");
        assert!(!passed(&d.reappeared, &d.left));
        let mut d = Drained::default();
        d.found(&unsure("b", true));
        assert_eq!(d.reappeared.len(), 1, "{d:?}");
        assert!(
            d.reappeared[0].starts_with("released claim come back: v1/b"),
            "{d:?}"
        );
        assert!(!passed(&d.reappeared, &d.left));
    }

    /// A history the checker cannot decide within its budget fails the run, as an
    /// anomaly does; one it decides fails nothing.
    #[test]
    fn an_undecided_history_fails_the_run() {
        let op = |call, ret, input, output| Record {
            volume: "v1".to_owned(),
            call_us: call,
            ret_us: ret,
            input,
            output,
            request: None,
        };
        // Claims of several allocs racing, none answered, then a read of who holds it:
        // the search must try the unanswered claims' orders before it can decide.
        let mut records: Vec<Record> = (0..6)
            .map(|i| op(i, None, Input::Claim(format!("a{i}")), Output::Unknown))
            .collect();
        records.push(op(
            10,
            Some(11),
            Input::Holder,
            Output::Held(Some("a5".into())),
        ));
        let decided = check_within(&records, 1_000_000);
        assert!(decided.undecided.is_empty() && decided.anomalies.is_empty());
        let (mut v, mut e) = (Vec::new(), Vec::new());
        judge_history(&decided, &mut v, &mut e);
        assert!(passed(&v, &e));

        let undecided = check_within(&records, 1);
        assert_eq!(undecided.undecided.len(), 1, "{undecided:?}");
        assert!(undecided.anomalies.is_empty(), "{undecided:?}");
        let (mut v, mut e) = (Vec::new(), Vec::new());
        judge_history(&undecided, &mut v, &mut e);
        assert!(!passed(&v, &e), "an undecided history passed the run");
        assert!(e[0].contains("not known to be linearizable"), "{e:?}");
    }
}
