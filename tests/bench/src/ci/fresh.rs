//! The CI scenario's per-job volumes: a seed volume written once and snapshotted, then
//! jobs one at a time each claiming a fresh volume from the snapshot (`POST
//! /v1/fresh-claims`), reading the seed's file, releasing, and waiting until the volume is
//! deleted. Their overhead is set against the floor of the plugin calls such a job needs
//! at the least, made straight on a plugin's socket one after another: CreateVolume from
//! the snapshot, ControllerPublishVolume, NodeStageVolume, NodePublishVolume, and back
//! down, NodeUnpublishVolume, NodeUnstageVolume, ControllerUnpublishVolume, DeleteVolume.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};
use csivol_api::{
    self as api, ClaimMode, ClaimRequest, FreshClaimRequest, FreshSource, SnapshotRequest,
    SnapshotState,
};
use csivol_csi::CsiEndpoint;
use csivol_csi::csi::v1 as csi;

use super::jobs::{self, KEY_FILE};
use crate::client::Http;
use crate::volumes;

/// The seed volume and its snapshot, the jobs' golden data.
pub const SEED: &str = "ci-golden";
pub const SNAPSHOT: &str = "ci-golden-1";
/// What the seed's job writes, and every fresh job must find.
const SEED_KEY: &str = "golden";

/// One fresh job's times.
#[derive(Debug, Clone, Copy)]
pub struct FreshSample {
    /// From the fresh claim's POST until its volume was deleted.
    pub total: Duration,
    pub claim_ready: Duration,
    /// From the release until csivol no longer lists the volume.
    pub release_deleted: Duration,
}

