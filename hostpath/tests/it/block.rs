//! Block volumes on real loop devices: bytes written through the published device read
//! back after unpublish and a new publish; expansion grows the device; snapshots copy the
//! image; devices are released at unstage, at the last unpublish without staging, and at
//! delete. Every test's loop devices are detached when it ends, even when it fails.

use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::{TestDir, is_mounted};

use crate::support::*;

const MIB: i64 = 1 << 20;

fn write_through(target: &Path, offset: u64, bytes: &[u8]) {
    let device = std::fs::OpenOptions::new()
        .write(true)
        .open(target)
        .unwrap();
    device.write_all_at(bytes, offset).unwrap();
    device.sync_all().unwrap();
}

fn read_through(target: &Path, offset: u64, len: usize) -> Vec<u8> {
    let device = std::fs::File::open(target).unwrap();
    let mut buf = vec![0; len];
    device.read_exact_at(&mut buf, offset).unwrap();
    buf
}

fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

#[tokio::test]
async fn bytes_survive_unpublish_and_republish_and_the_device_grows() {
    let dir = TestDir::new("hostpath-block");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let cap = block_cap();
    let v = create_with(&mut p, create_req("disk", cap.clone(), 8 * MIB)).await;
    assert_eq!(v.capacity_bytes, 8 * MIB);

    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    assert!(is_mounted(&target), "the device is bound onto the target");
    assert!(is_block_device(&target));
    assert_loop_devices(dir.path(), 1);
    write_through(&target, 3 * MIB as u64, b"written through the device");

    // Unpublish removes the target; the staged device stays; a new publish reads back.
    p.node
        .node_unpublish_volume(unpublish_req(&v, &target))
        .await
        .unwrap();
    assert!(!target.exists());
    assert_loop_devices(dir.path(), 1);
    let again = dir.join("target-b");
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
    let mut publish = publish_req(&v, Some(&staging), &again, &ctx, false);
    publish.volume_capability = Some(cap.clone());
    for _ in 0..2 {
        p.node.node_publish_volume(publish.clone()).await.unwrap();
    }
    assert_eq!(
        read_through(&again, 3 * MIB as u64, 26),
        b"written through the device"
    );
    let stats = p
        .node
        .node_get_volume_stats(stats_req(&v, &again))
        .await
        .unwrap()
        .into_inner();
    assert!(!stats.volume_condition.unwrap().abnormal);
    assert_eq!(stats_total(&mut p, &v, &again).await, 8 * MIB);

    // Online expansion: the image grows at the controller, the device at the node.
    let r = p
        .controller
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 16 * MIB,
                limit_bytes: 0,
            }),
            volume_capability: Some(cap.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.node_expansion_required);
    assert_eq!(
        stats_total(&mut p, &v, &again).await,
        8 * MIB,
        "not yet on the node"
    );
    let grown = p
        .node
        .node_expand_volume(csi::NodeExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            volume_path: again.display().to_string(),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(cap.clone()),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 16 * MIB,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(grown.capacity_bytes, 16 * MIB);
    assert_eq!(stats_total(&mut p, &v, &again).await, 16 * MIB);
    write_through(&again, 15 * MIB as u64, b"in the new space");
    assert_eq!(
        read_through(&again, 15 * MIB as u64, 16),
        b"in the new space"
    );

    // Taken down: the device is released.
    take_down(&mut p, &v, &staging, &again).await;
    assert_loop_devices(dir.path(), 0);
    assert!(!again.exists());
    p.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!dir.join("backend/data").join(&v.volume_id).exists());
}

/// A snapshot of a block volume holds its bytes; a volume from it has them.
#[tokio::test]
async fn block_snapshot_restores_bytes() {
    let dir = TestDir::new("hostpath-block-snapshot");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let cap = block_cap();
    let v = create_with(&mut p, create_req("disk", cap.clone(), 4 * MIB)).await;
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    write_through(&target, 4096, b"snapshotted bytes");
    let snap = p
        .controller
        .create_snapshot(csi::CreateSnapshotRequest {
            source_volume_id: v.volume_id.clone(),
            name: "snap".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    take_down(&mut p, &v, &staging, &target).await;
    let mut from = create_req("restored", cap.clone(), 0);
    from.capacity_range = None;
    from.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: snap.snapshot_id,
            },
        )),
    });
    // A file-system volume cannot come from a block snapshot.
    let mut wrong = from.clone();
    wrong.name = "wrong".into();
    wrong.volume_capabilities = vec![mount_cap(AccessMode::SingleNodeWriter)];
    assert_eq!(
        code(p.controller.create_volume(wrong).await),
        tonic::Code::InvalidArgument
    );
    let restored = create_with(&mut p, from).await;
    assert_eq!(restored.capacity_bytes, 4 * MIB);
    let (staging, target) = bring_up(&mut p, &dir, &restored, &cap, "b").await;
    assert_eq!(read_through(&target, 4096, 17), b"snapshotted bytes");
    take_down(&mut p, &restored, &staging, &target).await;
    assert_loop_devices(dir.path(), 0);
}

