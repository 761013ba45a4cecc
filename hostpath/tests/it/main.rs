//! csivol-hostpath over a real unix socket, through the generated client: the lifecycle with
//! real bind mounts, the spec's error codes, fault injection and restart persistence.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use csivol_proto::CsiEndpoint;
use csivol_proto::csi::v1 as csi;
use csivol_proto::domain::{AccessMode, AccessType, VolumeCapability};
use csivol_tests::{Proc, TestDir, is_mounted, wait_for};
use tonic::Code;
use tonic::transport::Channel;

type Identity = csi::identity_client::IdentityClient<Channel>;
type Controller = csi::controller_client::ControllerClient<Channel>;
type Node = csi::node_client::NodeClient<Channel>;

/// One running plugin process and clients for its three services.
struct Plugin {
    proc: Proc,
    socket: PathBuf,
    args: Vec<String>,
    state_dir: PathBuf,
    log: PathBuf,
    identity: Identity,
    controller: Controller,
    node: Node,
}

impl Plugin {
    /// Starts `csivol-hostpath` for `node_id` in `dir`, sharing `dir/backend`.
    async fn start(dir: &TestDir, node_id: &str, extra: &[&str]) -> Self {
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

    async fn spawn(socket: PathBuf, args: Vec<String>, state_dir: PathBuf, log: PathBuf) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_csivol-hostpath"));
        cmd.args(&args);
        let mut proc = Proc::spawn("csivol-hostpath", cmd, &log);
        let channel = CsiEndpoint::Unix(socket.clone()).channel(Duration::from_secs(10));
        let mut identity = Identity::new(channel.clone());
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
            controller: Controller::new(channel.clone()),
            node: Node::new(channel),
        }
    }

    /// Kills the plugin with SIGKILL and starts it again with the same arguments.
    async fn restart_after_kill(self) -> Self {
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
    fn calls(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state_dir.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn mount_cap(mode: AccessMode) -> csi::VolumeCapability {
    csi::VolumeCapability::from(&VolumeCapability {
        access_type: AccessType::FileSystem {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: mode,
    })
}

fn block_cap() -> csi::VolumeCapability {
    csi::VolumeCapability::from(&VolumeCapability {
        access_type: AccessType::BlockDevice,
        access_mode: AccessMode::SingleNodeWriter,
    })
}

fn code<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(s) => s.code(),
    }
}

fn message<T: std::fmt::Debug>(r: Result<tonic::Response<T>, tonic::Status>) -> String {
    r.expect_err("expected an error").message().to_owned()
}

async fn create(p: &mut Plugin, name: &str, mode: AccessMode) -> csi::Volume {
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

async fn controller_publish(
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

fn stage_req(
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

fn publish_req(
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

fn unpublish_req(v: &csi::Volume, target: &Path) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        target_path: target.display().to_string(),
    }
}

fn unstage_req(v: &csi::Volume, staging: &Path) -> csi::NodeUnstageVolumeRequest {
    csi::NodeUnstageVolumeRequest {
        volume_id: v.volume_id.clone(),
        staging_target_path: staging.display().to_string(),
    }
}

/// Whether `path` shows the volume as attached in the given mode.
fn attached(bind: bool, path: &Path) -> bool {
    if bind {
        is_mounted(path)
    } else {
        path.join(".csivol-hostpath").is_file()
    }
}

/// create → controller publish → stage → publish → unpublish → unstage → controller
/// unpublish → delete, each call made twice to prove it idempotent.
async fn lifecycle(mount: &str) {
    let dir = TestDir::new("hostpath-lifecycle");
    let bind = mount == "bind";
    let mut p = Plugin::start(&dir, "node-1", &[&format!("--mount={mount}")]).await;

    let info = p
        .identity
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "hostpath.csivol.dev");
    let node_info = p
        .node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(node_info.node_id, "node-1");

    let v = create(&mut p, "data", AccessMode::SingleNodeWriter).await;
    let again = create(&mut p, "data", AccessMode::SingleNodeWriter).await;
    assert_eq!(
        v, again,
        "CreateVolume with the same name must return the same volume"
    );
    assert_eq!(v.capacity_bytes, 1 << 20);

    let ctx = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    let ctx2 = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    assert_eq!(ctx, ctx2);
    assert!(!ctx.is_empty(), "publish_context carries the device");

    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    for _ in 0..2 {
        p.node
            .node_stage_volume(stage_req(&v, &staging, &ctx))
            .await
            .unwrap();
        assert!(attached(bind, &staging));
    }

    let targets = dir.join("targets");
    std::fs::create_dir(&targets).unwrap();
    let target = targets.join("alloc-1");
    let ro_target = targets.join("alloc-2");
    for _ in 0..2 {
        p.node
            .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
            .await
            .unwrap();
        p.node
            .node_publish_volume(publish_req(&v, Some(&staging), &ro_target, &ctx, true))
            .await
            .unwrap();
        assert!(attached(bind, &target));
        assert!(attached(bind, &ro_target));
    }
    if bind {
        // The data written through the target lands in the volume, and the read-only target
        // refuses writes.
        std::fs::write(target.join("hello.txt"), "hi").unwrap();
        assert_eq!(
            std::fs::read_to_string(ro_target.join("hello.txt")).unwrap(),
            "hi"
        );
        let err = std::fs::write(ro_target.join("nope.txt"), "x").unwrap_err();
        assert_eq!(
            err.raw_os_error(),
            Some(rustix::io::Errno::ROFS.raw_os_error())
        );
    }
    let stats = p
        .node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: v.volume_id.clone(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.usage.len(), 2);
    assert!(!stats.volume_condition.unwrap().abnormal);

    for _ in 0..2 {
        p.node
            .node_unpublish_volume(unpublish_req(&v, &target))
            .await
            .unwrap();
        p.node
            .node_unpublish_volume(unpublish_req(&v, &ro_target))
            .await
            .unwrap();
        assert!(
            !target.exists() && !ro_target.exists(),
            "unpublish removes the target"
        );
    }
    for _ in 0..2 {
        p.node
            .node_unstage_volume(unstage_req(&v, &staging))
            .await
            .unwrap();
        assert!(!attached(bind, &staging));
    }
    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: "node-1".into(),
        ..Default::default()
    };
    for _ in 0..2 {
        p.controller
            .controller_unpublish_volume(unpublish.clone())
            .await
            .unwrap();
    }
    let delete = csi::DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    };
    for _ in 0..2 {
        p.controller.delete_volume(delete.clone()).await.unwrap();
    }
    assert!(
        !dir.join("backend/data").join(&v.volume_id).exists(),
        "delete removes the data"
    );
    assert!(dir.mounts().is_empty(), "no mount left: {:?}", dir.mounts());
}