/// Makes the seed volume, writes its file through a claim on `node`, snapshots it and
/// waits until the snapshot is ready; returns the plugin's snapshot id.
pub async fn seed(
    http: &Http,
    node: &str,
    bind: bool,
    timeout: Duration,
) -> anyhow::Result<String> {
    volumes::create_with(
        http,
        vec![SEED.to_owned()],
        timeout,
        AccessMode::SingleNodeWriter,
    )
    .await?;
    let claims = format!("/v1/volumes/{SEED}/claims");
    let req = ClaimRequest::new("ci-seed", node, ClaimMode::Write);
    let deadline = jobs::deadline(timeout);
    let r = http
        .post(&http.held(&claims), &req)
        .await?
        .expect("claim the seed volume", &[201])?;
    let path = format!("{claims}/ci-seed");
    let claim = jobs::until_ready(http, &path, &r, deadline).await?;
    jobs::write_key(bind, &claim, SEED_KEY)?;
    jobs::release(http, &path, deadline).await?;
    let req = SnapshotRequest {
        volume: SEED.to_owned(),
        parameters: Default::default(),
    };
    http.put(&format!("/v1/snapshots/{SNAPSHOT}"), &req)
        .await?
        .expect("snapshot the seed volume", &[200, 201, 202])?;
    loop {
        let s: api::Snapshot = http
            .get(&format!("/v1/snapshots/{SNAPSHOT}"))
            .await?
            .expect("the seed's snapshot", &[200])?
            .json()?;
        match s.state {
            SnapshotState::Ready => return Ok(s.snapshot_id),
            SnapshotState::Failed => bail!(
                "snapshot {SNAPSHOT} failed: {}",
                s.error.unwrap_or_default()
            ),
            _ if Instant::now() >= deadline => {
                bail!("snapshot {SNAPSHOT} not ready within {timeout:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One fresh job on `node`: claim a volume from the snapshot, find the seed's file,
/// release, wait until the volume is deleted.
pub async fn job(
    http: &Http,
    alloc: &str,
    node: &str,
    bind: bool,
    timeout: Duration,
) -> anyhow::Result<FreshSample> {
    let start = Instant::now();
    let deadline = jobs::deadline(timeout);
    let req = FreshClaimRequest {
        name: "db".to_owned(),
        source: FreshSource::Snapshot(SNAPSHOT.to_owned()),
        claim: ClaimRequest {
            ttl_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            ..ClaimRequest::new(alloc, node, ClaimMode::Write)
        },
    };
    let r = http
        .post("/v1/fresh-claims", &req)
        .await?
        .expect(&format!("fresh claim {alloc}"), &[201])?;
    let created: api::Claim = r.json()?;
    let volume = created.volume.clone();
    let path = format!("/v1/volumes/{volume}/claims/{alloc}");
    let claim = jobs::until_ready(http, &path, &r, deadline).await?;
    let claim_ready = start.elapsed();
    let found = jobs::write_key(bind, &claim, alloc)?;
    if bind && found.as_deref() != Some(SEED_KEY) {
        bail!(
            "fresh volume {volume} of {alloc} does not hold the snapshot's data: {KEY_FILE} is {found:?}"
        );
    }
    let released = Instant::now();
    jobs::release(http, &path, deadline).await?;
    let vpath = format!("/v1/volumes/{volume}");
    let mut index = 0;
    loop {
        let r = http.get_blocking(&vpath, index).await?;
        match r.status {
            404 => break,
            200 => index = r.index.unwrap_or(index),
            s => bail!("GET {vpath}: HTTP {s}"),
        }
        if Instant::now() >= deadline {
            bail!("fresh volume {volume} of {alloc} not deleted within {timeout:?}");
        }
    }
    Ok(FreshSample {
        total: start.elapsed(),
        claim_ready,
        release_deleted: released.elapsed(),
    })
}

/// One floor sample: the eight plugin calls of a fresh job back to back on the plugin at
/// `socket` (its node's id is `node_id`), staging and target under `dir`.
async fn floor_once(
    conn: &csivol_csi::PluginConnection,
    node_id: &str,
    snapshot_id: &str,
    dir: &Path,
    n: u32,
) -> anyhow::Result<Duration> {
    let mut controller = csi::controller_client::ControllerClient::new(conn.clone());
    let mut node = csi::node_client::NodeClient::new(conn.clone());
    let cap = csi::VolumeCapability::from(&VolumeCapability {
        access_type: AccessType::FileSystem {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: AccessMode::SingleNodeWriter,
    });
    let staging = dir.join(format!("staging-{n}"));
    let target = dir.join(format!("target-{n}"));
    std::fs::create_dir_all(&staging)
        .with_context(|| format!("failed to create {}", staging.display()))?;
    let start = Instant::now();
    let v = controller
        .create_volume(csi::CreateVolumeRequest {
            name: format!("csivol-bench-floor-{n}"),
            volume_capabilities: vec![cap.clone()],
            volume_content_source: Some(csi::VolumeContentSource {
                r#type: Some(csi::volume_content_source::Type::Snapshot(
                    csi::volume_content_source::SnapshotSource {
                        snapshot_id: snapshot_id.to_owned(),
                    },
                )),
            }),
            ..Default::default()
        })
        .await
        .context("CreateVolume")?
        .into_inner()
        .volume
        .context("CreateVolume answered no volume")?;
    let ctx = controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: node_id.to_owned(),
            volume_capability: Some(cap.clone()),
            volume_context: v.volume_context.clone(),
            ..Default::default()
        })
        .await
        .context("ControllerPublishVolume")?
        .into_inner()
        .publish_context;
    node.node_stage_volume(csi::NodeStageVolumeRequest {
        volume_id: v.volume_id.clone(),
        publish_context: ctx.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(cap.clone()),
        volume_context: v.volume_context.clone(),
        ..Default::default()
    })
    .await
    .context("NodeStageVolume")?;
    node.node_publish_volume(csi::NodePublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        publish_context: ctx,
        staging_target_path: staging.display().to_string(),
        target_path: target.display().to_string(),
        volume_capability: Some(cap),
        volume_context: v.volume_context.clone(),
        ..Default::default()
    })
    .await
    .context("NodePublishVolume")?;
    node.node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        target_path: target.display().to_string(),
    })
    .await
    .context("NodeUnpublishVolume")?;
    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
    })
    .await
    .context("NodeUnstageVolume")?;
    controller
        .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: node_id.to_owned(),
            ..Default::default()
        })
        .await
        .context("ControllerUnpublishVolume")?;
    controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            ..Default::default()
        })
        .await
        .context("DeleteVolume")?;
    Ok(start.elapsed())
}

/// `samples` floor samples, one after another, on the plugin at `socket`.
pub async fn floor(
    socket: &Path,
    snapshot_id: &str,
    dir: &Path,
    samples: u32,
) -> anyhow::Result<Vec<Duration>> {
    let conn = CsiEndpoint::Unix(socket.to_owned()).connection(Duration::from_secs(30));
    let node_id = csi::node_client::NodeClient::new(conn.clone())
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .with_context(|| format!("NodeGetInfo on {} failed", socket.display()))?
        .into_inner()
        .node_id;
    let mut out = Vec::with_capacity(samples as usize);
    for n in 0..samples {
        let d = floor_once(&conn, &node_id, snapshot_id, dir, n)
            .await
            .with_context(|| format!("the plugin calls' floor on {}", socket.display()))?;
        out.push(d);
    }
    Ok(out)
}
