//! A real `csivol-hostpath` process with clients of its three services, and request
//! builders the tests share.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};
use csivol_csi::CsiEndpoint;
use csivol_csi::PluginConnection;
use csivol_csi::csi::v1 as csi;
pub(crate) use csivol_tests::loops::{LoopGuard, assert_loop_devices};
use csivol_tests::{Proc, TestDir, is_mounted};
use tonic::Code;

pub(crate) type Identity = csi::identity_client::IdentityClient<PluginConnection>;
pub(crate) type Controller = csi::controller_client::ControllerClient<PluginConnection>;
pub(crate) type Node = csi::node_client::NodeClient<PluginConnection>;
pub(crate) type Group = csi::group_controller_client::GroupControllerClient<PluginConnection>;

/// One running plugin process and clients for its services.
pub(crate) struct Plugin {
    pub(crate) proc: Proc,
    pub(crate) socket: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) state_dir: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) identity: Identity,
    pub(crate) controller: Controller,
    pub(crate) node: Node,
    pub(crate) group: Group,
}

impl Plugin {
    /// Starts `csivol-hostpath` for `node_id` in `dir`, sharing `dir/backend`.
    pub(crate) async fn start(dir: &TestDir, node_id: &str, extra: &[&str]) -> Self {
        let socket = dir.join(format!("{node_id}.sock"));
        let state_dir = dir.join(format!("state-{node_id}"));
        let mut args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--node-id={node_id}"),
            format!("--state-dir={}", state_dir.display()),
            format!("--backend-dir={}", dir.join("backend").display()),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = dir.join(format!("{node_id}.log"));
        Self::spawn(socket, args, state_dir, log).await
    }

    pub(crate) async fn spawn(
        socket: PathBuf,
        args: Vec<String>,
        state_dir: PathBuf,
        log: PathBuf,
    ) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_csivol-hostpath"));
        cmd.args(&args);
        let mut proc = Proc::spawn("csivol-hostpath", cmd, &log);
        let conn = CsiEndpoint::Unix(socket.clone()).connection(Duration::from_secs(10));
        let mut identity = Identity::new(conn.clone());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if identity.probe(csi::ProbeRequest {}).await.is_ok() {
                break;
            }
            if let Some(status) = proc.exited() {
                panic!(
                    "plugin exited with {status}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "plugin did not answer Probe");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Self {
            proc,
            socket,
            args,
            state_dir,
            log,
            identity,
            controller: Controller::new(conn.clone()),
            group: Group::new(conn.clone()),
            node: Node::new(conn),
        }
    }

    /// Kills the plugin with SIGKILL and starts it again with the same arguments.
    pub(crate) async fn restart_after_kill(self) -> Self {
        let Plugin {
            mut proc,
            socket,
            args,
            state_dir,
            log,
            ..
        } = self;
        proc.kill();
        Self::spawn(socket, args, state_dir, log).await
    }

    /// The RPCs recorded in the call log, in order.
    pub(crate) fn calls(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state_dir.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

pub(crate) fn mount_cap(mode: AccessMode) -> csi::VolumeCapability {
    csi::VolumeCapability::from(&VolumeCapability {
        access_type: AccessType::FileSystem {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: mode,
    })
}

pub(crate) fn block_cap() -> csi::VolumeCapability {
    csi::VolumeCapability::from(&VolumeCapability {
        access_type: AccessType::BlockDevice,
        access_mode: AccessMode::SingleNodeWriter,
    })
}

pub(crate) fn code<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}

pub(crate) fn message<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> String {
    r.expect_err("expected an error").message().to_owned()
}

pub(crate) async fn create(p: &mut Plugin, name: &str, mode: AccessMode) -> csi::Volume {
    p.controller
        .create_volume(csi::CreateVolumeRequest {
            name: name.into(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 1 << 20,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![mount_cap(mode)],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
}

pub(crate) async fn controller_publish(
    p: &mut Plugin,
    v: &csi::Volume,
    node: &str,
    mode: AccessMode,
) -> Result<HashMap<String, String>, tonic::Status> {
    p.controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: node.into(),
            volume_capability: Some(mount_cap(mode)),
            readonly: false,
            volume_context: v.volume_context.clone(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().publish_context)
}

pub(crate) fn stage_req(
    v: &csi::Volume,
    staging: &Path,
    ctx: &HashMap<String, String>,
) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: v.volume_id.clone(),
        publish_context: ctx.clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(mount_cap(AccessMode::SingleNodeWriter)),
        volume_context: v.volume_context.clone(),
        ..Default::default()
    }
}

pub(crate) fn publish_req(
    v: &csi::Volume,
    staging: Option<&Path>,
    target: &Path,
    ctx: &HashMap<String, String>,
    readonly: bool,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        publish_context: ctx.clone(),
        staging_target_path: staging.map(|s| s.display().to_string()).unwrap_or_default(),
        target_path: target.display().to_string(),
        volume_capability: Some(mount_cap(AccessMode::SingleNodeWriter)),
        readonly,
        volume_context: v.volume_context.clone(),
        ..Default::default()
    }
}

pub(crate) fn unpublish_req(v: &csi::Volume, target: &Path) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        target_path: target.display().to_string(),
    }
}