#[tokio::test]
async fn lifecycle_with_bind_mounts() {
    lifecycle("bind").await;
}

#[tokio::test]
async fn lifecycle_without_mounts() {
    lifecycle("none").await;
}

#[tokio::test]
async fn required_fields_are_invalid_argument() {
    let dir = TestDir::new("hostpath-fields");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let c = &mut p.controller;
    assert_eq!(
        code(c.create_volume(csi::CreateVolumeRequest::default()).await),
        Code::InvalidArgument
    );
    let no_caps = csi::CreateVolumeRequest {
        name: "x".into(),
        ..Default::default()
    };
    assert_eq!(code(c.create_volume(no_caps).await), Code::InvalidArgument);
    let block = csi::CreateVolumeRequest {
        name: "x".into(),
        volume_capabilities: vec![block_cap()],
        ..Default::default()
    };
    assert!(message(c.create_volume(block).await).contains("block access is not supported"));
    assert_eq!(
        code(c.delete_volume(csi::DeleteVolumeRequest::default()).await),
        Code::InvalidArgument
    );
    let no_node = csi::ControllerPublishVolumeRequest {
        volume_id: "v".into(),
        ..Default::default()
    };
    assert_eq!(
        code(c.controller_publish_volume(no_node).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            c.controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest::default())
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            c.validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest::default())
                .await
        ),
        Code::InvalidArgument
    );
    let n = &mut p.node;
    assert_eq!(
        code(
            n.node_stage_volume(csi::NodeStageVolumeRequest::default())
                .await
        ),
        Code::InvalidArgument
    );
    let relative = csi::NodeStageVolumeRequest {
        volume_id: "v".into(),
        staging_target_path: "relative/path".into(),
        volume_capability: Some(mount_cap(AccessMode::SingleNodeWriter)),
        ..Default::default()
    };
    assert!(message(n.node_stage_volume(relative).await).contains("absolute"));
    assert_eq!(
        code(
            n.node_unstage_volume(csi::NodeUnstageVolumeRequest::default())
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            n.node_publish_volume(csi::NodePublishVolumeRequest::default())
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            n.node_unpublish_volume(csi::NodeUnpublishVolumeRequest::default())
                .await
        ),
        Code::InvalidArgument
    );
    let no_path = csi::NodeGetVolumeStatsRequest {
        volume_id: "v".into(),
        ..Default::default()
    };
    assert_eq!(
        code(n.node_get_volume_stats(no_path).await),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn unknown_volumes_are_not_found() {
    let dir = TestDir::new("hostpath-notfound");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let ghost = csi::Volume {
        volume_id: "hostpath-999999".into(),
        ..Default::default()
    };
    assert_eq!(
        code(
            controller_publish(&mut p, &ghost, "node-1", AccessMode::SingleNodeWriter)
                .await
                .map(tonic::Response::new)
        ),
        Code::NotFound
    );
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    assert_eq!(
        code(
            p.node
                .node_stage_volume(stage_req(&ghost, &staging, &HashMap::new()))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(
            p.node
                .node_unstage_volume(unstage_req(&ghost, &staging))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(
            p.node
                .node_unpublish_volume(unpublish_req(&ghost, &dir.join("t")))
                .await
        ),
        Code::NotFound
    );
    let validate = csi::ValidateVolumeCapabilitiesRequest {
        volume_id: ghost.volume_id.clone(),
        volume_capabilities: vec![mount_cap(AccessMode::SingleNodeWriter)],
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.validate_volume_capabilities(validate).await),
        Code::NotFound
    );
    // Deleting a volume that does not exist succeeds: DeleteVolume is idempotent.
    let delete = csi::DeleteVolumeRequest {
        volume_id: ghost.volume_id.clone(),
        ..Default::default()
    };
    p.controller.delete_volume(delete).await.unwrap();
    // A node the backend never heard of cannot be published to.
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let err = controller_publish(&mut p, &v, "node-9", AccessMode::SingleNodeWriter)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn lifecycle_violations_are_failed_precondition() {
    let dir = TestDir::new("hostpath-lifecycle-errors");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    let target = dir.join("target");

    // Node calls before ControllerPublishVolume.
    let err = p
        .node
        .node_stage_volume(stage_req(&v, &staging, &HashMap::new()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("ControllerPublishVolume first"),
        "{}",
        err.message()
    );

    let ctx = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    // A stale or forged publish context is refused.
    let forged: HashMap<_, _> = [(
        "hostpath.csivol.dev/device".to_owned(),
        "/dev/other".to_owned(),
    )]
    .into();
    assert_eq!(
        code(
            p.node
                .node_stage_volume(stage_req(&v, &staging, &forged))
                .await
        ),
        Code::FailedPrecondition
    );
    // The volume context CreateVolume returned must come back.
    let mut no_context = stage_req(&v, &staging, &ctx);
    no_context.volume_context.clear();
    assert_eq!(
        code(p.node.node_stage_volume(no_context).await),
        Code::InvalidArgument
    );

    // Publish before stage.
    let err = p
        .node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("NodeStageVolume first"),
        "{}",
        err.message()
    );

    p.node
        .node_stage_volume(stage_req(&v, &staging, &ctx))
        .await
        .unwrap();
    // Staging the same volume somewhere else on the node.
    let other_staging = dir.join("staging-2");
    std::fs::create_dir(&other_staging).unwrap();
    assert_eq!(
        code(
            p.node
                .node_stage_volume(stage_req(&v, &other_staging, &ctx))
                .await
        ),
        Code::FailedPrecondition
    );
    p.node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap();
    // Same target with different options.
    assert_eq!(
        code(
            p.node
                .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, true))
                .await
        ),
        Code::AlreadyExists
    );
    // Unstage while still published.
    let err = p
        .node
        .node_unstage_volume(unstage_req(&v, &staging))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message().contains("NodeUnpublishVolume first"),
        "{}",
        err.message()
    );
    // Delete while published.
    let delete = csi::DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.delete_volume(delete).await),
        Code::FailedPrecondition
    );
    // Same name, incompatible capacity.
    let bigger = csi::CreateVolumeRequest {
        name: "v".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![mount_cap(AccessMode::SingleNodeWriter)],
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.create_volume(bigger).await),
        Code::AlreadyExists
    );
    let inverted = csi::CreateVolumeRequest {
        name: "w".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 10,
            limit_bytes: 5,
        }),
        volume_capabilities: vec![mount_cap(AccessMode::SingleNodeWriter)],
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.create_volume(inverted).await),
        Code::OutOfRange
    );
    let bad_token = csi::ListVolumesRequest {
        max_entries: 0,
        starting_token: "nope".into(),
    };
    assert_eq!(
        code(p.controller.list_volumes(bad_token).await),
        Code::Aborted
    );

    p.node
        .node_unpublish_volume(unpublish_req(&v, &target))
        .await
        .unwrap();
    p.node
        .node_unstage_volume(unstage_req(&v, &staging))
        .await
        .unwrap();
    assert!(dir.mounts().is_empty());
}

