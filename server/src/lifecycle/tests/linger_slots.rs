//! Stagings kept after a release give their node's slots up to another volume's claim:
//! the oldest ends, the claim is attached once its detach freed the slot, and the plugin's
//! limit is never passed; slots taken by claims refuse or queue as before.

use csivol_api::{
    AttachmentState, ClaimMode, ClaimRequest, ClaimState, ErrorCode, PoolChoice, PoolSpec, Report,
};

use super::lingers::controller_unpublished;
use super::pool_line::{ask, from_pool, label, slots};
use super::{Env, published};
use crate::clock::Clock;

/// Controller host `ctl`, node `n1` with room for `max` volumes of the plugin, pool
/// `cache` lingering 10 minutes over `v` and `w`, and `x` in no pool; all
/// single-node-writer.
async fn cluster(max: u32) -> (Env, Clock) {
    let clock = Clock::held_at(1_000_000);
    let env = Env::with_clock(clock.clone());
    env.register("ctl", true, &[]).await;
    slots(&env, "n1", max).await;
    for v in ["v", "w", "x"] {
        env.volume(v, "single-node-writer").await;
    }
    label(&env, "v").await;
    label(&env, "w").await;
    let spec = PoolSpec {
        selector: [("pool".to_owned(), "cache".to_owned())].into(),
        linger_ms: Some(600_000),
    };
    env.write(move |ctx, _| crate::lifecycle::create_pool(ctx, "cache", &spec, "op"))
        .await
        .unwrap();
    (env, clock)
}

/// `volume` claimed by `alloc` on `n1` and taken to ready.
async fn ready(env: &Env, volume: &str, alloc: &str) {
    env.claim(volume, alloc, "n1", ClaimMode::Write)
        .await
        .unwrap();
    env.controller_published("ctl").await;
    env.report("n1", vec![published(volume, alloc)]).await;
    assert_eq!(
        env.claim_state(volume, alloc).await,
        Some(ClaimState::Ready)
    );
}

/// `alloc`'s claim of `volume` released and its target taken down: `n1` keeps the staging.
async fn lingering(env: &Env, volume: &str, alloc: &str) {
    env.release(volume, alloc).await.unwrap();
    env.report("n1", vec![unpublished(volume, alloc)]).await;
    let v = volume.to_owned();
    assert_eq!(
        env.read(move |c| c.lingers(Some(&v), Some("n1")))
            .await
            .len(),
        1,
        "{volume} lingers on n1"
    );
}

fn unpublished(volume: &str, alloc: &str) -> Report {
    Report::Unpublished {
        volume: volume.into(),
        alloc: alloc.into(),
    }
}

/// The volumes attached to `n1`, in any state: never more than its plugin allows.
async fn attached_on_n1(env: &Env, max: usize) -> Vec<String> {
    let on: Vec<String> = env
        .read(|c| c.attachments_of_node("n1"))
        .await
        .into_iter()
        .map(|a| a.volume)
        .collect();
    assert!(on.len() <= max, "more than {max} volumes on n1: {on:?}");
    on
}

fn publishes_of(ops: &[String], volume: &str) -> usize {
    ops.iter()
        .filter(|o| o.starts_with(&format!("publish {volume} ")))
        .count()
}

