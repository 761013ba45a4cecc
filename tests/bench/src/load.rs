//! The load: concurrent clients doing claim → ready → release → gone cycles through the
//! HTTP API, with the calls the CLI makes off a terminal (`csivol claim --wait`, `csivol
//! release --wait` in a CI job): the claim's POST and the release's DELETE are held
//! (`?wait=`) until the claim changes again, and blocking queries follow it from there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState};

use super::client::Http;

/// One completed cycle.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The node the claim went to.
    pub node: String,
    /// From sending the claim until the client saw it `ready`.
    pub claim_ready: Duration,
    /// From sending the release until the client saw the claim gone.
    pub release_gone: Duration,
}

/// How a cycle ended.
#[derive(Debug)]
pub enum Outcome {
    Done(Sample),
    /// The claim was refused or never answered: an error, but nothing to account for.
    NotAcknowledged(String),
    /// The claim was acknowledged and then not seen through to ready and gone.
    Lost(String),
}

/// Where a cycle got to, for the kill -9 check: which requests were acknowledged.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub claim_acknowledged: bool,
    /// The release was sent: the claim may be gone even if the answer never came.
    pub release_sent: bool,
    pub release_acknowledged: bool,
}

/// One claim's full cycle. `progress` records acknowledgements as they arrive.
pub async fn cycle(
    http: &Http,
    volume: &str,
    node: &str,
    alloc: &str,
    timeout: Duration,
    progress: &mut Progress,
) -> Outcome {
    let start = Instant::now();
    let deadline = start + timeout;
    let req = ClaimRequest::new(alloc, node, ClaimMode::Write);
    let claims = format!("/v1/volumes/{volume}/claims");
    let created = match http.post(&http.held(&claims), &req).await {
        Ok(r) if r.status == 201 => r,
        Ok(r) => {
            return Outcome::NotAcknowledged(format!(
                "claim {volume}/{alloc} refused: HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        Err(e) => return Outcome::NotAcknowledged(format!("claim {volume}/{alloc}: {e:#}")),
    };
    progress.claim_acknowledged = true;
    let claim: api::Claim = match created.json() {
        Ok(c) => c,
        Err(e) => return Outcome::Lost(format!("claim {volume}/{alloc}: {e:#}")),
    };
    let path = format!("{claims}/{alloc}");
    let mut index = created.index.unwrap_or(claim.index);
    let (mut state, mut error) = (claim.state, claim.error);
    while state != ClaimState::Ready {
        if matches!(state, ClaimState::Failed | ClaimState::Blocked) {
            return Outcome::Lost(format!(
                "claim {volume}/{alloc} on {node} became {state}: {}",
                error.unwrap_or_default()
            ));
        }
        if Instant::now() >= deadline {
            return Outcome::Lost(format!(
                "claim {volume}/{alloc} on {node} not ready after {timeout:?} (still {state})"
            ));
        }
        match watch(http, &path, index).await {
            Ok(Some((c, i))) => {
                index = i;
                (state, error) = (c.state, c.error);
            }
            Ok(None) => {
                return Outcome::Lost(format!(
                    "claim {volume}/{alloc} on {node} vanished before it was ready"
                ));
            }
            Err(e) => return Outcome::Lost(format!("claim {volume}/{alloc}: {e:#}")),
        }
    }
    let claim_ready = start.elapsed();

    let released = Instant::now();
    progress.release_sent = true;
    let mut gone = false;
    match http.delete(&http.held(&path)).await {
        Ok(r) if r.status == 202 => {
            progress.release_acknowledged = true;
            index = r.index.unwrap_or(index);
            let c: api::Claim = match r.json() {
                Ok(c) => c,
                Err(e) => return Outcome::Lost(format!("release of {volume}/{alloc}: {e:#}")),
            };
            if c.state != ClaimState::Releasing {
                return Outcome::Lost(format!(
                    "released claim {volume}/{alloc} on {node} became {}",
                    c.state
                ));
            }
        }
        // Held until the claim was gone.
        Ok(r) if r.status == 204 => {
            progress.release_acknowledged = true;
            gone = true;
        }
        Ok(r) => {
            return Outcome::Lost(format!(
                "release of {volume}/{alloc} refused: HTTP {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            ));
        }
        Err(e) => return Outcome::Lost(format!("release of {volume}/{alloc}: {e:#}")),
    }
    while !gone {
        if Instant::now() >= deadline {
            return Outcome::Lost(format!(
                "claim {volume}/{alloc} on {node} not gone {timeout:?} after the claim"
            ));
        }
        match watch(http, &path, index).await {
            Ok(Some((c, i))) => {
                index = i;
                if c.state != ClaimState::Releasing {
                    return Outcome::Lost(format!(
                        "released claim {volume}/{alloc} on {node} became {}",
                        c.state
                    ));
                }
            }
            Ok(None) => gone = true,
            Err(e) => return Outcome::Lost(format!("release of {volume}/{alloc}: {e:#}")),
        }
    }
    Outcome::Done(Sample {
        node: node.to_string(),
        claim_ready,
        release_gone: released.elapsed(),
    })
}

/// A blocking query on a claim: `None` once it is gone.
pub async fn watch(
    http: &Http,
    path: &str,
    index: u64,
) -> anyhow::Result<Option<(api::Claim, u64)>> {
    let r = http.get_blocking(path, index).await?;
    match r.status {
        200 => {
            let c: api::Claim = r.json()?;
            Ok(Some((c, r.index.unwrap_or(index))))
        }
        404 => Ok(None),
        s => anyhow::bail!("GET {path}: HTTP {s}: {}", String::from_utf8_lossy(&r.body)),
    }
}

/// What the clients do.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub concurrency: u32,
    pub duration: Duration,
    pub cycle_timeout: Duration,
    /// The volumes to cycle; client `k` owns every `concurrency`-th one from `k`, so claims
    /// of different clients never meet on a volume.
    pub volumes: Arc<Vec<String>>,
    /// The nodes claims go to, picked at random per cycle.
    pub nodes: Arc<Vec<String>>,
    /// Alloc names are `<prefix>-c<client>-<n>`.
    pub alloc_prefix: String,
}

/// What the clients did.
#[derive(Debug, Default)]
pub struct LoadResult {
    pub samples: Vec<Sample>,
    pub acknowledged: u64,
    pub lost: Vec<String>,
    pub errors: Vec<String>,
    /// From the start until the last client finished its last cycle.
    pub elapsed: Duration,
}

/// A client stops after this many errors, so that a broken server does not flood the run.
const MAX_CLIENT_ERRORS: usize = 5;

/// Runs the clients for `spec.duration`: they start cycles until then and finish the one
/// they are in.
pub async fn run(http: &Http, spec: &LoadSpec) -> LoadResult {
    let start = Instant::now();
    let stop_at = start + spec.duration;
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..spec.concurrency as usize {
        let http = http.clone();
        let spec = spec.clone();
        tasks.spawn(async move {
            let mine: Vec<&String> = spec
                .volumes
                .iter()
                .skip(k)
                .step_by(spec.concurrency as usize)
                .collect();
            let mut out = LoadResult::default();
            let mut seq = 0u64;
            while Instant::now() < stop_at && out.errors.len() < MAX_CLIENT_ERRORS {
                let volume = mine[rand::random_range(0..mine.len())];
                let node = &spec.nodes[rand::random_range(0..spec.nodes.len())];
                let alloc = format!("{}-c{k}-{seq}", spec.alloc_prefix);
                seq += 1;
                let mut progress = Progress::default();
                match cycle(
                    &http,
                    volume,
                    node,
                    &alloc,
                    spec.cycle_timeout,
                    &mut progress,
                )
                .await
                {
                    Outcome::Done(s) => {
                        out.acknowledged += 1;
                        out.samples.push(s);
                    }
                    Outcome::NotAcknowledged(e) => out.errors.push(e),
                    Outcome::Lost(e) => {
                        out.acknowledged += 1;
                        out.lost.push(e.clone());
                        out.errors.push(e);
                    }
                }
            }
            out
        });
    }
    let mut total = LoadResult::default();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(r) => {
                total.samples.extend(r.samples);
                total.acknowledged += r.acknowledged;
                total.lost.extend(r.lost);
                total.errors.extend(r.errors);
            }
            Err(e) => total.errors.push(format!("a client task failed: {e}")),
        }
    }
    total.elapsed = start.elapsed();
    total
}
