//! The faults the campaign injects at random moments: kill -9 of a server, an agent or a
//! plugin (restarted after a random pause), an agent stopped across the heartbeat TTL and
//! continued, a server's disk filled and freed, a backup restored, a released claim's
//! request sent again late, a server or an agent stopped by SIGTERM while it starts; in HA
//! mode also a server stopped and continued, an etcd member killed or stopped, and
//! partitions: a server cut off from etcd, a member cut off from the rest, a node cut off
//! from one server. Several lanes inject at once, so faults overlap; a lane takes a
//! fault's target group for the fault's time (one server at a time, one etcd member at a
//! time, one fault per node), so that a quorum of etcd and one server stay whole while
//! everything else may be down together. The kinds are dealt from a shuffled deck, so
//! that each kind falls once before any falls a second time.
//!
//! The rule, by construction: a quorum of etcd members is up throughout. An etcd fault's
//! time lasts until the member it hit answers its health check again (back in the quorum,
//! caught up with the leader), not only until it was restarted, continued or reconnected;
//! only then may another member be hit. The product's promises hold while a quorum is up
//! (nothing acknowledged lost, no request failed for a member's death); what a server does
//! without a quorum (refuse writes as unavailable, acknowledge nothing) is tested apart,
//! in the server's own tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::cluster::{ChaosCluster, etcd_host, server_host};
use super::ledger::Ledger;
use super::{duplicate, restore, starts};
use crate::client::Http;
use crate::history::Recorder;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    KillServer,
    KillAgent,
    KillPlugin,
    StopAgent,
    DiskFull,
    /// A backup taken, later the servers stopped, the backup restored, the servers
    /// started again.
    Restore,
    /// A released claim's request sent again, with its key and without.
    DelayedDuplicate,
    /// A server restarted and stopped (SIGTERM) while it starts.
    TermServerStart,
    /// An agent restarted and stopped (SIGTERM) while it starts.
    TermAgentStart,
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
    /// The clients' requests (a delayed duplicate): one at a time.
    Requests,
}

impl Fault {
    /// The faults of the one-server campaign.
    pub const SINGLE: [Fault; 9] = [
        Self::KillServer,
        Self::KillAgent,
        Self::KillPlugin,
        Self::StopAgent,
        Self::DiskFull,
        Self::Restore,
        Self::DelayedDuplicate,
        Self::TermServerStart,
        Self::TermAgentStart,
    ];
    /// HA mode's: those, and the ones of several servers over etcd.
    pub const HA: [Fault; 15] = [
        Self::KillServer,
        Self::KillAgent,
        Self::KillPlugin,
        Self::StopAgent,
        Self::DiskFull,
        Self::Restore,
        Self::DelayedDuplicate,
        Self::TermServerStart,
        Self::TermAgentStart,
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
            Self::Restore => "backup restored",
            Self::DelayedDuplicate => "delayed duplicate claim",
            Self::TermServerStart => "SIGTERM during server start",
            Self::TermAgentStart => "SIGTERM during agent start",
            Self::StopServer => "server stopped (SIGSTOP)",
            Self::KillEtcd => "kill -9 etcd member",
            Self::StopEtcd => "etcd member stopped (SIGSTOP)",
            Self::ServerCutFromEtcd => "server cut off from etcd",
            Self::EtcdMemberCutOff => "etcd member cut off",
            Self::NodeCutFromServer => "node cut off from a server",
        }
    }

    /// Whether it needs HA mode (several servers over etcd, in network namespaces).
    pub fn ha_only(self) -> bool {
        !Self::SINGLE.contains(&self)
    }

    fn group(self, node: usize) -> Group {
        match self {
            Self::KillServer
            | Self::DiskFull
            | Self::StopServer
            | Self::ServerCutFromEtcd
            | Self::Restore
            | Self::TermServerStart => Group::Servers,
            Self::KillEtcd | Self::StopEtcd | Self::EtcdMemberCutOff => Group::Etcd,
            Self::KillAgent
            | Self::KillPlugin
            | Self::StopAgent
            | Self::NodeCutFromServer
            | Self::TermAgentStart => Group::Node(node),
            Self::DelayedDuplicate => Group::Requests,
        }
    }
}

/// What the faults act through besides the processes: the clients' view of the
/// cluster, for the faults that use the API and record what they do in the history.
pub struct Load<'a> {
    pub http: &'a Http,
    pub history: &'a Recorder,
    pub ledger: &'a Ledger,
    /// The run's dir (backups are written there).
    pub root: &'a Path,
}

/// What the faults found beside their counts.
#[derive(Debug, Default)]
pub struct Findings {
    /// Faults that could not be injected or healed.
    pub problems: Vec<String>,
    /// Promises the faults saw broken: a daemon that did not stop in order, a duplicate
    /// carried out.
    pub violations: Vec<String>,
    /// Counts of what happened within faults (a stop before or after a daemon bound its
    /// port or registered, a duplicate answered with its first answer or refused, ...).
    pub notes: BTreeMap<String, u64>,
}

impl Findings {
    pub fn note(&mut self, what: impl Into<String>) {
        *self.notes.entry(what.into()).or_default() += 1;
    }
}

/// What one fault saw.
#[derive(Debug, Default)]
pub struct Found {
    pub violations: Vec<String>,
    /// What happened, each counted in [`Findings::notes`].
    pub notes: Vec<String>,
}

/// What the lanes share.
struct Lanes<'a> {
    cluster: &'a tokio::sync::Mutex<ChaosCluster>,
    load: &'a Load<'a>,
    busy: Mutex<BTreeSet<Group>>,
    counts: Mutex<BTreeMap<Fault, u64>>,
    findings: Mutex<Findings>,
    /// The kinds still to deal in this round, and the generator that shuffles each round.
    deck: Mutex<(Vec<Fault>, StdRng)>,
    kinds: &'a [Fault],
    ttl: Duration,
    say: &'a (dyn Fn(String) + Sync),
}

