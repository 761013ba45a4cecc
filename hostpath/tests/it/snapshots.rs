//! Snapshots and clones: data written before a snapshot (or a clone) is in the volume
//! created from it; snapshots are listed page by page; they outlive their volume.

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;
use tonic::Code;

use crate::support::*;

fn snapshot_req(v: &csi::Volume, name: &str) -> csi::CreateSnapshotRequest {
    csi::CreateSnapshotRequest {
        source_volume_id: v.volume_id.clone(),
        name: name.into(),
        ..Default::default()
    }
}

fn from_snapshot(name: &str, snapshot_id: &str) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, mount_cap(AccessMode::SingleNodeWriter), 0);
    req.capacity_range = None;
    req.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: snapshot_id.into(),
            },
        )),
    });
    req
}

fn from_volume(name: &str, volume_id: &str) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, mount_cap(AccessMode::SingleNodeWriter), 0);
    req.capacity_range = None;
    req.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Volume(
            csi::volume_content_source::VolumeSource {
                volume_id: volume_id.into(),
            },
        )),
    });
    req
}

/// snapshot → new volume from it → publish: the data written before the snapshot is
/// there, what was written after is not; the snapshot outlives its source volume.
#[tokio::test]
async fn volume_from_snapshot_has_the_data() {
    let dir = TestDir::new("hostpath-snapshot");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let source = create_with(&mut p, create_req("source", cap.clone(), 4 << 20)).await;
    let (staging, target) = bring_up(&mut p, &dir, &source, &cap, "source").await;
    std::fs::create_dir(target.join("dir")).unwrap();
    std::fs::write(target.join("dir/before.txt"), "before").unwrap();

    let snap = p
        .controller
        .create_snapshot(snapshot_req(&source, "snap-1"))
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert!(snap.ready_to_use);
    assert_eq!(snap.source_volume_id, source.volume_id);
    assert_eq!(snap.size_bytes, 4 << 20);
    assert!(snap.creation_time.is_some());
    // Idempotent by name; the same name for another volume is ALREADY_EXISTS.
    let again = p
        .controller
        .create_snapshot(snapshot_req(&source, "snap-1"))
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(again, snap);
    let other = create(&mut p, "other", AccessMode::SingleNodeWriter).await;
    assert_eq!(
        code(
            p.controller
                .create_snapshot(snapshot_req(&other, "snap-1"))
                .await
        ),
        Code::AlreadyExists
    );
    std::fs::write(target.join("after.txt"), "after").unwrap();
    take_down(&mut p, &source, &staging, &target).await;
    // The source goes; the snapshot stays usable.
    p.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: source.volume_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();

    let restored = create_with(&mut p, from_snapshot("restored", &snap.snapshot_id)).await;
    assert_eq!(restored.capacity_bytes, 4 << 20, "the snapshot's size");
    assert_eq!(
        restored.content_source,
        from_snapshot("", &snap.snapshot_id).volume_content_source
    );
    let (staging, target) = bring_up(&mut p, &dir, &restored, &cap, "restored").await;
    assert_eq!(
        std::fs::read_to_string(target.join("dir/before.txt")).unwrap(),
        "before"
    );
    assert!(!target.join("after.txt").exists());
    take_down(&mut p, &restored, &staging, &target).await;

    // Smaller than the snapshot is OUT_OF_RANGE; an unknown snapshot NOT_FOUND.
    let mut small = from_snapshot("small", &snap.snapshot_id);
    small.capacity_range = Some(csi::CapacityRange {
        required_bytes: 0,
        limit_bytes: 1 << 20,
    });
    assert_eq!(
        code(p.controller.create_volume(small).await),
        Code::OutOfRange
    );
    assert_eq!(
        code(
            p.controller
                .create_volume(from_snapshot("ghost", "snapshot-999999"))
                .await
        ),
        Code::NotFound
    );

    // Deleted, twice: the second is a success too.
    for _ in 0..2 {
        p.controller
            .delete_snapshot(csi::DeleteSnapshotRequest {
                snapshot_id: snap.snapshot_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    assert_eq!(
        code(
            p.controller
                .create_volume(from_snapshot("late", &snap.snapshot_id))
                .await
        ),
        Code::NotFound
    );
}

/// A clone has its source's data at the time of cloning, and is a volume of its own.
#[tokio::test]
async fn clone_has_the_source_data() {
    let dir = TestDir::new("hostpath-clone");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let source = create_with(&mut p, create_req("source", cap.clone(), 2 << 20)).await;
    let (staging, target) = bring_up(&mut p, &dir, &source, &cap, "source").await;
    std::fs::write(target.join("data.txt"), "cloned").unwrap();
    take_down(&mut p, &source, &staging, &target).await;

    let mut bigger = from_volume("clone", &source.volume_id);
    bigger.capacity_range = Some(csi::CapacityRange {
        required_bytes: 3 << 20,
        limit_bytes: 0,
    });
    let clone = create_with(&mut p, bigger).await;
    assert_eq!(clone.capacity_bytes, 3 << 20);
    assert_ne!(clone.volume_id, source.volume_id);
    let (staging, target) = bring_up(&mut p, &dir, &clone, &cap, "clone").await;
    assert_eq!(
        std::fs::read_to_string(target.join("data.txt")).unwrap(),
        "cloned"
    );
    std::fs::write(target.join("data.txt"), "changed").unwrap();
    take_down(&mut p, &clone, &staging, &target).await;
    assert_eq!(
        std::fs::read_to_string(
            dir.join("backend/data")
                .join(&source.volume_id)
                .join("data.txt")
        )
        .unwrap(),
        "cloned",
        "the source is not changed through its clone"
    );
    assert_eq!(
        code(
            p.controller
                .create_volume(from_volume("ghost", "hostpath-999999"))
                .await
        ),
        Code::NotFound
    );
}

/// ListSnapshots pages with the tokens it hands out, filters by volume and by id, and
/// answers ABORTED for a token it did not hand out.
#[tokio::test]
async fn list_snapshots_pages_and_filters() {
    let dir = TestDir::new("hostpath-list-snapshots");
    let mut p = Plugin::start(&dir, "node-1", &["--mount=none"]).await;
    let a = create(&mut p, "a", AccessMode::SingleNodeWriter).await;
    let b = create(&mut p, "b", AccessMode::SingleNodeWriter).await;
    let mut ids = Vec::new();
    for (v, name) in [(&a, "a-1"), (&a, "a-2"), (&b, "b-1")] {
        let s = p
            .controller
            .create_snapshot(snapshot_req(v, name))
            .await
            .unwrap()
            .into_inner()
            .snapshot
            .unwrap();
        ids.push(s.snapshot_id);
    }
    let list = |max_entries: i32, starting_token: &str| csi::ListSnapshotsRequest {
        max_entries,
        starting_token: starting_token.into(),
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = p
            .controller
            .list_snapshots(list(2, &token))
            .await
            .unwrap()
            .into_inner();
        assert!(page.entries.len() <= 2);
        seen.extend(
            page.entries
                .into_iter()
                .map(|e| e.snapshot.unwrap().snapshot_id),
        );
        if page.next_token.is_empty() {
            break;
        }
        token = page.next_token;
    }
    assert_eq!(seen, ids);
    let by_volume = p
        .controller
        .list_snapshots(csi::ListSnapshotsRequest {
            source_volume_id: a.volume_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_volume.entries.len(), 2);
    let by_id = p
        .controller
        .list_snapshots(csi::ListSnapshotsRequest {
            snapshot_id: ids[2].clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_id.entries.len(), 1);
    let unknown = p
        .controller
        .list_snapshots(csi::ListSnapshotsRequest {
            snapshot_id: "snapshot-999999".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(unknown.entries.is_empty());
    assert_eq!(
        code(p.controller.list_snapshots(list(0, "nope")).await),
        Code::Aborted
    );
    assert_eq!(
        code(p.controller.list_snapshots(list(-1, "")).await),
        Code::InvalidArgument
    );
}
