//! `--resident N`: N ready claims held on every node while the load runs a second time, so
//! that the report compares the CPU per cycle with and without an inventory on the nodes.
//! The claims are made, and later released, through the same API calls as the load's.

use std::time::{Duration, Instant};

use anyhow::bail;
use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState};

use super::client::Http;
use super::load;
use super::stats::concurrently;
use super::volumes;

/// Every resident claim's alloc: one claim per resident volume.
const ALLOC: &str = "resident";
/// Claims made or released at once.
const IN_FLIGHT: usize = 64;

/// One resident volume and the node its claim is held on.
#[derive(Debug, Clone)]
pub struct Resident {
    pub volume: String,
    pub node: String,
}

impl Resident {
    fn path(&self) -> String {
        format!("/v1/volumes/{}/claims/{ALLOC}", self.volume)
    }
}

/// The resident volumes: `per_node` on each node, named after it.
pub fn plan(nodes: &[String], per_node: u32) -> Vec<Resident> {
    nodes
        .iter()
        .flat_map(|node| {
            (1..=per_node).map(move |i| Resident {
                volume: format!("res-{node}-{i:04}"),
                node: node.clone(),
            })
        })
        .collect()
}

/// Makes the volumes (created through CreateVolume in full mode, registered in server mode)
/// and claims each on its node, then waits until every claim is ready.
pub async fn hold(
    http: &Http,
    residents: &[Resident],
    full: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    let names: Vec<String> = residents.iter().map(|r| r.volume.clone()).collect();
    if full {
        volumes::create(http, names, timeout).await?;
    } else {
        volumes::register(http, names, 128).await?;
    }
    let deadline = Instant::now() + timeout;
    let op = http.clone();
    let results = concurrently(residents.to_vec(), IN_FLIGHT, move |r| {
        let http = op.clone();
        async move {
            let req = ClaimRequest::new(ALLOC, r.node.clone(), ClaimMode::Write);
            let resp = http
                .post(&format!("/v1/volumes/{}/claims", r.volume), &req)
                .await?
                .expect(&format!("resident claim on {}", r.volume), &[201])?;
            let c: api::Claim = resp.json()?;
            let mut index = resp.index.unwrap_or(c.index);
            let mut state = c.state;
            while state != ClaimState::Ready {
                if Instant::now() >= deadline {
                    bail!("resident claim {} not ready in time ({state})", r.path());
                }
                match load::watch(&http, &r.path(), index).await? {
                    Some((c, i)) => (state, index) = (c.state, i),
                    None => bail!("resident claim {} vanished", r.path()),
                }
            }
            anyhow::Ok(())
        }
    })
    .await;
    results.into_iter().collect()
}

/// Releases every resident claim and waits until each is gone.
pub async fn release(http: &Http, residents: &[Resident], timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let op = http.clone();
    let results = concurrently(residents.to_vec(), IN_FLIGHT, move |r| {
        let http = op.clone();
        async move {
            let resp = http
                .delete(&r.path())
                .await?
                .expect(&format!("release of {}", r.path()), &[202])?;
            let mut index = resp.index.unwrap_or(0);
            loop {
                if Instant::now() >= deadline {
                    bail!("resident claim {} not gone in time", r.path());
                }
                match load::watch(&http, &r.path(), index).await? {
                    Some((_, i)) => index = i,
                    None => return anyhow::Ok(()),
                }
            }
        }
    })
    .await;
    results.into_iter().collect()
}
