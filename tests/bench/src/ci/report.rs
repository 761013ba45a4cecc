//! The CI scenario's report: each arm's warm ratios, warm against cold claim → ready, and
//! the fresh jobs' overhead against the floor of their plugin calls.

use std::time::Duration;

use csivol_api::PoolChoice;
use serde::Serialize;

use super::fresh::FreshSample;
use super::{Arm, POOL, RANDOM, Sample, ZIPF_S};
use crate::Config;
use crate::floor::{Figure, Floor};
use crate::stats::machine;

/// What the run measured, for [`assemble`].
pub struct Parts {
    pub seed: u64,
    /// Jobs per arm.
    pub jobs: u32,
    pub floor: Floor,
    pub samples: Vec<Sample>,
    pub jobs_took: Duration,
    pub fresh: Vec<FreshSample>,
    pub csi_floor: Figure,
    pub errors: Vec<String>,
}

/// One arm's figures.
#[derive(Debug, Serialize)]
pub struct ArmFigures {
    pub jobs: usize,
    pub same_key: usize,
    /// Not the same key, but still staged on the job's node.
    pub staged_here: usize,
    /// The pool arm only: a member whose last key shares the longest prefix.
    pub prefix: usize,
    pub cold: usize,
    pub same_key_ratio: f64,
    pub staged_here_ratio: f64,
    /// Claim → ready of the jobs that got a member last released with their key.
    pub warm_claim_ready: Figure,
    /// Claim → ready of the others.
    pub cold_claim_ready: Figure,
    /// warm p50 / cold p50.
    pub warm_vs_cold_p50: f64,
    /// Claim → ready of the jobs that got a member staged on their node (`staged here`:
    /// kept after a release with `--pool-linger`, or whose release there was under way),
    /// which skips NodeStageVolume.
    pub staged_here_claim_ready: Figure,
    /// Claim → ready of the jobs that got neither their key nor a member staged on their
    /// node (prefix and cold).
    pub unstaged_claim_ready: Figure,
    /// staged-here p50 / unstaged p50.
    pub staged_vs_unstaged_p50: f64,
}

impl ArmFigures {
    fn of(samples: &[&Sample]) -> Self {
        let n = samples.len();
        let count = |c: PoolChoice| samples.iter().filter(|s| s.choice == c).count();
        let times = |warm: bool| {
            Figure::of(
                samples
                    .iter()
                    .filter(|s| (s.choice == PoolChoice::SameKey) == warm)
                    .map(|s| s.claim_ready)
                    .collect(),
            )
        };
        let ratio = |k: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
        let (warm, cold) = (times(true), times(false));
        let of = |keep: fn(PoolChoice) -> bool| {
            Figure::of(
                samples
                    .iter()
                    .filter(|s| keep(s.choice))
                    .map(|s| s.claim_ready)
                    .collect(),
            )
        };
        let staged = of(|c| c == PoolChoice::StagedHere);
        let unstaged = of(|c| matches!(c, PoolChoice::Prefix | PoolChoice::Cold));
        Self {
            jobs: n,
            same_key: count(PoolChoice::SameKey),
            staged_here: count(PoolChoice::StagedHere),
            prefix: count(PoolChoice::Prefix),
            cold: count(PoolChoice::Cold),
            same_key_ratio: ratio(count(PoolChoice::SameKey)),
            staged_here_ratio: ratio(count(PoolChoice::StagedHere)),
            warm_vs_cold_p50: quotient(warm.p50_ms, cold.p50_ms),
            warm_claim_ready: warm,
            cold_claim_ready: cold,
            staged_vs_unstaged_p50: quotient(staged.p50_ms, unstaged.p50_ms),
            staged_here_claim_ready: staged,
            unstaged_claim_ready: unstaged,
        }
    }
}

