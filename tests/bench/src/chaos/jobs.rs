//! The campaign's per-job volumes and pools, beside the named volumes' load (one-server
//! mode). Fresh clients claim per-job volumes cloned from a seed volume, each with a short
//! lease they renew while the job runs; pool clients claim members of a pool of labelled
//! single-writer volumes with cache keys and release them as jobs that succeeded. Each
//! waits ready, writes a marker into its target and releases, riding out the faults by
//! sending each request again under its `Idempotency-Key`. A claim found gone before its
//! release is kept for the event log to explain; the end checks are `job_checks`'s. A
//! member or per-job volume presented on two nodes at once is seen by the campaign's
//! observer, which scans every volume's targets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_api::domain::AccessMode;
use csivol_api::{
    self as api, ClaimMode, ClaimRequest, ClaimState, FreshClaimRequest, FreshSource,
    PoolClaimRequest, PoolSpec, RenewRequest, VolumeLabelRequest,
};
use csivol_client::once::Once;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::invariants::presented;
use super::ledger::Ledger;
use super::load::{Answer, new_once, persist};
use crate::client::{Http, Resp};
use crate::volumes;

/// The ledger's volume for every job under way (a job knows its volume only from its
/// claim's answer).
pub const JOB: &str = "";

/// Whether `alloc` is a job's: the restore's operator leaves it out of the history.
pub fn is_job(alloc: &str) -> bool {
    alloc.starts_with("fresh-") || alloc.starts_with("pool-")
}

