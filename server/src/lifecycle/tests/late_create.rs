//! Late CreateVolume answers: from a host that no longer has the operation, or for one
//! already finished. What a creation still running gets is taken as its answer; a volume
//! made that nothing records is deleted through the plugin, once; the volume csivol
//! records, or one made by an operation of another generation of the state, never is.

use csivol_api::{CreatedFor, Report};

use super::{Env, GENERATION};
use crate::model::{Lifecycle, OpRow};

/// `new` being created, its CreateVolume handed to `n1`; `n2` hosts the controller too.
async fn creating() -> (Env, OpRow) {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    let spec = super::create_spec();
    env.write(move |ctx, l| super::super::create_volume(ctx, "new", spec.clone(), "op", l))
        .await
        .unwrap();
    env.register("n2", true, &[]).await;
    let op = env.ops_of("n1").await.remove(0);
    (env, op)
}

/// CreateVolume's answer to attempt `attempt` of `op`: made as `external_id`, handed out
/// by a state of `generation`.
fn created(op: &OpRow, attempt: u32, external_id: &str, generation: &str) -> Report {
    Report::Created {
        op: op.id as u64,
        attempt,
        external_id: external_id.into(),
        capacity_bytes: 1024,
        context: Default::default(),
        accessible_topology: Vec::new(),
        made_for: Some(CreatedFor {
            plugin: "hp".into(),
            volume: "new".into(),
            generation: Some(generation.into()),
        }),
    }
}

#[tokio::test]
async fn a_late_answer_for_a_finished_creation_deletes_what_it_made_once() {
    let (env, op) = creating().await;
    env.report("n1", vec![created(&op, op.attempt, "disk-1", GENERATION)])
        .await;
    let v = env.read(|c| c.require_volume("new")).await;
    assert_eq!(
        (v.lifecycle, v.external_id.as_str()),
        (Lifecycle::Ready, "disk-1")
    );

    // The same answer again, or another host's answer with the recorded id (a retried
    // CreateVolume, idempotent on its name): the volume csivol records stays.
    env.report("n1", vec![created(&op, op.attempt, "disk-1", GENERATION)])
        .await;
    env.report("n2", vec![created(&op, 0, "disk-1", GENERATION)])
        .await;
    assert!(env.ops().await.is_empty(), "{:?}", env.ops().await);

    // A host paused while it ran an earlier attempt answers now, with a volume nothing
    // records: it is deleted through the plugin, once, however often the answer comes.
    env.report("n2", vec![created(&op, 0, "disk-2", GENERATION)])
        .await;
    env.report("n2", vec![created(&op, 0, "disk-2", GENERATION)])
        .await;
    let ops = env.ops().await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(
        ops[0].starts_with("delete stray-volume/disk-2 - "),
        "{ops:?}"
    );
    let message = env.last_message("volume-deleting", "n2").await;
    assert_eq!(
        message,
        "a late CreateVolume answer from node n2 made volume disk-2 that nothing records; \
         deleting it"
    );
    let host = ops[0].split(' ').nth(3).unwrap().to_owned();
    let delete = env.ops_of(&host).await.remove(0);
    let shown = env
        .read(move |c| crate::lifecycle::ops::op_to_api(c, &delete))
        .await
        .unwrap();
    match shown.kind {
        csivol_api::ControllerOpKind::Delete {
            volume,
            external_id,
            ..
        } => assert_eq!((volume.as_str(), external_id.as_str()), ("new", "disk-2")),
        other => panic!("{other:?}"),
    }
    env.report(
        &host,
        vec![Report::Deleted {
            op: shown.id,
            attempt: shown.attempt,
        }],
    )
    .await;
    assert!(env.ops().await.is_empty());
    // The recorded volume is untouched.
    let v = env.read(|c| c.require_volume("new")).await;
    assert_eq!(
        (v.lifecycle, v.external_id.as_str()),
        (Lifecycle::Ready, "disk-1")
    );
    assert_eq!(
        env.events_of("volume-deleted").await,
        ["volume-deleted new - -"]
    );
}

#[tokio::test]
async fn a_late_answer_for_a_creation_still_running_is_its_answer() {
    let (env, op) = creating().await;
    // The answer of an earlier attempt, from a host that no longer has it: the plugin
    // made the volume, and the running attempt, asked with the same name, gets it too.
    env.report("n2", vec![created(&op, op.attempt, "disk-1", GENERATION)])
        .await;
    let v = env.read(|c| c.require_volume("new")).await;
    assert_eq!(
        (v.lifecycle, v.external_id.as_str()),
        (Lifecycle::Ready, "disk-1")
    );
    assert!(env.ops().await.is_empty());
    // The running attempt's answer then comes late, with the recorded id: nothing goes.
    env.report("n1", vec![created(&op, op.attempt, "disk-1", GENERATION)])
        .await;
    assert!(env.ops().await.is_empty());
}

#[tokio::test]
async fn a_late_answer_of_another_generation_or_an_older_agent_changes_nothing() {
    let (env, op) = creating().await;
    env.report("n1", vec![created(&op, op.attempt, "disk-1", GENERATION)])
        .await;
    // Handed out by a state of another generation (the state was restored since): a
    // volume made within the restore's window is left for the operator.
    env.report("n2", vec![created(&op, 0, "disk-3", "00000000000000b2")])
        .await;
    // An older agent says nothing of what it was asked for.
    let mut old = created(&op, 0, "disk-4", GENERATION);
    if let Report::Created { made_for, .. } = &mut old {
        *made_for = None;
    }
    env.report("n2", vec![old]).await;
    assert!(env.ops().await.is_empty(), "{:?}", env.ops().await);
    let v = env.read(|c| c.require_volume("new")).await;
    assert_eq!(v.external_id, "disk-1");
}
