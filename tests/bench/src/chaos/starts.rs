//! SIGTERM while a daemon starts: a server or an agent stopped as a service manager stops
//! it (SIGTERM), started again, and stopped again while it starts, then started for good.
//! The second signal falls at a random moment after the daemon listens for it (which no
//! process can do before its first step), within as long as its last start took (timed
//! on the last start for good), so that most fall while it starts. Each stop must be taken
//! in order: the daemon exits 0 (not killed by the signal's default action, not an error)
//! within its time, and the run goes on.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use csivol_api::{Node, NodeStatus};
use rand::Rng;
use rand::rngs::StdRng;

use super::cluster::ChaosCluster;
use super::faults::{Found, STOP_TIMEOUT};
use crate::client::Http;
use crate::procs::{self, Interrupted};

/// A moment within `took`, at random.
fn within(rng: &mut StdRng, took: Duration) -> Duration {
    let ms = took.as_millis().max(1) as u64;
    Duration::from_millis(rng.random_range(0..=ms))
}

/// Server `i`: stopped, started and stopped while it starts, started again.
pub async fn server(
    cluster: &tokio::sync::Mutex<ChaosCluster>,
    i: usize,
    rng: &mut StdRng,
    found: &mut Found,
) -> anyhow::Result<()> {
    let mut c = cluster.lock().await;
    let delay = within(rng, c.start_times.server);
    let s = &mut c.servers[i];
    if !s.running() {
        anyhow::bail!("it was not running: a restart before had failed");
    }
    let name = format!("server {}", i + 1);
    judge(&name, "stopped", s.terminate(STOP_TIMEOUT).await, found);
    let Interrupted { status, complete } = s.interrupt_start(delay, STOP_TIMEOUT).await?;
    found.notes.push(format!(
        "server stopped {} its start was complete",
        if complete { "after" } else { "before" }
    ));
    judge(&name, "stopped while it started", status, found);
    let took = s.start_again_timed().await?;
    c.start_times.server = took;
    Ok(())
}

/// Node `i`'s agent: stopped, started and stopped while it starts, started again.
pub async fn agent(
    cluster: &tokio::sync::Mutex<ChaosCluster>,
    http: &Http,
    i: usize,
    rng: &mut StdRng,
    found: &mut Found,
) -> anyhow::Result<()> {
    let (name, delay) = {
        let c = cluster.lock().await;
        (c.nodes[i].name.clone(), within(rng, c.start_times.agent))
    };
    let who = format!("the agent of {name}");
    let status = cluster.lock().await.terminate_agent(i, STOP_TIMEOUT).await;
    judge(&who, "stopped", status, found);
    // Stopped in order, the node is `stopped` as of its stop: a registration changes that.
    let before = stop_of(http, &name).await;
    let Interrupted { status, .. } = cluster
        .lock()
        .await
        .interrupt_agent_start(i, delay, STOP_TIMEOUT)
        .await?;
    judge(&who, "stopped while it started", status, found);
    if let (Some(before), Some(after)) = (before, stop_of(http, &name).await) {
        found.notes.push(format!(
            "agent stopped {} it registered",
            if before == after { "before" } else { "after" }
        ));
    }
    let pid = {
        let mut c = cluster.lock().await;
        c.start_agent(i)?;
        c.agent_pid(i)
    };
    // Timed from its listening for SIGTERM to the server's having it ready again.
    if let Some(pid) = pid
        && let Some(took) = registration_time(http, &name, pid).await
    {
        cluster.lock().await.start_times.agent = took;
    }
    Ok(())
}

/// The node's status and the time of its last planned stop, as the server has them.
async fn stop_of(http: &Http, node: &str) -> Option<(NodeStatus, Option<String>)> {
    let r = http.get(&format!("/v1/nodes/{node}")).await.ok()?;
    let n = r.json::<Node>().ok()?;
    Some((n.status, n.stopped.map(|s| s.at)))
}

/// How long the agent `pid` took from listening for SIGTERM to its node being ready
/// again; `None` if either was not seen within the stop timeout.
async fn registration_time(http: &Http, node: &str, pid: u32) -> Option<Duration> {
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !procs::catches_term_now(pid) {
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = Instant::now();
    loop {
        if let Some((NodeStatus::Ready, _)) = stop_of(http, node).await {
            return Some(first.elapsed());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A daemon stopped by SIGTERM exits 0 within its time; anything else is a violation.
pub(super) fn judge(who: &str, how: &str, status: Option<ExitStatus>, found: &mut Found) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) if s.success() => {}
        Some(s) => found.violations.push(format!(
            "{who}, {how} by SIGTERM, exited with {}",
            match s.signal() {
                Some(sig) => format!("signal {sig} (killed by it, not stopped in order)"),
                None => format!("status {}", s.code().unwrap_or(-1)),
            }
        )),
        None => found.violations.push(format!(
            "{who}, {how} by SIGTERM, had not exited {}s later (killed)",
            STOP_TIMEOUT.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn only_an_exit_0_is_a_stop_in_order() {
        let mut found = Found::default();
        judge("a", "stopped", Some(ExitStatus::from_raw(0)), &mut found);
        assert!(found.violations.is_empty());
        judge("b", "stopped", Some(ExitStatus::from_raw(15)), &mut found);
        judge(
            "c",
            "stopped",
            Some(ExitStatus::from_raw(1 << 8)),
            &mut found,
        );
        judge("d", "stopped", None, &mut found);
        assert_eq!(found.violations.len(), 3, "{:?}", found.violations);
        assert!(found.violations[0].contains("signal 15"), "{found:?}");
        assert!(found.violations[1].contains("status 1"), "{found:?}");
        assert!(found.violations[2].contains("had not exited"), "{found:?}");
    }
}
