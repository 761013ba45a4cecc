//! Claims: the rules, the queue, release, the dry run.

use csivol_api::{ClaimMode, ClaimRequest, ClaimState, Report};

use super::Env;

#[tokio::test]
async fn a_claim_waits_for_a_controller_host_and_says_why() {
    let env = Env::new();
    env.register("n1", false, &[]).await;
    env.volume("v", "single-node-writer").await;
    let c = env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    assert_eq!(
        c.state,
        ClaimState::Attaching,
        "the plugin needs ControllerPublish"
    );
    assert_eq!(
        env.ops().await,
        ["publish v n1 - 0"],
        "queued, nobody to run it"
    );
    let row = env.claim_row("v", "a1").await.unwrap();
    assert!(
        row.error
            .as_deref()
            .is_some_and(|e| e.contains("no healthy agent hosts the controller of plugin `hp`")),
        "{row:?}"
    );
    assert_eq!(
        env.events_of("claim-created").await,
        ["claim-created v n1 a1"]
    );

    // A controller host registers: the operation is handed to it.
    env.register("ctl", true, &[]).await;
    assert_eq!(env.ops().await, ["publish v n1 ctl 0"]);
}

#[tokio::test]
async fn a_second_writer_is_refused_or_waits_in_the_queue_until_the_first_is_gone() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.register("n2", true, &[]).await;
    env.volume("v", "multi-node-single-writer").await;
    env.ready_claim("v", "a1", "n1").await;

    let e = env
        .claim("v", "a2", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(
        e.message.contains("held by alloc a1 on node n1"),
        "{}",
        e.message
    );
    assert!(env.claim_row("v", "a2").await.is_none(), "nothing recorded");

    let mut queued = ClaimRequest::new("a2", "n2", ClaimMode::Write);
    queued.queue = true;
    let c = env.claim_with("v", queued).await.unwrap();
    assert_eq!(c.state, ClaimState::Queued);
    assert_eq!(c.queue_position, Some(1));
    // A reader on another node may still join: a single writer allows readers.
    let r = env
        .claim("v", "r1", "n2", ClaimMode::Read)
        .await
        .unwrap_err();
    assert!(
        r.message.contains("queued"),
        "nobody overtakes the queue: {}",
        r.message
    );

    env.release("v", "a1").await.unwrap();
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Releasing)
    );
    assert_eq!(
        env.claim_state("v", "a2").await,
        Some(ClaimState::Queued),
        "a1 still holds it"
    );
    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "v".into(),
            alloc: "a1".into(),
        }],
    )
    .await;
    assert!(env.claim_row("v", "a1").await.is_none());
    assert_eq!(
        env.claim_state("v", "a2").await,
        Some(ClaimState::Attaching)
    );
    assert_eq!(
        env.events_of("claim-granted").await,
        ["claim-granted v n2 a2"]
    );
}

#[tokio::test]
async fn release_is_idempotent_leaves_the_queue_and_refuses_an_unknown_alloc() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.volume("v", "single-node-single-writer").await;
    env.ready_claim("v", "a1", "n1").await;
    let first = env.release("v", "a1").await.unwrap();
    let again = env.release("v", "a1").await.unwrap();
    assert_eq!(first.state, ClaimState::Releasing);
    assert_eq!(again.state, ClaimState::Releasing);
    assert_eq!(
        env.events_of("claim-releasing").await.len(),
        1,
        "recorded once"
    );

    let mut queued = ClaimRequest::new("a2", "n1", ClaimMode::Write);
    queued.queue = true;
    env.claim_with("v", queued).await.unwrap();
    env.release("v", "a2").await.unwrap();
    assert!(env.claim_row("v", "a2").await.is_none(), "left the queue");
    assert_eq!(
        env.events_of("claim-dequeued").await,
        ["claim-dequeued v n1 a2"]
    );

    let e = env.release("v", "nobody").await.unwrap_err();
    assert_eq!(e.code().as_str(), "not_found");
}

#[tokio::test]
async fn a_dry_run_answers_what_a_claim_would_do_and_records_nothing() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    let req = ClaimRequest::new("a1", "n1", ClaimMode::Write);
    let limits = env.limits.clone();
    let answer = env
        .read(move |c| {
            super::super::claim_dry_run(c, "v", &req, &limits, crate::clock::Clock::wall().now_ms())
        })
        .await;
    assert!(answer.accepted);
    assert_eq!(answer.state, Some(ClaimState::Attaching));
    assert!(env.read(|c| c.claims_of_volume("v")).await.is_empty());

    env.ready_claim("v", "a1", "n1").await;
    let same = ClaimRequest::new("a1", "n1", ClaimMode::Write);
    let limits = env.limits.clone();
    let answer = env
        .read(move |c| {
            super::super::claim_dry_run(
                c,
                "v",
                &same,
                &limits,
                crate::clock::Clock::wall().now_ms(),
            )
        })
        .await;
    assert!(answer.accepted && answer.existing);
    assert_eq!(answer.state, Some(ClaimState::Ready));

    let elsewhere = ClaimRequest::new("a2", "n2", ClaimMode::Write);
    let limits = env.limits.clone();
    let answer = env
        .read(move |c| {
            super::super::claim_dry_run(
                c,
                "v",
                &elsewhere,
                &limits,
                crate::clock::Clock::wall().now_ms(),
            )
        })
        .await;
    assert!(!answer.accepted);
    let error = answer.error.expect("why not");
    assert_eq!(error.code.as_str(), "conflict");
    assert_eq!(env.read(|c| c.claims_of_volume("v")).await.len(), 1);
}
