//! The machine's floor, measured in the same run as the load: what one durable SQLite
//! commit, one loopback HTTP round trip and one unix-socket gRPC round trip cost here and
//! now. A claim cannot be faster than the sum of the ones it needs, so figures are also
//! given as multiples of that sum, which survives a noisy or slow machine.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use csivol_csi::CsiEndpoint;
use csivol_csi::csi::v1 as csi;
use serde::Serialize;

use super::client::Http;
use super::stats::Dist;

/// Round trips measured before timing starts (connections, caches, lazy statics).
const WARMUP: u32 = 20;

/// One floor figure: median and p99 of its samples, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Figure {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples: usize,
}

impl Figure {
    pub fn of(samples: Vec<Duration>) -> Self {
        let d = Dist::new(samples);
        Self {
            p50_ms: d.p50().unwrap_or(0.0),
            p99_ms: d.p99().unwrap_or(0.0),
            samples: d.len(),
        }
    }
}

/// One durable SQLite commit with the server's settings (WAL, synchronous=FULL), in a
/// database next to the server's (same filesystem): one small insert per transaction.
pub fn sqlite_commit(dir: &Path, samples: u32) -> anyhow::Result<Figure> {
    let path = dir.join("floor.db");
    let conn = rusqlite::Connection::open(&path)
        .with_context(|| format!("failed to open {}", path.display()))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")?;
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        conn.execute_batch(&format!(
            "BEGIN; INSERT INTO t (v) VALUES ('claim {i}'); COMMIT;"
        ))?;
        if i >= WARMUP {
            out.push(start.elapsed());
        }
    }
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(Figure::of(out))
}

/// One etcd quorum transaction, as the etcd store commits: compare a key's revision, put
/// it, on the run's etcd cluster (sequential, one at a time).
pub async fn etcd_txn(endpoints: &[String], samples: u32) -> anyhow::Result<Figure> {
    let client = csivol_etcd_client::Client::new(endpoints)?;
    let key = b"/csivol-bench-floor".to_vec();
    let (_, kv) = client.get(&key).await?;
    let mut rev = kv.map_or(0, |kv| kv.mod_revision);
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        let resp = client
            .txn(
                vec![csivol_etcd_client::mod_revision_is(key.clone(), rev)],
                vec![csivol_etcd_client::put(
                    key.clone(),
                    format!("claim {i}").into_bytes(),
                    0,
                )],
                vec![],
            )
            .await?;
        if i >= WARMUP {
            out.push(start.elapsed());
        }
        anyhow::ensure!(resp.succeeded, "the floor key changed under the floor");
        rev = resp.header.map_or(0, |h| h.revision);
    }
    Ok(Figure::of(out))
}

/// One consistent read on the run's etcd cluster: a linearizable range of one key, which
/// etcd answers only after confirming with a quorum that its leader is current (its
/// ReadIndex), the cost a server pays to read its store consistently.
pub async fn etcd_read(endpoints: &[String], samples: u32) -> anyhow::Result<Figure> {
    let client = csivol_etcd_client::Client::new(endpoints)?;
    let key = b"/csivol-bench-floor";
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        client.get(key).await?;
        if i >= WARMUP {
            out.push(start.elapsed());
        }
    }
    Ok(Figure::of(out))
}

/// One loopback HTTP round trip through the server's stack: `GET /v1/health` on the real
/// server, on a kept-alive connection of the same client the load uses.
pub async fn http_round_trip(http: &Http, samples: u32) -> anyhow::Result<Figure> {
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        http.get("/v1/health")
            .await?
            .expect("GET /v1/health", &[200])?;
        if i >= WARMUP {
            out.push(start.elapsed());
        }
    }
    Ok(Figure::of(out))
}

/// One gRPC round trip to the real plugin over its unix socket: CSI `Probe`.
pub async fn grpc_round_trip(socket: &Path, samples: u32) -> anyhow::Result<Figure> {
    let conn = CsiEndpoint::Unix(socket.to_owned()).connection(Duration::from_secs(10));
    let mut client = csi::identity_client::IdentityClient::new(conn);
    let mut out = Vec::with_capacity(samples as usize);
    for i in 0..WARMUP + samples {
        let start = Instant::now();
        client
            .probe(csi::ProbeRequest {})
            .await
            .with_context(|| format!("Probe on {} failed", socket.display()))?;
        if i >= WARMUP {
            out.push(start.elapsed());
        }
    }
    Ok(Figure::of(out))
}

/// The three floor figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Floor {
    pub sqlite_commit: Figure,
    /// With `--store etcd`: one etcd quorum transaction, the commit the formulas count.
    pub etcd_txn: Option<Figure>,
    /// With `--store etcd`: one linearizable etcd read, the cost of a consistent read.
    pub etcd_read: Option<Figure>,
    pub http_round_trip: Figure,
    pub grpc_round_trip: Figure,
}

impl Floor {
    /// What one commit of the server's store costs: etcd's transaction with the etcd
    /// store, SQLite's durable commit otherwise.
    pub fn commit(&self) -> Figure {
        self.etcd_txn.unwrap_or(self.sqlite_commit)
    }
}

/// What one step of a cycle costs at the least, in floor units.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Step {
    pub step: &'static str,
    pub http: u32,
    pub commits: u32,
    pub grpc: u32,
}