#[tokio::test]
async fn single_node_volumes_and_volume_limits() {
    let dir = TestDir::new("hostpath-limits");
    let mut n1 = Plugin::start(&dir, "node-1", &["--max-volumes-per-node=1"]).await;
    let _n2 = Plugin::start(&dir, "node-2", &[]).await;
    let single = create(&mut n1, "single", AccessMode::SingleNodeWriter).await;
    let multi = create(&mut n1, "multi", AccessMode::MultiNodeMultiWriter).await;

    controller_publish(&mut n1, &single, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    let err = controller_publish(&mut n1, &single, "node-2", AccessMode::SingleNodeWriter)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(
        err.message().contains("node-1"),
        "names the holder: {}",
        err.message()
    );

    // node-1 allows one volume: the second is refused, on node-2 it fits, and a multi-node
    // volume may be on both nodes.
    let err = controller_publish(&mut n1, &multi, "node-1", AccessMode::MultiNodeMultiWriter)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());
    controller_publish(&mut n1, &multi, "node-2", AccessMode::MultiNodeMultiWriter)
        .await
        .unwrap();
    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: single.volume_id.clone(),
        node_id: "node-1".into(),
        ..Default::default()
    };
    n1.controller
        .controller_unpublish_volume(unpublish)
        .await
        .unwrap();
    controller_publish(&mut n1, &multi, "node-1", AccessMode::MultiNodeMultiWriter)
        .await
        .unwrap();

    let list = n1
        .controller
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 1,
            starting_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.entries.len(), 1);
    assert_eq!(list.next_token, "1");
    let rest = n1
        .controller
        .list_volumes(csi::ListVolumesRequest {
            max_entries: 0,
            starting_token: list.next_token,
        })
        .await
        .unwrap()
        .into_inner();
    let published = &rest.entries[0].status.as_ref().unwrap().published_node_ids;
    assert_eq!(published, &["node-1".to_owned(), "node-2".to_owned()]);
}