/// Without staging, publishing attaches the device and the last unpublish releases it.
#[tokio::test]
async fn block_without_staging() {
    let dir = TestDir::new("hostpath-block-nostage");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &["--no-stage", "--no-controller"]).await;
    let cap = block_cap_mode(AccessMode::SingleNodeMultiWriter);
    let v = create_with(&mut p, create_req("disk", cap.clone(), 2 * MIB)).await;
    let targets = [dir.join("t1"), dir.join("t2")];
    for t in &targets {
        let mut publish = publish_req(&v, None, t, &Default::default(), false);
        publish.volume_capability = Some(cap.clone());
        p.node.node_publish_volume(publish).await.unwrap();
        assert!(is_block_device(t));
    }
    assert_loop_devices(dir.path(), 1);
    write_through(&targets[0], 0, b"shared");
    assert_eq!(read_through(&targets[1], 0, 6), b"shared");
    p.node
        .node_unpublish_volume(unpublish_req(&v, &targets[0]))
        .await
        .unwrap();
    assert_loop_devices(dir.path(), 1);
    p.node
        .node_unpublish_volume(unpublish_req(&v, &targets[1]))
        .await
        .unwrap();
    assert_loop_devices(dir.path(), 0);
}

/// DeleteVolume releases loop devices left on the image (a node that went away).
#[tokio::test]
async fn delete_releases_leftover_loop_devices() {
    let dir = TestDir::new("hostpath-block-delete");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create_with(&mut p, create_req("disk", block_cap(), MIB)).await;
    let image = dir.join("backend/data").join(&v.volume_id).join("disk.img");
    let status = std::process::Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&image)
        .status()
        .unwrap();
    assert!(status.success());
    assert_loop_devices(dir.path(), 1);
    p.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: v.volume_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_loop_devices(dir.path(), 0);
    assert!(!image.exists());
}

/// `--mount none`: no loop devices; the target is a file naming the volume.
#[tokio::test]
async fn block_with_marker_files() {
    let dir = TestDir::new("hostpath-block-none");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &["--mount=none"]).await;
    let cap = block_cap();
    let v = create_with(&mut p, create_req("disk", cap.clone(), MIB)).await;
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    assert_eq!(std::fs::read_to_string(&target).unwrap(), v.volume_id);
    assert_loop_devices(dir.path(), 0);
    assert!(
        !p.node
            .node_get_volume_stats(stats_req(&v, &target))
            .await
            .unwrap()
            .into_inner()
            .volume_condition
            .unwrap()
            .abnormal
    );
    take_down(&mut p, &v, &staging, &target).await;
    assert!(!target.exists());
    assert!(dir.mounts().is_empty());
}

