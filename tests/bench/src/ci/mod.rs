//! The CI scenario (`--ci-jobs N`): CI jobs over a pool of warm caches, in full mode.
//!
//! Two pools of `--pool-size` single-node-writer volumes each. Jobs pick a branch key of
//! `--cache-keys` from a Zipf distribution (rank k drawn with weight 1/k) and a node at
//! random, from a seeded generator, so a run is repeated with `--seed`. The same list of
//! jobs is run twice at once, by `--ci-clients` clients each: on the pool `ci-cache`
//! through `POST /v1/pools/ci-cache/claims` with the job's cache key, the server choosing
//! the member; and on the pool `ci-random` by claiming a member picked at random among the
//! free ones by name, the baseline. Each job waits until its claim is ready, writes its
//! key on the volume (with real mounts, after reading the previous job's), and releases as
//! a job that succeeded. The figures: how often each arm got a member last released with
//! the job's key (warm: same key) or one still staged on the job's node, and the claim to
//! ready time of warm claims against cold ones. With `--pool-linger`, both pools linger:
//! a node keeps a released member staged for its next job there, which then skips
//! NodeStageVolume; the pools are deleted after the jobs, which ends what lingers.
//!
//! Then `--fresh-jobs` per-job volumes from a snapshot of a seed volume, one at a time,
//! against the floor of the plugin calls they need (see `fresh`).

mod fresh;
mod jobs;
mod report;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use csivol_api::domain::AccessMode;
use csivol_api::{self as api, ClaimMode, ClaimRequest, PoolChoice, PoolClaimRequest, PoolSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use report::CiReport;

use crate::client::Http;
use crate::floor::Figure;
use crate::phases::{self, Say, WorkDir};
use crate::procs::Bins;
use crate::{Config, MountArg, volumes};

/// The pool the server chooses in, and the one the baseline picks from at random.
const POOL: &str = "ci-cache";
const RANDOM: &str = "ci-random";
/// The Zipf exponent of the keys' popularity.
const ZIPF_S: f64 = 1.0;

/// One job of the list both arms run.
#[derive(Debug, Clone)]
struct Job {
    key: String,
    node: String,
}

/// Which arm ran a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    Pool,
    Random,
}

/// One job done.
#[derive(Debug, Clone)]
struct Sample {
    arm: Arm,
    /// For the pool arm the server's choice; for the baseline, what its random pick was
    /// by the same rules (same key, else staged here, else cold).
    choice: PoolChoice,
    claim_ready: Duration,
}

/// The keys' names, most popular first: sharing the prefix `branch-`, or (`distinct`)
/// none at all.
fn key_name(rank: usize, distinct: bool) -> String {
    match u8::try_from(rank - 1) {
        Ok(i) if distinct && i < 26 => format!("{}-branch", char::from(b'a' + i)),
        _ => format!("branch-{rank:02}"),
    }
}

/// The jobs: a key from the Zipf distribution and a node at random, each.
fn plan(seed: u64, jobs: u32, keys: u32, distinct: bool, nodes: &[String]) -> Vec<Job> {
    let mut rng = StdRng::seed_from_u64(seed);
    let weights: Vec<f64> = (1..=keys).map(|k| f64::from(k).powf(-ZIPF_S)).collect();
    let total: f64 = weights.iter().sum();
    (0..jobs)
        .map(|_| {
            let mut u = rng.random::<f64>() * total;
            let mut rank = weights.len();
            for (i, w) in weights.iter().enumerate() {
                if u < *w {
                    rank = i + 1;
                    break;
                }
                u -= w;
            }
            Job {
                key: key_name(rank, distinct),
                node: nodes[rng.random_range(0..nodes.len())].clone(),
            }
        })
        .collect()
}

/// The baseline's view of its members: which it holds, and the key each was last
/// released with by a job that succeeded (kept by the benchmark, as a claim by name
/// records none in the server).
struct RandomMembers {
    names: Vec<String>,
    busy: Vec<bool>,
    last_key: Vec<Option<String>>,
}

