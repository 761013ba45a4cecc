//! The whole lifecycle, each call made twice to prove it idempotent, with and without
//! real mounts.

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;

use crate::support::*;

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