/// Two nodes on one machine stage one multi-node block volume: each gets its own loop
/// device, and one node's unstage leaves the other's device and data alone.
#[tokio::test]
async fn each_node_has_its_own_device() {
    let dir = TestDir::new("hostpath-block-two-nodes");
    let _loops = LoopGuard::new(dir.path());
    let mut n1 = Plugin::start(&dir, "node-1", &[]).await;
    let mut n2 = Plugin::start(&dir, "node-2", &[]).await;
    let cap = block_cap_mode(AccessMode::MultiNodeMultiWriter);
    let v = create_with(&mut n1, create_req("shared", cap.clone(), 2 * MIB)).await;
    let (s1, t1) = bring_up(&mut n1, &dir, &v, &cap, "n1").await;
    let ctx = n1
        .controller
        .controller_publish_volume(csi::ControllerPublishVolumeRequest {
            volume_id: v.volume_id.clone(),
            node_id: "node-2".into(),
            volume_capability: Some(cap.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .publish_context;
    let s2 = dir.join("staging-n2");
    std::fs::create_dir(&s2).unwrap();
    let t2 = dir.join("target-n2");
    let mut stage = stage_req(&v, &s2, &ctx);
    stage.volume_capability = Some(cap.clone());
    n2.node.node_stage_volume(stage).await.unwrap();
    let mut publish = publish_req(&v, Some(&s2), &t2, &ctx, false);
    publish.volume_capability = Some(cap.clone());
    n2.node.node_publish_volume(publish).await.unwrap();
    assert_loop_devices(dir.path(), 2);

    write_through(&t1, 0, b"from node-1");
    take_down(&mut n1, &v, &s1, &t1).await;
    assert_loop_devices(dir.path(), 1);
    assert_eq!(read_through(&t2, 0, 11), b"from node-1");
}

/// Killed with its volume staged and published, the plugin comes back knowing its device:
/// staging and publishing again attach no second one, and taking down releases it.
#[tokio::test]
async fn a_killed_plugin_keeps_its_device() {
    let dir = TestDir::new("hostpath-block-restart");
    let _loops = LoopGuard::new(dir.path());
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let cap = block_cap();
    let v = create_with(&mut p, create_req("disk", cap.clone(), MIB)).await;
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    write_through(&target, 0, b"before the kill");
    let mut p = p.restart_after_kill().await;
    let (staging2, target2) = bring_up(&mut p, &dir, &v, &cap, "a").await;
    assert_eq!((&staging2, &target2), (&staging, &target));
    assert_loop_devices(dir.path(), 1);
    assert_eq!(read_through(&target, 0, 15), b"before the kill");
    take_down(&mut p, &v, &staging, &target).await;
    assert_loop_devices(dir.path(), 0);
}

/// A loop device detached behind the plugin whose number was set up again on another file
/// is no longer the volume's, though a target bound to its node still shows the number:
/// staging and publishing again (as a CO repairing it does) place the volume's own device
/// at the staging and the target, not the node of the number.
#[tokio::test]
async fn a_loop_device_number_reused_by_another_file_is_replaced() {
    use csivol_tests::loops::{loop_devices_under, reuse_number};
    use std::os::unix::fs::MetadataExt;
    for shape in [&[][..], &["--node-shape=stage-device"][..]] {
        let dir = TestDir::new("hostpath-block-reused");
        let _loops = LoopGuard::new(dir.path());
        let mut p = Plugin::start(&dir, "node-1", shape).await;
        let cap = block_cap();
        let v = create_with(&mut p, create_req("disk", cap.clone(), MIB)).await;
        let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "a").await;
        write_through(&target, 0, b"the volume's own bytes");
        let other = dir.join("other.img");
        let f = std::fs::File::create(&other).unwrap();
        f.set_len(MIB as u64).unwrap();
        f.write_all_at(b"another volume's bytes", 0).unwrap();
        drop(f);

        // Another test may take the freed number first: a reuse all the same, repaired by
        // staging again, after which the number of the volume's new device is tried.
        let mut attempts = 0;
        let reused = loop {
            let devices = loop_devices_under(&dir.join("backend"));
            assert_eq!(devices.len(), 1, "{shape:?}: {devices:?}");
            let reused = std::fs::metadata(&devices[0]).unwrap().rdev();
            if reuse_number(&devices[0], &other) {
                break reused;
            }
            attempts += 1;
            assert!(
                attempts < 5,
                "{shape:?}: every freed number was taken by another file"
            );
            bring_up(&mut p, &dir, &v, &cap, "a").await;
        };
        assert_eq!(
            String::from_utf8_lossy(&read_through(&target, 0, 22)),
            "another volume's bytes",
            "{shape:?}: the target shows the number's new device"
        );

        let (staging2, target2) = bring_up(&mut p, &dir, &v, &cap, "a").await;
        assert_eq!((&staging2, &target2), (&staging, &target));
        assert_eq!(
            String::from_utf8_lossy(&read_through(&target, 0, 22)),
            "the volume's own bytes",
            "{shape:?}: staged and published again from the volume's device"
        );
        assert_ne!(
            std::fs::metadata(&target).unwrap().rdev(),
            reused,
            "{shape:?}"
        );
        assert_loop_devices(&dir.join("backend"), 1);
        take_down(&mut p, &v, &staging, &target).await;
        assert_loop_devices(&dir.join("backend"), 0);
    }
}