pub async fn run(cfg: &Config) -> anyhow::Result<CiReport> {
    let a = &cfg.args;
    let say = Say::start();
    let bins = Bins::find(a.bin_dir.as_deref(), a.agent_bin.as_deref())?;
    let dir = WorkDir::new(a.keep_dir.as_deref())?;
    let root = dir.path().to_owned();
    let (mut run, http, floor) = phases::start(cfg, &bins, dir, &say).await?;
    let nodes = phases::start_nodes(cfg, &mut run, &bins, &http, &say).await?;
    let bind = a.mount == MountArg::Bind;
    let seed = a.seed.unwrap_or_else(rand::random);
    let size = a.pool_size;
    let jobs = a.ci_jobs.context("the CI scenario needs --ci-jobs")?;

    let member = |pool: &str, i: u32| format!("{pool}-{i:02}");
    let cache: Vec<String> = (1..=size).map(|i| member(POOL, i)).collect();
    let random: Vec<String> = (1..=size).map(|i| member(RANDOM, i)).collect();
    say.say(format!(
        "creating pools {POOL} and {RANDOM} of {size} single-node-writer volumes each"
    ));
    let timeout = Duration::from_secs(60) + Duration::from_millis(u64::from(size) * 100);
    let all: Vec<String> = cache.iter().chain(&random).cloned().collect();
    volumes::create_with(&http, all, timeout, AccessMode::SingleNodeWriter).await?;
    for (pool, names) in [(POOL, &cache), (RANDOM, &random)] {
        let selector = BTreeMap::from([("pool".to_owned(), pool.to_owned())]);
        for v in names {
            let req = api::VolumeLabelRequest {
                set: selector.clone(),
                remove: Vec::new(),
            };
            http.post(&format!("/v1/volumes/{v}/labels"), &req)
                .await?
                .expect(&format!("label {v}"), &[200])?;
        }
        let spec = PoolSpec {
            selector,
            linger_ms: a
                .pool_linger
                .map(|l| u64::try_from(l.as_millis()).unwrap_or(u64::MAX)),
        };
        http.put(&format!("/v1/pools/{pool}"), &spec)
            .await?
            .expect(&format!("create pool {pool}"), &[200, 201])?;
    }

    let list = Arc::new(plan(seed, jobs, a.cache_keys, a.distinct_keys, &nodes));
    say.say(format!(
        "running {} jobs twice at once ({} clients each): from pool {POOL} by cache key, \
         and on a random free member of {RANDOM} (seed {seed})",
        jobs, a.ci_clients
    ));
    let members = Arc::new(Mutex::new(RandomMembers {
        busy: vec![false; random.len()],
        last_key: vec![None; random.len()],
        names: random,
    }));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for arm in [Arm::Pool, Arm::Random] {
        let next = Arc::new(AtomicUsize::new(0));
        for c in 0..a.ci_clients {
            let (http, list, next, members) = (
                http.clone(),
                Arc::clone(&list),
                Arc::clone(&next),
                Arc::clone(&members),
            );
            let timeout = a.cycle_timeout;
            tasks.spawn(async move {
                let mut out = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = list.get(i) else { break };
                    let alloc = format!(
                        "ci-{}-c{c}-{i}",
                        if arm == Arm::Pool { "pool" } else { "random" }
                    );
                    let r = match arm {
                        Arm::Pool => pool_job(&http, job, &alloc, bind, timeout).await,
                        Arm::Random => {
                            random_job(&http, &members, job, &alloc, bind, timeout).await
                        }
                    };
                    out.push(
                        r.with_context(|| format!("job {alloc} (key {}, {})", job.key, job.node)),
                    );
                }
                out
            });
        }
    }
    let mut samples = Vec::new();
    let mut errors = Vec::new();
    while let Some(done) = tasks.join_next().await {
        for r in done.context("a client of the CI jobs panicked")? {
            match r {
                Ok(s) => samples.push(s),
                Err(e) => errors.push(format!("{e:#}")),
            }
        }
    }
    let jobs_took = started.elapsed();
    // The pools go: what their nodes kept staged is taken down, as nothing lingers after
    // the run.
    for pool in [POOL, RANDOM] {
        http.delete(&format!("/v1/pools/{pool}"))
            .await?
            .expect(&format!("delete pool {pool}"), &[204])?;
    }

    say.say(format!(
        "seeding volume {} and snapshot {}",
        fresh::SEED,
        fresh::SNAPSHOT
    ));
    let snapshot_id = fresh::seed(&http, &nodes[0], bind, a.cycle_timeout).await?;
    say.say(format!(
        "running {} jobs on fresh volumes from the snapshot, one at a time",
        a.fresh_jobs
    ));
    let mut fresh_samples = Vec::new();
    for i in 0..a.fresh_jobs {
        let node = &nodes[i as usize % nodes.len()];
        match fresh::job(&http, &format!("ci-fresh-{i}"), node, bind, a.cycle_timeout).await {
            Ok(s) => fresh_samples.push(s),
            Err(e) => errors.push(format!("fresh job {i}: {e:#}")),
        }
    }
    let socket = &run
        .full
        .as_ref()
        .context("the CI scenario runs in full mode")?
        .nodes[0]
        .socket;
    say.say(format!(
        "floor: {} times the eight plugin calls of a fresh job, straight on node-1's plugin",
        a.fresh_jobs
    ));
    let csi_floor =
        fresh::floor(socket, &snapshot_id, &root.join("ci-floor"), a.fresh_jobs).await?;
    let left = leftover_job_volumes(&http).await?;
    errors.extend(
        left.iter()
            .map(|v| format!("per-job volume {v} not deleted")),
    );
    if let Some(full) = run.full.as_mut() {
        errors.extend(full.exited());
    }
    Ok(report::assemble(
        cfg,
        report::Parts {
            seed,
            jobs,
            floor,
            samples,
            jobs_took,
            fresh: fresh_samples,
            csi_floor: Figure::of(csi_floor),
            errors,
        },
    ))
}

