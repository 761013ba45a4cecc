//! Nodes and liveness: registration, drift found at registration, loss, return.

use csivol_api::{AttachmentState, ClaimMode, ClaimState, NodeStatus};

use super::{Env, ready_node};

#[tokio::test]
async fn registration_records_the_plugins_and_finds_a_ready_claim_no_longer_mounted() {
    let env = Env::new();
    assert!(
        !env.register("n1", true, &[]).await,
        "a new node was not lost"
    );
    let plugins = env.read(|c| c.node_plugins("n1")).await;
    assert_eq!(plugins.len(), 1);
    assert_eq!(plugins[0].csi_node_id.as_deref(), Some("csi-n1"));
    assert!(plugins[0].controller && plugins[0].node_service);
    assert_eq!(env.read(|c| c.controller_hosts("hp")).await, ["n1"]);

    env.volume("v", "single-node-writer").await;
    env.volume("w", "single-node-writer").await;
    env.ready_claim("v", "a1", "n1").await;
    env.ready_claim("w", "b1", "n1").await;
    // The agent restarted and finds only w mounted.
    env.register("n1", true, &[("w", "b1")]).await;
    let v = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(v.state, ClaimState::Publishing);
    assert_eq!(
        v.error.as_deref(),
        Some("drift: node n1 registered without it mounted")
    );
    assert_eq!(env.claim_state("w", "b1").await, Some(ClaimState::Ready));
    assert_eq!(env.events_of("claim-drift").await, ["claim-drift v n1 a1"]);

    let bad = super::registration("n1", false, &[]);
    let mut twice = bad.clone();
    twice.plugins.push(bad.plugins[0].clone());
    let e = env
        .write(move |ctx, l| super::super::register_node(ctx, "n1", &twice, l))
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "invalid");
    assert!(e.message.contains("listed twice"), "{}", e.message);
}

#[tokio::test]
async fn a_lost_node_blocks_what_it_holds_and_its_return_resumes_or_republishes_it() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    for v in ["v", "w"] {
        env.volume(v, "single-node-writer").await;
    }
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    env.claim("w", "b1", "n1", ClaimMode::Write).await.unwrap();
    env.controller_published("ctl").await;
    env.controller_published("ctl").await;
    env.report(
        "n1",
        vec![super::published("v", "a1"), super::published("w", "b1")],
    )
    .await;

    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "no heartbeat for 30s", l))
        .await
        .unwrap();
    let n = env.read(|c| c.require_node("n1")).await;
    assert_eq!(n.status, NodeStatus::Lost);
    assert!(n.lost_at.is_some());
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Blocked));
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Blocked)
    );
    assert_eq!(env.events_of("node-lost").await, ["node-lost - n1 -"]);
    assert_eq!(
        env.events_of("volume-blocked").await,
        ["volume-blocked v n1 -", "volume-blocked w n1 -"]
    );
    // A new claim on a lost node is refused.
    env.volume("x", "single-node-writer").await;
    let e = env
        .claim("x", "c1", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "blocked");
    // Losing it again changes nothing.
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "again", l))
        .await
        .unwrap();
    assert_eq!(env.events_of("node-lost").await.len(), 1);

    // It comes back with v still mounted, w gone.
    assert!(
        env.register("n1", false, &[("v", "a1")]).await,
        "it had been lost"
    );
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attached)
    );
    // Nobody released w's claim: it is published again, not released.
    let w = env.claim_row("w", "b1").await.expect("kept");
    assert_eq!(w.state, ClaimState::Publishing);
    assert_eq!(
        w.error.as_deref(),
        Some("drift: node n1 came back without it mounted")
    );
    assert_eq!(
        env.attachment_state("w", "n1").await,
        Some(AttachmentState::Attached),
        "still attached to the node that publishes it again"
    );
    assert_eq!(
        env.events_of("claim-resumed").await,
        ["claim-resumed v n1 a1"]
    );
    assert_eq!(
        env.events_of("claim-republished").await,
        ["claim-republished w n1 b1"]
    );
    assert!(env.events_of("claim-released").await.is_empty());
    // Its node's report makes it ready, as a repair.
    env.report("n1", vec![super::published("w", "b1")]).await;
    assert_eq!(env.claim_state("w", "b1").await, Some(ClaimState::Ready));
    assert_eq!(
        env.events_of("claim-repaired").await,
        ["claim-repaired w n1 b1"]
    );
    assert_eq!(
        env.events_of("node-returned").await,
        ["node-returned - n1 -"]
    );
}

const GRACE: std::time::Duration = std::time::Duration::from_secs(600);
const TTL: std::time::Duration = std::time::Duration::from_secs(1);

