//! What a consistent read costs with the etcd store, measured in the run: the same
//! `GET /v1/volumes/NAME` made consistent (the default: the server first learns etcd's
//! last commit and waits until its copy has it) and with `?stale=true` (its copy as it
//! is), one at a time for the latency and from many clients at once for the throughput.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::client::Http;
use super::floor::Figure;

/// Reads measured from several clients at once, per mode.
const CONCURRENT_READS: u32 = 4000;

#[derive(Debug, Clone, Serialize)]
pub struct ReadCost {
    pub path: String,
    pub consistent: Figure,
    pub stale: Figure,
    /// What making one read consistent adds at the median: consistent - stale p50.
    pub added_p50_ms: f64,
    /// Clients reading at once for the throughput figures.
    pub clients: u32,
    pub consistent_per_second: f64,
    pub stale_per_second: f64,
}

async fn one(http: &Http, path: &str) -> anyhow::Result<Duration> {
    let start = Instant::now();
    http.get(path).await?.expect(path, &[200])?;
    Ok(start.elapsed())
}

/// Reads of `path` from `clients` clients at once, `total` in all; reads per second.
async fn throughput(http: &Http, path: &str, clients: u32, total: u32) -> anyhow::Result<f64> {
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (http, path) = (http.clone(), path.to_owned());
            tokio::spawn(async move {
                for _ in 0..total / clients {
                    one(&http, &path).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(f64::from(total / clients * clients) / start.elapsed().as_secs_f64())
}

/// `samples` reads of `volume` one at a time in each mode (interleaved, so both see the
/// same machine), then [`CONCURRENT_READS`] from `clients` at once in each mode.
pub async fn measure(
    http: &Http,
    volume: &str,
    samples: u32,
    clients: u32,
) -> anyhow::Result<ReadCost> {
    let path = format!("/v1/volumes/{volume}");
    let stale_path = format!("{path}?stale=true");
    let (mut consistent, mut stale) = (Vec::new(), Vec::new());
    for i in 0..samples + 20 {
        let c = one(http, &path).await?;
        let s = one(http, &stale_path).await?;
        if i >= 20 {
            consistent.push(c);
            stale.push(s);
        }
    }
    let (consistent, stale) = (Figure::of(consistent), Figure::of(stale));
    let clients = clients.max(1);
    let consistent_per_second = throughput(http, &path, clients, CONCURRENT_READS).await?;
    let stale_per_second = throughput(http, &stale_path, clients, CONCURRENT_READS).await?;
    Ok(ReadCost {
        path,
        added_p50_ms: consistent.p50_ms - stale.p50_ms,
        consistent,
        stale,
        clients,
        consistent_per_second,
        stale_per_second,
    })
}