/// Per-job volumes csivol still has.
async fn leftover_job_volumes(http: &Http) -> anyhow::Result<Vec<String>> {
    let volumes: Vec<api::Volume> = http.get("/v1/volumes").await?.json()?;
    Ok(volumes
        .into_iter()
        .filter(|v| v.job.is_some())
        .map(|v| v.name)
        .collect())
}

/// A job of the pool arm: the server chooses the member by the job's key.
async fn pool_job(
    http: &Http,
    job: &Job,
    alloc: &str,
    bind: bool,
    timeout: Duration,
) -> anyhow::Result<Sample> {
    let start = Instant::now();
    let deadline = jobs::deadline(timeout);
    let req = PoolClaimRequest {
        claim: ClaimRequest::new(alloc, &job.node, ClaimMode::Write),
        cache_key: Some(job.key.clone()),
        restore_keys: Vec::new(),
    };
    let r = http
        .post(&http.held(&format!("/v1/pools/{POOL}/claims")), &req)
        .await?
        .expect("claim from the pool", &[201])?;
    let created: api::Claim = r.json()?;
    let choice = created
        .pool
        .as_ref()
        .map(|p| p.choice)
        .context("a pool claim's answer says nothing of its pool")?;
    let path = format!("/v1/volumes/{}/claims/{alloc}", created.volume);
    let claim = jobs::until_ready(http, &path, &r, deadline).await?;
    let claim_ready = start.elapsed();
    let found = jobs::write_key(bind, &claim, &job.key)?;
    let result = match (choice, found) {
        (PoolChoice::SameKey, Some(found)) if found != job.key => Err(anyhow::anyhow!(
            "{} was chosen as warm for key {} but holds the data of key {found}",
            claim.volume,
            job.key
        )),
        (PoolChoice::SameKey, None) if bind => Err(anyhow::anyhow!(
            "{} was chosen as warm for key {} but holds no job's data",
            claim.volume,
            job.key
        )),
        _ => Ok(()),
    };
    jobs::release(http, &path, deadline).await?;
    result.map(|()| Sample {
        arm: Arm::Pool,
        choice,
        claim_ready,
    })
}

