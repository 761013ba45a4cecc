//! The backlog scenario (`--backlog`): the real server and simulated nodes whose one
//! controller host takes `--backlog-op-time` per ControllerPublish/Unpublish call. N claims
//! on N volumes spread over the nodes are released at once, which queues N detaches on the
//! plugin (the Kubernetes attacher's "detach storm"); then one claim on a fresh node needs
//! an attach. The figures: how long that attach waited in the queue and how long its claim
//! took to be ready, against how long the storm took to drain (what the attach would have
//! waited in arrival order), and the detaches' own mean wait. The server's own figures
//! (`csivol_controller_op_wait_seconds`) are read from its metrics.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState};
use serde::Serialize;

use super::client::Http;
use super::phases::{Say, WorkDir};
use super::procs::{Bins, Server};
use super::sim::SimCluster;
use super::stats::concurrently;
use super::{Config, PLUGIN, volumes};

/// Nodes the storm's claims are spread over (one more node takes the attach).
const STORM_NODES: u32 = 100;

#[derive(Debug, Serialize)]
pub struct BacklogReport {
    pub detaches: u32,
    pub nodes: u32,
    pub op_time_ms: f64,
    pub controller_concurrency: u32,
    /// Detaches waiting for a slot when the attach was asked for.
    pub queued_at_attach: u64,
    /// The attach's wait in the queue, from queued to handed to the controller host (the
    /// server's figure).
    pub attach_wait_ms: f64,
    /// From the claim request to the claim seen ready.
    pub attach_claim_ready_ms: f64,
    /// From the attach's request until the storm's last detach was handed out: what the
    /// attach would have waited behind the storm in arrival order.
    pub storm_drain_ms: f64,
    /// The detaches' mean wait in the queue (the server's figure).
    pub detach_mean_wait_ms: f64,
    /// attach_wait_ms / storm_drain_ms.
    pub attach_wait_vs_drain: f64,
    /// attach_wait_ms / op_time_ms: how many controller calls' time the attach waited.
    pub attach_wait_in_ops: f64,
    pub machine: String,
}

impl BacklogReport {
    pub fn text(&self) -> String {
        format!(
            "csivol-bench backlog: {} detaches queued on plugin {PLUGIN} (one controller host, {} ms per call, \
             at most {} in flight), then one attach\n\
             machine:                 {}\n\
             detaches waiting:        {} when the attach was asked for\n\
             attach wait in queue:    {:.1} ms ({:.2} calls' time)\n\
             attach claim to ready:   {:.1} ms\n\
             storm drained in:        {:.1} ms (an attach behind it in arrival order would have waited this long)\n\
             attach wait / drain:     {:.4}\n\
             detach mean wait:        {:.1} ms\n",
            self.detaches,
            self.op_time_ms,
            self.controller_concurrency,
            self.machine,
            self.queued_at_attach,
            self.attach_wait_ms,
            self.attach_wait_in_ops,
            self.attach_claim_ready_ms,
            self.storm_drain_ms,
            self.attach_wait_vs_drain,
            self.detach_mean_wait_ms,
        )
    }
}

/// A histogram's `_sum` and `_count` for the plugin and kind, from Prometheus text.
fn wait_sum_count(metrics: &str, kind: &str) -> (f64, f64) {
    let read = |suffix: &str| {
        let key = format!(
            "csivol_controller_op_wait_seconds_{suffix}{{plugin=\"{PLUGIN}\",kind=\"{kind}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (read("sum"), read("count"))
}

async fn metrics(http: &Http) -> anyhow::Result<String> {
    let r = http.get("/v1/metrics").await?.expect("metrics", &[200])?;
    Ok(String::from_utf8_lossy(&r.body).into_owned())
}

async fn queue(http: &Http) -> anyhow::Result<api::ControllerQueue> {
    let p: api::Plugin = http
        .get(&format!("/v1/plugins/{PLUGIN}"))
        .await?
        .expect("plugin", &[200])?
        .json()?;
    Ok(p.queue)
}

/// Claims `volume` for `alloc` on `node` and waits until it is ready.
async fn claim_ready(http: &Http, volume: &str, alloc: &str, node: &str) -> anyhow::Result<()> {
    let req = ClaimRequest::new(alloc.to_owned(), node.to_owned(), ClaimMode::Write);
    let r = http
        .post(&format!("/v1/volumes/{volume}/claims"), &req)
        .await?
        .expect(&format!("claim {volume}"), &[201])?;
    let c: api::Claim = r.json()?;
    let path = format!("/v1/volumes/{volume}/claims/{alloc}");
    let mut index = r.index.unwrap_or(c.index);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if Instant::now() > deadline {
            bail!("{path} was not ready within 5 minutes");
        }
        match super::load::watch(http, &path, index).await? {
            Some((c, _)) if c.state == ClaimState::Ready => return Ok(()),
            Some((c, _)) if c.state == ClaimState::Failed => {
                bail!("{path} failed: {}", c.error.unwrap_or_default())
            }
            Some((_, i)) => index = i,
            None => bail!("{path} vanished"),
        }
    }
}

/// The machine the figures were measured on, as the report names it.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or_else(
            || "?".to_owned(),
            |kib| format!("{:.0}", kib / 1024.0 / 1024.0),
        );
    let load = super::stats::load_average().map_or_else(|| "?".to_owned(), |l| format!("{l:.2}"));
    format!("{cpus} CPUs, {mem_gib} GiB, load average {load} at the start")
}

