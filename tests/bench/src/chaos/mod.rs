//! `csivol-bench --mode full --chaos`: the fault campaign. Under a steady claim load on
//! single-writer volumes, faults fall at random moments for the run's duration (kill -9 of
//! the server, agents and plugins; agents stopped across the heartbeat TTL and continued;
//! the server's disk filled and freed), while observers check the invariants continuously;
//! then the faults stop, everything is healed, the load drains, and the end checks run.
//! It prints the faults injected by kind and the violations found, and exits 1 on any
//! violation (or a cycle that never finished, or a process that died on its own).

mod cluster;
mod faults;
mod invariants;
mod load;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use csivol_api::domain::AccessMode;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;

use self::cluster::ChaosCluster;
use self::faults::Fault;
use self::load::{Spec, Tally};
use super::phases::{Say, WorkDir};
use super::procs::Bins;
use super::{Config, stats, volumes};

/// How long the end of the run waits for every volume to be free again.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);

#[derive(Debug, Serialize)]
pub struct ChaosReport {
    pub mode: &'static str,
    pub duration_s: f64,
    pub nodes: u32,
    pub volumes: u32,
    pub concurrency: u32,
    pub heartbeat_ttl_s: f64,
    pub mount: String,
    pub seed: u64,
    pub machine: String,
    pub faults: BTreeMap<Fault, u64>,
    pub faults_total: u64,
    pub cycles: u64,
    pub acknowledged_claims: u64,
    pub failed_claims: u64,
    /// Claims released by the server's rule for a lost node that came back (event logged).
    pub released_on_node_return: u64,
    pub client_retries: u64,
    pub observations: u64,
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
        line(format!("machine: {}", self.machine));
        line(format!("faults injected: {}", self.faults_total));
        for (f, n) in &self.faults {
            line(format!("  {:<30} {n}", f.describe()));
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
            "observations: {} scans of the nodes' mounts and the plugins' records",
            self.observations
        ));
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
    let report = super::run_bounded("campaign", budget, execute(cfg))?;
    super::emit(cfg.args.json, &report, || report.text(), report.ok)
}

async fn execute(cfg: &Config) -> anyhow::Result<ChaosReport> {
    let a = &cfg.args;
    let say = Say::start();
    let bins = Bins::find(a.bin_dir.as_deref())?;
    let dir = WorkDir::new(a.keep_dir.as_deref())?;
    let root = dir.path().to_owned();
    let mount = cfg.mount();
    let seed = a.seed.unwrap_or_else(rand::random);
    let ttl = a.heartbeat_ttl;
    let cycle_timeout = a.cycle_timeout.max(ttl * 4 + Duration::from_secs(60));
    say.say(format!(
        "chaos: starting the server on its own tmpfs and {} nodes (--mount {mount}), seed {seed}",
        cfg.nodes
    ));
    let mut cluster = ChaosCluster::start(&bins, &root, cfg.nodes, mount, ttl).await?;
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

    let nodes = cluster.node_dirs();
    let (stop_observing, observing) = tokio::sync::watch::channel(false);
    let observer = tokio::spawn(observe(nodes.clone(), mount.to_owned(), observing));

    let started = Instant::now();
    let until = started + a.duration;
    let node_names = Arc::new(nodes.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
    let clients: Vec<_> = (0..a.concurrency)
        .map(|c| {
            let spec = Spec {
                client: c,
                volumes: names
                    .iter()
                    .skip(c as usize)
                    .step_by(a.concurrency as usize)
                    .cloned()
                    .collect(),
                nodes: Arc::clone(&node_names),
                until,
                cycle_timeout,
                mount: mount.to_owned(),
                seed,
            };
            tokio::spawn(load::client(http.clone(), spec))
        })
        .collect();

    say.say(format!(
        "chaos: {} clients and faults for {}",
        a.concurrency,
        humantime::format_duration(a.duration)
    ));
    let (stop_faults, faults_stopped) = tokio::sync::watch::channel(false);
    let mut rng = StdRng::seed_from_u64(seed);
    let talk = |m: String| say.say(m);
    let (counts, mut errors) = {
        let timer = async {
            tokio::time::sleep_until(tokio::time::Instant::from_std(until)).await;
            let _ = stop_faults.send(true);
        };
        let (r, ()) = tokio::join!(
            faults::inject(&mut cluster, &mut rng, ttl, &faults_stopped, &talk),
            timer
        );
        r
    };
    let duration_s = started.elapsed().as_secs_f64();

    say.say("chaos: faults stopped; healing every process and draining the load");
    errors.extend(cluster.heal().await?);
    let mut tally = Tally::default();
    for c in clients {
        tally.add(c.await.context("a load client panicked")?);
    }
    let mut violations = tally.violations.clone();
    errors.extend(tally.stuck.iter().cloned());

    say.say("chaos: checking that every volume is free and nothing is left over");
    violations.extend(
        volumes::wait_all_free(&http, names.len(), DRAIN_TIMEOUT)
            .await?
            .into_iter()
            .map(|o| format!("orphan after the drain: {o}")),
    );
    violations.extend(
        super::cluster::leftovers(&cluster.backend, &nodes, &root)
            .into_iter()
            .map(|o| format!("orphan after the drain: {o}")),
    );
    let _ = stop_observing.send(true);
    let (observations, seen) = observer.await.context("the observer panicked")?;
    violations.extend(seen);
    violations.extend(invariants::call_log_overlaps(&nodes));
    let events = invariants::all_events(&http).await?;
    violations.extend(invariants::unattributed_force(&events));
    if let Some(status) = cluster.server.proc.exited() {
        errors.push(format!("the server exited with {status}"));
    }

    cluster.save_server_log(&root);
    let faults_total = counts.values().sum();
    let ok = violations.is_empty() && errors.is_empty();
    Ok(ChaosReport {
        mode: "full --chaos",
        duration_s,
        nodes: cfg.nodes,
        volumes: a.volumes,
        concurrency: a.concurrency,
        heartbeat_ttl_s: ttl.as_secs_f64(),
        mount: mount.to_owned(),
        seed,
        machine: stats::machine(),
        faults: counts,
        faults_total,
        cycles: tally.cycles,
        acknowledged_claims: tally.acknowledged,
        failed_claims: tally.failed,
        released_on_node_return: tally.released_on_return,
        client_retries: tally.retries,
        observations,
        violation_count: violations.len(),
        violations,
        errors,
        ok,
    })
}

/// Scans the nodes every 100 ms for a single-writer volume presented on two nodes; a
/// sighting counts once a second scan, after it, sees it too (a scan reads the nodes one
/// after the other, so one scan alone can straddle a correct handover).
async fn observe(
    nodes: Vec<(String, PathBuf)>,
    mount: String,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, Vec<String>) {
    let mut scans = 0;
    let mut found: BTreeSet<String> = BTreeSet::new();
    while !*stop.borrow() {
        let (n, m) = (nodes.clone(), mount.clone());
        let twice = tokio::task::spawn_blocking(move || {
            let first = invariants::double_writers(&invariants::writers(&n, &m));
            if first.is_empty() {
                return Vec::new();
            }
            let second = invariants::double_writers(&invariants::writers(&n, &m));
            second
                .into_iter()
                .filter(|v| {
                    first
                        .iter()
                        .any(|f| f.split(':').next() == v.split(':').next())
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        scans += 1;
        found.extend(twice);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (scans, found.into_iter().collect())
}
