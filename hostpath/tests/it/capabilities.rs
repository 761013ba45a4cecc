//! Optional capabilities: advertised by default, each left out with `--disable`, and then
//! refused with the spec's code; ListVolumes and ControllerGetVolume with published nodes
//! and conditions; GetCapacity; expansion.

use std::path::Path;

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;
use tonic::Code;

use crate::support::*;

use csi::controller_service_capability::rpc::Type as C;
use csi::node_service_capability::rpc::Type as N;

#[tokio::test]
async fn every_capability_by_default() {
    let dir = TestDir::new("hostpath-caps");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let caps = controller_caps(&mut p).await;
    for c in [
        C::CreateDeleteVolume,
        C::PublishUnpublishVolume,
        C::ListVolumes,
        C::ListVolumesPublishedNodes,
        C::GetCapacity,
        C::CreateDeleteSnapshot,
        C::ListSnapshots,
        C::CloneVolume,
        C::ExpandVolume,
        C::VolumeCondition,
        C::GetVolume,
        C::ModifyVolume,
        C::GetSnapshot,
    ] {
        assert!(caps.contains(&c), "{c:?} in {caps:?}");
    }
    let ncaps = node_caps(&mut p).await;
    for n in [
        N::StageUnstageVolume,
        N::GetVolumeStats,
        N::ExpandVolume,
        N::VolumeCondition,
        N::VolumeMountGroup,
    ] {
        assert!(ncaps.contains(&n), "{n:?} in {ncaps:?}");
    }
    let plugin = p
        .identity
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    use csi::plugin_capability::{Type, volume_expansion};
    assert!(plugin.capabilities.iter().any(|c| matches!(
        &c.r#type,
        Some(Type::VolumeExpansion(e)) if e.r#type() == volume_expansion::Type::Online
    )));
    // Without --topology there are no accessibility constraints.
    assert!(!plugin.capabilities.iter().any(|c| matches!(
        &c.r#type,
        Some(Type::Service(s))
            if s.r#type() == csi::plugin_capability::service::Type::VolumeAccessibilityConstraints
    )));
}

