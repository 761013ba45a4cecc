//! Group snapshots through the controller-operation queue: cut, polled with the group's
//! ids until ready, members recorded as snapshots, a member never deleted alone, errors
//! retried or recorded, and a failed group cut anew by name.

use csivol_api::{ControllerOpKind, GroupMember, GroupSnapshotRequest, Report, SnapshotState};
use serde_json::json;

use super::{Env, PLUGIN, plugin_error, registration};
use crate::model::GroupSnapshotRow;
use crate::store::Txn;

/// Registers `node` hosting the controller of the plugin, with group snapshots or not.
async fn register_host(env: &Env, node: &str, groups: bool) {
    let mut req = registration(node, true, &[]);
    let caps = req.plugins[0].controller.as_mut().unwrap();
    caps.create_delete_snapshot = true;
    caps.group_snapshots = groups;
    let n = node.to_owned();
    env.write(move |ctx, l| super::super::register_node(ctx, &n, &req, l))
        .await
        .unwrap();
}

/// Registers volume `name` with the plugin's id `ext-NAME`.
async fn volume(env: &Env, name: &str) {
    let spec: csivol_api::VolumeSpec = serde_json::from_value(json!({
        "plugin": PLUGIN,
        "external_id": format!("ext-{name}"),
        "access_mode": "single-node-writer",
        "attachment": "file-system",
    }))
    .unwrap();
    let n = name.to_owned();
    env.write(move |ctx, _| super::super::register_volume(ctx, &n, spec.clone(), "op"))
        .await
        .unwrap();
}

async fn group(env: &Env, name: &str, volumes: &[&str]) -> crate::error::ApiResult<bool> {
    let (n, req) = (
        name.to_owned(),
        GroupSnapshotRequest {
            volumes: volumes.iter().map(|v| v.to_string()).collect(),
            parameters: Default::default(),
        },
    );
    env.write(move |ctx, l| super::super::create_group_snapshot(ctx, &n, req.clone(), "op", l))
        .await
        .map(|(_, started)| started)
}

async fn row(env: &Env, name: &str) -> Option<GroupSnapshotRow> {
    let n = name.to_owned();
    env.read(move |c| c.group_snapshot(&n)).await
}

/// The states of the group's members, by name.
async fn members(env: &Env, name: &str) -> Vec<(String, SnapshotState, String)> {
    let n = name.to_owned();
    env.read(move |c| c.group_members(&n))
        .await
        .into_iter()
        .map(|m| (m.name, m.state, m.snapshot_id))
        .collect()
}

/// The group's operation assigned to `host` and what the host is asked to do.
async fn op_for(env: &Env, host: &str) -> (u64, u32, ControllerOpKind) {
    let o = env
        .ops_of(host)
        .await
        .into_iter()
        .find(|o| o.volume.starts_with("group-snapshot/"))
        .expect("a group snapshot's operation");
    let (id, attempt) = (o.id as u64, o.attempt);
    let api = env
        .read(move |c| super::super::ops::op_to_api(c, &o))
        .await
        .expect("its group exists");
    (id, attempt, api.kind)
}

fn cut(op: u64, attempt: u32, ready: [bool; 2]) -> Report {
    Report::GroupSnapshotCreated {
        op,
        attempt,
        group_snapshot_id: "group-7".into(),
        ready_to_use: ready.iter().all(|r| *r),
        creation_time_ms: Some(1_700_000_000_000),
        snapshots: ["a", "b"]
            .iter()
            .zip(ready)
            .map(|(v, ready_to_use)| GroupMember {
                snapshot_id: format!("snap-{v}"),
                source_volume_id: format!("ext-{v}"),
                size_bytes: 4096,
                ready_to_use,
                creation_time_ms: Some(1_700_000_000_000),
            })
            .collect(),
    }
}