fn quotient(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The fresh jobs' figures.
#[derive(Debug, Serialize)]
pub struct FreshFigures {
    pub jobs: usize,
    /// From the fresh claim's POST until the volume was deleted.
    pub job: Figure,
    pub claim_ready: Figure,
    pub release_deleted: Figure,
    /// CreateVolume from the snapshot, ControllerPublish, NodeStage, NodePublish,
    /// NodeUnpublish, NodeUnstage, ControllerUnpublish, DeleteVolume, back to back on one
    /// plugin.
    pub plugin_calls_floor: Figure,
    /// job p50 / floor p50, and p99 / p99.
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    /// job p50 - floor p50: what csivol adds to the plugin's own work.
    pub overhead_p50_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct CiReport {
    pub scenario: &'static str,
    pub machine: String,
    pub seed: u64,
    pub nodes: u32,
    pub mount: &'static str,
    pub pool_size: u32,
    /// How long both pools linger (`--pool-linger`), in ms; none: they do not.
    pub pool_linger_ms: Option<u64>,
    pub cache_keys: u32,
    /// The keys share no prefix (`--distinct-keys`).
    pub distinct_keys: bool,
    pub zipf_s: f64,
    pub clients_per_arm: u32,
    pub jobs_per_arm: u32,
    pub jobs_seconds: f64,
    pub http_round_trip: Figure,
    pub grpc_round_trip: Figure,
    pub commit: Figure,
    pub pool: ArmFigures,
    pub random: ArmFigures,
    /// pool same-key ratio / random same-key ratio.
    pub same_key_vs_random: f64,
    pub fresh: FreshFigures,
    pub errors: Vec<String>,
    pub ok: bool,
}

pub fn assemble(cfg: &Config, p: Parts) -> CiReport {
    let a = &cfg.args;
    let arm = |which: Arm| {
        let s: Vec<&Sample> = p.samples.iter().filter(|s| s.arm == which).collect();
        ArmFigures::of(&s)
    };
    let (pool, random) = (arm(Arm::Pool), arm(Arm::Random));
    let fig = |f: fn(&FreshSample) -> Duration| Figure::of(p.fresh.iter().map(f).collect());
    let job = fig(|s| s.total);
    let fresh = FreshFigures {
        jobs: p.fresh.len(),
        ratio_p50: quotient(job.p50_ms, p.csi_floor.p50_ms),
        ratio_p99: quotient(job.p99_ms, p.csi_floor.p99_ms),
        overhead_p50_ms: job.p50_ms - p.csi_floor.p50_ms,
        job,
        claim_ready: fig(|s| s.claim_ready),
        release_deleted: fig(|s| s.release_deleted),
        plugin_calls_floor: p.csi_floor,
    };
    let ok = p.errors.is_empty()
        && pool.jobs == p.jobs as usize
        && random.jobs == p.jobs as usize
        && fresh.jobs == a.fresh_jobs as usize;
    CiReport {
        scenario: "ci-jobs",
        machine: machine(),
        seed: p.seed,
        nodes: cfg.nodes,
        mount: cfg.mount(),
        pool_size: a.pool_size,
        pool_linger_ms: a
            .pool_linger
            .map(|l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
        cache_keys: a.cache_keys,
        distinct_keys: a.distinct_keys,
        zipf_s: ZIPF_S,
        clients_per_arm: a.ci_clients,
        jobs_per_arm: p.jobs,
        jobs_seconds: p.jobs_took.as_secs_f64(),
        http_round_trip: p.floor.http_round_trip,
        grpc_round_trip: p.floor.grpc_round_trip,
        commit: p.floor.commit(),
        same_key_vs_random: quotient(pool.same_key_ratio, random.same_key_ratio),
        pool,
        random,
        fresh,
        errors: p.errors,
        ok,
    }
}

fn fig(f: &Figure) -> String {
    format!(
        "p50 {:.1} ms, p99 {:.1} ms ({} jobs)",
        f.p50_ms, f.p99_ms, f.samples
    )
}

impl CiReport {
    pub fn text(&self) -> String {
        let arm = |name: &str, a: &ArmFigures| {
            format!(
                "  {name}\n\
                 \x20   warm: same key:      {} of {} ({:.1}%)\n\
                 \x20   staged here:         {} ({:.1}%)\n\
                 \x20   prefix / cold:       {} / {}\n\
                 \x20   claim → ready warm:  {}\n\
                 \x20   claim → ready cold:  {}\n\
                 \x20   warm / cold p50:     {:.2}\n\
                 \x20   claim → ready staged here:     {}\n\
                 \x20   claim → ready neither:         {}\n\
                 \x20   staged here / neither p50:     {:.2}\n",
                a.same_key,
                a.jobs,
                a.same_key_ratio * 100.0,
                a.staged_here,
                a.staged_here_ratio * 100.0,
                a.prefix,
                a.cold,
                fig(&a.warm_claim_ready),
                fig(&a.cold_claim_ready),
                a.warm_vs_cold_p50,
                fig(&a.staged_here_claim_ready),
                fig(&a.unstaged_claim_ready),
                a.staged_vs_unstaged_p50,
            )
        };
        let f = &self.fresh;
        let mut out = format!(
            "csivol-bench ci-jobs: {} jobs per arm on {} nodes (--mount {}), pools of {} caches{}, \
             {} branch keys{} (Zipf s={}), {} clients per arm, seed {}\n\
             machine:                 {}\n\
             floor:                   HTTP p50 {:.3} ms, gRPC p50 {:.3} ms, commit p50 {:.3} ms\n\
             jobs took:               {:.1} s (both arms at once)\n\
             {}{}\
             same key, pool / random: {:.2}\n\
             fresh volume from a snapshot, {} jobs one at a time:\n\
             \x20 job (claim → deleted):  {}\n\
             \x20 claim → ready:          {}\n\
             \x20 release → deleted:      {}\n\
             \x20 plugin calls' floor:    {} (create + publish + stage + publish, and back + delete)\n\
             \x20 job / floor:            {:.2}x p50, {:.2}x p99 ({:.1} ms over the floor at p50)\n",
            self.jobs_per_arm,
            self.nodes,
            self.mount,
            self.pool_size,
            self.pool_linger_ms.map_or_else(String::new, |l| format!(
                " lingering {}",
                humantime::format_duration(Duration::from_millis(l))
            )),
            self.cache_keys,
            if self.distinct_keys {
                " sharing no prefix"
            } else {
                " sharing `branch-`"
            },
            self.zipf_s,
            self.clients_per_arm,
            self.seed,
            self.machine,
            self.http_round_trip.p50_ms,
            self.grpc_round_trip.p50_ms,
            self.commit.p50_ms,
            self.jobs_seconds,
            arm(
                &format!("pool {POOL} (the server chooses by cache key):"),
                &self.pool
            ),
            arm(
                &format!("baseline {RANDOM} (a free member at random):"),
                &self.random
            ),
            self.same_key_vs_random,
            f.jobs,
            fig(&f.job),
            fig(&f.claim_ready),
            fig(&f.release_deleted),
            fig(&f.plugin_calls_floor),
            f.ratio_p50,
            f.ratio_p99,
            f.overhead_p50_ms,
        );
        if self.errors.is_empty() {
            out.push_str("errors:                  none\n");
        } else {
            out.push_str(&format!("errors:                  {}\n", self.errors.len()));
            for e in &self.errors {
                out.push_str(&format!("  {e}\n"));
            }
        }
        out
    }
}
