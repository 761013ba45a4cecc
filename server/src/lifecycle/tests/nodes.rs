//! Nodes and liveness: registration, drift found at registration, loss, return.

use csivol_api::{AttachmentState, ClaimMode, ClaimState, NodeStatus};

use super::Env;

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
async fn a_lost_node_blocks_what_it_holds_and_its_return_resumes_what_it_still_has() {
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

    env.write(|ctx, l| super::super::mark_lost(ctx, "n1", "no heartbeat for 30s", l))
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
    env.write(|ctx, l| super::super::mark_lost(ctx, "n1", "again", l))
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
    assert!(env.claim_row("w", "b1").await.is_none(), "released");
    assert_eq!(
        env.attachment_state("w", "n1").await,
        Some(AttachmentState::Unstaging),
        "taken down the normal way"
    );
    assert_eq!(
        env.events_of("claim-resumed").await,
        ["claim-resumed v n1 a1"]
    );
    assert_eq!(
        env.events_of("node-returned").await,
        ["node-returned - n1 -"]
    );
}
