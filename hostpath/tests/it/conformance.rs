//! Points where the plugin once diverged from the spec's error tables, each checked
//! against the table's answer.

use std::collections::HashMap;

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::{TestDir, is_mounted};
use tonic::Code;

use crate::support::*;

/// `volume_context` is OPTIONAL in ControllerPublishVolume: the plugin works without it,
/// and refuses only one that does not match the volume's.
#[tokio::test]
async fn controller_publish_without_volume_context() {
    let dir = TestDir::new("hostpath-publish-context");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let req = |context: HashMap<String, String>| csi::ControllerPublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: "node-1".into(),
        volume_capability: Some(mount_cap(AccessMode::SingleNodeWriter)),
        volume_context: context,
        ..Default::default()
    };
    let without = p
        .controller
        .controller_publish_volume(req(HashMap::new()))
        .await
        .unwrap()
        .into_inner();
    let with = p
        .controller
        .controller_publish_volume(req(v.volume_context.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(without.publish_context, with.publish_context);
    let wrong: HashMap<_, _> = [("hostpath.csivol.dev/name".to_owned(), "other".to_owned())].into();
    assert_eq!(
        code(p.controller.controller_publish_volume(req(wrong)).await),
        Code::InvalidArgument
    );
    // ValidateVolumeCapabilities likewise confirms without a context.
    let confirmed = p
        .controller
        .validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest {
            volume_id: v.volume_id.clone(),
            volume_capabilities: vec![mount_cap(AccessMode::SingleNodeWriter)],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(confirmed.confirmed.is_some(), "{}", confirmed.message);
}

/// ControllerUnpublishVolume for a volume or a node that no longer exists: the volume can
/// be regarded as unpublished, so the answer is OK (it was NOT_FOUND).
#[tokio::test]
async fn controller_unpublish_of_what_is_gone_is_ok() {
    let dir = TestDir::new("hostpath-unpublish-gone");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let unpublish = |volume_id: &str, node_id: &str| csi::ControllerUnpublishVolumeRequest {
        volume_id: volume_id.into(),
        node_id: node_id.into(),
        ..Default::default()
    };
    for (volume, node) in [
        ("hostpath-999999", "node-1"),
        ("hostpath-999999", ""),
        ("not a plugin id", "node-1"),
    ] {
        p.controller
            .controller_unpublish_volume(unpublish(volume, node))
            .await
            .unwrap_or_else(|e| panic!("unpublish {volume} from {node:?}: {e}"));
    }
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    p.controller
        .controller_unpublish_volume(unpublish(&v.volume_id, "node-that-never-was"))
        .await
        .unwrap();
    // Published, then the volume deleted behind the CO's back: still OK, and the
    // attachment is gone with it.
    controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    std::fs::remove_file(
        dir.join("backend/volumes")
            .join(format!("{}.json", v.volume_id)),
    )
    .unwrap();
    p.controller
        .controller_unpublish_volume(unpublish(&v.volume_id, "node-1"))
        .await
        .unwrap();
    assert!(
        !dir.join("backend/attachments")
            .join(&v.volume_id)
            .join("node-1.json")
            .exists()
    );
}

/// NodeGetVolumeStats for a path that does not hold the volume is NOT_FOUND, whatever the
/// path (it was INVALID_ARGUMENT for a relative one); an unknown volume is NOT_FOUND too.
#[tokio::test]
async fn volume_stats_for_a_path_without_the_volume_is_not_found() {
    let dir = TestDir::new("hostpath-stats-notfound");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    for path in ["some/path", "/path/does/not/exist", "/"] {
        let mut req = stats_req(&v, &target);
        req.volume_path = path.into();
        assert_eq!(
            code(p.node.node_get_volume_stats(req).await),
            Code::NotFound,
            "{path}"
        );
    }
    let ghost = csi::Volume {
        volume_id: "hostpath-999999".into(),
        ..Default::default()
    };
    let mut req = stats_req(&ghost, &target);
    req.volume_path = "some/path".into();
    assert_eq!(
        code(p.node.node_get_volume_stats(req).await),
        Code::NotFound
    );
    // An empty path is a missing required field.
    let mut req = stats_req(&v, &target);
    req.volume_path.clear();
    assert_eq!(
        code(p.node.node_get_volume_stats(req).await),
        Code::InvalidArgument
    );
    // Where the volume is, it answers.
    p.node
        .node_get_volume_stats(stats_req(&v, &target))
        .await
        .unwrap();
    p.node
        .node_get_volume_stats(stats_req(&v, &staging))
        .await
        .unwrap();
    take_down(&mut p, &v, &staging, &target).await;
}

/// NodePublishVolume on a staging plugin without `staging_target_path`: the table's
/// "Staging target path not set" is FAILED_PRECONDITION.
#[tokio::test]
async fn publish_without_staging_path_is_failed_precondition() {
    let dir = TestDir::new("hostpath-publish-nostaging");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let ctx = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    let target = dir.join("target");
    let r = p
        .node
        .node_publish_volume(publish_req(&v, None, &target, &ctx, false))
        .await;
    assert_eq!(code(r), Code::FailedPrecondition);
    assert!(!is_mounted(&target));
}

/// Block access to a file-system volume (and the reverse) is refused with each call's
/// own code: INVALID_ARGUMENT at the controller, FAILED_PRECONDITION ("exceeds
/// capabilities") at the node, not confirmed by ValidateVolumeCapabilities.
#[tokio::test]
async fn access_type_that_does_not_fit_the_volume() {
    let dir = TestDir::new("hostpath-kind");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let fs_volume = create(&mut p, "fs", AccessMode::SingleNodeWriter).await;
    let block = block_cap();
    let mut publish = csi::ControllerPublishVolumeRequest {
        volume_id: fs_volume.volume_id.clone(),
        node_id: "node-1".into(),
        volume_capability: Some(block.clone()),
        ..Default::default()
    };
    assert_eq!(
        code(
            p.controller
                .controller_publish_volume(publish.clone())
                .await
        ),
        Code::InvalidArgument
    );
    let validate = p
        .controller
        .validate_volume_capabilities(csi::ValidateVolumeCapabilitiesRequest {
            volume_id: fs_volume.volume_id.clone(),
            volume_capabilities: vec![block.clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(validate.confirmed.is_none());
    assert!(
        validate.message.contains("file-system volume"),
        "{}",
        validate.message
    );
    publish.volume_capability = Some(mount_cap(AccessMode::SingleNodeWriter));
    let ctx = p
        .controller
        .controller_publish_volume(publish)
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    let mut stage = stage_req(&fs_volume, &staging, &ctx);
    stage.volume_capability = Some(block.clone());
    assert_eq!(
        code(p.node.node_stage_volume(stage).await),
        Code::FailedPrecondition
    );
    // One volume cannot be both.
    let mut mixed = create_req("mixed", block, 1 << 20);
    mixed
        .volume_capabilities
        .push(mount_cap(AccessMode::SingleNodeWriter));
    assert_eq!(
        code(p.controller.create_volume(mixed).await),
        Code::InvalidArgument
    );
}

/// The rows of the error table (docs/reference-plugin.md) that the other tests do not reach.
#[tokio::test]
async fn the_rest_of_the_error_table() {
    let dir = TestDir::new("hostpath-error-table");
    let mut p = Plugin::start(&dir, "node-1", &["--capacity=8388608"]).await;
    let v = create(&mut p, "v", AccessMode::MultiNodeMultiWriter).await;
    let publish =
        |readonly: bool, cap: csi::VolumeCapability| csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: "node-1".into(),
            volume_capability: Some(cap),
            readonly,
            ..Default::default()
        };
    let mode = AccessMode::MultiNodeMultiWriter;
    let ctx = p
        .controller
        .controller_publish_volume(publish(false, mount_cap(mode)))
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    // ControllerPublishVolume: published here with another readonly or capability.
    assert_eq!(
        code(
            p.controller
                .controller_publish_volume(publish(true, mount_cap(mode)))
                .await
        ),
        Code::AlreadyExists
    );
    assert_eq!(
        code(
            p.controller
                .controller_publish_volume(publish(
                    false,
                    mount_cap(AccessMode::MultiNodeReaderOnly)
                ))
                .await
        ),
        Code::AlreadyExists
    );
    // NodeStageVolume: staged at that path with another capability.
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    let mut stage = stage_req(&v, &staging, &ctx);
    stage.volume_capability = Some(mount_cap(mode));
    p.node.node_stage_volume(stage.clone()).await.unwrap();
    stage.volume_capability = Some(mount_cap(AccessMode::MultiNodeReaderOnly));
    assert_eq!(
        code(p.node.node_stage_volume(stage).await),
        Code::AlreadyExists
    );
    // NodeExpandVolume: block access to a file-system volume.
    let expand = csi::NodeExpandVolumeRequest {
        volume_id: v.volume_id.clone(),
        volume_path: staging.display().to_string(),
        volume_capability: Some(block_cap()),
        ..Default::default()
    };
    assert_eq!(
        code(p.node.node_expand_volume(expand).await),
        Code::InvalidArgument
    );
    // ControllerExpandVolume: a capability that does not fit; past the pool.
    let grow =
        |bytes: i64, cap: Option<csi::VolumeCapability>| csi::ControllerExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: bytes,
                limit_bytes: 0,
            }),
            volume_capability: cap,
            ..Default::default()
        };
    assert_eq!(
        code(
            p.controller
                .controller_expand_volume(grow(2 << 20, Some(block_cap())))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            p.controller
                .controller_expand_volume(grow(64 << 20, None))
                .await
        ),
        Code::OutOfRange
    );
    // Names with a control character the spec bans.
    let banned = create_req("bad\u{7}name", mount_cap(mode), 0);
    assert_eq!(
        code(p.controller.create_volume(banned).await),
        Code::InvalidArgument
    );
    let banned = csi::CreateSnapshotRequest {
        source_volume_id: v.volume_id.clone(),
        name: "bad\u{1b}name".into(),
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.create_snapshot(banned).await),
        Code::InvalidArgument
    );
    // CreateSnapshot of an unknown volume; ListVolumes with a negative page size.
    let snapshot = csi::CreateSnapshotRequest {
        source_volume_id: "hostpath-999999".into(),
        name: "s".into(),
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.create_snapshot(snapshot).await),
        Code::NotFound
    );
    assert_eq!(
        code(
            p.controller
                .list_volumes(csi::ListVolumesRequest {
                    max_entries: -1,
                    starting_token: String::new(),
                })
                .await
        ),
        Code::InvalidArgument
    );
}