const fn step(step: &'static str, http: u32, commits: u32, grpc: u32) -> Step {
    Step {
        step,
        http,
        commits,
        grpc,
    }
}

/// A sum of steps: the floor of one phase of a cycle.
#[derive(Debug, Clone, Serialize)]
pub struct Formula {
    pub steps: Vec<Step>,
    pub http: u32,
    pub commits: u32,
    pub grpc: u32,
    pub ms: f64,
}

impl Formula {
    fn new(floor: &Floor, steps: Vec<Step>) -> Self {
        let http = steps.iter().map(|s| s.http).sum();
        let commits = steps.iter().map(|s| s.commits).sum();
        let grpc = steps.iter().map(|s| s.grpc).sum();
        let ms = f64::from(http) * floor.http_round_trip.p50_ms
            + f64::from(commits) * floor.commit().p50_ms
            + f64::from(grpc) * floor.grpc_round_trip.p50_ms;
        Self {
            steps,
            http,
            commits,
            grpc,
            ms,
        }
    }

    /// `4 HTTP + 3 commits + 3 gRPC = 4.21 ms`
    pub fn sum_text(&self) -> String {
        let mut parts = vec![
            format!("{} HTTP", self.http),
            format!("{} commits", self.commits),
        ];
        if self.grpc > 0 {
            parts.push(format!("{} gRPC", self.grpc));
        }
        format!("{} = {:.3} ms", parts.join(" + "), self.ms)
    }

    /// `claim POST (1 HTTP + 1 commit); ...`
    pub fn steps_text(&self) -> String {
        self.steps
            .iter()
            .map(|s| {
                let mut parts = Vec::new();
                if s.grpc > 0 {
                    parts.push(format!("{} gRPC", s.grpc));
                }
                if s.http > 0 {
                    parts.push(format!("{} HTTP", s.http));
                }
                if s.commits > 0 {
                    parts.push(format!("{} commit", s.commits));
                }
                format!("{} ({})", s.step, parts.join(" + "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The floors of the two phases a client waits for, and of the whole cycle.
#[derive(Debug, Clone, Serialize)]
pub struct CycleFloor {
    pub claim_ready: Formula,
    pub release_gone: Formula,
    pub full_cycle_ms: f64,
}

/// The costs a cycle cannot avoid. `plugin_calls`: whether a real plugin is called (full
/// mode; simulated nodes answer at once). `controller_publish`: whether the volume must
/// be ControllerPublished first. The agents' long-poll answers (the server telling an agent
/// what to do) are not counted: that keeps the floor low and the ratio strict.
///
/// The clients' POST and DELETE are held until the claim changes again (`?wait=`): a
/// release is answered once the claim is gone, with no wake-up of its own, and so is a
/// claim that needs no ControllerPublish (it goes from publishing to ready). A claim that
/// does is answered at `publishing`, and a blocking query waits for ready.
pub fn cycle_floor(floor: &Floor, plugin_calls: bool, controller_publish: bool) -> CycleFloor {
    let g = u32::from(plugin_calls);
    let mut claim = vec![step("claim POST", 1, 1, 0)];
    if controller_publish {
        claim.push(step("ControllerPublishVolume + report", 1, 1, g));
    }
    claim.push(step(
        "NodeStageVolume + NodePublishVolume + report",
        1,
        1,
        2 * g,
    ));
    if controller_publish {
        claim.push(step("client wake-up", 1, 0, 0));
    }
    let release = vec![
        step("release DELETE", 1, 1, 0),
        step("NodeUnpublishVolume + report", 1, 1, g),
    ];
    let claim_ready = Formula::new(floor, claim);
    let release_gone = Formula::new(floor, release);
    let full_cycle_ms = claim_ready.ms + release_gone.ms;
    CycleFloor {
        claim_ready,
        release_gone,
        full_cycle_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fig(ms: f64) -> Figure {
        Figure {
            p50_ms: ms,
            p99_ms: ms,
            samples: 1,
        }
    }

    #[test]
    fn floor_formula() {
        let floor = Floor {
            sqlite_commit: fig(1.0),
            etcd_txn: None,
            etcd_read: None,
            http_round_trip: fig(0.1),
            grpc_round_trip: fig(0.01),
        };
        let full = cycle_floor(&floor, true, true);
        assert_eq!(
            (
                full.claim_ready.http,
                full.claim_ready.commits,
                full.claim_ready.grpc
            ),
            (4, 3, 3)
        );
        assert!((full.claim_ready.ms - 3.43).abs() < 1e-9);
        assert_eq!(
            full.claim_ready.sum_text(),
            "4 HTTP + 3 commits + 3 gRPC = 3.430 ms"
        );
        let sim = cycle_floor(&floor, false, false);
        assert_eq!(
            (
                sim.claim_ready.http,
                sim.claim_ready.commits,
                sim.claim_ready.grpc
            ),
            (2, 2, 0)
        );
        assert_eq!((sim.release_gone.http, sim.release_gone.commits), (2, 2));
        assert!((sim.full_cycle_ms - 4.4).abs() < 1e-9);
        assert_eq!((full.release_gone.http, full.release_gone.grpc), (2, 1));
    }
}
