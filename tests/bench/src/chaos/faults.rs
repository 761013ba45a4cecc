//! The faults the campaign injects, one at a time at random moments: kill -9 of the server,
//! an agent or a plugin (restarted after a random pause), an agent stopped across the
//! heartbeat TTL and continued, and the server's disk filled and freed.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
use serde::Serialize;

use super::cluster::ChaosCluster;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    KillServer,
    KillAgent,
    KillPlugin,
    StopAgent,
    DiskFull,
}

impl Fault {
    pub const ALL: [Fault; 5] = [
        Self::KillServer,
        Self::KillAgent,
        Self::KillPlugin,
        Self::StopAgent,
        Self::DiskFull,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Self::KillServer => "kill -9 server",
            Self::KillAgent => "kill -9 agent",
            Self::KillPlugin => "kill -9 plugin",
            Self::StopAgent => "agent stopped across the TTL",
            Self::DiskFull => "server disk full",
        }
    }
}

/// Injects faults until `stop` says so; returns how many of each kind, and what went
/// wrong beyond the faults themselves (a server that did not come back is one).
pub async fn inject(
    cluster: &mut ChaosCluster,
    rng: &mut StdRng,
    ttl: Duration,
    stop: &tokio::sync::watch::Receiver<bool>,
    say: &dyn Fn(String),
) -> (BTreeMap<Fault, u64>, Vec<String>) {
    let mut counts: BTreeMap<Fault, u64> = Fault::ALL.iter().map(|f| (*f, 0)).collect();
    let mut problems = Vec::new();
    let pause =
        |rng: &mut StdRng, lo: u64, hi: u64| Duration::from_millis(rng.random_range(lo..hi));
    while !*stop.borrow() {
        tokio::time::sleep(pause(rng, 300, 2500)).await;
        if *stop.borrow() {
            break;
        }
        let fault = Fault::ALL[rng.random_range(0..Fault::ALL.len())];
        let node = rng.random_range(0..cluster.nodes.len());
        let name = match fault {
            Fault::KillServer | Fault::DiskFull => "server".to_owned(),
            _ => cluster.nodes[node].name.clone(),
        };
        let result: anyhow::Result<()> = async {
            match fault {
                Fault::KillServer => cluster.server.kill_and_restart().await?,
                Fault::KillAgent => {
                    cluster.kill_agent(node);
                    tokio::time::sleep(pause(rng, 0, 1500)).await;
                    cluster.start_agent(node)?;
                }
                Fault::KillPlugin => {
                    cluster.kill_plugin(node);
                    tokio::time::sleep(pause(rng, 0, 1500)).await;
                    cluster.start_plugin(node).await?;
                }
                Fault::StopAgent => {
                    cluster.pause_agent(node, true);
                    tokio::time::sleep(ttl + pause(rng, 200, 3000)).await;
                    cluster.pause_agent(node, false);
                }
                Fault::DiskFull => {
                    cluster.fill_disk()?;
                    tokio::time::sleep(pause(rng, 500, 4000)).await;
                    cluster.free_disk();
                }
            }
            Ok(())
        }
        .await;
        *counts.entry(fault).or_default() += 1;
        match result {
            Ok(()) => say(format!("fault: {} ({name})", fault.describe())),
            Err(e) => {
                // Free the disk whatever happened: the next fault must not start on a full one.
                cluster.free_disk();
                problems.push(format!("{} ({name}): {e:#}", fault.describe()));
                say(format!(
                    "fault: {} ({name}) went wrong: {e:#}",
                    fault.describe()
                ));
            }
        }
    }
    (counts, problems)
}
