//! Group snapshots (the GroupController service) and GetSnapshot, each with the spec's
//! error table, and snapshots that become ready to use only after a while
//! (`--snapshot-ready-after`).

use std::time::Duration;

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::{TestDir, eventually};
use tonic::Code;

use crate::support::*;

use csi::controller_service_capability::rpc::Type as C;

fn group_req(name: &str, volumes: &[&csi::Volume]) -> csi::CreateVolumeGroupSnapshotRequest {
    csi::CreateVolumeGroupSnapshotRequest {
        name: name.into(),
        source_volume_ids: volumes.iter().map(|v| v.volume_id.clone()).collect(),
        ..Default::default()
    }
}

fn get_snapshot(id: &str) -> csi::GetSnapshotRequest {
    csi::GetSnapshotRequest {
        snapshot_id: id.into(),
        ..Default::default()
    }
}

fn member_ids(g: &csi::VolumeGroupSnapshot) -> Vec<String> {
    g.snapshots.iter().map(|s| s.snapshot_id.clone()).collect()
}

async fn group_caps(p: &mut Plugin) -> bool {
    p.group
        .group_controller_get_capabilities(csi::GroupControllerGetCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities
        .iter()
        .any(|c| {
            matches!(&c.r#type, Some(csi::group_controller_service_capability::Type::Rpc(r))
                if r.r#type() == csi::group_controller_service_capability::rpc::Type::CreateDeleteGetVolumeGroupSnapshot)
        })
}

async fn has_group_service(p: &mut Plugin) -> bool {
    use csi::plugin_capability::{Type, service};
    p.identity
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities
        .iter()
        .any(|c| matches!(&c.r#type, Some(Type::Service(s)) if s.r#type() == service::Type::GroupControllerService))
}

/// Two volumes snapshotted together: one member each, with the group's id and one
/// creation time; each member restores like any snapshot; the group is got, listed and
/// deleted as a whole.
#[tokio::test]
async fn group_snapshot_of_two_volumes() {
    let dir = TestDir::new("hostpath-group");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    assert!(has_group_service(&mut p).await);
    assert!(group_caps(&mut p).await);
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let data = create_with(&mut p, create_req("data", cap.clone(), 2 << 20)).await;
    let logs = create_with(&mut p, create_req("logs", cap.clone(), 1 << 20)).await;
    let (staging, target) = bring_up(&mut p, &dir, &data, &cap, "data").await;
    std::fs::write(target.join("row.txt"), "committed").unwrap();

    let g = p
        .group
        .create_volume_group_snapshot(group_req("nightly", &[&data, &logs]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert!(g.ready_to_use);
    assert_eq!(g.snapshots.len(), 2);
    for (s, v) in g.snapshots.iter().zip([&data, &logs]) {
        assert_eq!(s.source_volume_id, v.volume_id);
        assert_eq!(s.group_snapshot_id, g.group_snapshot_id);
        assert_eq!(s.creation_time, g.creation_time, "one point in time");
        assert!(s.ready_to_use);
    }
    // Idempotent by name; the same name over other volumes is ALREADY_EXISTS.
    let again = p
        .group
        .create_volume_group_snapshot(group_req("nightly", &[&logs, &data]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert_eq!(again, g);
    assert_eq!(
        code(
            p.group
                .create_volume_group_snapshot(group_req("nightly", &[&data]))
                .await
        ),
        Code::AlreadyExists
    );
    // GetVolumeGroupSnapshot with its members, and each member through GetSnapshot.
    let got = p
        .group
        .get_volume_group_snapshot(csi::GetVolumeGroupSnapshotRequest {
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids: member_ids(&g),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    assert_eq!(got, g);
    let member = p
        .controller
        .get_snapshot(get_snapshot(&g.snapshots[0].snapshot_id))
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    assert_eq!(member, g.snapshots[0]);

    // A member restores like any snapshot.
    let mut restore = create_req("restored", cap.clone(), 0);
    restore.capacity_range = None;
    restore.volume_content_source = Some(csi::VolumeContentSource {
        r#type: Some(csi::volume_content_source::Type::Snapshot(
            csi::volume_content_source::SnapshotSource {
                snapshot_id: member.snapshot_id.clone(),
            },
        )),
    });
    let restored = create_with(&mut p, restore).await;
    assert_eq!(restored.capacity_bytes, 2 << 20);
    let (rs, rt) = bring_up(&mut p, &dir, &restored, &cap, "restored").await;
    assert_eq!(
        std::fs::read_to_string(rt.join("row.txt")).unwrap(),
        "committed"
    );
    take_down(&mut p, &restored, &rs, &rt).await;
    take_down(&mut p, &data, &staging, &target).await;

    // A member is deleted with its group, not alone.
    assert_eq!(
        code(
            p.controller
                .delete_snapshot(csi::DeleteSnapshotRequest {
                    snapshot_id: member.snapshot_id.clone(),
                    ..Default::default()
                })
                .await
        ),
        Code::InvalidArgument
    );
    p.group
        .delete_volume_group_snapshot(csi::DeleteVolumeGroupSnapshotRequest {
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids: member_ids(&g),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        code(
            p.controller
                .get_snapshot(get_snapshot(&member.snapshot_id))
                .await
        ),
        Code::NotFound
    );
}

/// The spec's error tables of the three group calls.
#[tokio::test]
async fn group_snapshot_error_table() {
    let dir = TestDir::new("hostpath-group-errors");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let a = create(&mut p, "a", AccessMode::SingleNodeWriter).await;
    let b = create(&mut p, "b", AccessMode::SingleNodeWriter).await;
    let gc = &mut p.group;
    // CreateVolumeGroupSnapshot: required fields; a volume twice; an unknown volume.
    assert_eq!(
        code(gc.create_volume_group_snapshot(group_req("", &[&a])).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(gc.create_volume_group_snapshot(group_req("g", &[])).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.create_volume_group_snapshot(group_req("g", &[&a, &a]))
                .await
        ),
        Code::InvalidArgument
    );
    let mut unknown = group_req("g", &[&a]);
    unknown.source_volume_ids.push("hostpath-999999".into());
    assert_eq!(
        code(gc.create_volume_group_snapshot(unknown).await),
        Code::NotFound
    );
    let mut banned = group_req("g\u{7}", &[&a]);
    banned.name = "g\u{7}".into();
    assert_eq!(
        code(gc.create_volume_group_snapshot(banned).await),
        Code::InvalidArgument
    );
    let g = gc
        .create_volume_group_snapshot(group_req("g", &[&a, &b]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    let members = member_ids(&g);
    // GetVolumeGroupSnapshot: unknown group NOT_FOUND; a snapshot list mismatch, or none,
    // INVALID_ARGUMENT.
    let get = |id: &str, ids: Vec<String>| csi::GetVolumeGroupSnapshotRequest {
        group_snapshot_id: id.into(),
        snapshot_ids: ids,
        ..Default::default()
    };
    assert_eq!(
        code(
            gc.get_volume_group_snapshot(get("group-999999", members.clone()))
                .await
        ),
        Code::NotFound
    );
    assert_eq!(
        code(gc.get_volume_group_snapshot(get("", members.clone())).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.get_volume_group_snapshot(get(&g.group_snapshot_id, members[..1].to_vec()))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.get_volume_group_snapshot(get(&g.group_snapshot_id, vec![]))
                .await
        ),
        Code::InvalidArgument
    );
    // DeleteVolumeGroupSnapshot: a mismatch is INVALID_ARGUMENT and deletes nothing; an
    // unknown group is OK (already gone), and so is deleting twice.
    let delete = |id: &str, ids: Vec<String>| csi::DeleteVolumeGroupSnapshotRequest {
        group_snapshot_id: id.into(),
        snapshot_ids: ids,
        ..Default::default()
    };
    assert_eq!(
        code(
            gc.delete_volume_group_snapshot(delete(
                &g.group_snapshot_id,
                vec!["snapshot-x".into()]
            ))
            .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            gc.delete_volume_group_snapshot(delete("", members.clone()))
                .await
        ),
        Code::InvalidArgument
    );
    gc.delete_volume_group_snapshot(delete("group-999999", members.clone()))
        .await
        .unwrap();
    gc.get_volume_group_snapshot(get(&g.group_snapshot_id, members.clone()))
        .await
        .expect("the refused delete changed nothing");
    for _ in 0..2 {
        gc.delete_volume_group_snapshot(delete(&g.group_snapshot_id, members.clone()))
            .await
            .unwrap();
    }
    assert_eq!(
        code(
            gc.get_volume_group_snapshot(get(&g.group_snapshot_id, members))
                .await
        ),
        Code::NotFound
    );
}

/// GetSnapshot's errors: a missing id INVALID_ARGUMENT, an unknown snapshot NOT_FOUND.
#[tokio::test]
async fn get_snapshot_error_table() {
    let dir = TestDir::new("hostpath-getsnap");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    assert!(controller_caps(&mut p).await.contains(&C::GetSnapshot));
    let c = &mut p.controller;
    assert_eq!(
        code(c.get_snapshot(get_snapshot("")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.get_snapshot(get_snapshot("snapshot-999999")).await),
        Code::NotFound
    );
}

/// Without the capabilities: no GROUP_CONTROLLER_SERVICE, no GET_SNAPSHOT, and their calls
/// are UNIMPLEMENTED.
#[tokio::test]
async fn without_group_snapshots_or_get_snapshot() {
    let dir = TestDir::new("hostpath-nogroups");
    let mut p = Plugin::start(
        &dir,
        "node-1",
        &["--disable=group-snapshots", "--disable=get-snapshot"],
    )
    .await;
    assert!(!has_group_service(&mut p).await);
    assert!(!group_caps(&mut p).await);
    assert!(!controller_caps(&mut p).await.contains(&C::GetSnapshot));
    let a = create(&mut p, "a", AccessMode::SingleNodeWriter).await;
    assert_eq!(
        code(
            p.group
                .create_volume_group_snapshot(group_req("g", &[&a]))
                .await
        ),
        Code::Unimplemented
    );
    assert_eq!(
        code(
            p.group
                .get_volume_group_snapshot(csi::GetVolumeGroupSnapshotRequest::default())
                .await
        ),
        Code::Unimplemented
    );
    assert_eq!(
        code(
            p.group
                .delete_volume_group_snapshot(csi::DeleteVolumeGroupSnapshotRequest::default())
                .await
        ),
        Code::Unimplemented
    );
    assert_eq!(
        code(
            p.controller
                .get_snapshot(get_snapshot("snapshot-000001"))
                .await
        ),
        Code::Unimplemented
    );
}

/// With `--snapshot-ready-after`, a snapshot and a group are cut at once but not ready to
/// use until the delay has passed; every call reports it the same way.
#[tokio::test]
async fn snapshots_become_ready_later() {
    let dir = TestDir::new("hostpath-ready-later");
    let mut p = Plugin::start(&dir, "node-1", &["--snapshot-ready-after=4s"]).await;
    let a = create(&mut p, "a", AccessMode::SingleNodeWriter).await;
    let s = p
        .controller
        .create_snapshot(csi::CreateSnapshotRequest {
            source_volume_id: a.volume_id.clone(),
            name: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .snapshot
        .unwrap();
    let g = p
        .group
        .create_volume_group_snapshot(group_req("g", &[&a]))
        .await
        .unwrap()
        .into_inner()
        .group_snapshot
        .unwrap();
    // Cut at once, ready only after the delay: a call would have to stall for seconds
    // between the cut and its own answer to see it ready.
    assert!(!s.ready_to_use && !g.ready_to_use);
    assert!(g.snapshots.iter().all(|m| !m.ready_to_use));
    let mut controller = p.controller.clone();
    let ready = eventually(
        "the snapshot to become ready",
        Duration::from_secs(30),
        || {
            let mut controller = controller.clone();
            let id = s.snapshot_id.clone();
            async move {
                let got = controller.get_snapshot(get_snapshot(&id)).await.ok()?;
                got.into_inner().snapshot.filter(|s| s.ready_to_use)
            }
        },
    )
    .await;
    assert_eq!(ready.creation_time, s.creation_time);
    // The group was cut after the snapshot: it is ready once it has waited as long.
    let mut group = p.group.clone();
    let g2 = eventually("the group to become ready", Duration::from_secs(30), || {
        let mut group = group.clone();
        let req = csi::GetVolumeGroupSnapshotRequest {
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids: member_ids(&g),
            ..Default::default()
        };
        async move {
            let got = group.get_volume_group_snapshot(req).await.ok()?;
            got.into_inner().group_snapshot.filter(|g| g.ready_to_use)
        }
    })
    .await;
    assert!(g2.snapshots.iter().all(|s| s.ready_to_use));
    group
        .delete_volume_group_snapshot(csi::DeleteVolumeGroupSnapshotRequest {
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids: member_ids(&g),
            ..Default::default()
        })
        .await
        .unwrap();
    let listed = controller
        .list_snapshots(csi::ListSnapshotsRequest {
            snapshot_id: s.snapshot_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(listed.entries[0].snapshot.as_ref().unwrap().ready_to_use);
}
