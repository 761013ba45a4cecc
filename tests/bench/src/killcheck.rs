//! The durability check: while clients are cycling claims, SIGKILL the server, start it
//! again on the same data dir and address, and check that every claim whose creation was
//! acknowledged is still there (and every acknowledged release still releasing or done),
//! then see each one through to gone.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use csivol_api::ClaimState;

use super::client::Http;
use super::load::{self, LoadSpec, Outcome, Progress};
use super::procs::Server;
use super::report::KillCheck;

/// A client's cycle in flight when the server died.
#[derive(Debug, Clone)]
struct InFlight {
    volume: String,
    alloc: String,
    progress: Progress,
    /// Why the cycle failed, when it failed before the server was killed.
    error: Option<String>,
}

/// Runs the clients for `before`, kills the server, restarts it and checks the claims.
/// Returns the figures and the problems found (each one a durability failure).
pub async fn run(
    http: &Http,
    server: &mut Server,
    spec: &LoadSpec,
    before: Duration,
    timeout: Duration,
) -> anyhow::Result<(KillCheck, Vec<String>)> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cycles = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let left: Arc<Mutex<Vec<InFlight>>> = Arc::default();
    let mut tasks = tokio::task::JoinSet::new();
    for k in 0..spec.concurrency as usize {
        let (http, spec) = (http.clone(), spec.clone());
        let (stop, cycles, left) = (Arc::clone(&stop), Arc::clone(&cycles), Arc::clone(&left));
        tasks.spawn(async move {
            let mine: Vec<&String> = spec
                .volumes
                .iter()
                .skip(k)
                .step_by(spec.concurrency as usize)
                .collect();
            let mut seq = 0u64;
            loop {
                let volume = mine[rand::random_range(0..mine.len())];
                let node = &spec.nodes[rand::random_range(0..spec.nodes.len())];
                let alloc = format!("{}-c{k}-{seq}", spec.alloc_prefix);
                seq += 1;
                let mut progress = Progress::default();
                let outcome = load::cycle(
                    &http,
                    volume,
                    node,
                    &alloc,
                    spec.cycle_timeout,
                    &mut progress,
                )
                .await;
                let failure = match outcome {
                    Outcome::Done(_) => {
                        cycles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        continue;
                    }
                    Outcome::NotAcknowledged(e) | Outcome::Lost(e) => e,
                };
                // The server goes away only after `stop`: a failure before it is an error
                // of its own, which also ends this client.
                let killed = stop.load(std::sync::atomic::Ordering::Relaxed);
                left.lock().expect("lock").push(InFlight {
                    volume: volume.clone(),
                    alloc,
                    progress,
                    error: (!killed).then_some(failure),
                });
                return;
            }
        });
    }
    tokio::time::sleep(before).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let cycles_before_kill = cycles.load(std::sync::atomic::Ordering::Relaxed);
    let killed = Instant::now();
    server.proc.kill();
    // Every client's request in flight fails now; each records where it was and stops.
    let drained = tokio::time::timeout(timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
        anyhow::bail!("clients did not notice the killed server within {timeout:?}");
    }
    server
        .kill_and_restart()
        .await
        .context("failed to restart the server after kill -9")?;
    let restart_s = killed.elapsed().as_secs_f64();

    let left = std::mem::take(&mut *left.lock().expect("lock"));
    let mut problems = Vec::new();
    let mut acknowledged = 0;
    let mut survived = 0;
    let mut release_undone = 0;
    let mut gone_after_release = 0;
    let deadline = Instant::now() + timeout;
    for f in &left {
        if let Some(e) = &f.error {
            problems.push(format!("before the kill: {e}"));
        }
        let path = format!("/v1/volumes/{}/claims/{}", f.volume, f.alloc);
        let found = load::watch(http, &path, 0).await?;
        let p = &f.progress;
        if p.claim_acknowledged {
            acknowledged += 1;
            match (&found, p.release_sent, p.release_acknowledged) {
                // Not released: it must be there.
                (Some(_), false, _) => survived += 1,
                (None, false, _) => problems.push(format!(
                    "the acknowledged claim {}/{} is gone after kill -9",
                    f.volume, f.alloc
                )),
                // Released (perhaps without an answer): gone is fine, and an acknowledged
                // release must not come back as anything but releasing.
                (None, true, _) => {
                    survived += 1;
                    gone_after_release += 1;
                }
                (Some((c, _)), true, acked) => {
                    survived += 1;
                    if acked && c.state != ClaimState::Releasing {
                        release_undone += 1;
                        problems.push(format!(
                            "the acknowledged release of {}/{} is undone: the claim is {} after kill -9",
                            f.volume, f.alloc, c.state
                        ));
                    }
                }
            }
        }
        // See every claim that exists through to gone, acknowledged or not.
        if let Some((c, index)) = found
            && let Err(e) = finish(http, &path, c.state, index, deadline).await
        {
            problems.push(format!(
                "claim {}/{} after the restart: {e:#}",
                f.volume, f.alloc
            ));
        }
    }
    Ok((
        KillCheck {
            acknowledged,
            survived,
            gone_after_release,
            release_undone,
            cycles_before_kill,
            restart_s,
        },
        problems,
    ))
}

/// Waits for a claim to be ready (unless already releasing), releases it, waits until gone.
async fn finish(
    http: &Http,
    path: &str,
    mut state: ClaimState,
    mut index: u64,
    deadline: Instant,
) -> anyhow::Result<()> {
    while !matches!(state, ClaimState::Ready | ClaimState::Releasing) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "not ready in time (still {state})"
        );
        match load::watch(http, path, index).await? {
            Some((c, i)) => (state, index) = (c.state, i),
            None => return Ok(()),
        }
        anyhow::ensure!(
            !matches!(state, ClaimState::Failed | ClaimState::Blocked),
            "the claim became {state}"
        );
    }
    if state == ClaimState::Ready {
        let r = http.delete(path).await?.expect("release", &[202])?;
        index = r.index.unwrap_or(index);
    }
    loop {
        anyhow::ensure!(Instant::now() < deadline, "not gone in time");
        match load::watch(http, path, index).await? {
            Some((_, i)) => index = i,
            None => return Ok(()),
        }
    }
}