#[tokio::test]
async fn fault_injection_fails_then_recovers_and_delays() {
    let dir = TestDir::new("hostpath-faults");
    let mut p = Plugin::start(
        &dir,
        "node-1",
        &[
            "--fail=CreateVolume=UNAVAILABLE:2",
            "--fail=DeleteVolume=INTERNAL",
            "--delay=NodeGetInfo=300ms",
        ],
    )
    .await;
    let req = csi::CreateVolumeRequest {
        name: "v".into(),
        volume_capabilities: vec![mount_cap(AccessMode::SingleNodeWriter)],
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.create_volume(req.clone()).await),
        Code::Unavailable
    );
    assert_eq!(
        code(p.controller.create_volume(req.clone()).await),
        Code::Unavailable
    );
    p.controller.create_volume(req).await.unwrap();
    for _ in 0..3 {
        let delete = csi::DeleteVolumeRequest {
            volume_id: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            code(p.controller.delete_volume(delete).await),
            Code::Internal
        );
    }
    let started = Instant::now();
    p.node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the delay was applied"
    );

    let creates: Vec<_> = p
        .calls()
        .into_iter()
        .filter(|c| c["rpc"] == "CreateVolume")
        .map(|c| c["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(creates, ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
}

#[tokio::test]
async fn delayed_calls_are_seen_in_flight_together() {
    let dir = TestDir::new("hostpath-inflight");
    let p = Plugin::start(&dir, "node-1", &["--delay=NodeGetInfo=400ms"]).await;
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let mut node = p.node.clone();
            tokio::spawn(async move {
                node.node_get_info(csi::NodeGetInfoRequest {})
                    .await
                    .unwrap()
            })
        })
        .collect();
    for c in calls {
        c.await.unwrap();
    }
    let max = p
        .calls()
        .iter()
        .filter(|c| c["rpc"] == "NodeGetInfo")
        .map(|c| c["in_flight"].as_u64().unwrap())
        .max();
    assert_eq!(max, Some(3), "the call log counts concurrent node calls");
}

