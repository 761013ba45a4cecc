//! Volumes of a run: created through csivol (full mode) or registered (server mode), the
//! timed `GET /v1/volumes`, and the wait at the end until every volume is free again.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use csivol_api::domain::AccessMode;
use csivol_api::{self as api, Attachment, CreateVolumeSpec, VolumeSpec, VolumeState};

use super::client::Http;
use super::stats::{Dist, concurrently};

/// Every volume a run cycles allows any number of writers on any number of nodes, so the
/// random claims of the load never conflict with each other.
const ACCESS_MODE: AccessMode = AccessMode::MultiNodeMultiWriter;

pub fn volume_name(i: u32) -> String {
    format!("vol-{i:06}")
}

/// Creates the volumes through csivol (CreateVolume on a controller host) and waits until
/// every one is free.
pub async fn create(http: &Http, names: Vec<String>, timeout: Duration) -> anyhow::Result<()> {
    create_with(http, names, timeout, ACCESS_MODE).await
}

/// [`create`] with another access mode (the chaos campaign's volumes allow one writer).
pub async fn create_with(
    http: &Http,
    names: Vec<String>,
    timeout: Duration,
    access_mode: AccessMode,
) -> anyhow::Result<()> {
    let total = names.len();
    let wanted: std::collections::HashSet<String> = names.iter().cloned().collect();
    let op = http.clone();
    let results = concurrently(names, 32, move |name| {
        let http = op.clone();
        async move {
            let spec = CreateVolumeSpec {
                plugin: super::PLUGIN.to_owned(),
                access_mode,
                attachment: Attachment::FileSystem,
                capacity_bytes: 1 << 20,
                fs_type: String::new(),
                mount_flags: Vec::new(),
                parameters: BTreeMap::new(),
                secrets: BTreeMap::new(),
                topology_request: None,
                source: None,
                mutable_parameters: BTreeMap::new(),
                claim_mount_flags: Vec::new(),
                selinux_context: None,
                ownership: None,
                labels: Default::default(),
            };
            http.post(&format!("/v1/volumes/{name}/create"), &spec)
                .await?
                .expect(&format!("create volume {name}"), &[200, 202])?;
            anyhow::Ok(())
        }
    })
    .await;
    for r in results {
        r?;
    }
    let deadline = Instant::now() + timeout;
    loop {
        let mut volumes: Vec<api::Volume> = http.get("/v1/volumes").await?.json()?;
        // Only these volumes count: others of the run may be free already.
        volumes.retain(|v| wanted.contains(v.name.as_str()));
        if let Some(v) = volumes.iter().find(|v| v.state == VolumeState::Failed) {
            bail!(
                "creating volume {} failed: {}",
                v.name,
                v.error.clone().unwrap_or_default()
            );
        }
        let free = volumes
            .iter()
            .filter(|v| v.state == VolumeState::Free)
            .count();
        if free >= total {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("only {free} of {total} volumes were created within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Registers existing volumes (`PUT /v1/volumes/{name}`), `limit` requests in flight.
pub async fn register(http: &Http, names: Vec<String>, limit: usize) -> anyhow::Result<()> {
    let op = http.clone();
    let results = concurrently(names, limit, move |name| {
        let http = op.clone();
        async move {
            let spec = VolumeSpec {
                plugin: super::PLUGIN.to_owned(),
                external_id: format!("sim-{name}"),
                access_mode: ACCESS_MODE,
                attachment: Attachment::FileSystem,
                fs_type: String::new(),
                mount_flags: Vec::new(),
                context: BTreeMap::new(),
                parameters: BTreeMap::new(),
                secrets: BTreeMap::new(),
                topology: Vec::new(),
                claim_mount_flags: Vec::new(),
                selinux_context: None,
                ownership: None,
                labels: Default::default(),
            };
            http.put(&format!("/v1/volumes/{name}"), &spec)
                .await?
                .expect(&format!("register volume {name}"), &[200, 201])?;
            anyhow::Ok(())
        }
    })
    .await;
    for r in results {
        r?;
    }
    Ok(())
}

/// Volumes that are not free, or free but still listing a claim or an attachment.
fn not_free(volumes: &[api::Volume]) -> Vec<String> {
    volumes
        .iter()
        .filter(|v| {
            v.state != VolumeState::Free || !v.claims.is_empty() || !v.attachments.is_empty()
        })
        .map(|v| {
            format!(
                "volume {} is {} with {} claim(s) {:?} and {} attachment(s) {:?}",
                v.name,
                v.state,
                v.claims.len(),
                v.claims
                    .iter()
                    .map(|c| format!("{}@{}:{}", c.alloc, c.node, c.state))
                    .collect::<Vec<_>>(),
                v.attachments.len(),
                v.attachments
                    .iter()
                    .map(|a| format!("{}:{}", a.node, a.state))
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

/// Waits until the server lists no claim and no attachment left on any of `expected`
/// volumes (the detach tail of the last releases runs after their claims are gone).
/// Returns what is still held at the deadline. Large inventories are checked with state
/// filters, so that the wait does not list 100,000 volumes over and over.
pub async fn wait_all_free(
    http: &Http,
    expected: usize,
    timeout: Duration,
) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + timeout;
    loop {
        let listed = async {
            anyhow::Ok(if expected <= 20_000 {
                let all: Vec<api::Volume> = http.get("/v1/volumes").await?.json()?;
                (not_free(&all), all.len())
            } else {
                let mut held = Vec::new();
                for s in [
                    VolumeState::Attached,
                    VolumeState::Blocked,
                    VolumeState::Creating,
                    VolumeState::Deleting,
                    VolumeState::Failed,
                ] {
                    let some: Vec<api::Volume> =
                        http.get(&format!("/v1/volumes?state={s}")).await?.json()?;
                    held.extend(not_free(&some));
                }
                (held, expected)
            })
        };
        // A listing that got no answer (a server still busy after the faults) is asked
        // again until the deadline; only then is it the answer.
        let (held, count) = match listed.await {
            Ok(l) => l,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        if held.is_empty() && count == expected {
            return Ok(held);
        }
        if Instant::now() >= deadline {
            let mut held = held;
            if count != expected {
                held.push(format!(
                    "the server lists {count} volumes, {expected} expected"
                ));
            }
            return Ok(held);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET /v1/volumes` timed end to end (request sent until the whole body arrived).
#[derive(Debug, Clone)]
pub struct ListFigure {
    pub p50_ms: f64,
    pub max_ms: f64,
    pub count: usize,
    pub bytes: usize,
    /// What the listing shows still held (nothing, after a clean run).
    pub held: Vec<String>,
    /// The same list page by page as the CLI reads it (`?limit=1000&after=`), end to end;
    /// `None` when the server does not page.
    pub paged_ms: Option<f64>,
}

/// Volumes per page of the paged listing, as the CLI asks.
const PAGE: usize = 1000;

/// Lists every volume page by page; `None` when the server refuses `limit`.
async fn list_paged(http: &Http) -> anyhow::Result<Option<usize>> {
    let mut count = 0;
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/volumes?limit={PAGE}&after={a}"),
            None => format!("/v1/volumes?limit={PAGE}"),
        };
        let r = http.get(&path).await?;
        if r.status == 400 && after.is_none() {
            return Ok(None);
        }
        let page: Vec<api::Volume> = r.expect("GET /v1/volumes?limit=", &[200])?.json()?;
        count += page.len();
        if page.len() < PAGE {
            return Ok(Some(count));
        }
        after = page.last().map(|v| v.name.clone());
    }
}

pub async fn time_list(http: &Http, samples: u32) -> anyhow::Result<ListFigure> {
    let mut times = Vec::new();
    let mut last = Vec::new();
    for _ in 0..samples.max(1) {
        let start = Instant::now();
        let r = http
            .get("/v1/volumes")
            .await?
            .expect("GET /v1/volumes", &[200])?;
        times.push(start.elapsed());
        last = r.body;
    }
    let volumes: Vec<api::Volume> = serde_json::from_slice(&last)?;
    let start = Instant::now();
    let paged = list_paged(http).await?;
    let paged_ms = paged.map(|_| start.elapsed().as_secs_f64() * 1000.0);
    if let Some(n) = paged
        && n != volumes.len()
    {
        bail!(
            "the paged listing found {n} volumes, the whole one {}",
            volumes.len()
        );
    }
    let d = Dist::new(times);
    Ok(ListFigure {
        p50_ms: d.p50().unwrap_or(0.0),
        max_ms: d.max().unwrap_or(0.0),
        count: volumes.len(),
        bytes: last.len(),
        held: not_free(&volumes),
        paged_ms,
    })
}

/// Shares a list between tasks.
pub fn shared(names: Vec<String>) -> Arc<Vec<String>> {
    Arc::new(names)
}
