//! Snapshots through the controller-operation queue, and volumes created from a snapshot
//! or cloned from a volume.

use csivol_api::{
    ContentSource, ControllerOpKind, CreateVolumeSpec, Report, SnapshotRequest, SnapshotState,
    WireContentSource,
};
use serde_json::json;

use super::{Env, plugin_error, registration};
use crate::model::SnapshotRow;
use crate::store::Txn;

/// Registers `node` hosting the controller of `hp` with these snapshot capabilities.
pub(super) async fn register_host(env: &Env, node: &str, snapshots: bool, clone: bool) {
    let mut req = registration(node, true, &[]);
    let caps = req.plugins[0].controller.as_mut().unwrap();
    caps.create_delete_snapshot = snapshots;
    caps.list_snapshots = snapshots;
    caps.clone_volume = clone;
    let n = node.to_owned();
    env.write(move |ctx, l| super::super::register_node(ctx, &n, &req, l))
        .await
        .unwrap();
}

async fn snapshot(env: &Env, name: &str, volume: &str) -> crate::error::ApiResult<bool> {
    let (n, req) = (
        name.to_owned(),
        SnapshotRequest {
            volume: volume.to_owned(),
            parameters: Default::default(),
        },
    );
    env.write(move |ctx, l| super::super::create_snapshot(ctx, &n, req.clone(), "op", l, false))
        .await
        .map(|(_, started)| started)
}

async fn row(env: &Env, name: &str) -> Option<SnapshotRow> {
    let n = name.to_owned();
    env.read(move |c| c.snapshot(&n)).await
}

/// The operation assigned to `host` for snapshot `name` and what the host is asked to do.
async fn op_for(env: &Env, host: &str) -> (u64, u32, ControllerOpKind) {
    let o = env.ops_of(host).await.remove(0);
    let (id, attempt) = (o.id as u64, o.attempt);
    let api = env
        .read(move |c| super::super::ops::op_to_api(c, &o))
        .await
        .expect("its snapshot exists");
    (id, attempt, api.kind)
}

async fn delete(
    env: &Env,
    name: &'static str,
) -> crate::error::ApiResult<Option<csivol_api::Snapshot>> {
    env.write(move |ctx, l| super::super::delete_snapshot(ctx, name, "op", l))
        .await
}

fn create_spec(source: ContentSource) -> CreateVolumeSpec {
    let mut spec: CreateVolumeSpec = serde_json::from_value(json!({
        "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
    }))
    .unwrap();
    spec.source = Some(source);
    spec
}