#[tokio::test]
async fn a_claim_on_a_node_full_of_lingers_ends_the_oldest_and_is_attached_after_its_detach() {
    let (env, clock) = cluster(2).await;
    ready(&env, "v", "a1").await;
    ready(&env, "w", "b1").await;
    lingering(&env, "v", "a1").await;
    clock.set(1_010_000);
    lingering(&env, "w", "b1").await;
    let lingering_slots = || env.read(|c| crate::lifecycle::lingering_slots(c, "n1", "hp"));
    assert_eq!(lingering_slots().await, 2);

    // Both slots are taken, by stagings kept only: the claim of x is not refused.
    let c = env.claim("x", "c1", "n1", ClaimMode::Write).await.unwrap();
    assert_eq!(c.state, ClaimState::Pending);
    // v was released first: its staging ends, w's is kept.
    assert_eq!(
        env.last_message("staging-linger-ended", "n1").await,
        "the staging kept after alloc a1's release ends: ended for volume x's claim on node n1 \
         (alloc c1), the node's slots are full (plugin `hp` takes 2 volumes there)"
    );
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    assert_eq!(
        env.attachment_state("w", "n1").await,
        Some(AttachmentState::Attached)
    );
    assert_eq!(env.read(|c| c.lingers(None, Some("n1"))).await.len(), 1);
    assert_eq!(lingering_slots().await, 1);
    // x is neither attached nor published while v holds its slot, and says why.
    assert_eq!(publishes_of(&env.ops().await, "x"), 0);
    assert_eq!(attached_on_n1(&env, 2).await, ["v", "w"]);
    let row = env.claim_row("x", "c1").await.unwrap();
    assert!(
        row.error
            .as_deref()
            .is_some_and(|e| e.starts_with("waits for a free slot on node n1")),
        "{row:?}"
    );

    // The node unstages v; it is still published to n1 until the controller says not.
    env.report("n1", vec![Report::Unstaged { volume: "v".into() }])
        .await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    assert_eq!(env.claim_state("x", "c1").await, Some(ClaimState::Pending));
    assert_eq!(publishes_of(&env.ops().await, "x"), 0);
    attached_on_n1(&env, 2).await;

    // ControllerUnpublishVolume returned: the slot is free and x takes it at once.
    controller_unpublished(&env).await;
    assert_eq!(env.attachment_state("v", "n1").await, None);
    assert_eq!(
        env.claim_state("x", "c1").await,
        Some(ClaimState::Attaching)
    );
    assert_eq!(publishes_of(&env.ops().await, "x"), 1);
    assert_eq!(
        env.claim_row("x", "c1").await.unwrap().error.as_deref(),
        Some("a slot on node n1 is free: the volume is attached there")
    );
    assert_eq!(attached_on_n1(&env, 2).await, ["w", "x"]);
    env.controller_published("ctl").await;
    env.report("n1", vec![published("x", "c1")]).await;
    assert_eq!(env.claim_state("x", "c1").await, Some(ClaimState::Ready));
    // w was never touched.
    assert_eq!(
        env.attachment_state("w", "n1").await,
        Some(AttachmentState::Attached)
    );
    assert_eq!(env.events_of("staging-linger-ended").await.len(), 1);
}

#[tokio::test]
async fn slots_taken_by_claims_refuse_or_queue_as_before_and_a_release_then_lingers_not() {
    let (env, _clock) = cluster(1).await;
    ready(&env, "v", "a1").await;
    let e = env
        .claim("x", "c1", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Conflict);
    assert!(
        e.message
            .contains("node `n1` has no free slot for plugin `hp`: 1 of 1 volumes in use"),
        "{}",
        e.message
    );
    let mut req = ClaimRequest::new("c1", "n1", ClaimMode::Write);
    req.queue = true;
    env.claim_with("x", req).await.unwrap();
    assert_eq!(env.claim_state("x", "c1").await, Some(ClaimState::Queued));

    // v is released while x waits for its slot: the pool does not keep it staged.
    env.release("v", "a1").await.unwrap();
    env.report("n1", vec![unpublished("v", "a1")]).await;
    assert!(env.read(|c| c.lingers(None, None)).await.is_empty());
    assert!(env.events_of("staging-lingering").await.is_empty());
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    assert_eq!(env.claim_state("x", "c1").await, Some(ClaimState::Queued));
    env.report("n1", vec![Report::Unstaged { volume: "v".into() }])
        .await;
    assert_eq!(env.claim_state("x", "c1").await, Some(ClaimState::Queued));
    attached_on_n1(&env, 1).await;
    // The detach frees the slot: x is granted from the queue and attached.
    controller_unpublished(&env).await;
    assert_eq!(
        env.claim_state("x", "c1").await,
        Some(ClaimState::Attaching)
    );
    assert_eq!(attached_on_n1(&env, 1).await, ["x"]);
}

#[tokio::test]
async fn the_lingering_volume_claimed_again_on_its_node_takes_no_new_slot() {
    let (env, _clock) = cluster(1).await;
    ready(&env, "v", "a1").await;
    lingering(&env, "v", "a1").await;
    // By name.
    env.claim("v", "a2", "n1", ClaimMode::Write).await.unwrap();
    assert_eq!(
        env.claim_state("v", "a2").await,
        Some(ClaimState::Publishing)
    );
    assert!(
        env.last_message("staging-linger-ended", "n1")
            .await
            .ends_with("claimed again on the node (alloc a2): published from the staging it kept")
    );
    env.report("n1", vec![published("v", "a2")]).await;
    lingering(&env, "v", "a2").await;

    // From the pool: w is free too, but v is staged here and keeps its slot.
    let c = from_pool(&env, ask("a3", "n1", None, false), None)
        .await
        .unwrap();
    assert_eq!(c.volume, "v");
    assert_eq!(c.pool.unwrap().choice, PoolChoice::StagedHere);
    assert_eq!(
        env.claim_state("v", "a3").await,
        Some(ClaimState::Publishing)
    );
    assert_eq!(attached_on_n1(&env, 1).await, ["v"]);
    assert!(
        env.events_of("staging-linger-ended")
            .await
            .iter()
            .all(|e| e.starts_with("staging-linger-ended v n1"))
    );
    assert!(
        !env.last_message("staging-linger-ended", "n1")
            .await
            .contains("slots are full")
    );
}