#[tokio::test]
async fn a_planned_stop_holds_the_claims_until_its_grace_is_out() {
    let env = ready_node().await;
    env.write(|ctx, l| super::super::node_stopping(ctx, "n1", false, GRACE, l))
        .await
        .unwrap();
    let n = env.read(|c| c.require_node("n1")).await;
    assert_eq!(n.status, NodeStatus::Stopped);
    assert!(n.stopped_at.is_some() && !n.stop_took_down);
    let stopping = env.events_of("node-stopping").await;
    assert_eq!(stopping, ["node-stopping - n1 -"]);
    // Nothing moves: the claim stays ready, the volume attached; nothing new lands there.
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attached)
    );
    env.volume("x", "single-node-writer").await;
    let e = env
        .claim("x", "c1", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "blocked");
    assert!(e.message.contains("is stopped"), "{}", e.message);

    // Silent past its TTL, within its grace: not lost.
    let expiry = env
        .write(|ctx, l| super::super::expire_node(ctx, "n1", TTL, GRACE, l))
        .await
        .unwrap();
    assert!(
        matches!(expiry, super::super::Expiry::StoppedUntil(t) if t == n.stopped_at.unwrap() + 600_000),
        "{expiry:?}"
    );
    assert_eq!(
        env.read(|c| c.require_node("n1")).await.status,
        NodeStatus::Stopped
    );
    assert!(env.events_of("node-lost").await.is_empty());

    // Past its grace: lost as any silent node, its claim blocked.
    let expiry = env
        .write(|ctx, l| super::super::expire_node(ctx, "n1", TTL, std::time::Duration::ZERO, l))
        .await
        .unwrap();
    assert_eq!(expiry, super::super::Expiry::Done);
    assert_eq!(
        env.read(|c| c.require_node("n1")).await.status,
        NodeStatus::Lost
    );
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Blocked));
    let lost = env.last_message("node-lost", "n1").await;
    assert!(
        lost.starts_with("stopped in order and silent for 0s (planned_stop_grace)"),
        "{lost}"
    );
}

#[tokio::test]
async fn a_stopped_node_registers_again_with_what_it_still_has() {
    let env = ready_node().await;
    env.write(|ctx, l| super::super::node_stopping(ctx, "n1", true, GRACE, l))
        .await
        .unwrap();
    // It took its volumes down (its drift report made the claim publishing) and comes
    // back holding nothing: registered as a node that stopped, not as a lost one.
    assert!(!env.register("n1", false, &[]).await, "it was not lost");
    let n = env.read(|c| c.require_node("n1")).await;
    assert_eq!(n.status, NodeStatus::Ready);
    assert_eq!(n.stopped_at, None);
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Publishing)
    );
    let message = env.last_message("node-registered", "n1").await;
    assert!(
        message.contains("registered again after a planned stop"),
        "{message}"
    );
    // A stop notice from a node that is not ready (lost, fenced) changes nothing.
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "test", l))
        .await
        .unwrap();
    env.write(|ctx, l| super::super::node_stopping(ctx, "n1", false, GRACE, l))
        .await
        .unwrap();
    assert_eq!(
        env.read(|c| c.require_node("n1")).await.status,
        NodeStatus::Lost
    );
}

#[tokio::test]
async fn what_a_plugin_made_is_kept_for_plugin_show_across_registrations() {
    let env = ready_node().await;
    let observed = csivol_api::Report::Published {
        volume: "v".into(),
        alloc: "a1".into(),
        target_path: "/targets/v/a1".into(),
        observed: Some(csivol_api::ObservedShape {
            staging: Some("none".into()),
            target: "mount".into(),
        }),
        ownership: None,
    };
    env.report("n1", vec![observed]).await;
    env.register("n1", false, &[("v", "a1")]).await;
    let limits = env.limits.clone();
    let now = crate::clock::Clock::wall().now_ms();
    let plugins = env
        .read(move |c| crate::views::list_plugins(c, Some("hp"), &limits, now))
        .await;
    let n1 = plugins[0].nodes.iter().find(|n| n.name == "n1").unwrap();
    let seen = n1.observed.as_ref().expect("kept across the registration");
    assert_eq!((seen.volume.as_str(), seen.alloc.as_str()), ("v", "a1"));
    assert_eq!(seen.shape.staging.as_deref(), Some("none"));
    assert_eq!(seen.shape.target, "mount");
}

/// A node lost while its claim's volume was being attached (ControllerPublishVolume asked
/// for, not answered; the request is dropped with the loss) comes back: the attachment
/// was never made, so it is asked for again (the RPC is idempotent), not taken as made,
/// which would have the node stage a volume that is not published to it and fail the
/// claim. An attachment that was made stays so.
#[tokio::test]
async fn an_attachment_lost_before_it_was_made_is_asked_for_again_on_return() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attaching)
    );
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "no heartbeat", l))
        .await
        .unwrap();
    assert!(env.ops_of("ctl").await.is_empty(), "the publish is dropped");

    assert!(env.register("n1", false, &[]).await, "it had been lost");
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attaching),
        "{:?}",
        env.events().await
    );
    let ops: Vec<String> = env
        .ops_of("ctl")
        .await
        .iter()
        .map(|o| format!("{} {}", o.kind.as_str(), o.volume))
        .collect();
    assert_eq!(ops, ["publish v"]);
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Attaching)
    );
    env.controller_published("ctl").await;
    env.report("n1", vec![super::published("v", "a1")]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
}
