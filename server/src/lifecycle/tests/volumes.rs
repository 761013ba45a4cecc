//! Volumes: registration, creation through the plugin, deregistration and deletion.

use csivol_api::{ClaimMode, Report};

use super::{Env, spec};
use crate::model::Lifecycle;

#[tokio::test]
async fn registering_again_changes_nothing_and_a_changed_spec_in_use_is_refused() {
    let env = Env::new();
    let first = env
        .write(|ctx, _| {
            super::super::register_volume(ctx, "v", spec("multi-node-multi-writer"), "op")
        })
        .await
        .unwrap();
    assert!(first.1, "new");
    let again = env
        .write(|ctx, _| {
            super::super::register_volume(ctx, "v", spec("multi-node-multi-writer"), "op")
        })
        .await
        .unwrap();
    assert!(!again.1, "the same spec is no change");
    assert_eq!(again.0.index, first.0.index, "not even its index moved");

    env.register("n1", false, &[]).await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    let e = env
        .write(|ctx, _| super::super::register_volume(ctx, "v", spec("single-node-writer"), "op"))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(e.message.contains("in use: a1 on n1"), "{}", e.message);
    // Released, and still being taken down: said so, never "release its claims first".
    env.release("v", "a1").await.unwrap();
    let e = env
        .write(|ctx, _| super::super::register_volume(ctx, "v", spec("single-node-writer"), "op"))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(
        e.message
            .ends_with("is still being released: the claim of alloc a1 on n1 is releasing"),
        "{}",
        e.message
    );
    let hint = e.hint.unwrap_or_default();
    assert!(hint.contains("once the release has finished"), "{hint}");
    assert!(!hint.contains("release its claims"), "{hint}");
    let v = env.read(|c| c.require_volume("v")).await;
    assert_eq!(
        v.access_mode.as_str(),
        "multi-node-multi-writer",
        "unchanged"
    );
    assert_eq!(
        env.events_of("volume-registered").await,
        ["volume-registered v - -"]
    );
    assert!(env.events_of("volume-updated").await.is_empty());
}

#[tokio::test]
async fn a_created_volume_is_ready_once_its_plugin_created_it() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    let spec = super::create_spec();
    let (v, started) = env
        .write(move |ctx, l| super::super::create_volume(ctx, "new", spec.clone(), "op", l))
        .await
        .unwrap();
    assert!(started);
    assert_eq!(v.state.as_str(), "creating");
    assert_eq!(
        env.ops().await,
        ["create new - n1 0"],
        "handed to the controller host"
    );
    let op = env.ops_of("n1").await.remove(0);
    let payload: serde_json::Value = serde_json::from_str(&op.payload).unwrap();
    assert_eq!(payload["capacity_bytes"], 1024);
    // CreateVolume's name is the creation's own, recorded with the operation.
    let csi_name = payload["csi_name"].as_str().unwrap();
    assert!(
        csi_name.starts_with("csivol-new-") && csi_name.len() == "csivol-new-".len() + 12,
        "{csi_name}"
    );

    env.report(
        "n1",
        vec![Report::Created {
            op: op.id as u64,
            attempt: 0,
            external_id: "disk-7".into(),
            capacity_bytes: 2048,
            context: [("zone".to_owned(), "a".to_owned())].into(),
            accessible_topology: Vec::new(),
            made_for: None,
        }],
    )
    .await;
    let v = env.read(|c| c.require_volume("new")).await;
    assert_eq!(v.lifecycle, Lifecycle::Ready);
    assert_eq!(v.external_id, "disk-7");
    assert_eq!(v.capacity_bytes, Some(2048));
    assert_eq!(v.context["zone"], "a");
    assert!(env.ops().await.is_empty());
    assert_eq!(
        env.events_of("volume-created").await,
        ["volume-created new - -"]
    );
}

#[tokio::test]
async fn deregistering_refuses_a_claimed_volume_and_deletes_a_free_one_through_its_plugin() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    let e = env
        .write(|ctx, l| super::super::deregister_volume(ctx, "v", false, "op", l, false))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(e.message.contains("is claimed: a1 on n1"), "{}", e.message);

    env.volume("w", "single-node-writer").await;
    let deleting = env
        .write(|ctx, l| super::super::deregister_volume(ctx, "w", true, "op", l, false))
        .await
        .unwrap()
        .expect("a volume being deleted");
    assert_eq!(deleting.state.as_str(), "deleting");
    let op = env
        .ops_of("n1")
        .await
        .into_iter()
        .find(|o| o.volume == "w")
        .expect("DeleteVolume handed out");
    assert_eq!(op.kind.as_str(), "delete");
    env.report(
        "n1",
        vec![Report::Deleted {
            op: op.id as u64,
            attempt: 0,
        }],
    )
    .await;
    assert!(env.read(|c| c.volume("w")).await.is_none(), "gone");
    assert_eq!(
        env.events_of("volume-deleted").await,
        ["volume-deleted w - -"]
    );

    env.volume("x", "single-node-writer").await;
    let gone = env
        .write(|ctx, l| super::super::deregister_volume(ctx, "x", false, "op", l, false))
        .await
        .unwrap();
    assert!(gone.is_none());
    assert!(env.read(|c| c.volume("x")).await.is_none());
    assert_eq!(
        env.events_of("volume-deregistered").await,
        ["volume-deregistered x - -"]
    );
}

#[tokio::test]
async fn a_volume_is_stamped_once_per_request_until_its_row_is_written_otherwise() {
    use crate::store::Txn;
    let env = Env::new();
    env.volume("v", "multi-node-multi-writer").await;
    let before = env.read(|c| c.require_volume("v")).await;
    let (index, writes) = env
        .write(move |ctx, _| {
            let changes = |ctx: &crate::store::sqlite::writer::WriteCtx<'_>| ctx.tx.total_changes();
            let mut writes = Vec::new();
            let mut last = changes(ctx);
            let mut step = |ctx: &crate::store::sqlite::writer::WriteCtx<'_>| {
                let now = changes(ctx);
                writes.push(now - last);
                last = now;
            };
            ctx.stamp_volume("v")?;
            step(ctx);
            // The same values again: nothing to write.
            ctx.stamp_volume("v")?;
            step(ctx);
            // Its row written by another step: the next stamp is written again.
            ctx.put_volume(&before)?;
            step(ctx);
            ctx.stamp_volume("v")?;
            step(ctx);
            ctx.set_volume_error("v", "stuck", false)?;
            step(ctx);
            ctx.stamp_volume("v")?;
            step(ctx);
            Ok((ctx.index(), writes))
        })
        .await
        .unwrap();
    assert_eq!(writes, [1, 0, 1, 1, 1, 1]);
    let after = env.read(|c| c.require_volume("v")).await;
    assert_eq!(after.modify_index, index);
}