/// With every optional capability disabled, none is advertised and each call is refused:
/// UNIMPLEMENTED for an RPC, INVALID_ARGUMENT for a request that needs a capability.
#[tokio::test]
async fn capabilities_left_out_are_refused() {
    let dir = TestDir::new("hostpath-nocaps");
    let mut p = Plugin::start(
        &dir,
        "node-1",
        &[
            "--disable=list-volumes",
            "--disable=get-capacity",
            "--disable=expand-volume",
            "--disable=snapshots",
            "--disable=clone-volume",
            "--disable=volume-stats",
            "--disable=volume-condition",
            "--disable=get-volume",
            "--disable=block",
            "--disable=modify-volume",
            "--disable=volume-mount-group",
        ],
    )
    .await;
    let caps = controller_caps(&mut p).await;
    assert_eq!(
        caps,
        [
            C::CreateDeleteVolume,
            C::PublishUnpublishVolume,
            C::PublishReadonly,
            C::SingleNodeMultiWriter
        ]
    );
    assert_eq!(
        node_caps(&mut p).await,
        [N::StageUnstageVolume, N::SingleNodeMultiWriter]
    );
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let c = &mut p.controller;
    assert_eq!(
        code(c.list_volumes(csi::ListVolumesRequest::default()).await),
        Code::Unimplemented
    );
    assert_eq!(
        code(c.get_capacity(csi::GetCapacityRequest::default()).await),
        Code::Unimplemented
    );
    let expand = csi::ControllerExpandVolumeRequest {
        volume_id: v.volume_id.clone(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 2 << 20,
            limit_bytes: 0,
        }),
        ..Default::default()
    };
    assert_eq!(
        code(c.controller_expand_volume(expand).await),
        Code::Unimplemented
    );
    let snapshot = csi::CreateSnapshotRequest {
        source_volume_id: v.volume_id.clone(),
        name: "s".into(),
        ..Default::default()
    };
    assert_eq!(code(c.create_snapshot(snapshot).await), Code::Unimplemented);
    assert_eq!(
        code(
            c.delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: "snapshot-000001".into(),
                ..Default::default()
            })
            .await
        ),
        Code::Unimplemented
    );
    assert_eq!(
        code(c.list_snapshots(csi::ListSnapshotsRequest::default()).await),
        Code::Unimplemented
    );
    assert_eq!(
        code(
            c.controller_get_volume(csi::ControllerGetVolumeRequest {
                volume_id: v.volume_id.clone()
            })
            .await
        ),
        Code::Unimplemented
    );
    // Sources this plugin cannot create from: INVALID_ARGUMENT ("source not supported").
    for source in [
        csi::volume_content_source::Type::Snapshot(csi::volume_content_source::SnapshotSource {
            snapshot_id: "snapshot-000001".into(),
        }),
        csi::volume_content_source::Type::Volume(csi::volume_content_source::VolumeSource {
            volume_id: v.volume_id.clone(),
        }),
    ] {
        let mut req = create_req("copy", mount_cap(AccessMode::SingleNodeWriter), 0);
        req.volume_content_source = Some(csi::VolumeContentSource {
            r#type: Some(source),
        });
        assert_eq!(code(c.create_volume(req).await), Code::InvalidArgument);
    }
    // Block access is an unsupported field.
    assert_eq!(
        code(c.create_volume(create_req("b", block_cap(), 1 << 20)).await),
        Code::InvalidArgument
    );
    // Topology is off without --topology: accessibility requirements are refused.
    let mut zonal = create_req("z", mount_cap(AccessMode::SingleNodeWriter), 0);
    zonal.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: vec![csi::Topology {
            segments: [("zone".to_owned(), "a".to_owned())].into(),
        }],
        preferred: vec![],
    });
    assert_eq!(code(c.create_volume(zonal).await), Code::InvalidArgument);

    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    assert_eq!(
        code(p.node.node_get_volume_stats(stats_req(&v, &target)).await),
        Code::Unimplemented
    );
    let node_expand = csi::NodeExpandVolumeRequest {
        volume_id: v.volume_id.clone(),
        volume_path: target.display().to_string(),
        ..Default::default()
    };
    assert_eq!(
        code(p.node.node_expand_volume(node_expand).await),
        Code::Unimplemented
    );
    take_down(&mut p, &v, &staging, &target).await;
}