#[tokio::test]
async fn a_group_is_cut_polled_until_ready_and_deleted_whole() {
    let env = Env::new();
    register_host(&env, "n1", true).await;
    volume(&env, "a").await;
    volume(&env, "b").await;

    assert!(group(&env, "g", &["a", "b"]).await.unwrap());
    assert_eq!(row(&env, "g").await.unwrap().state, SnapshotState::Creating);
    assert_eq!(
        env.ops().await,
        ["create-group-snapshot group-snapshot/g - n1 0"]
    );
    let (id, attempt, kind) = op_for(&env, "n1").await;
    assert_eq!(
        kind,
        ControllerOpKind::CreateGroupSnapshot {
            group: "g".into(),
            source_volume_ids: vec!["ext-a".into(), "ext-b".into()],
            group_snapshot_id: String::new(),
            snapshot_ids: Vec::new(),
            parameters: Default::default(),
            secrets: Default::default(),
        }
    );

    // Cut, one member not ready to use: the group is pending and asked about again.
    env.report("n1", vec![cut(id, attempt, [true, false])])
        .await;
    let g = row(&env, "g").await.unwrap();
    assert_eq!((g.state, g.ready_to_use), (SnapshotState::Pending, false));
    assert_eq!(
        members(&env, "g").await,
        [
            ("g.a".into(), SnapshotState::Ready, "snap-a".into()),
            ("g.b".into(), SnapshotState::Pending, "snap-b".into())
        ]
    );
    assert_eq!(
        env.ops().await,
        ["create-group-snapshot group-snapshot/g - - 1"]
    );

    // Its volumes stay while it is being cut; a member is never deleted alone.
    let e = env
        .write(|ctx, l| super::super::deregister_volume(ctx, "b", true, "op", l, false))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("snapshots being created: g"),
        "{}",
        e.message
    );
    let e = env
        .write(|ctx, l| super::super::delete_snapshot(ctx, "g.a", "op", l))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid", "{}", e.message);

    // The poll names the group and its members, for GetVolumeGroupSnapshot.
    env.write(move |ctx, _| ctx.assign_op(id as i64, "n1"))
        .await
        .unwrap();
    let (_, _, kind) = op_for(&env, "n1").await;
    assert!(
        matches!(&kind, ControllerOpKind::CreateGroupSnapshot { group_snapshot_id, snapshot_ids, .. }
            if group_snapshot_id == "group-7" && snapshot_ids == &["snap-a", "snap-b"]),
        "{kind:?}"
    );
    env.report("n1", vec![cut(id, attempt + 1, [true, true])])
        .await;
    let g = row(&env, "g").await.unwrap();
    assert_eq!((g.state, g.ready_to_use), (SnapshotState::Ready, true));
    assert!(env.ops().await.is_empty());
    assert_eq!(env.events_of("snapshot-pending").await.len(), 1);
    assert_eq!(env.events_of("snapshot-ready").await.len(), 1);
    // The same request again starts nothing; other volumes under the name are refused.
    assert!(!group(&env, "g", &["b", "a"]).await.unwrap());
    let e = group(&env, "g", &["a"]).await.unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");

    // Delete: a retryable error is retried, a final one leaves the group as it was.
    let deleting = env
        .write(|ctx, l| super::super::delete_group_snapshot(ctx, "g", "op", l))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(deleting.state, SnapshotState::Deleting);
    let (id, attempt, kind) = op_for(&env, "n1").await;
    assert_eq!(
        kind,
        ControllerOpKind::DeleteGroupSnapshot {
            group: "g".into(),
            group_snapshot_id: "group-7".into(),
            snapshot_ids: vec!["snap-a".into(), "snap-b".into()],
            secrets: Default::default(),
        }
    );
    let error = |op, attempt, code, is_final| Report::OpError {
        op,
        attempt,
        error: plugin_error(code, is_final),
    };
    env.report("n1", vec![error(id, attempt, "UNAVAILABLE", false)])
        .await;
    let g = row(&env, "g").await.unwrap();
    assert_eq!(g.state, SnapshotState::Deleting);
    assert!(g.error.unwrap().contains("retrying at"));
    env.write(move |ctx, _| ctx.assign_op(id as i64, "n1"))
        .await
        .unwrap();
    env.report(
        "n1",
        vec![error(id, attempt + 1, "FAILED_PRECONDITION", true)],
    )
    .await;
    let g = row(&env, "g").await.unwrap();
    assert_eq!(g.state, SnapshotState::Ready);
    assert!(
        g.error
            .unwrap()
            .starts_with("DeleteVolumeGroupSnapshot failed")
    );
    assert!(
        members(&env, "g")
            .await
            .iter()
            .all(|m| m.1 == SnapshotState::Ready)
    );

    // NOT_FOUND means it is gone already: the group and its members go.
    env.write(|ctx, l| super::super::delete_group_snapshot(ctx, "g", "op", l))
        .await
        .unwrap();
    let (id, attempt, _) = op_for(&env, "n1").await;
    env.report("n1", vec![error(id, attempt, "NOT_FOUND", true)])
        .await;
    assert!(row(&env, "g").await.is_none());
    assert!(members(&env, "g").await.is_empty());
    assert_eq!(env.events_of("snapshot-deleted").await.len(), 1);
}

#[tokio::test]
async fn a_failed_group_is_cut_again_by_name_and_a_plugin_without_groups_is_refused() {
    let env = Env::new();
    register_host(&env, "n1", true).await;
    volume(&env, "a").await;
    volume(&env, "b").await;

    group(&env, "g", &["a", "b"]).await.unwrap();
    let (id, attempt, _) = op_for(&env, "n1").await;
    // CreateVolumeGroupSnapshot's "Cannot snapshot multiple volumes together": final.
    env.report(
        "n1",
        vec![Report::OpError {
            op: id,
            attempt,
            error: plugin_error("FAILED_PRECONDITION", true),
        }],
    )
    .await;
    let g = row(&env, "g").await.unwrap();
    assert_eq!(g.state, SnapshotState::Failed);
    assert!(env.ops().await.is_empty());
    assert_eq!(env.events_of("operation-failed").await.len(), 1);

    // Asked again, it is cut anew by name (no group id to poll).
    assert!(group(&env, "g", &["a", "b"]).await.unwrap());
    let (_, _, kind) = op_for(&env, "n1").await;
    assert!(
        matches!(&kind, ControllerOpKind::CreateGroupSnapshot { group_snapshot_id, .. } if group_snapshot_id.is_empty()),
        "{kind:?}"
    );

    // A plugin whose group controller lacks the capability: refused, nothing recorded.
    let env = Env::new();
    register_host(&env, "n1", false).await;
    volume(&env, "a").await;
    let e = group(&env, "g", &["a"]).await.unwrap_err();
    assert_eq!(e.code().as_str(), "invalid");
    assert!(
        e.message
            .contains("CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT"),
        "{}",
        e.message
    );
    assert!(e.hint.is_some());
    assert!(row(&env, "g").await.is_none());
    assert!(env.ops().await.is_empty());
}