/// A second NodePublishVolume at another target: refused for single-node-single-writer
/// (FAILED_PRECONDITION), allowed for single-node-writer (csivol shares such a volume
/// between claims on one node) and single-node-multi-writer.
#[tokio::test]
async fn second_publish_on_a_node_by_access_mode() {
    let dir = TestDir::new("hostpath-second-publish");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    for (name, mode, second) in [
        (
            "ssw",
            AccessMode::SingleNodeSingleWriter,
            Err(Code::FailedPrecondition),
        ),
        ("snw", AccessMode::SingleNodeWriter, Ok(())),
        ("smw", AccessMode::SingleNodeMultiWriter, Ok(())),
    ] {
        let cap = mount_cap(mode);
        let v = create_with(&mut p, create_req(name, cap.clone(), 1 << 20)).await;
        let (staging, target) = bring_up(&mut p, &dir, &v, &cap, name).await;
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
        let other = dir.join(format!("other-{name}"));
        let mut publish = publish_req(&v, Some(&staging), &other, &ctx, false);
        publish.volume_capability = Some(cap.clone());
        let got = p
            .node
            .node_publish_volume(publish)
            .await
            .map(drop)
            .map_err(|e| e.code());
        assert_eq!(got, second, "{name}");
        if got.is_ok() {
            assert!(is_mounted(&other));
            p.node
                .node_unpublish_volume(unpublish_req(&v, &other))
                .await
                .unwrap();
        }
        take_down(&mut p, &v, &staging, &target).await;
    }
    assert!(dir.mounts().is_empty());
}