/// Runs the scenario.
pub async fn run(cfg: &Config) -> anyhow::Result<BacklogReport> {
    let a = &cfg.args;
    let say = Say::start();
    let machine = machine();
    let bins = Bins::find(a.bin_dir.as_deref(), a.agent_bin.as_deref())?;
    let dir = WorkDir::new(a.keep_dir.as_deref())?;
    let detaches = a.backlog_detaches;
    say.say("starting the server");
    let server = Server::start(
        &bins,
        &dir.path().join("server"),
        a.heartbeat_ttl,
        a.controller_concurrency,
        &[],
        &[],
    )
    .await?;
    let http = Http::new(&server.url, &server.token)?;
    let nodes = STORM_NODES.min(detaches.max(1)) + 1;
    say.say(format!(
        "registering {nodes} simulated nodes; node-1 hosts the controller, {} per call",
        humantime::format_duration(a.backlog_op_time)
    ));
    let sims = SimCluster::start(&http, nodes, 1, true, a.heartbeat_ttl, a.backlog_op_time).await?;
    sims.channels_open(Duration::from_secs(60)).await;
    let names: Vec<String> = (0..=detaches).map(volumes::volume_name).collect();
    volumes::register(&http, names.clone(), 32).await?;
    let storm_nodes = nodes - 1;
    let fresh = sims.nodes.last().expect("nodes").name.clone();
    say.say(format!(
        "{detaches} claims over {storm_nodes} nodes, each attached through the slow controller"
    ));
    let h = http.clone();
    let node_names = sims.names();
    let claimed = concurrently(
        names[..detaches as usize]
            .iter()
            .cloned()
            .enumerate()
            .collect(),
        64,
        move |(i, v): (usize, String)| {
            let http = h.clone();
            let node = node_names[i % storm_nodes as usize].clone();
            async move { claim_ready(&http, &v, "storm", &node).await }
        },
    )
    .await;
    for c in claimed {
        c.context("a storm claim")?;
    }
    // The controller is busy: the storm queues up behind the calls it holds.
    sims.hold_ops(true);
    say.say(format!("releasing the {detaches} claims at once"));
    let h = http.clone();
    let released = concurrently(names[..detaches as usize].to_vec(), 64, move |v| {
        let http = h.clone();
        async move {
            http.delete(&format!("/v1/volumes/{v}/claims/storm"))
                .await?
                .expect(&format!("release {v}"), &[200, 202])?;
            anyhow::Ok(())
        }
    })
    .await;
    for r in released {
        r?;
    }
    // The storm: every detach queued, those the controller holds running, the rest
    // waiting for a slot.
    let deadline = Instant::now() + Duration::from_secs(120);
    let queued = loop {
        let q = queue(&http).await?;
        let n = q.waiting.get("unpublish").map_or(0, |k| k.count);
        let running = q.running.len() as u32;
        if n + running >= detaches {
            break u64::from(n);
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {detaches} detaches queued in 2 minutes",
                n + running
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let before = metrics(&http).await?;
    let (publish_sum, publish_count) = wait_sum_count(&before, "publish");
    let (held_sum, held_count) = wait_sum_count(&before, "unpublish");
    say.say(format!(
        "{queued} detaches waiting; the controller goes on, and one claim on {fresh} needs an attach"
    ));
    sims.hold_ops(false);
    let asked = Instant::now();
    claim_ready(&http, &names[detaches as usize], "late", &fresh).await?;
    let attach_claim_ready = asked.elapsed();
    let after = metrics(&http).await?;
    let (sum, count) = wait_sum_count(&after, "publish");
    if count - publish_count != 1.0 {
        bail!(
            "expected one attach during the storm, the server counted {}",
            count - publish_count
        );
    }
    let attach_wait_ms = (sum - publish_sum) * 1000.0;
    say.say("waiting for the storm to drain");
    let drained = loop {
        let q = queue(&http).await?;
        if q.waiting.is_empty() && q.backing_off.is_empty() {
            break asked.elapsed();
        }
        if asked.elapsed() > Duration::from_secs(600) {
            bail!("the storm did not drain in 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let end = metrics(&http).await?;
    // The detaches handed out once the controller went on (those it held had waited
    // while it was stopped, which is not the queue's doing).
    let (dsum, dcount) = wait_sum_count(&end, "unpublish");
    let (dsum, dcount) = (dsum - held_sum, dcount - held_count);
    let errors = sims.errors();
    if !errors.is_empty() {
        bail!("simulated nodes failed: {}", errors.join("; "));
    }
    let op_time_ms = a.backlog_op_time.as_secs_f64() * 1000.0;
    let storm_drain_ms = drained.as_secs_f64() * 1000.0;
    let concurrency = queue(&http).await?.concurrency;
    Ok(BacklogReport {
        detaches,
        nodes,
        op_time_ms,
        controller_concurrency: concurrency,
        queued_at_attach: queued,
        attach_wait_ms,
        attach_claim_ready_ms: attach_claim_ready.as_secs_f64() * 1000.0,
        storm_drain_ms,
        detach_mean_wait_ms: if dcount > 0.0 {
            dsum / dcount * 1000.0
        } else {
            0.0
        },
        attach_wait_vs_drain: attach_wait_ms / storm_drain_ms.max(f64::EPSILON),
        attach_wait_in_ops: attach_wait_ms / op_time_ms.max(f64::EPSILON),
        machine,
    })
}
