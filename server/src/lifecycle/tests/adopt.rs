//! Adoption asks the plugin through a controller host: a volume waits `creating` for
//! ValidateVolumeCapabilities, whose answer decides; and below this release's schema the
//! operations it queues, of kinds the servers of the release before do not know, are
//! refused.

use csivol_api::{ControllerOpKind, Report, SnapshotAdoptRequest, VolumeState};

use super::*;

fn adopted_spec() -> VolumeSpec {
    let mut spec = spec("single-node-writer");
    spec.external_id = "made-elsewhere".into();
    spec
}

async fn adopt(env: &Env) -> ApiResult<api::Volume> {
    env.write(|ctx, l| super::super::adopt_volume(ctx, "v", adopted_spec(), false, "op", l))
        .await
        .map(|(v, _)| v)
}

/// The controller operation handed to host `n1`, with its id and attempt.
async fn handed_out(env: &Env) -> (u64, u32, ControllerOpKind) {
    let o = env.ops_of("n1").await.remove(0);
    let (id, attempt) = (o.id as u64, o.attempt);
    let api = env
        .read(move |c| super::super::ops::op_to_api(c, &o))
        .await
        .expect("its volume exists");
    (id, attempt, api.kind)
}

async fn volume(env: &Env) -> api::Volume {
    env.read(|c| super::super::volume_view(c, "v")).await
}

#[tokio::test]
async fn a_volume_is_usable_only_once_the_plugin_confirmed_it() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    let v = adopt(&env).await.unwrap();
    assert_eq!(v.state, VolumeState::Creating);
    let (op, attempt, kind) = handed_out(&env).await;
    assert!(
        matches!(&kind, ControllerOpKind::ValidateVolume { external_id, .. } if external_id == "made-elsewhere"),
        "{kind:?}"
    );
    // Not confirmed: failed, naming what and with the plugin's message.
    env.report(
        "n1",
        vec![Report::Validated {
            op,
            attempt,
            not_confirmed: vec!["the volume capability".into()],
            message: "no such mode here".into(),
        }],
    )
    .await;
    let v = volume(&env).await;
    assert_eq!(v.state, VolumeState::Failed);
    let error = v.error.unwrap_or_default();
    assert!(
        error.contains("did not confirm the volume capability"),
        "{error}"
    );
    assert!(error.contains("no such mode here"), "{error}");

    // Adopted again, the failed record replaced; confirmed: free.
    adopt(&env).await.unwrap();
    let (op, attempt, _) = handed_out(&env).await;
    env.report(
        "n1",
        vec![Report::Validated {
            op,
            attempt,
            not_confirmed: Vec::new(),
            message: String::new(),
        }],
    )
    .await;
    assert_eq!(volume(&env).await.state, VolumeState::Free);

    // Adopted again with the same spec: nothing changes, nothing is asked.
    assert_eq!(adopt(&env).await.unwrap().state, VolumeState::Free);
    assert!(env.ops_of("n1").await.is_empty(), "{:?}", env.ops().await);

    // With another spec: refused, the registered volume as it was.
    let e = env
        .write(|ctx, l| {
            let mut spec = adopted_spec();
            spec.access_mode = api::AccessMode::MultiNodeReaderOnly;
            super::super::adopt_volume(ctx, "v", spec, false, "op", l)
        })
        .await
        .unwrap_err();
    assert!(
        format!("{e:?}").contains("already registered with another spec"),
        "{e:?}"
    );
    let v = volume(&env).await;
    assert_eq!(
        (v.state, v.access_mode),
        (VolumeState::Free, api::AccessMode::SingleNodeWriter)
    );
    assert!(env.ops_of("n1").await.is_empty(), "{:?}", env.ops().await);
}

#[tokio::test]
async fn below_this_releases_schema_adoption_is_refused() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.write(|ctx, _| {
        ctx.tx
            // What the previous schema lacks of the claims (the rest does not matter here).
            .execute_batch(
                "DROP INDEX claims_claimer;
                 ALTER TABLE claims DROP COLUMN claimer;
                 ALTER TABLE claims DROP COLUMN drift;
                 ALTER TABLE claims DROP COLUMN mount;",
            )
            .map_err(crate::error::ApiError::from)
    })
    .await
    .unwrap();
    let e = adopt(&env).await.unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    let e = env
        .write(|ctx, l| {
            let req = SnapshotAdoptRequest {
                plugin: PLUGIN.into(),
                snapshot_id: "snap-1".into(),
            };
            super::super::adopt_snapshot(ctx, "s", req, "op", l)
        })
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
}