/// A job of the baseline: a free member picked at random, claimed by name.
async fn random_job(
    http: &Http,
    members: &Mutex<RandomMembers>,
    job: &Job,
    alloc: &str,
    bind: bool,
    timeout: Duration,
) -> anyhow::Result<Sample> {
    let (i, volume, last_key) = {
        let mut m = members
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let free: Vec<usize> = (0..m.names.len()).filter(|i| !m.busy[*i]).collect();
        anyhow::ensure!(
            !free.is_empty(),
            "no free member: more clients than members"
        );
        let i = free[rand::random_range(0..free.len())];
        m.busy[i] = true;
        (i, m.names[i].clone(), m.last_key[i].clone())
    };
    let r = random_claim(
        http,
        &volume,
        job,
        alloc,
        bind,
        timeout,
        last_key.as_deref(),
    )
    .await;
    let mut m = members
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    m.busy[i] = false;
    if r.is_ok() {
        m.last_key[i] = Some(job.key.clone());
    }
    r
}

async fn random_claim(
    http: &Http,
    volume: &str,
    job: &Job,
    alloc: &str,
    bind: bool,
    timeout: Duration,
    last_key: Option<&str>,
) -> anyhow::Result<Sample> {
    // Read before the clock starts: whether the member is still staged on the job's node.
    let pool: api::Pool = http
        .get(&format!("/v1/pools/{RANDOM}"))
        .await?
        .expect("the baseline's pool", &[200])?
        .json()?;
    let staged_here = pool
        .members
        .iter()
        .any(|m| m.volume == volume && m.staged_on.contains(&job.node));
    let choice = if last_key == Some(job.key.as_str()) {
        PoolChoice::SameKey
    } else if staged_here {
        PoolChoice::StagedHere
    } else {
        PoolChoice::Cold
    };
    let start = Instant::now();
    let deadline = jobs::deadline(timeout);
    let claims = format!("/v1/volumes/{volume}/claims");
    let req = ClaimRequest::new(alloc, &job.node, ClaimMode::Write);
    let r = http
        .post(&http.held(&claims), &req)
        .await?
        .expect(&format!("claim {volume}"), &[201])?;
    let path = format!("{claims}/{alloc}");
    let claim = jobs::until_ready(http, &path, &r, deadline).await?;
    let claim_ready = start.elapsed();
    let found = jobs::write_key(bind, &claim, &job.key)?;
    jobs::release(http, &path, deadline).await?;
    if bind && found.as_deref() != last_key {
        anyhow::bail!(
            "{volume} holds the data of key {found:?}, but its last job had key {last_key:?}"
        );
    }
    Ok(Sample {
        arm: Arm::Random,
        choice,
        claim_ready,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_the_seeds_and_zipf_distributed() {
        let nodes: Vec<String> = (1..=5).map(|i| format!("node-{i}")).collect();
        let a = plan(7, 2000, 12, false, &nodes);
        let b = plan(7, 2000, 12, false, &nodes);
        let keys = |p: &[Job]| p.iter().map(|j| j.key.clone()).collect::<Vec<_>>();
        assert_eq!(keys(&a), keys(&b));
        assert_ne!(keys(&a), keys(&plan(8, 2000, 12, false, &nodes)));
        let count = |k: &str| a.iter().filter(|j| j.key == k).count();
        // Weights 1/k over 12 keys: the first has 1/H(12) = 32% of the jobs, the second
        // half of that, the last 1/12 of it.
        assert!(
            (540..740).contains(&count("branch-01")),
            "{}",
            count("branch-01")
        );
        assert!(
            (240..400).contains(&count("branch-02")),
            "{}",
            count("branch-02")
        );
        assert!(
            (20..90).contains(&count("branch-12")),
            "{}",
            count("branch-12")
        );
        assert!(nodes.iter().all(|n| a.iter().any(|j| &j.node == n)));
        let d = plan(7, 2000, 12, true, &nodes);
        assert!(
            d.iter()
                .all(|j| j.key.ends_with("-branch") && j.key.len() == 8)
        );
        assert_eq!(
            d.iter().filter(|j| j.key == "a-branch").count(),
            count("branch-01")
        );
    }
}