pub(crate) fn unstage_req(v: &csi::Volume, staging: &Path) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
    }
}

/// Whether `path` shows the volume as attached in the given mode.
pub(crate) fn attached(bind: bool, path: &Path) -> bool {
    if bind {
        is_mounted(path)
    } else {
        path.join(".csivol-hostpath").is_file()
    }
}

pub(crate) fn block_cap_mode(mode: AccessMode) -> csi::VolumeCapability {
    csi::VolumeCapability::from(&VolumeCapability {
        access_type: AccessType::BlockDevice,
        access_mode: mode,
    })
}

/// A CreateVolume request for `name` with `cap` and `bytes` of required capacity.
pub(crate) fn create_req(
    name: &str,
    cap: csi::VolumeCapability,
    bytes: i64,
) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![cap],
        ..Default::default()
    }
}

/// Creates a volume from `req`, which must succeed.
pub(crate) async fn create_with(p: &mut Plugin, req: csi::CreateVolumeRequest) -> csi::Volume {
    p.controller
        .create_volume(req)
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
}

/// Controller-publishes, stages and publishes `v` with `cap` on the plugin's own node
/// (`node-1`), at `dir/staging-<tag>` and `dir/target-<tag>`; returns the target.
pub(crate) async fn bring_up(
    p: &mut Plugin,
    dir: &TestDir,
    v: &csi::Volume,
    cap: &csi::VolumeCapability,
    tag: &str,
) -> (PathBuf, PathBuf) {
    let ctx = p
        .controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: "node-1".into(),
            volume_capability: Some(cap.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let staging = dir.join(format!("staging-{tag}"));
    std::fs::create_dir_all(&staging).unwrap();
    let target = dir.join(format!("target-{tag}"));
    let mut stage = stage_req(v, &staging, &ctx);
    stage.volume_capability = Some(cap.clone());
    p.node.node_stage_volume(stage).await.unwrap();
    let mut publish = publish_req(v, Some(&staging), &target, &ctx, false);
    publish.volume_capability = Some(cap.clone());
    p.node.node_publish_volume(publish).await.unwrap();
    (staging, target)
}

/// Undoes [`bring_up`].
pub(crate) async fn take_down(p: &mut Plugin, v: &csi::Volume, staging: &Path, target: &Path) {
    p.node
        .node_unpublish_volume(unpublish_req(v, target))
        .await
        .unwrap();
    p.node
        .node_unstage_volume(unstage_req(v, staging))
        .await
        .unwrap();
    p.controller
        .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: "node-1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

pub(crate) fn stats_req(v: &csi::Volume, path: &Path) -> csi::NodeGetVolumeStatsRequest {
    csi::NodeGetVolumeStatsRequest {
        volume_id: v.volume_id.clone(),
        volume_path: path.display().to_string(),
        staging_target_path: String::new(),
    }
}

/// The total bytes NodeGetVolumeStats reports for `v` at `path`.
pub(crate) async fn stats_total(p: &mut Plugin, v: &csi::Volume, path: &Path) -> i64 {
    let stats = p
        .node
        .node_get_volume_stats(stats_req(v, path))
        .await
        .unwrap()
        .into_inner();
    stats
        .usage
        .iter()
        .find(|u| u.unit == csi::volume_usage::Unit::Bytes as i32)
        .expect("a usage in bytes")
        .total
}

/// The controller capabilities a plugin reports, as wire enum values.
pub(crate) async fn controller_caps(
    p: &mut Plugin,
) -> Vec<csi::controller_service_capability::rpc::Type> {
    use csi::controller_service_capability::Type;
    p.controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities
        .into_iter()
        .filter_map(|c| match c.r#type {
            Some(Type::Rpc(r)) => r.r#type().into(),
            None => None,
        })
        .collect()
}

/// The node capabilities a plugin reports, as wire enum values.
pub(crate) async fn node_caps(p: &mut Plugin) -> Vec<csi::node_service_capability::rpc::Type> {
    use csi::node_service_capability::Type;
    p.node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities
        .into_iter()
        .filter_map(|c| match c.r#type {
            Some(Type::Rpc(r)) => r.r#type().into(),
            None => None,
        })
        .collect()
}
