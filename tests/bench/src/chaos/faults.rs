//! The faults the campaign injects at random moments: kill -9 of a server, an agent or a
//! plugin (restarted after a random pause), an agent stopped across the heartbeat TTL and
//! continued, a server's disk filled and freed; in HA mode also a server stopped and
//! continued, an etcd member killed or stopped, and partitions: a server cut off from
//! etcd, a member cut off from the rest, a node cut off from one server. Several lanes
//! inject at once, so faults overlap; a lane takes a fault's target group for the fault's
//! time (one server at a time, one etcd member at a time, one fault per node), so that a
//! quorum of etcd and one server stay whole while everything else may be down together.
//!
//! The rule, by construction: a quorum of etcd members is up throughout. An etcd fault's
//! time lasts until the member it hit answers its health check again (back in the quorum,
//! caught up with the leader), not only until it was restarted, continued or reconnected;
//! only then may another member be hit. The product's promises hold while a quorum is up
//! (nothing acknowledged lost, no request failed for a member's death); what a server does
//! without a quorum (refuse writes as unavailable, acknowledge nothing) is tested apart,
//! in the server's own tests.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::cluster::{ChaosCluster, etcd_host, server_host};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    KillServer,
    KillAgent,
    KillPlugin,
    StopAgent,
    DiskFull,
    StopServer,
    KillEtcd,
    StopEtcd,
    ServerCutFromEtcd,
    EtcdMemberCutOff,
    NodeCutFromServer,
}

/// What a fault acts on, as far as other lanes must keep off it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Group {
    Servers,
    Etcd,
    Node(usize),
}

impl Fault {
    /// The faults of the one-server campaign.
    pub const SINGLE: [Fault; 5] = [
        Self::KillServer,
        Self::KillAgent,
        Self::KillPlugin,
        Self::StopAgent,
        Self::DiskFull,
    ];
    /// HA mode's: those, and the ones of several servers over etcd.
    pub const HA: [Fault; 11] = [
        Self::KillServer,
        Self::KillAgent,
        Self::KillPlugin,
        Self::StopAgent,
        Self::DiskFull,
        Self::StopServer,
        Self::KillEtcd,
        Self::StopEtcd,
        Self::ServerCutFromEtcd,
        Self::EtcdMemberCutOff,
        Self::NodeCutFromServer,
    ];

    pub fn describe(self) -> &'static str {
        match self {
            Self::KillServer => "kill -9 server",
            Self::KillAgent => "kill -9 agent",
            Self::KillPlugin => "kill -9 plugin",
            Self::StopAgent => "agent stopped across the TTL",
            Self::DiskFull => "server disk full",
            Self::StopServer => "server stopped (SIGSTOP)",
            Self::KillEtcd => "kill -9 etcd member",
            Self::StopEtcd => "etcd member stopped (SIGSTOP)",
            Self::ServerCutFromEtcd => "server cut off from etcd",
            Self::EtcdMemberCutOff => "etcd member cut off",
            Self::NodeCutFromServer => "node cut off from a server",
        }
    }

    fn group(self, node: usize) -> Group {
        match self {
            Self::KillServer | Self::DiskFull | Self::StopServer | Self::ServerCutFromEtcd => {
                Group::Servers
            }
            Self::KillEtcd | Self::StopEtcd | Self::EtcdMemberCutOff => Group::Etcd,
            Self::KillAgent | Self::KillPlugin | Self::StopAgent | Self::NodeCutFromServer => {
                Group::Node(node)
            }
        }
    }
}

/// What the lanes share.
struct Lanes<'a> {
    cluster: &'a tokio::sync::Mutex<ChaosCluster>,
    busy: Mutex<BTreeSet<Group>>,
    counts: Mutex<BTreeMap<Fault, u64>>,
    problems: Mutex<Vec<String>>,
    kinds: &'static [Fault],
    ttl: Duration,
    say: &'a (dyn Fn(String) + Sync),
}

/// How long a member hit by a fault may take to be healthy again after its healing.
const ETCD_REJOIN: Duration = Duration::from_secs(60);

/// The most lanes [`inject`] runs.
pub const MAX_LANES: u32 = 3;

/// Injects faults on `lanes` lanes at once (at most [`MAX_LANES`]) until `stop` says so;
/// returns how many of each
/// kind, and what went wrong beyond the faults themselves (a server that did not come
/// back is one).
pub async fn inject(
    cluster: &tokio::sync::Mutex<ChaosCluster>,
    seed: u64,
    lanes: u32,
    ttl: Duration,
    stop: &tokio::sync::watch::Receiver<bool>,
    say: &(dyn Fn(String) + Sync),
) -> (BTreeMap<Fault, u64>, Vec<String>) {
    let kinds: &'static [Fault] = if cluster.lock().await.ha.is_some() {
        &Fault::HA
    } else {
        &Fault::SINGLE
    };
    let shared = Lanes {
        cluster,
        busy: Mutex::new(BTreeSet::new()),
        counts: Mutex::new(kinds.iter().map(|f| (*f, 0)).collect()),
        problems: Mutex::new(Vec::new()),
        kinds,
        ttl,
        say,
    };
    // Each lane ends only after its fault's healing step.
    let run = |l: u32| {
        let rng = StdRng::seed_from_u64(seed.wrapping_add(u64::from(l)));
        lane(&shared, rng, stop.clone(), l < lanes)
    };
    tokio::join!(run(0), run(1), run(2));
    let counts = shared.counts.into_inner().expect("counts");
    let problems = shared.problems.into_inner().expect("problems");
    (counts, problems)
}

fn pause(rng: &mut StdRng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..hi))
}

