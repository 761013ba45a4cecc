//! After a restore: the volumes two nodes must not hold go to no node until every node that
//! may hold one has said what it holds; what a node holds that the restored state does not
//! know is taken down through the normal path.

use super::*;
use crate::lifecycle::settle;
use crate::watch::Generation;

/// Begins settling in generation `g`, its window for unknown nodes already past (these
/// tests look at the nodes the state knows; the window is `close_window`'s).
async fn restored(env: &Env, g: u64) {
    env.write(move |ctx, _| settle::begin(ctx, Generation(g), 0))
        .await
        .unwrap();
}

/// The leader's steps, until it has nothing more to do now.
async fn progress(env: &Env) {
    while env.write(|ctx, l| settle::progress(ctx, l)).await.unwrap() {}
}

async fn held(env: &Env, volume: &str) -> bool {
    let v = volume.to_owned();
    env.read(move |c| {
        let row = c.require_volume(&v)?;
        super::super::admission::held_back(c, &row, crate::db::now_ms())
    })
    .await
}

async fn register_again(env: &Env, node: &str) -> bool {
    let n = node.to_owned();
    env.read(move |c| super::super::desired_state(c, &n, 0))
        .await
        .register_again
}

/// `n1` holds a claim of a single-writer volume made after the backup (so the restored
/// state does not have it); `n2` asks for the volume. It is not granted while `n1` holds
/// the mount, which is taken down through the normal path: unpublish, unstage,
/// ControllerUnpublish; then `n2` gets it.
#[tokio::test]
async fn a_mount_the_restored_state_does_not_know_is_taken_down_before_anyone_gets_it() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    env.register("n2", false, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.volume("shared", "multi-node-multi-writer").await;
    restored(&env, 7).await;
    assert!(
        register_again(&env, "n1").await,
        "n1 says what it holds first"
    );
    let desired = env.read(|c| super::super::desired_state(c, "n1", 0)).await;
    assert_eq!(
        desired.status,
        Some(csivol_api::NodeStatus::Lost),
        "an older agent registers again on `lost`"
    );
    assert!(held(&env, "v").await);
    assert!(
        !held(&env, "shared").await,
        "two nodes may hold a multi-writer volume"
    );

    // Before n1 said anything, n2's claim is recorded and waits: nothing is attached.
    let c = env
        .claim("v", "late", "n2", ClaimMode::Write)
        .await
        .unwrap();
    assert_eq!(c.state, ClaimState::Pending);
    assert!(
        env.ops().await.is_empty(),
        "no ControllerPublish: {:?}",
        env.ops().await
    );
    let c = env
        .claim("shared", "s", "n2", ClaimMode::Write)
        .await
        .unwrap();
    assert_eq!(c.state, ClaimState::Attaching, "not held back");

    // n1 registers: it holds `v` for a claim the restored state does not have.
    let mut req = registration("n1", false, &[("v", "after-backup")]);
    req.staged = vec!["v".into()];
    env.write(move |ctx, l| super::super::register_node(ctx, "n1", &req, l))
        .await
        .unwrap();
    assert!(!register_again(&env, "n1").await);
    assert_eq!(
        env.claim_state("v", "after-backup").await,
        Some(ClaimState::Releasing),
        "recorded, to be taken down"
    );
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attached)
    );
    assert_eq!(
        env.events_of("claim-found").await,
        ["claim-found v n1 after-backup"]
    );
    let d = env.read(|c| super::super::desired_state(c, "n1", 0)).await;
    assert_eq!(d.unpublish.len(), 1, "{d:?}");
    assert!(
        held(&env, "v").await,
        "ctl and n2 run the plugin and have not reported"
    );

    // Everyone reported: nothing is held back any more, but n1 still holds `v`.
    env.register("ctl", true, &[]).await;
    env.register("n2", false, &[]).await;
    assert!(!held(&env, "v").await);
    progress(&env).await;
    assert_eq!(env.events_of("state-settled").await.len(), 1);
    assert_eq!(
        env.claim_state("v", "late").await,
        Some(ClaimState::Pending)
    );
    assert!(
        env.ops().await.iter().all(|o| !o.starts_with("publish v")),
        "{:?}",
        env.ops().await
    );

    // n1 takes it down the normal way; then the volume goes to n2.
    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "v".into(),
            alloc: "after-backup".into(),
        }],
    )
    .await;
    assert_eq!(env.claim_state("v", "after-backup").await, None);
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    env.report("n1", vec![Report::Unstaged { volume: "v".into() }])
        .await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    let op = env
        .ops_of("ctl")
        .await
        .into_iter()
        .find(|o| o.volume == "v")
        .unwrap();
    assert_eq!(op.kind, csivol_rules::kinds::OpKind::Unpublish);
    env.report(
        "ctl",
        vec![Report::ControllerUnpublished {
            op: op.id as u64,
            attempt: op.attempt,
        }],
    )
    .await;
    assert_eq!(env.attachment_state("v", "n1").await, None);
    assert_eq!(
        env.claim_state("v", "late").await,
        Some(ClaimState::Attaching)
    );
    progress(&env).await;
    let left = env.read(|c| c.meta("settle.")).await;
    assert!(left.is_empty(), "settling leaves nothing behind: {left:?}");
}

