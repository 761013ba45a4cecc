//! The controller-operation queue: scheduling within limits, success, failure with backoff.

use std::time::Duration;

use csivol_api::{AttachmentState, ClaimMode, ClaimState, Report};

use super::{Env, plugin_error};

#[tokio::test]
async fn operations_go_to_the_least_loaded_host_one_per_node_within_the_plugin_limit() {
    let mut env = Env::new();
    env.limits.controller_concurrency = 3;
    env.register("h1", true, &[]).await;
    env.register("h2", true, &[]).await;
    for n in ["n1", "n2", "n3", "n4"] {
        env.register(n, false, &[]).await;
    }
    for (v, n) in [
        ("v1", "n1"),
        ("v2", "n2"),
        ("v3", "n3"),
        ("v4", "n4"),
        ("v5", "n1"),
    ] {
        env.volume(v, "single-node-writer").await;
        env.claim(v, &format!("a-{v}"), n, ClaimMode::Write)
            .await
            .unwrap();
    }
    assert_eq!(
        env.ops().await,
        [
            "publish v1 n1 h1 0",
            "publish v2 n2 h2 0",
            "publish v3 n3 h1 0",
            // Beyond the plugin's limit of 3 in flight.
            "publish v4 n4 - 0",
            // One operation at a time per node.
            "publish v5 n1 - 0",
        ]
    );

    // Success makes room: the due operations are handed out in the same write, to the
    // least loaded host (ties to the first by name).
    env.controller_published("h1").await;
    assert_eq!(
        env.attachment_state("v1", "n1").await,
        Some(AttachmentState::Attached)
    );
    assert_eq!(
        env.claim_state("v1", "a-v1").await,
        Some(ClaimState::Publishing)
    );
    assert_eq!(
        env.ops().await,
        [
            "publish v2 n2 h2 0",
            "publish v4 n4 h1 0",
            "publish v5 n1 h1 0"
        ]
    );
}

