//! The spec's error codes: required fields, unknown volumes, lifecycle violations, single-node
//! volumes and volume limits.

use std::collections::HashMap;

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::{TestDir, is_mounted};
use tonic::Code;

use crate::support::*;

#[tokio::test]
async fn required_fields_are_invalid_argument() {
    let dir = TestDir::new("hostpath-fields");
    // Without block support, a block capability is an unsupported field too.
    let mut p = Plugin::start(&dir, "node-1", &["--disable=block"]).await;
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

/// A staging recorded but no longer mounted (a crash, an operator's umount) is not bound
/// to a target: that would publish an empty local directory instead of the volume.
#[tokio::test]
async fn publish_over_an_unmounted_staging_is_failed_precondition() {
    let dir = TestDir::new("hostpath-unmounted-staging");
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
    rustix::mount::unmount(&staging, rustix::mount::UnmountFlags::empty()).unwrap();

    let r = p
        .node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await;
    assert_eq!(code(r), Code::FailedPrecondition);
    assert!(!is_mounted(&target), "nothing bound to the target");
    // Staged again (NodeStageVolume is idempotent and mounts what is missing), it publishes.
    p.node
        .node_stage_volume(stage_req(&v, &staging, &ctx))
        .await
        .unwrap();
    p.node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap();
    assert!(is_mounted(&target));
}
