//! The node-loss figure (server mode): ready claims on one simulated node, the node stops
//! heartbeating, and the time until the server shows its claims `blocked`.

use std::time::Instant;

use anyhow::bail;
use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState, NodeUnblockRequest};

use super::client::Http;
use super::phases::Say;
use super::sim::SimCluster;
use super::{Config, NODE_LOSS_CLAIMS, load};

#[derive(Debug)]
pub struct NodeLoss {
    pub node: String,
    pub blocked_s: f64,
    pub claims: usize,
}

/// Puts ready claims on one simulated node, stops it right after a heartbeat, and times
/// until the server shows its claims `blocked`; then unblocks it as an operator would.
pub async fn probe(
    http: &Http,
    sims: &SimCluster,
    cfg: &Config,
    volumes: &[String],
    say: &Say,
) -> anyhow::Result<NodeLoss> {
    let a = &cfg.args;
    let hosts = if cfg.controller_publish {
        a.controller_hosts
    } else {
        0
    };
    if sims.nodes.len() as u32 <= hosts {
        bail!("needs a node that does not host the controller: use more --nodes");
    }
    let victim = sims.nodes.last().expect("at least one node");
    let count = NODE_LOSS_CLAIMS.min(a.volumes) as usize;
    say.say(format!(
        "node loss: {count} ready claims on {}, then it stops heartbeating (TTL {})",
        victim.name,
        humantime::format_duration(a.heartbeat_ttl)
    ));
    let mut claims = Vec::new();
    for (i, volume) in volumes.iter().take(count).enumerate() {
        let alloc = format!("node-loss-{i}");
        let req = ClaimRequest::new(alloc.clone(), victim.name.clone(), ClaimMode::Write);
        let r = http
            .post(&format!("/v1/volumes/{volume}/claims"), &req)
            .await?
            .expect("node-loss claim", &[201])?;
        let c: api::Claim = r.json()?;
        claims.push((
            format!("/v1/volumes/{volume}/claims/{alloc}"),
            r.index.unwrap_or(c.index),
        ));
    }
    let deadline = Instant::now() + a.cycle_timeout;
    for (path, index) in &mut claims {
        wait_state(http, path, index, ClaimState::Ready, deadline).await?;
    }
    let killed = sims.kill(victim).await?;
    let deadline = Instant::now() + a.heartbeat_ttl + a.cycle_timeout;
    for (path, index) in &mut claims {
        wait_state(http, path, index, ClaimState::Blocked, deadline).await?;
    }
    let blocked_s = killed.elapsed().as_secs_f64();
    say.say(format!(
        "node loss: claims blocked {blocked_s:.2} s after the last heartbeat; unblocking {}",
        victim.name
    ));
    let req = NodeUnblockRequest {
        reason: "csivol-bench: node-loss figure, the simulated node is gone".to_owned(),
        dry_run: false,
    };
    http.post(&format!("/v1/nodes/{}/unblock", victim.name), &req)
        .await?
        .expect("unblock", &[200])?;
    Ok(NodeLoss {
        node: victim.name.clone(),
        blocked_s,
        claims: count,
    })
}

/// Blocks on a claim until it reaches `want`.
async fn wait_state(
    http: &Http,
    path: &str,
    index: &mut u64,
    want: ClaimState,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{path} did not become {want} in time"
        );
        match load::watch(http, path, *index).await? {
            Some((c, i)) => {
                *index = i;
                if c.state == want {
                    return Ok(());
                }
            }
            None => bail!("{path} vanished while waiting for {want}"),
        }
    }
}