#[tokio::test]
async fn a_retryable_failure_backs_off_and_a_final_one_fails_the_claim() {
    let env = Env::new();
    env.register("h1", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.volume("w", "single-node-writer").await;
    env.claim("v", "a1", "h1", ClaimMode::Write).await.unwrap();
    env.claim("w", "b1", "h1", ClaimMode::Write).await.unwrap();
    let mut ops = env.ops_of("h1").await;
    assert_eq!(ops.len(), 1, "one at a time on node h1");
    let first = ops.remove(0);

    // A stale attempt, or a report from a host the operation is not assigned to, is ignored.
    let stale = Report::OpError {
        op: first.id as u64,
        attempt: first.attempt + 1,
        error: plugin_error("UNAVAILABLE", false),
    };
    env.report("h1", vec![stale.clone()]).await;
    env.register("h2", true, &[]).await;
    env.report("h2", vec![stale]).await;
    assert_eq!(env.ops_of("h1").await[0].attempt, 0);

    env.report(
        "h1",
        vec![Report::OpError {
            op: first.id as u64,
            attempt: 0,
            error: plugin_error("UNAVAILABLE", false),
        }],
    )
    .await;
    let retried = env.read(move |c| c.op(first.id)).await.expect("kept");
    assert_eq!(retried.attempt, 1);
    assert_eq!(retried.host, None, "back in the queue");
    let now = crate::clock::Clock::wall().now_ms();
    assert!(
        retried.not_before > now - 1_000 && retried.not_before <= now + 1_200,
        "the first retry waits about a second: {} vs {now}",
        retried.not_before
    );
    let claim = env
        .claim_row(&first.volume, &retried_alloc(&first.volume))
        .await
        .unwrap();
    assert_eq!(claim.state, ClaimState::Attaching, "still attaching");
    assert!(
        claim
            .error
            .unwrap()
            .starts_with("ControllerPublishVolume failed: UNAVAILABLE")
    );
    assert_eq!(claim.next_retry_at, Some(retried.not_before));

    // The other volume's operation was handed out meanwhile; it fails for good.
    let other = env
        .ops_of("h1")
        .await
        .into_iter()
        .chain(env.ops_of("h2").await)
        .find(|o| o.id != first.id)
        .expect("the other operation is assigned");
    let host = other.host.clone().unwrap();
    env.report(
        &host,
        vec![Report::OpError {
            op: other.id as u64,
            attempt: other.attempt,
            error: plugin_error("INVALID_ARGUMENT", true),
        }],
    )
    .await;
    let failed = env
        .claim_row(&other.volume, &retried_alloc(&other.volume))
        .await
        .unwrap();
    assert_eq!(failed.state, ClaimState::Failed);
    assert!(failed.error.unwrap().contains("INVALID_ARGUMENT"));
    assert_eq!(
        env.attachment_state(&other.volume, "h1").await,
        None,
        "never attached"
    );
    assert!(env.read(move |c| c.op(other.id)).await.is_none());
    assert_eq!(env.events_of("operation-failed").await.len(), 1);
    // The claim's own events say why it went: it is taken down like a released one.
    let claim_failed = env.events_of("claim-failed").await;
    assert_eq!(claim_failed.len(), 1, "{claim_failed:?}");
    assert!(
        claim_failed[0].starts_with(&format!("claim-failed {} ", other.volume))
            && claim_failed[0].ends_with(&format!(" {}", retried_alloc(&other.volume))),
        "{claim_failed:?}"
    );
}

fn retried_alloc(volume: &str) -> String {
    if volume == "v" { "a1" } else { "b1" }.to_owned()
}

#[test]
fn backoff_doubles_from_a_second_to_five_minutes_with_jitter() {
    use super::super::backoff::backoff;
    for _ in 0..100 {
        let first = backoff(0);
        assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1200));
        let third = backoff(2);
        assert!(third >= Duration::from_millis(3200) && third <= Duration::from_millis(4800));
        assert!(backoff(30) <= Duration::from_secs(360), "capped");
        assert!(backoff(30) >= Duration::from_secs(240));
    }
}

#[tokio::test]
async fn the_due_queue_is_read_in_arrival_order_at_most_a_thousand_of_each_kind() {
    use crate::store::Txn;
    use csivol_rules::kinds::OpKind;
    let env = Env::new();
    // A burst of 1,005 attaches queued before two deletes and one more attach (ops rows
    // only: the queue is read as it is stored, whatever the volumes).
    env.write(|ctx, _| {
        for i in 0..1005 {
            ctx.queue_op(OpKind::Publish, "hp", &format!("v{i:04}"), Some("n1"), "{}")?;
        }
        ctx.queue_op(OpKind::Delete, "hp", "d1", None, "{}")?;
        ctx.queue_op(OpKind::Delete, "hp", "d2", None, "{}")?;
        ctx.queue_op(OpKind::Publish, "hp", "late", Some("n1"), "{}")?;
        ctx.queue_op(OpKind::Delete, "other", "d3", None, "{}")?;
        Ok(())
    })
    .await
    .unwrap();
    let due = env
        .read(|c| c.due_ops("hp", crate::clock::Clock::wall().now_ms() + 1))
        .await;
    let ids: Vec<i64> = due.iter().map(|o| o.id).collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(ids, sorted, "oldest first");
    let publish: Vec<&str> = due
        .iter()
        .filter(|o| o.kind == OpKind::Publish)
        .map(|o| o.volume.as_str())
        .collect();
    assert_eq!(publish.len(), 1000, "at most 1,000 of a kind");
    assert_eq!((publish[0], publish[999]), ("v0000", "v0999"));
    let deletes: Vec<&str> = due
        .iter()
        .filter(|o| o.kind == OpKind::Delete)
        .map(|o| o.volume.as_str())
        .collect();
    assert_eq!(
        deletes,
        ["d1", "d2"],
        "a burst of one kind hides none of another"
    );
}