async fn lane(
    shared: &Lanes<'_>,
    mut rng: StdRng,
    stop: tokio::sync::watch::Receiver<bool>,
    active: bool,
) {
    while active && !*stop.borrow() {
        tokio::time::sleep(pause(&mut rng, 300, 2500)).await;
        if *stop.borrow() {
            break;
        }
        let fault = shared.kinds[rng.random_range(0..shared.kinds.len())];
        let (nodes, servers) = {
            let c = shared.cluster.lock().await;
            (c.nodes.len(), c.servers.len())
        };
        let node = rng.random_range(0..nodes);
        let server = rng.random_range(0..servers);
        let member = rng.random_range(0..3);
        let group = fault.group(node);
        if !shared.busy.lock().expect("busy").insert(group.clone()) {
            // Another lane has that target now: pick again later.
            continue;
        }
        let name = match group {
            Group::Servers => server_host(server),
            Group::Etcd => etcd_host(member),
            Group::Node(i) => format!("node-{}", i + 1),
        };
        let result = one(shared, fault, node, server, member, &mut rng).await;
        shared.busy.lock().expect("busy").remove(&group);
        *shared
            .counts
            .lock()
            .expect("counts")
            .entry(fault)
            .or_default() += 1;
        match result {
            Ok(()) => (shared.say)(format!("fault: {} ({name})", fault.describe())),
            Err(e) => {
                // Free the disk whatever happened: the next fault must not start on a full one.
                shared.cluster.lock().await.free_disk();
                let line = format!("{} ({name}): {e:#}", fault.describe());
                (shared.say)(format!("fault went wrong: {line}"));
                shared.problems.lock().expect("problems").push(line);
            }
        }
    }
}

/// One fault, from its start to its healing; the cluster is locked only while a step
/// acts, so other lanes' faults fall meanwhile.
async fn one(
    shared: &Lanes<'_>,
    fault: Fault,
    node: usize,
    server: usize,
    member: usize,
    rng: &mut StdRng,
) -> anyhow::Result<()> {
    let c = shared.cluster;
    let ttl = shared.ttl;
    let net = c.lock().await.ha.as_ref().map(|h| Arc::clone(&h.net));
    let etcd_hosts: Vec<String> = (0..3).map(etcd_host).collect();
    let etcd_refs: Vec<&str> = etcd_hosts.iter().map(String::as_str).collect();
    match fault {
        Fault::KillServer => c.lock().await.servers[server].kill_and_restart().await?,
        Fault::KillAgent => {
            c.lock().await.kill_agent(node);
            tokio::time::sleep(pause(rng, 0, 1500)).await;
            c.lock().await.start_agent(node)?;
        }
        Fault::KillPlugin => {
            c.lock().await.kill_plugin(node);
            tokio::time::sleep(pause(rng, 0, 1500)).await;
            c.lock().await.start_plugin(node).await?;
        }
        Fault::StopAgent => {
            c.lock().await.pause_agent(node, true);
            tokio::time::sleep(ttl + pause(rng, 200, 3000)).await;
            c.lock().await.pause_agent(node, false);
        }
        Fault::DiskFull => {
            c.lock().await.fill_disk(server)?;
            tokio::time::sleep(pause(rng, 500, 4000)).await;
            c.lock().await.free_disk();
        }
        Fault::StopServer => {
            if !c.lock().await.pause_server(server, true) {
                anyhow::bail!("it was not running: a restart before had failed");
            }
            tokio::time::sleep(pause(rng, 500, 4000)).await;
            c.lock().await.pause_server(server, false);
        }
        Fault::KillEtcd => {
            if let Some(ha) = c.lock().await.ha.as_mut() {
                ha.etcd.kill(member);
            }
            tokio::time::sleep(pause(rng, 0, 3000)).await;
            if let Some(ha) = c.lock().await.ha.as_mut() {
                ha.etcd.restart(member);
            }
        }
        Fault::StopEtcd => {
            c.lock().await.pause_etcd(member, true);
            tokio::time::sleep(pause(rng, 500, 4000)).await;
            c.lock().await.pause_etcd(member, false);
        }
        Fault::ServerCutFromEtcd => {
            let net = net.expect("HA mode");
            let host = server_host(server);
            net.isolate(&host, &etcd_refs);
            // Past the leader's lease, so that a leader cut off must step down.
            tokio::time::sleep(Duration::from_secs(2) + pause(rng, 500, 4000)).await;
            for e in &etcd_refs {
                net.mend(&host, e);
            }
        }
        Fault::EtcdMemberCutOff => {
            let net = net.expect("HA mode");
            let host = etcd_host(member);
            let mut others: Vec<String> =
                etcd_hosts.iter().filter(|h| **h != host).cloned().collect();
            others.extend((0..c.lock().await.servers.len()).map(server_host));
            let others: Vec<&str> = others.iter().map(String::as_str).collect();
            net.isolate(&host, &others);
            tokio::time::sleep(pause(rng, 1000, 5000)).await;
            for o in &others {
                net.mend(&host, o);
            }
        }
        Fault::NodeCutFromServer => {
            let net = net.expect("HA mode");
            let (a, b) = (format!("node-{}", node + 1), server_host(server));
            net.cut(&a, &b);
            // Across the heartbeat TTL: the agent must move to the other server in time.
            tokio::time::sleep(ttl + pause(rng, 500, 3000)).await;
            net.mend(&a, &b);
        }
    }
    if fault.group(node) == Group::Etcd {
        // The lane holds the members until the one it hit is back in the quorum.
        ChaosCluster::etcd_member_healthy(c, member, ETCD_REJOIN).await?;
    }
    Ok(())
}
