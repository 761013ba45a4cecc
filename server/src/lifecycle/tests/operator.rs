//! Operators' actions: unblock and detach, with their dry runs.

use csivol_api::{AttachmentState, ClaimMode, ClaimState, DetachRequest};

use super::Env;

/// Node `n1` holds a ready claim `a1` of volume `v`, attached through controller host
/// `ctl`; then `n1` is lost.
async fn blocked() -> Env {
    let env = super::ready_node().await;
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "no heartbeat", l))
        .await
        .unwrap();
    env
}

#[tokio::test]
async fn unblock_plans_in_a_dry_run_and_force_releases_and_detaches_for_real() {
    let env = blocked().await;
    let plan = env
        .write(|ctx, l| super::super::unblock_volume(ctx, "v", None, "", true, "op", l))
        .await
        .unwrap();
    assert!(plan.dry_run);
    let actions: Vec<_> = plan
        .actions
        .iter()
        .map(|a| {
            format!(
                "{} {} {}",
                a.action,
                a.node,
                a.alloc.as_deref().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(actions, ["force-release n1 a1", "force-detach n1 -"]);
    assert!(plan.actions[0].lost_since.is_some());
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Blocked),
        "nothing changed"
    );

    let e = env
        .write(|ctx, l| super::super::unblock_volume(ctx, "v", None, " ", false, "op", l))
        .await
        .unwrap_err();
    assert_eq!(
        e.code().as_str(),
        "invalid",
        "a real unblock needs a reason"
    );

    env.write(|ctx, l| super::super::unblock_node(ctx, "n1", "n1 burned", false, "op", l))
        .await
        .unwrap();
    assert!(env.claim_row("v", "a1").await.is_none());
    let a = env
        .read(|c| crate::store::Snapshot::attachment(c, "v", "n1"))
        .await
        .unwrap();
    assert_eq!(a.state, AttachmentState::Detaching);
    assert!(a.forced);
    assert_eq!(
        env.ops().await,
        ["unpublish v n1 ctl 0"],
        "ControllerUnpublish without the node"
    );
    assert_eq!(
        env.events_of("claim-force-released").await,
        ["claim-force-released v n1 a1"]
    );
    assert_eq!(
        env.events_of("volume-unblocked").await,
        ["volume-unblocked v n1 -"]
    );

    let e = env
        .write(|ctx, l| super::super::unblock_volume(ctx, "v", None, "again", false, "op", l))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict", "not blocked any more");
}

#[tokio::test]
async fn detach_releases_through_a_live_node_and_needs_force_for_a_lost_one() {
    let env = blocked().await;
    let req = |node: &str, force: bool, dry_run: bool| DetachRequest {
        node: node.into(),
        reason: "maintenance".into(),
        force,
        dry_run,
    };
    let r = req("n1", false, false);
    let e = env
        .write(move |ctx, l| super::super::detach(ctx, "v", &r, "op", l))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "blocked");
    assert!(e.message.contains("n1` is lost"), "{}", e.message);
    let r = req("n1", true, true);
    let plan = env
        .write(move |ctx, l| super::super::detach(ctx, "v", &r, "op", l))
        .await
        .unwrap();
    assert_eq!(plan.actions.len(), 2, "the unblock's plan");
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Blocked));

    // On a live node, detach releases through it; --force is refused there.
    env.volume("w", "single-node-writer").await;
    env.claim("w", "b1", "ctl", ClaimMode::Write).await.unwrap();
    let r = req("ctl", true, false);
    let e = env
        .write(move |ctx, l| super::super::detach(ctx, "w", &r, "op", l))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    let r = req("ctl", false, true);
    let plan = env
        .write(move |ctx, l| super::super::detach(ctx, "w", &r, "op", l))
        .await
        .unwrap();
    assert_eq!(plan.actions[0].action, "release");
    assert_eq!(
        env.claim_state("w", "b1").await,
        Some(ClaimState::Attaching),
        "dry run"
    );
    let r = req("ctl", false, false);
    env.write(move |ctx, l| super::super::detach(ctx, "w", &r, "op", l))
        .await
        .unwrap();
    assert_eq!(
        env.claim_state("w", "b1").await,
        Some(ClaimState::Releasing)
    );
    assert_eq!(
        env.events_of("volume-detach").await,
        ["volume-detach w ctl -"]
    );
}