/// A claim the backup has ready, which its node no longer holds (released after the
/// backup): it waits while another node may hold the volume, then its node mounts it
/// again. One its node still holds stays ready throughout.
#[tokio::test]
async fn a_restored_claim_comes_back_once_nothing_else_may_hold_its_volume() {
    let env = ready_node().await;
    env.register("n2", false, &[]).await;
    env.volume("w", "single-node-writer").await;
    env.claim("w", "kept", "n2", ClaimMode::Write)
        .await
        .unwrap();
    env.controller_published("ctl").await;
    env.report("n2", vec![published("w", "kept")]).await;
    assert_eq!(env.claim_state("w", "kept").await, Some(ClaimState::Ready));
    restored(&env, 9).await;

    env.register("n1", false, &[]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Pending));
    assert_eq!(env.events_of("claim-held").await, ["claim-held v n1 a1"]);
    let d = env.read(|c| super::super::desired_state(c, "n1", 0)).await;
    assert!(d.publish.is_empty(), "not mounted while held: {d:?}");

    env.register("n2", false, &[("w", "kept")]).await;
    assert_eq!(env.claim_state("w", "kept").await, Some(ClaimState::Ready));
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Pending),
        "ctl not heard"
    );
    env.register("ctl", true, &[]).await;
    assert_eq!(env.claim_state("w", "kept").await, Some(ClaimState::Ready));
    // The storage may have detached `v` from n1 since the backup: n1 holds nothing of it,
    // so it is detached first and attached again, not staged on the backup's word.
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Pending));
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    let op = env.ops_of("ctl").await.remove(0);
    env.report(
        "ctl",
        vec![Report::ControllerUnpublished {
            op: op.id as u64,
            attempt: op.attempt,
        }],
    )
    .await;
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Attaching)
    );
    env.controller_published("ctl").await;
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Publishing)
    );
    env.report("n1", vec![published("v", "a1")]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
    assert_eq!(
        env.claim_state("w", "kept").await,
        Some(ClaimState::Ready),
        "never moved"
    );
}

/// A node that does not come back holds its plugin's volumes back until an operator says
/// it is gone; saying so again in the same generation (another server) asks nothing anew.
#[tokio::test]
async fn a_node_that_does_not_come_back_is_waited_for_until_an_operator_unblocks_it() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("gone", false, &[]).await;
    env.volume("v", "single-node-writer").await;
    restored(&env, 3).await;
    env.register("ctl", true, &[]).await;
    restored(&env, 3).await;
    assert!(
        !register_again(&env, "ctl").await,
        "the same generation: ctl was heard"
    );
    assert!(held(&env, "v").await, "`gone` runs the plugin");
    let c = env.claim("v", "a", "ctl", ClaimMode::Write).await.unwrap();
    assert_eq!(c.state, ClaimState::Pending);

    // `gone` holds no blocked volume: the plan says what the unblock does all the same (the
    // CLI asks for it, and acts only on a plan that does something).
    let plan = env
        .write(|ctx, l| super::super::unblock_node(ctx, "gone", "it burned", true, "op", l))
        .await
        .unwrap();
    let actions: Vec<_> = plan
        .actions
        .iter()
        .map(|a| (a.action.as_str(), a.node.as_str()))
        .collect();
    assert_eq!(actions, [("stop-waiting", "gone")]);
    assert!(held(&env, "v").await, "a dry run changes nothing");
    env.write(|ctx, l| super::super::unblock_node(ctx, "gone", "it burned", false, "op", l))
        .await
        .unwrap();
    assert!(!held(&env, "v").await);
    progress(&env).await;
    assert_eq!(env.claim_state("v", "a").await, Some(ClaimState::Attaching));
    assert_eq!(
        env.events_of("node-unblocked").await,
        ["node-unblocked - gone -"]
    );

    // A new generation (the state went back again) asks every node anew.
    restored(&env, 4).await;
    assert!(register_again(&env, "ctl").await);
}

/// The window for nodes the restored state does not know holds everything back until it
/// closes, and a node the state does not know that registers meanwhile says what it holds.
#[tokio::test]
async fn the_window_holds_back_until_it_closes_and_unknown_nodes_report_too() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    let far = crate::db::now_ms() + 3_600_000;
    env.write(move |ctx, _| settle::begin(ctx, Generation(5), far))
        .await
        .unwrap();
    env.register("ctl", true, &[]).await;
    assert!(held(&env, "v").await, "the window is open");
    env.register("newcomer", false, &[("v", "x")]).await;
    assert_eq!(env.claim_state("v", "x").await, Some(ClaimState::Releasing));
    let due = env
        .read(|c| settle::progress_due(c, crate::db::now_ms()))
        .await;
    assert!(!due, "nothing to move on while the window is open");
    let due = env.read(move |c| settle::progress_due(c, far)).await;
    assert!(due, "the window passed");
}