/// ListVolumes shows the nodes a volume is published to and its condition;
/// ControllerGetVolume likewise, and NOT_FOUND for a volume that is gone. Without
/// LIST_VOLUMES_PUBLISHED_NODES the nodes are left out.
#[tokio::test]
async fn list_and_get_volumes_show_published_nodes_and_conditions() {
    let dir = TestDir::new("hostpath-list-volumes");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let _n2 = Plugin::start(&dir, "node-2", &[]).await;
    let shared = create(&mut p, "shared", AccessMode::MultiNodeMultiWriter).await;
    let idle = create(&mut p, "idle", AccessMode::SingleNodeWriter).await;
    for node in ["node-1", "node-2"] {
        controller_publish(&mut p, &shared, node, AccessMode::MultiNodeMultiWriter)
            .await
            .unwrap();
    }
    std::fs::create_dir_all(p.state_dir.join("abnormal")).unwrap();
    std::fs::write(
        p.state_dir.join("abnormal").join(&idle.volume_id),
        "disk on fire\n",
    )
    .unwrap();

    let list = p
        .controller
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    let status = |id: &str| {
        list.entries
            .iter()
            .find(|e| e.volume.as_ref().unwrap().volume_id == id)
            .unwrap()
            .status
            .clone()
            .unwrap()
    };
    assert_eq!(
        status(&shared.volume_id).published_node_ids,
        ["node-1", "node-2"]
    );
    assert!(!status(&shared.volume_id).volume_condition.unwrap().abnormal);
    assert!(status(&idle.volume_id).published_node_ids.is_empty());
    let condition = status(&idle.volume_id).volume_condition.unwrap();
    assert!(condition.abnormal);
    assert_eq!(condition.message, "disk on fire");

    let got = p
        .controller
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: shared.volume_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.volume.unwrap().volume_id, shared.volume_id);
    assert_eq!(got.status.unwrap().published_node_ids, ["node-1", "node-2"]);
    assert_eq!(
        code(
            p.controller
                .controller_get_volume(csi::ControllerGetVolumeRequest {
                    volume_id: "hostpath-999999".into()
                })
                .await
        ),
        Code::NotFound
    );
    // The storage system lost the volume's data: abnormal.
    std::fs::remove_dir_all(dir.join("backend/data").join(&shared.volume_id)).unwrap();
    let got = p
        .controller
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: shared.volume_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(got.status.unwrap().volume_condition.unwrap().abnormal);

    let dir2 = TestDir::new("hostpath-list-volumes-nonodes");
    let mut q = Plugin::start(
        &dir2,
        "node-1",
        &[
            "--disable=list-volumes-published-nodes",
            "--disable=volume-condition",
        ],
    )
    .await;
    assert!(
        !controller_caps(&mut q)
            .await
            .contains(&C::ListVolumesPublishedNodes)
    );
    let v = create(&mut q, "v", AccessMode::SingleNodeWriter).await;
    controller_publish(&mut q, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    let list = q
        .controller
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.entries.len(), 1);
    assert!(list.entries[0].status.is_none(), "{:?}", list.entries[0]);
}

/// GetCapacity with a `--capacity` pool: what is left after every volume; a volume that
/// does not fit is RESOURCE_EXHAUSTED. Without a pool it is the backend's free space.
#[tokio::test]
async fn get_capacity_reports_the_pool() {
    let dir = TestDir::new("hostpath-capacity");
    let pool = 10 << 20;
    let mut p = Plugin::start(&dir, "node-1", &[&format!("--capacity={pool}")]).await;
    let available = |r: csi::GetCapacityResponse| r.available_capacity;
    let before = p
        .controller
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(before.maximum_volume_size, Some(pool));
    assert_eq!(available(before), pool);
    create_with(
        &mut p,
        create_req("v", mount_cap(AccessMode::SingleNodeWriter), 4 << 20),
    )
    .await;
    let after = p
        .controller
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(available(after), 6 << 20);
    assert_eq!(
        code(
            p.controller
                .create_volume(create_req(
                    "too-big",
                    mount_cap(AccessMode::SingleNodeWriter),
                    7 << 20
                ))
                .await
        ),
        Code::ResourceExhausted
    );

    let dir2 = TestDir::new("hostpath-capacity-fs");
    let mut q = Plugin::start(&dir2, "node-1", &[]).await;
    let free = q
        .controller
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(free.available_capacity > 0);
    assert_eq!(free.maximum_volume_size, None);
}