/// A snapshot found not ready to use is listed again until it is; deleted meanwhile, the
/// listing stops and only DeleteSnapshot is queued.
#[tokio::test]
async fn a_pending_adopted_snapshot_is_listed_until_ready_and_deleted_alone() {
    let env = Env::new();
    snapshots::register_host(&env, "n1", true, false).await;
    let adopt = || {
        env.write(|ctx, l| {
            let req = SnapshotAdoptRequest {
                plugin: PLUGIN.into(),
                snapshot_id: "snap-1".into(),
            };
            super::super::adopt_snapshot(ctx, "s", req, "op", l)
        })
    };
    let (s, started) = adopt().await.unwrap();
    assert!(started);
    assert_eq!(s.state, api::SnapshotState::Creating);
    let (op, attempt, kind) = handed_out(&env).await;
    assert_eq!(
        kind,
        ControllerOpKind::FindSnapshot {
            snapshot: "s".into(),
            snapshot_id: "snap-1".into(),
        }
    );
    env.report(
        "n1",
        vec![Report::SnapshotFound {
            op,
            attempt,
            snapshot: Some(api::ListedSnapshot {
                snapshot_id: "snap-1".into(),
                source_volume_id: "elsewhere".into(),
                size_bytes: 4096,
                creation_time_ms: Some(1_700_000_000_000),
                ready_to_use: false,
            }),
        }],
    )
    .await;
    let s = env.read(|c| super::super::snapshot_view(c, "s")).await;
    assert_eq!(
        (s.state, s.snapshot_id.as_str(), s.size_bytes),
        (api::SnapshotState::Pending, "snap-1", 4096)
    );
    assert_eq!(env.ops().await, ["find-snapshot snapshot/s - - 1"]);
    // Adopted again: the same snapshot, nothing new.
    assert!(!adopt().await.unwrap().1);
    env.write(|ctx, l| super::super::delete_snapshot(ctx, "s", "op", l))
        .await
        .unwrap();
    let ops = env.ops().await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(ops[0].starts_with("delete-snapshot snapshot/s"), "{ops:?}");
}

/// A snapshot adopted into a namespace is that namespace's: one the plugin lists as cut
/// from a volume of another namespace is refused (its data is that namespace's), one of a
/// volume there is linked to it, and a snapshot of the storage already adopted elsewhere
/// is refused without naming it.
#[tokio::test]
async fn a_snapshot_adopted_into_a_namespace_is_of_that_namespaces_volumes_only() {
    let env = Env::new();
    snapshots::register_host(&env, "n1", true, false).await;
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    // `db` of `default` is backend volume `ext-db`, team-a's `db` is `ext-team-a~db`.
    env.volume("db", "single-node-writer").await;
    env.volume("team-a~db", "single-node-writer").await;
    let adopt = |key: &'static str, id: &'static str| {
        env.write(move |ctx, l| {
            let req = SnapshotAdoptRequest {
                plugin: PLUGIN.into(),
                snapshot_id: id.into(),
            };
            super::super::adopt_snapshot(ctx, key, req, "op", l)
        })
    };
    let found = |op, attempt, id: &str, source: &str| Report::SnapshotFound {
        op,
        attempt,
        snapshot: Some(api::ListedSnapshot {
            snapshot_id: id.into(),
            source_volume_id: source.into(),
            size_bytes: 4096,
            creation_time_ms: None,
            ready_to_use: true,
        }),
    };
    adopt("team-a~s", "snap-1").await.unwrap();
    let (op, attempt, _) = handed_out(&env).await;
    env.report("n1", vec![found(op, attempt, "snap-1", "ext-db")])
        .await;
    let s = env
        .read(|c| super::super::snapshot_view(c, "team-a~s"))
        .await;
    assert_eq!(
        (s.namespace.as_str(), s.state, s.snapshot_id.as_str()),
        ("team-a", api::SnapshotState::Failed, ""),
        "refused, and no id a deletion could send: {s:?}"
    );
    let error = s.error.unwrap_or_default();
    assert!(error.contains("another namespace"), "{error}");
    assert!(
        !error.contains("`db`") && !error.contains("default"),
        "{error}"
    );

    // One of team-a's own volume is adopted and linked to it.
    adopt("team-a~s2", "snap-2").await.unwrap();
    let (op, attempt, _) = handed_out(&env).await;
    env.report("n1", vec![found(op, attempt, "snap-2", "ext-team-a~db")])
        .await;
    let s = env
        .read(|c| super::super::snapshot_view(c, "team-a~s2"))
        .await;
    assert_eq!(
        (s.namespace.as_str(), s.state, s.volume.as_str()),
        ("team-a", api::SnapshotState::Ready, "db"),
        "{s:?}"
    );
    // Adopted again from `default`: refused, without naming team-a's snapshot.
    let e = adopt("s3", "snap-2").await.unwrap_err();
    assert!(e.message.contains("in another namespace"), "{e:?}");
    assert!(!e.message.contains("s2"), "{e:?}");
}