#[tokio::test]
async fn restart_keeps_what_it_did() {
    let dir = TestDir::new("hostpath-restart");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let ctx = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    let target = dir.join("target");
    p.node
        .node_stage_volume(stage_req(&v, &staging, &ctx))
        .await
        .unwrap();
    p.node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap();

    let mut p = p.restart_after_kill().await;
    // The restarted plugin remembers the staging and publication: repeating them is a no-op,
    // and unstaging before unpublishing is still refused.
    p.node
        .node_stage_volume(stage_req(&v, &staging, &ctx))
        .await
        .unwrap();
    p.node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap();
    assert_eq!(
        code(p.node.node_unstage_volume(unstage_req(&v, &staging)).await),
        Code::FailedPrecondition
    );
    assert_eq!(
        dir.mounts().len(),
        2,
        "nothing mounted twice: {:?}",
        dir.mounts()
    );

    p.node
        .node_unpublish_volume(unpublish_req(&v, &target))
        .await
        .unwrap();
    p.node
        .node_unstage_volume(unstage_req(&v, &staging))
        .await
        .unwrap();
    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: "node-1".into(),
        ..Default::default()
    };
    p.controller
        .controller_unpublish_volume(unpublish)
        .await
        .unwrap();
    let delete = csi::DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    };
    p.controller.delete_volume(delete).await.unwrap();
    assert!(dir.mounts().is_empty());
}

#[tokio::test]
async fn node_only_plugin_without_staging() {
    let dir = TestDir::new("hostpath-nostage");
    let mut p = Plugin::start(&dir, "node-1", &["--no-controller", "--no-stage"]).await;
    let caps = p
        .controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap();
    let caps = csivol_proto::domain::ControllerCapabilities::from(caps.get_ref());
    assert!(!caps.publish_unpublish_volume && caps.create_delete_volume);
    let ncaps = p
        .node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap();
    assert!(!csivol_proto::domain::NodeCapabilities::from(ncaps.get_ref()).stage_unstage_volume);

    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let err = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    assert_eq!(
        code(
            p.node
                .node_stage_volume(stage_req(&v, &staging, &HashMap::new()))
                .await
        ),
        Code::Unimplemented
    );

    let target = dir.join("target");
    p.node
        .node_publish_volume(publish_req(&v, None, &target, &HashMap::new(), false))
        .await
        .unwrap();
    assert!(is_mounted(&target));
    std::fs::write(target.join("f"), "data").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("backend/data").join(&v.volume_id).join("f")).unwrap(),
        "data"
    );
    p.node
        .node_unpublish_volume(unpublish_req(&v, &target))
        .await
        .unwrap();
    assert!(dir.mounts().is_empty());
}

#[tokio::test]
async fn replaces_stale_socket_and_stops_on_sigterm() {
    let dir = TestDir::new("hostpath-signals");
    std::fs::write(dir.join("node-1.sock"), "stale").unwrap();
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    assert!(p.socket.exists());
    let status = p
        .proc
        .terminate(Duration::from_secs(10))
        .expect("exits on SIGTERM");
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(&p.log).unwrap()
    );
    wait_for("socket removal", Duration::from_secs(5), || {
        (!p.socket.exists()).then_some(())
    });
}