impl Lanes<'_> {
    /// The next kind from the deck; a new round shuffled when it is empty.
    fn deal(&self) -> Fault {
        let mut deck = self.deck.lock().expect("deck");
        let (cards, rng) = &mut *deck;
        if cards.is_empty() {
            cards.extend_from_slice(self.kinds);
            cards.shuffle(rng);
        }
        cards.pop().expect("a deck of at least one kind")
    }

    fn findings(&self) -> std::sync::MutexGuard<'_, Findings> {
        self.findings.lock().expect("findings")
    }
}

/// How long a member hit by a fault may take to be healthy again after its healing.
const ETCD_REJOIN: Duration = Duration::from_secs(60);

/// How long a daemon may take to stop after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// The most lanes [`inject`] runs.
pub const MAX_LANES: u32 = 3;

/// Injects faults of `kinds` on `lanes` lanes at once (at most [`MAX_LANES`]) until
/// `stop` says so; returns how many of each kind, and what the faults found beyond
/// themselves (a server that did not come back is a problem; a daemon that did not stop
/// in order a violation).
#[allow(clippy::too_many_arguments)] // reason: the campaign's parts, each used as it is
pub async fn inject(
    cluster: &tokio::sync::Mutex<ChaosCluster>,
    load: &Load<'_>,
    kinds: &[Fault],
    seed: u64,
    lanes: u32,
    ttl: Duration,
    stop: &tokio::sync::watch::Receiver<bool>,
    say: &(dyn Fn(String) + Sync),
) -> (BTreeMap<Fault, u64>, Findings) {
    let shared = Lanes {
        cluster,
        load,
        busy: Mutex::new(BTreeSet::new()),
        counts: Mutex::new(kinds.iter().map(|f| (*f, 0)).collect()),
        findings: Mutex::new(Findings::default()),
        deck: Mutex::new((Vec::new(), StdRng::seed_from_u64(seed))),
        kinds,
        ttl,
        say,
    };
    // Each lane ends only after its fault's healing step.
    let run = |l: u32| {
        let rng = StdRng::seed_from_u64(seed.wrapping_add(u64::from(l) + 1));
        lane(&shared, rng, stop.clone(), l < lanes)
    };
    tokio::join!(run(0), run(1), run(2));
    let counts = shared.counts.into_inner().expect("counts");
    let findings = shared.findings.into_inner().expect("findings");
    (counts, findings)
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
    let mut fault = None;
    while active && !*stop.borrow() {
        tokio::time::sleep(pause(&mut rng, 300, 2500)).await;
        if *stop.borrow() {
            break;
        }
        // A kind whose target another lane had is tried again, not dealt anew.
        let f = *fault.get_or_insert_with(|| shared.deal());
        let (nodes, servers) = {
            let c = shared.cluster.lock().await;
            (c.nodes.len(), c.servers.len())
        };
        let node = rng.random_range(0..nodes);
        let server = rng.random_range(0..servers);
        let member = rng.random_range(0..3);
        let group = f.group(node);
        if !shared.busy.lock().expect("busy").insert(group.clone()) {
            // Another lane has that target now: try again later.
            continue;
        }
        fault = None;
        let name = match group {
            Group::Servers if f == Fault::Restore => "every server".to_owned(),
            Group::Servers => server_host(server),
            Group::Etcd => etcd_host(member),
            Group::Node(i) => format!("node-{}", i + 1),
            Group::Requests => "a client".to_owned(),
        };
        let result = one(shared, f, node, server, member, &mut rng).await;
        shared.busy.lock().expect("busy").remove(&group);
        *shared.counts.lock().expect("counts").entry(f).or_default() += 1;
        match result {
            Ok(()) => (shared.say)(format!("fault: {} ({name})", f.describe())),
            Err(e) => {
                // Free the disk whatever happened: the next fault must not start on a full one.
                shared.cluster.lock().await.free_disk();
                let line = format!("{} ({name}): {e:#}", f.describe());
                (shared.say)(format!("fault went wrong: {line}"));
                shared.findings().problems.push(line);
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
    let mut found = Found::default();
    let result = one_kind(shared, fault, node, server, member, rng, &mut found).await;
    let mut f = shared.findings();
    f.violations.extend(found.violations);
    for n in found.notes {
        f.note(n);
    }
    result
}

/// [`one`], with what the fault saw put in `found`.
#[allow(clippy::too_many_arguments)] // reason: the lane's picks, each used by some kinds
async fn one_kind(
    shared: &Lanes<'_>,
    fault: Fault,
    node: usize,
    server: usize,
    member: usize,
    rng: &mut StdRng,
    found: &mut Found,
) -> anyhow::Result<()> {
    let c = shared.cluster;
    let ttl = shared.ttl;
    let net = c.lock().await.ha.as_ref().map(|h| Arc::clone(&h.net));
    let etcd_hosts: Vec<String> = (0..3).map(etcd_host).collect();
    let etcd_refs: Vec<&str> = etcd_hosts.iter().map(String::as_str).collect();
    match fault {
        Fault::KillServer => c.lock().await.servers[server].kill_and_restart().await?,
        Fault::Restore => restore::restore(c, shared.load, rng, found).await?,
        Fault::DelayedDuplicate => duplicate::replay(shared.load, rng, found).await?,
        Fault::TermServerStart => starts::server(c, server, rng, found).await?,
        Fault::TermAgentStart => starts::agent(c, shared.load.http, node, rng, found).await?,
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
