//! Exact retries in the lifecycle: every way a claim is released leaves its tombstone (its
//! holder's release, the claim's removal, an operator's unblock, an alloc that held
//! nothing), and a new claim sent before it is refused while one sent after is recorded.

use csivol_api::{ClaimMode, ClaimRequest, ClaimState, Report};

use super::{Env, ready_node};
use crate::store::Tombstone;

impl Env {
    async fn tombstone(&self, volume: &str, alloc: &str) -> Option<Tombstone> {
        let (v, a) = (volume.to_owned(), alloc.to_owned());
        self.read(move |c| c.tombstone(&v, &a)).await
    }

    /// Claims as a request sent at `sent_at` would.
    async fn claim_sent(
        &self,
        volume: &str,
        alloc: &str,
        node: &str,
        sent_at: i64,
    ) -> crate::error::ApiResult<csivol_api::Claim> {
        let (v, req) = (
            volume.to_owned(),
            ClaimRequest::new(alloc, node, ClaimMode::Write),
        );
        self.write(move |ctx, l| {
            super::super::create_claim(ctx, &v, &req, "ci", l, false, Some(sent_at))
        })
        .await
        .map(|(c, _)| c)
    }
}

#[tokio::test]
async fn a_release_leaves_a_tombstone_that_refuses_claims_sent_before_it() {
    let env = ready_node().await;
    assert_eq!(env.tombstone("v", "a1").await, None);
    env.release("v", "a1").await.unwrap();
    let released = env.tombstone("v", "a1").await.expect("a tombstone");
    // The claim is gone once its node unpublished: its tombstone moves forward.
    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "v".into(),
            alloc: "a1".into(),
        }],
    )
    .await;
    assert_eq!(env.claim_state("v", "a1").await, None);
    let removed = env.tombstone("v", "a1").await.unwrap();
    assert!(
        removed.index > released.index,
        "{removed:?} after {released:?}"
    );
    assert!(removed.released_at >= released.released_at);

    let e = env
        .claim_sent("v", "a1", "n1", released.released_at - 1)
        .await
        .unwrap_err();
    assert_eq!(e.code().as_str(), "conflict");
    assert!(e.message.contains("was released at"), "{}", e.message);
    assert!(env.claim_row("v", "a1").await.is_none(), "nothing recorded");
    // Sent at or after: a new job reusing the alloc's name.
    let c = env
        .claim_sent("v", "a1", "n1", removed.released_at)
        .await
        .unwrap();
    assert_ne!(c.state, ClaimState::Releasing);
    // A request that does not say when it was sent (an older client) is not judged.
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
}

#[tokio::test]
async fn an_unblock_a_dequeue_and_an_alloc_that_held_nothing_leave_tombstones() {
    let env = ready_node().await;
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "no heartbeat", l))
        .await
        .unwrap();
    env.write(|ctx, l| super::super::unblock_volume(ctx, "v", None, "n1 burned", false, "op", l))
        .await
        .unwrap();
    assert!(env.tombstone("v", "a1").await.is_some(), "a force release");

    env.volume("w", "single-node-writer").await;
    let mut queued = ClaimRequest::new("q", "ctl", ClaimMode::Write);
    queued.queue = true;
    env.claim("w", "holder", "ctl", ClaimMode::Write)
        .await
        .unwrap();
    env.claim_with("w", queued).await.unwrap();
    env.release("w", "q").await.unwrap();
    assert!(
        env.tombstone("w", "q").await.is_some(),
        "a queued claim's release"
    );

    let e = env.release("w", "nobody").await.unwrap_err();
    assert_eq!(e.code().as_str(), "not_found");
    assert!(
        env.tombstone("w", "nobody").await.is_some(),
        "committed with the refusal"
    );
    let e = env.release("no-such-volume", "a").await.unwrap_err();
    assert_eq!(e.code().as_str(), "not_found");
    assert_eq!(env.tombstone("no-such-volume", "a").await, None);
}