/// Releases a job's claim that a restore brought back after its job was over, as the
/// restore's operator does, and waits until it is gone.
pub async fn release_back(
    http: &Http,
    volume: &str,
    alloc: &str,
    deadline: Instant,
) -> Result<(), String> {
    let path = format!("/v1/volumes/{volume}/claims/{alloc}");
    let mut retries = 0;
    loop {
        if let Answer::Got(a) = persist(deadline, &mut retries, || http.delete(&path)).await
            && a.status >= 300
            && a.status != 404
        {
            return Err(format!("HTTP {}: {}", a.status, text(&a)));
        }
        if let Answer::Got(a) = persist(deadline, &mut retries, || http.get(&path)).await
            && a.status == 404
        {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err("not gone in time".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The volume per-job volumes are cloned from.
pub const SEED: &str = "job-seed";
/// The pool, its label, and how many members it has.
const POOL: &str = "chaos-pool";
const POOL_MEMBERS: u32 = 3;
/// A per-job claim's lease: short, so that a job whose client gave up (a fault outlasting
/// its cycle) frees its volume soon; renewed every third of it while the job runs.
const LEASE: Duration = Duration::from_secs(20);
/// The marker a job writes into its target.
const MARKER: &str = "csivol-bench-job";

/// What the per-job and pool clients did, and what the end found.
#[derive(Debug, Default, Serialize)]
pub struct JobsReport {
    pub fresh_cycles: u64,
    pub pool_cycles: u64,
    /// Claims refused (a lost node, no free member): tried again later.
    pub job_claims_refused: u64,
    /// Per-job claims whose lease ran out before their release (a fault outlasting it):
    /// the server released them and deleted their volumes (`claim-expired`).
    pub fresh_leases_lapsed: u64,
    /// Acknowledged claims gone before their job released them for another reason the
    /// event log gives: failed by the plugin and released by the server before the job
    /// saw it failed (`claim-failed`), a per-job volume's CreateVolume failed for good
    /// (`claim-dequeued`), or a restore forgot them (one fell while their job ran). Any
    /// other is a violation.
    pub job_claims_failed: u64,
    pub job_claims_dequeued: u64,
    pub job_claims_forgotten_by_restore: u64,
    pub job_markers_written: u64,
    /// With `--mount none`: ready targets seen presented instead.
    pub job_targets_presented: u64,
    pub job_retries: u64,
    /// Per-job volumes left in csivol's list after the drain (each a violation).
    pub job_volumes_left: usize,
    /// Volumes in the plugin's storage beyond the campaign's own after the drain: each a
    /// violation, except those made while a restore's backup was taken and its end (the
    /// restored state never knew them), counted apart.
    pub storage_volumes_leaked: usize,
    pub storage_volumes_forgotten_by_restore: usize,
    /// `volume-deleting` while the volume was blocked (each a violation), and how many
    /// times a per-job volume or pool member was blocked (what that check had to judge).
    pub deleted_while_blocked: usize,
    pub job_volumes_blocked: usize,
    /// Per-job volumes and pool members the observer saw presented, and of those, how
    /// many it saw presented on two nodes at once (each a violation).
    pub job_volumes_observed: usize,
    pub job_double_writers: usize,
}

impl JobsReport {
    pub fn text(&self) -> String {
        format!(
            "jobs: {} per-job volume cycles, {} pool cycles, {} claims refused and tried again, {} leases lapsed, {} claims failed by the plugin and gone before their job saw it, {} dequeued (CreateVolume failed), {} forgotten by a restore, {} markers written, {} targets seen presented (--mount none), {} requests retried; {} per-job volumes and pool members seen presented, {} of them on two nodes at once; after the drain: {} per-job volumes left, {} volumes leaked in the storage ({} more made within a restore's window), {} deleted while blocked (of {} blocks of per-job volumes and pool members)",
            self.fresh_cycles,
            self.pool_cycles,
            self.job_claims_refused,
            self.fresh_leases_lapsed,
            self.job_claims_failed,
            self.job_claims_dequeued,
            self.job_claims_forgotten_by_restore,
            self.job_markers_written,
            self.job_targets_presented,
            self.job_retries,
            self.job_volumes_observed,
            self.job_double_writers,
            self.job_volumes_left,
            self.storage_volumes_leaked,
            self.storage_volumes_forgotten_by_restore,
            self.deleted_while_blocked,
            self.job_volumes_blocked
        )
    }

    /// What the observer saw of the per-job volumes and pool members.
    pub fn observed(&mut self, o: &super::invariants::Observed) {
        self.job_volumes_observed = o.job_volumes.len();
        self.job_double_writers = o
            .violations
            .iter()
            .filter(|v| o.job_volumes.iter().any(|j| on_volume(v, j)))
            .count();
    }

    fn add(&mut self, o: &JobsReport) {
        self.fresh_cycles += o.fresh_cycles;
        self.pool_cycles += o.pool_cycles;
        self.job_claims_refused += o.job_claims_refused;
        self.fresh_leases_lapsed += o.fresh_leases_lapsed;
        self.job_claims_failed += o.job_claims_failed;
        self.job_claims_dequeued += o.job_claims_dequeued;
        self.job_claims_forgotten_by_restore += o.job_claims_forgotten_by_restore;
        self.job_markers_written += o.job_markers_written;
        self.job_targets_presented += o.job_targets_presented;
        self.job_retries += o.job_retries;
    }
}

/// What a client brings back: its counts, violations and cycles that never finished.
#[derive(Debug, Default)]
pub struct Outcome {
    pub report: JobsReport,
    pub violations: Vec<String>,
    pub stuck: Vec<String>,
    /// Acknowledged claims a job found gone before its release, for the event log to
    /// explain at the end.
    pub vanished: Vec<Vanished>,
}

/// An acknowledged claim its job found gone before it released it.
#[derive(Debug, Clone)]
pub struct Vanished {
    pub volume: String,
    pub alloc: String,
    /// Its lease may have run out by then (a per-job claim not renewed for a lease).
    pub may_have_lapsed: bool,
    /// A restore fell while its job ran.
    pub restored: bool,
}

/// Makes the seed volume and the pool's labelled members, and the pool; returns the names
/// of the volumes made, for the end's count.
pub async fn setup(http: &Http, timeout: Duration) -> anyhow::Result<Vec<String>> {
    let members: Vec<String> = (1..=POOL_MEMBERS).map(|i| format!("{POOL}-{i}")).collect();
    let mut made = vec![SEED.to_owned()];
    made.extend(members.iter().cloned());
    volumes::create_with(http, made.clone(), timeout, AccessMode::SingleNodeWriter).await?;
    let selector = BTreeMap::from([("pool".to_owned(), POOL.to_owned())]);
    for m in &members {
        let req = VolumeLabelRequest {
            set: selector.clone(),
            remove: Vec::new(),
        };
        http.post(&format!("/v1/volumes/{m}/labels"), &req)
            .await?
            .expect(&format!("label volume {m}"), &[200])?;
    }
    let spec = PoolSpec {
        selector,
        linger_ms: None,
    };
    http.put(&format!("/v1/pools/{POOL}"), &spec)
        .await?
        .expect("create the pool", &[200, 201])?;
    Ok(made)
}

/// The names of the volumes in the plugin's storage (`volumes/` of its backend).
pub fn storage_volumes(backend: &Path) -> BTreeSet<String> {
    std::fs::read_dir(backend.join("volumes"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Which client: a per-job one, or a pool one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Fresh,
    Pool,
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub kind: Kind,
    pub client: u32,
    pub nodes: Arc<Vec<String>>,
    pub until: Instant,
    pub cycle_timeout: Duration,
    pub seed: u64,
    /// The campaign's `--mount`: with `none` a target is the plugin's directory with its
    /// marker file, not the volume, so the job only checks it is presented.
    pub mount: String,
    pub ledger: Arc<Ledger>,
}

/// Cycles jobs until `spec.until`.
pub async fn client(http: Http, spec: Spec) -> Outcome {
    let mut out = Outcome::default();
    let mut rng = StdRng::seed_from_u64(spec.seed ^ (0x70b5 + u64::from(spec.client)));
    let mut n = 0u64;
    while Instant::now() < spec.until {
        n += 1;
        let who = match spec.kind {
            Kind::Fresh => "fresh",
            Kind::Pool => "pool",
        };
        let alloc = format!("{who}-{}-{n}", spec.client);
        let node = spec.nodes[rng.random_range(0..spec.nodes.len())].clone();
        let key = format!("key-{}", rng.random_range(0..3u8));
        job(&http, &spec, &alloc, &node, &key, &mut out).await;
    }
    out
}

/// One job: claim, until ready (renewing a per-job claim's lease), a marker written,
/// release, until gone.
async fn job(http: &Http, spec: &Spec, alloc: &str, node: &str, key: &str, out: &mut Outcome) {
    let _under_way = spec.ledger.begin(JOB, alloc);
    let deadline = Instant::now() + spec.cycle_timeout;
    let r = &mut out.report;
    let mut claim = ClaimRequest::new(alloc, node, ClaimMode::Write);
    let once: Once = new_once();
    let (path, body) = match spec.kind {
        Kind::Fresh => {
            claim.ttl_ms = Some(LEASE.as_millis() as u64);
            let req = FreshClaimRequest {
                name: "scratch".to_owned(),
                source: FreshSource::Volume(SEED.to_owned()),
                claim,
            };
            ("/v1/fresh-claims".to_owned(), serde_json::to_value(req))
        }
        Kind::Pool => {
            let req = PoolClaimRequest {
                claim,
                cache_key: Some(key.to_owned()),
                restore_keys: Vec::new(),
            };
            (
                format!("/v1/pools/{POOL}/claims"),
                serde_json::to_value(req),
            )
        }
    };
    let body = body.expect("a request serializes");
    // The lease runs from the server's taking the request, after this; and what a restore
    // may have forgotten.
    let mut lease_from = Instant::now();
    let restores = spec.ledger.restores();
    let created = match persist(deadline, &mut r.job_retries, || {
        http.post_once(&path, &body, &once)
    })
    .await
    {
        Answer::Got(a) if a.status == 200 || a.status == 201 => a,
        Answer::Got(a) if (400..500).contains(&a.status) => {
            // Refused (a lost node, no free member): nothing made; later.
            r.job_claims_refused += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            return;
        }
        Answer::Got(a) => {
            out.stuck.push(format!(
                "{path} for {alloc}: HTTP {}: {}",
                a.status,
                text(&a)
            ));
            return;
        }
        Answer::TimedOut => {
            out.stuck.push(format!(
                "{path} for {alloc}: no answer within {:?}",
                spec.cycle_timeout
            ));
            return;
        }
    };
    let Ok(c) = created.json::<api::Claim>() else {
        out.stuck.push(format!(
            "{path} for {alloc}: not a claim: {}",
            text(&created)
        ));
        return;
    };
    let volume = c.volume.clone();
    let claim_path = format!("/v1/volumes/{volume}/claims/{alloc}");
    let mut c = Some(c);
    loop {
        match c.as_ref().map(|c| c.state) {
            Some(ClaimState::Ready) => {
                let ready = c.as_ref().expect("ready");
                write_marker(http, &claim_path, ready, &spec.mount, deadline, out).await;
                break;
            }
            Some(ClaimState::Failed) => break,
            _ => {}
        }
        if Instant::now() >= deadline {
            out.stuck.push(format!(
                "claim {claim_path} on {node} not ready within {:?}",
                spec.cycle_timeout
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let r = &mut out.report;
        if spec.kind == Kind::Fresh && lease_from.elapsed() >= LEASE / 3 {
            let renew = RenewRequest {
                ttl_ms: Some(LEASE.as_millis() as u64),
            };
            let (once, renew_path) = (new_once(), format!("{claim_path}/renew"));
            let sent = Instant::now();
            if let Answer::Got(a) = persist(deadline, &mut r.job_retries, || {
                http.post_once(&renew_path, &renew, &once)
            })
            .await
                && a.status == 200
            {
                lease_from = sent;
            }
        }
        c = match persist(deadline, &mut r.job_retries, || http.get(&claim_path)).await {
            Answer::Got(a) if a.status == 404 => {
                // Its lease ran out while a fault held the job back (released by the
                // server, its volume deleted), or the event log says why it went.
                out.vanished.push(Vanished {
                    volume: volume.clone(),
                    alloc: alloc.to_owned(),
                    // A second for the server's clock, which sets the lease.
                    may_have_lapsed: spec.kind == Kind::Fresh
                        && lease_from.elapsed() + Duration::from_secs(1) >= LEASE,
                    restored: spec.ledger.restores() != restores,
                });
                return;
            }
            Answer::Got(a) => a.json().ok(),
            Answer::TimedOut => None,
        };
    }
    let release = match spec.kind {
        Kind::Fresh => claim_path.clone(),
        Kind::Pool => format!("{claim_path}?succeeded=true"),
    };
    let r = &mut out.report;
    // A claim blocked on its lost node cannot be released through it (423): as a CI job
    // would, the job waits for the node to come back.
    let answer = loop {
        match persist(deadline, &mut r.job_retries, || http.delete(&release)).await {
            Answer::Got(a) if a.status == 423 && Instant::now() < deadline => {
                r.job_retries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            answer => break answer,
        }
    };
    match answer {
        Answer::Got(a) if a.status < 300 || a.status == 404 => {}
        Answer::Got(a) => {
            out.stuck.push(format!(
                "release {claim_path}: HTTP {}: {}",
                a.status,
                text(&a)
            ));
            return;
        }
        Answer::TimedOut => {
            out.stuck.push(format!("release {claim_path}: no answer"));
            return;
        }
    }
    loop {
        if let Answer::Got(a) =
            persist(deadline, &mut r.job_retries, || http.get(&claim_path)).await
            && a.status == 404
        {
            match spec.kind {
                Kind::Fresh => r.fresh_cycles += 1,
                Kind::Pool => r.pool_cycles += 1,
            }
            return;
        }
        if Instant::now() >= deadline {
            out.stuck.push(format!(
                "release {claim_path} on {node}: not gone within {:?}",
                spec.cycle_timeout
            ));
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Writes the job's marker into a ready claim's target (with `--mount none`, where the
/// target holds no volume, checks that it is presented instead). A write that fails is a
/// violation only if the claim is still ready as it was (not blocked and back meanwhile).
async fn write_marker(
    http: &Http,
    path: &str,
    c: &api::Claim,
    mount: &str,
    deadline: Instant,
    out: &mut Outcome,
) {
    let Some(target) = c.target_path.as_deref() else {
        out.violations
            .push(format!("claim {path} is ready without a target path"));
        return;
    };
    let file = PathBuf::from(target).join(MARKER);
    let done = if mount == "none" {
        if presented(Path::new(target), mount) {
            out.report.job_targets_presented += 1;
            Ok(())
        } else {
            Err("its target is not presented".to_owned())
        }
    } else {
        std::fs::write(&file, c.alloc.as_bytes()).map_err(|e| e.to_string())
    };
    let Err(e) = done else {
        if mount != "none" {
            out.report.job_markers_written += 1;
        }
        return;
    };
    if let Answer::Got(r) = persist(deadline, &mut out.report.job_retries, || http.get(path)).await
        && let Ok(again) = r.json::<api::Claim>()
        && again.state == ClaimState::Ready
        && again.updated_at == c.updated_at
    {
        out.violations.push(format!(
            "claim {path} is ready on {}, but its job found its target {}: {e}",
            c.node,
            file.display()
        ));
    }
}

/// Whether observer violation `v` names volume `volume` (`... volume NAME: holders`).
fn on_volume(v: &str, volume: &str) -> bool {
    v.split(':')
        .next()
        .is_some_and(|head| head.ends_with(&format!(" {volume}")))
}

fn text(r: &Resp) -> String {
    String::from_utf8_lossy(&r.body).chars().take(200).collect()
}

/// Sums the clients' outcomes.
pub fn sum(outcomes: Vec<Outcome>) -> Outcome {
    let mut all = Outcome::default();
    for o in outcomes {
        all.report.add(&o.report);
        all.violations.extend(o.violations);
        all.stuck.extend(o.stuck);
        all.vanished.extend(o.vanished);
    }
    all
}

/// Whether `volume` is one of the campaign's per-job volumes or pool members.
pub fn is_job_volume(volume: &str) -> bool {
    volume.starts_with("scratch-") || volume.starts_with(POOL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The observer's sightings on two nodes count for the jobs only when they name a
    /// per-job volume or pool member, the whole name.
    #[test]
    fn double_writers_of_job_volumes_are_counted_by_name() {
        let o = super::super::invariants::Observed {
            scans: 2,
            violations: vec![
                "two writers on single-writer volume chaos-pool-1: node-1 (x), node-2 (y)".into(),
                "two writers on single-writer volume vol-0001: node-1 (x), node-2 (y)".into(),
            ],
            job_volumes: ["chaos-pool-1", "chaos-pool-10", "scratch-ab"]
                .map(str::to_owned)
                .into(),
        };
        let mut r = JobsReport::default();
        r.observed(&o);
        assert_eq!((r.job_volumes_observed, r.job_double_writers), (3, 1));
    }
}