#[tokio::test]
async fn a_snapshot_is_created_polled_until_ready_used_and_deleted() {
    let env = Env::new();
    register_host(&env, "n1", true, true).await;
    env.volume("v", "single-node-writer").await;

    assert!(snapshot(&env, "s1", "v").await.unwrap());
    assert_eq!(
        row(&env, "s1").await.unwrap().state,
        SnapshotState::Creating
    );
    assert_eq!(
        env.ops().await,
        ["create-snapshot snapshot/s1 - n1 0"],
        "handed to the controller host like CreateVolume"
    );
    let (id, attempt, kind) = op_for(&env, "n1").await;
    assert_eq!(
        kind,
        ControllerOpKind::CreateSnapshot {
            snapshot: "s1".into(),
            source_volume_id: "ext-1".into(),
            snapshot_id: String::new(),
            parameters: Default::default(),
            secrets: Default::default(),
        }
    );

    // Cut but not ready to use: CreateSnapshot is asked again later.
    let created = |op, attempt, ready_to_use| Report::SnapshotCreated {
        op,
        attempt,
        snapshot_id: "snap-9".into(),
        size_bytes: 4096,
        ready_to_use,
        creation_time_ms: Some(1_700_000_000_000),
    };
    env.report("n1", vec![created(id, attempt, false)]).await;
    let s = row(&env, "s1").await.unwrap();
    assert_eq!((s.state, s.ready_to_use), (SnapshotState::Pending, false));
    assert_eq!(s.snapshot_id, "snap-9");
    assert_eq!(env.ops().await, ["create-snapshot snapshot/s1 - - 1"]);

    // Its volume stays while the snapshot is being cut.
    let e = env
        .write(|ctx, l| super::super::deregister_volume(ctx, "v", true, "op", l, false))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(
        e.message.contains("snapshots being created: s1"),
        "{}",
        e.message
    );

    // A volume cannot start from a snapshot that is not ready to use.
    let e = env
        .write(|ctx, l| {
            let spec = create_spec(ContentSource::Snapshot("s1".into()));
            super::super::create_volume(ctx, "c1", spec, "op", l)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(e.message.contains("not ready to use yet"), "{}", e.message);

    // The poll comes due (the scheduler's clock is not the test's: hand it out directly).
    env.write(move |ctx, _| ctx.assign_op(id as i64, "n1"))
        .await
        .unwrap();
    // The poll names the snapshot cut, for a plugin with GET_SNAPSHOT to be asked about it.
    let (_, _, kind) = op_for(&env, "n1").await;
    assert!(
        matches!(&kind, ControllerOpKind::CreateSnapshot { snapshot_id, .. } if snapshot_id == "snap-9"),
        "{kind:?}"
    );
    env.report("n1", vec![created(id, attempt + 1, true)]).await;
    let s = row(&env, "s1").await.unwrap();
    assert_eq!((s.state, s.ready_to_use), (SnapshotState::Ready, true));
    assert_eq!(s.size_bytes, 4096);
    assert!(env.ops().await.is_empty());
    assert_eq!(
        env.events_of("snapshot-pending").await,
        ["snapshot-pending v - -"]
    );
    assert_eq!(
        env.events_of("snapshot-ready").await,
        ["snapshot-ready v - -"]
    );

    // Idempotent: the same request again starts nothing; the name for another volume is taken.
    assert!(!snapshot(&env, "s1", "v").await.unwrap());
    env.volume("w", "single-node-writer").await;
    let e = snapshot(&env, "s1", "w").await.unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");

    // A volume from the snapshot: CreateVolume carries the plugin's snapshot id.
    env.write(|ctx, l| {
        let spec = create_spec(ContentSource::Snapshot("s1".into()));
        super::super::create_volume(ctx, "c1", spec, "op", l)
    })
    .await
    .unwrap();
    let (op, _, kind) = op_for(&env, "n1").await;
    let ControllerOpKind::Create { source, .. } = kind else {
        panic!("a create: {kind:?}")
    };
    assert_eq!(source, Some(WireContentSource::SnapshotId("snap-9".into())));
    env.report(
        "n1",
        vec![Report::Created {
            op,
            attempt: 0,
            external_id: "disk-c1".into(),
            capacity_bytes: 4096,
            context: Default::default(),
            accessible_topology: Vec::new(),
            made_for: None,
        }],
    )
    .await;

    // A clone of the volume carries the plugin's volume id.
    env.write(|ctx, l| {
        let spec = create_spec(ContentSource::Volume("v".into()));
        super::super::create_volume(ctx, "c2", spec, "op", l)
    })
    .await
    .unwrap();
    let (_, _, kind) = op_for(&env, "n1").await;
    let ControllerOpKind::Create { source, .. } = kind else {
        panic!("a create: {kind:?}")
    };
    assert_eq!(source, Some(WireContentSource::VolumeId("ext-1".into())));
    assert!(
        env.events_of("volume-creating").await.len() == 2,
        "{:?}",
        env.events().await
    );

    // Delete: a final error leaves the snapshot as it was, with the plugin's error.
    let d = delete(&env, "s1")
        .await
        .unwrap()
        .expect("deleting through the plugin");
    assert_eq!(d.state, SnapshotState::Deleting);
    let o = env
        .ops_of("n1")
        .await
        .into_iter()
        .find(|o| o.volume == "snapshot/s1")
        .unwrap();
    env.report(
        "n1",
        vec![Report::OpError {
            op: o.id as u64,
            attempt: o.attempt,
            error: plugin_error("FAILED_PRECONDITION", true),
        }],
    )
    .await;
    let s = row(&env, "s1").await.unwrap();
    assert_eq!(s.state, SnapshotState::Ready);
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .starts_with("DeleteSnapshot failed"),
        "{:?}",
        s.error
    );

    delete(&env, "s1").await.unwrap();
    let o = env
        .ops_of("n1")
        .await
        .into_iter()
        .find(|o| o.volume == "snapshot/s1")
        .unwrap();
    env.report(
        "n1",
        vec![Report::SnapshotDeleted {
            op: o.id as u64,
            attempt: o.attempt,
        }],
    )
    .await;
    assert!(row(&env, "s1").await.is_none());
    assert_eq!(
        env.events_of("snapshot-deleted").await,
        ["snapshot-deleted v - -"]
    );
}

#[tokio::test]
async fn requests_the_plugin_cannot_serve_are_refused_with_a_hint() {
    let env = Env::new();
    register_host(&env, "n1", false, false).await;
    env.volume("v", "single-node-writer").await;

    let e = snapshot(&env, "s1", "v").await.unwrap_err();
    assert_eq!(e.code().as_str(), "invalid");
    assert!(
        e.message.contains("CREATE_DELETE_SNAPSHOT"),
        "{}",
        e.message
    );
    assert!(e.hint.unwrap().contains("csivol plugin show hp"));
    assert!(row(&env, "s1").await.is_none(), "nothing recorded");

    let e = env
        .write(|ctx, l| {
            let spec = create_spec(ContentSource::Volume("v".into()));
            super::super::create_volume(ctx, "c", spec, "op", l)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid");
    assert!(e.message.contains("CLONE_VOLUME"), "{}", e.message);
    assert!(
        env.read(|c| c.volume("c")).await.is_none(),
        "nothing recorded"
    );

    let e = env
        .write(|ctx, l| {
            let spec = create_spec(ContentSource::Snapshot("nope".into()));
            super::super::create_volume(ctx, "c", spec, "op", l)
        })
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "not_found");

    let e = snapshot(&env, "s1", "missing").await.unwrap_err();
    assert_eq!(e.code().as_str(), "not_found");
    assert!(env.ops().await.is_empty());
}

#[tokio::test]
async fn snapshot_errors_retry_or_fail_and_not_found_on_delete_is_done() {
    let env = Env::new();
    register_host(&env, "n1", true, false).await;
    env.volume("v", "single-node-writer").await;
    snapshot(&env, "s1", "v").await.unwrap();

    // UNAVAILABLE: retried, the error shown on the snapshot.
    let (id, attempt, _) = op_for(&env, "n1").await;
    env.report(
        "n1",
        vec![Report::OpError {
            op: id,
            attempt,
            error: plugin_error("UNAVAILABLE", false),
        }],
    )
    .await;
    let s = row(&env, "s1").await.unwrap();
    assert_eq!(s.state, SnapshotState::Creating);
    assert!(
        s.error.as_deref().unwrap().contains("retrying at"),
        "{:?}",
        s.error
    );
    assert_eq!(env.ops().await, ["create-snapshot snapshot/s1 - - 1"]);

    // INVALID_ARGUMENT: final; the snapshot failed, and a delete only drops the record.
    env.write(move |ctx, _| ctx.assign_op(id as i64, "n1"))
        .await
        .unwrap();
    env.report(
        "n1",
        vec![Report::OpError {
            op: id,
            attempt: attempt + 1,
            error: plugin_error("INVALID_ARGUMENT", true),
        }],
    )
    .await;
    assert_eq!(row(&env, "s1").await.unwrap().state, SnapshotState::Failed);
    assert!(env.ops().await.is_empty());
    let gone = env
        .write(|ctx, l| super::super::delete_snapshot(ctx, "s1", "op", l))
        .await
        .unwrap();
    assert!(gone.is_none());
    assert!(row(&env, "s1").await.is_none());

    // NOT_FOUND from DeleteSnapshot: the snapshot is gone at the plugin already.
    snapshot(&env, "s2", "v").await.unwrap();
    let (id, attempt, _) = op_for(&env, "n1").await;
    env.report(
        "n1",
        vec![Report::SnapshotCreated {
            op: id,
            attempt,
            snapshot_id: "snap-2".into(),
            size_bytes: 0,
            ready_to_use: true,
            creation_time_ms: None,
        }],
    )
    .await;
    env.write(|ctx, l| super::super::delete_snapshot(ctx, "s2", "op", l))
        .await
        .unwrap();
    let (id, attempt, kind) = op_for(&env, "n1").await;
    assert!(
        matches!(kind, ControllerOpKind::DeleteSnapshot { ref snapshot_id, .. } if snapshot_id == "snap-2")
    );
    env.report(
        "n1",
        vec![Report::OpError {
            op: id,
            attempt,
            error: plugin_error("NOT_FOUND", true),
        }],
    )
    .await;
    assert!(row(&env, "s2").await.is_none());
    assert!(env.ops().await.is_empty());
}