/// The capacity ControllerGetVolume reports for `v`.
async fn recorded_capacity(p: &mut Plugin, v: &csi::Volume) -> i64 {
    p.controller
        .controller_get_volume(csi::ControllerGetVolumeRequest {
            volume_id: v.volume_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .capacity_bytes
}

/// NodeExpandVolume of `v` at `path` (staged at `staging`) to `bytes`.
fn node_expand_req(
    v: &csi::Volume,
    path: &Path,
    staging: &Path,
    bytes: i64,
) -> csi::NodeExpandVolumeRequest {
    csi::NodeExpandVolumeRequest {
        volume_id: v.volume_id.clone(),
        volume_path: path.display().to_string(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        staging_target_path: staging.display().to_string(),
        ..Default::default()
    }
}

fn expand_req(v: &csi::Volume, bytes: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: v.volume_id.clone(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        ..Default::default()
    }
}

/// Online expansion of a published file-system volume: the controller grows the volume,
/// the node's "file system" follows at NodeExpandVolume, as stats show.
#[tokio::test]
async fn expand_grows_a_published_volume() {
    let dir = TestDir::new("hostpath-expand");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let v = create_with(&mut p, create_req("v", cap.clone(), 1 << 20)).await;
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    assert_eq!(stats_total(&mut p, &v, &target).await, 1 << 20);

    let node_expand = |path: &Path, bytes: i64| node_expand_req(&v, path, &staging, bytes);
    // The node cannot grow past what the controller gave the volume.
    assert_eq!(
        code(
            p.node
                .node_expand_volume(node_expand(&staging, 3 << 20))
                .await
        ),
        Code::OutOfRange
    );
    for _ in 0..2 {
        let r = p
            .controller
            .controller_expand_volume(expand_req(&v, 3 << 20))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.capacity_bytes, 3 << 20);
        assert!(r.node_expansion_required);
    }
    // A smaller request is OK and changes nothing (the volume is already that large).
    let r = p
        .controller
        .controller_expand_volume(expand_req(&v, 2 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.capacity_bytes, 3 << 20);
    assert_eq!(
        stats_total(&mut p, &v, &target).await,
        1 << 20,
        "not yet on the node"
    );
    let grown = p
        .node
        .node_expand_volume(node_expand(&staging, 3 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grown.capacity_bytes, 3 << 20);
    assert_eq!(stats_total(&mut p, &v, &target).await, 3 << 20);
    assert_eq!(recorded_capacity(&mut p, &v).await, 3 << 20);

    // Wrong requests: a path without the volume, an unknown volume, no range.
    assert_eq!(
        code(
            p.node
                .node_expand_volume(node_expand(&dir.join("elsewhere"), 0))
                .await
        ),
        Code::NotFound
    );
    let ghost = csi::Volume {
        volume_id: "hostpath-999999".into(),
        ..Default::default()
    };
    assert_eq!(
        code(
            p.controller
                .controller_expand_volume(expand_req(&ghost, 1))
                .await
        ),
        Code::NotFound
    );
    let mut no_range = expand_req(&v, 0);
    no_range.capacity_range = None;
    assert_eq!(
        code(p.controller.controller_expand_volume(no_range).await),
        Code::InvalidArgument
    );
    take_down(&mut p, &v, &staging, &target).await;
}

/// `--expansion offline`: refused while the volume is published (FAILED_PRECONDITION),
/// done once it is not; the file system then waits for NodeExpandVolume after the next
/// stage.
#[tokio::test]
async fn offline_expansion_waits_for_unpublish() {
    let dir = TestDir::new("hostpath-expand-offline");
    let mut p = Plugin::start(&dir, "node-1", &["--expansion=offline"]).await;
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let v = create_with(&mut p, create_req("v", cap.clone(), 1 << 20)).await;
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    let err = p
        .controller
        .controller_expand_volume(expand_req(&v, 2 << 20))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("node-1"), "{}", err.message());
    take_down(&mut p, &v, &staging, &target).await;
    let r = p
        .controller
        .controller_expand_volume(expand_req(&v, 2 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.capacity_bytes, 2 << 20);
    assert!(r.node_expansion_required);
    // Staged again, the file system is as it was until NodeExpandVolume grows it: it
    // belongs to the volume, not to the node that staged it.
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "b").await;
    assert_eq!(stats_total(&mut p, &v, &target).await, 1 << 20);
    p.node
        .node_expand_volume(node_expand_req(&v, &staging, &staging, 2 << 20))
        .await
        .unwrap();
    assert_eq!(stats_total(&mut p, &v, &target).await, 2 << 20);
    take_down(&mut p, &v, &staging, &target).await;
    // And it stays grown when staged again.
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "c").await;
    assert_eq!(stats_total(&mut p, &v, &target).await, 2 << 20);
    take_down(&mut p, &v, &staging, &target).await;
}

/// `--disable controller-expand-volume`: a node-only plugin. ControllerExpandVolume is
/// UNIMPLEMENTED and the controller does not list EXPAND_VOLUME; the node's
/// NodeExpandVolume grows the volume in storage and its file system.
#[tokio::test]
async fn node_only_expansion_grows_the_volume_from_the_node() {
    let dir = TestDir::new("hostpath-expand-node-only");
    let mut p = Plugin::start(&dir, "node-1", &["--disable=controller-expand-volume"]).await;
    assert!(!controller_caps(&mut p).await.contains(&C::ExpandVolume));
    assert!(node_caps(&mut p).await.contains(&N::ExpandVolume));
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let v = create_with(&mut p, create_req("v", cap.clone(), 1 << 20)).await;
    assert_eq!(
        code(
            p.controller
                .controller_expand_volume(expand_req(&v, 2 << 20))
                .await
        ),
        Code::Unimplemented
    );
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    let grown = p
        .node
        .node_expand_volume(node_expand_req(&v, &target, &staging, 2 << 20))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grown.capacity_bytes, 2 << 20);
    assert_eq!(stats_total(&mut p, &v, &target).await, 2 << 20);
    assert_eq!(recorded_capacity(&mut p, &v).await, 2 << 20);
    take_down(&mut p, &v, &staging, &target).await;
}

/// With the request's `volume_mount_group` set to a group.
fn with_group(mut cap: Option<csi::VolumeCapability>, gid: &str) -> Option<csi::VolumeCapability> {
    if let Some(csi::volume_capability::AccessType::Mount(m)) =
        cap.as_mut().and_then(|c| c.access_type.as_mut())
    {
        m.volume_mount_group = gid.into();
    }
    cap
}

/// VOLUME_MOUNT_GROUP: the published root gets the group, `g+rwx` and setgid; without the
/// capability (`--disable volume-mount-group`) a CO that sends the group anyway is refused.
#[tokio::test]
async fn volume_mount_group_gives_the_published_root_the_group_or_is_refused_without_it() {
    use std::os::unix::fs::MetadataExt;
    for (args, offered) in [
        (&[][..], true),
        (&["--disable=volume-mount-group"][..], false),
    ] {
        let dir = TestDir::new("hostpath-mount-group");
        let mut p = Plugin::start(&dir, "node-1", args).await;
        assert_eq!(
            node_caps(&mut p).await.contains(&N::VolumeMountGroup),
            offered
        );
        let v = create(&mut p, "data", AccessMode::SingleNodeWriter).await;
        let ctx = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
            .await
            .unwrap();
        let staging = dir.join("staging");
        std::fs::create_dir(&staging).unwrap();
        let mut stage = stage_req(&v, &staging, &ctx);
        stage.volume_capability = with_group(stage.volume_capability, "4321");
        let staged = p.node.node_stage_volume(stage.clone()).await;
        if !offered {
            assert_eq!(code(staged), Code::InvalidArgument);
            stage.volume_capability = Some(mount_cap(AccessMode::SingleNodeWriter));
            p.node.node_stage_volume(stage).await.unwrap();
        } else {
            staged.unwrap();
        }
        std::fs::create_dir(dir.join("targets")).unwrap();
        let target = dir.join("targets/t");
        let mut publish = publish_req(&v, Some(&staging), &target, &ctx, false);
        publish.volume_capability = with_group(publish.volume_capability, "4321");
        let published = p.node.node_publish_volume(publish).await;
        if offered {
            published.unwrap();
            let m = std::fs::metadata(&target).unwrap();
            assert_eq!(m.gid(), 4321);
            assert_eq!(
                m.mode() & 0o2070,
                0o2070,
                "g+rwx and setgid: {:o}",
                m.mode()
            );
            p.node
                .node_unpublish_volume(unpublish_req(&v, &target))
                .await
                .unwrap();
        } else {
            assert_eq!(code(published), Code::InvalidArgument);
        }
    }
}
