//! Operations held until their volume's release has finished: a deletion held until the
//! volume is detached and refused without a wait, an expansion dropped when the volume is
//! claimed again first, a claim elsewhere queued behind the release.

use csivol_api::{AttachmentState, ClaimMode, ClaimRequest, ClaimState, ExpansionPhase, Report};

use super::{Env, ready_node};
use crate::error::{ApiError, ApiResult};

async fn delete(env: &Env, volume: &str, waits: bool) -> ApiResult<Option<csivol_api::Volume>> {
    let v = volume.to_owned();
    env.write(move |ctx, l| super::super::deregister_volume(ctx, &v, true, "op", l, waits))
        .await
}

async fn claim_waiting(env: &Env, volume: &str, alloc: &str, node: &str) -> csivol_api::Claim {
    let (v, req) = (
        volume.to_owned(),
        ClaimRequest::new(alloc, node, ClaimMode::Write),
    );
    env.write(move |ctx, l| {
        super::super::create_claim(
            ctx,
            &v,
            &req,
            &super::super::Claimant::operator("ci"),
            l,
            true,
            None,
        )
    })
    .await
    .unwrap()
    .0
}

/// The answer of the one operation assigned to `host`, taking it down.
async fn unpublished_by(env: &Env, host: &str) {
    let ops = env.ops_of(host).await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    env.report(
        host,
        vec![Report::ControllerUnpublished {
            op: ops[0].id as u64,
            attempt: ops[0].attempt,
        }],
    )
    .await;
}

fn refused_as_releasing(e: &ApiError, waits_with: &str) {
    assert!(e.message.contains("still being released"), "{e:?}");
    let hint = e.hint.as_deref().unwrap_or_default();
    assert!(hint.contains(waits_with), "{e:?}");
    assert!(!hint.contains("csivol release"), "{e:?}");
}

#[tokio::test]
async fn a_deletion_asked_with_a_wait_is_held_until_the_volume_is_detached() {
    let env = ready_node().await;
    env.release("v", "a1").await.unwrap();

    let e = delete(&env, "v", false).await.unwrap_err();
    refused_as_releasing(&e, "csivol volume deregister v --delete --wait");
    assert!(
        e.message
            .ends_with("the claim of alloc a1 on n1 is releasing"),
        "{e:?}"
    );

    let v = delete(&env, "v", true).await.unwrap().expect("deleting");
    assert_eq!(v.state, csivol_api::VolumeState::Deleting);
    // Queued, and handed to no controller host while the release goes on.
    assert_eq!(env.ops().await, ["delete v - - 0"]);
    let refused = env
        .claim("v", "b1", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    assert!(refused.message.contains("is being deleted"), "{refused:?}");

    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "v".into(),
            alloc: "a1".into(),
        }],
    )
    .await;
    env.report("n1", vec![Report::Unstaged { volume: "v".into() }])
        .await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    assert_eq!(env.ops().await, ["delete v - - 0", "unpublish v n1 ctl 0"]);
    unpublished_by(&env, "ctl").await;
    // Detached: DeleteVolume goes to the controller host now.
    assert_eq!(env.ops().await, ["delete v - ctl 0"]);
    // Asked for, then sent: two events.
    assert_eq!(
        env.events_of("volume-deleting").await,
        ["volume-deleting v - -", "volume-deleting v - -"]
    );
}

#[tokio::test]
async fn a_held_expansion_is_dropped_when_the_volume_is_claimed_again_first() {
    let env = Env::new();
    super::expand::register(&env, "n1", true, Some("offline")).await;
    env.volume("m", "multi-node-multi-writer").await;
    env.ready_claim("m", "a", "n1").await;
    env.release("m", "a").await.unwrap();
    let req = csivol_api::ExpandRequest {
        capacity_bytes: 2 << 30,
        cancel: false,
    };
    let (v, started) = env
        .write(move |ctx, l| super::super::expand_volume(ctx, "m", &req, "op", l, true))
        .await
        .unwrap();
    assert!(started);
    assert!(
        v.expansion.as_ref().is_some_and(|e| e.after_release),
        "{v:?}"
    );
    assert_eq!(env.ops().await, ["expand m - - 0"]);

    // Another claim takes the volume before the release has finished: an offline expansion
    // can no longer run as asked, and says why.
    env.claim("m", "b", "n1", ClaimMode::Write).await.unwrap();
    let e = env
        .read(|c| c.require_volume("m"))
        .await
        .expansion
        .expect("the failed expansion stays");
    assert_eq!(e.phase, ExpansionPhase::Failed);
    assert!(!e.after_release);
    assert!(
        e.error
            .as_deref()
            .is_some_and(|m| m
                .starts_with("ControllerExpandVolume was not sent: the volume was claimed again")),
        "{e:?}"
    );
    assert!(env.ops().await.is_empty());
    assert_eq!(env.events_of("operation-failed").await.len(), 1);
}

#[tokio::test]
async fn a_claim_elsewhere_with_a_wait_is_queued_behind_the_release() {
    let env = ready_node().await;
    env.register("n2", false, &[]).await;
    env.release("v", "a1").await.unwrap();

    let e = env
        .claim("v", "b1", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    refused_as_releasing(&e, "csivol claim v --node n2 --alloc b1 --wait");
    assert!(env.claim_row("v", "b1").await.is_none());

    let c = claim_waiting(&env, "v", "b1", "n2").await;
    assert_eq!(c.state, ClaimState::Queued);
    env.report(
        "n1",
        vec![Report::Unpublished {
            volume: "v".into(),
            alloc: "a1".into(),
        }],
    )
    .await;
    // Granted once the claim is gone; a single-node volume still waits for its detach.
    assert_eq!(env.claim_state("v", "b1").await, Some(ClaimState::Pending));
    env.report("n1", vec![Report::Unstaged { volume: "v".into() }])
        .await;
    unpublished_by(&env, "ctl").await;
    assert_eq!(
        env.claim_state("v", "b1").await,
        Some(ClaimState::Attaching)
    );
}

#[tokio::test]
async fn a_held_expansion_may_be_cancelled_before_anything_is_sent() {
    let env = Env::new();
    super::expand::register(&env, "n1", true, Some("offline")).await;
    env.volume("m", "single-node-writer").await;
    env.ready_claim("m", "a", "n1").await;
    env.release("m", "a").await.unwrap();
    let ask = |capacity_bytes, cancel| csivol_api::ExpandRequest {
        capacity_bytes,
        cancel,
    };
    let req = ask(2 << 30, false);
    env.write(move |ctx, l| super::super::expand_volume(ctx, "m", &req, "op", l, true))
        .await
        .unwrap();
    assert_eq!(env.ops().await, ["expand m - - 0"]);
    let req = ask(0, true);
    let (v, changed) = env
        .write(move |ctx, l| super::super::expand_volume(ctx, "m", &req, "op", l, false))
        .await
        .unwrap();
    assert!(changed);
    assert!(v.expansion.is_none(), "{v:?}");
    assert!(env.ops().await.is_empty());
    let said = env
        .read(|c| c.events(0, &Default::default(), u32::MAX))
        .await
        .into_iter()
        .rev()
        .find(|e| e.kind == "volume-expansion-cancelled")
        .expect("cancelled")
        .message;
    assert!(said.contains("waited for the volume's release"), "{said}");
}

#[tokio::test]
async fn a_claim_that_more_than_a_release_stands_in_the_way_of_is_refused_waiting_or_not() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.register("n2", false, &[]).await;
    env.volume("w", "single-node-multi-writer").await;
    env.ready_claim("w", "a", "n1").await;
    env.ready_claim("w", "b", "n1").await;
    env.release("w", "a").await.unwrap();
    let e = env
        .claim("w", "c", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("alloc a on node n1, whose claim is being released, and other claims"),
        "{e:?}"
    );
    let hint = e.hint.as_deref().unwrap_or_default();
    assert!(
        hint.contains("--queue") && !hint.contains("csivol release"),
        "{e:?}"
    );
    // A wait is no way past a claim that stays: refused all the same, nothing queued.
    let (v, req) = (
        "w".to_owned(),
        ClaimRequest::new("c", "n2", ClaimMode::Write),
    );
    let waited = env
        .write(move |ctx, l| {
            super::super::create_claim(
                ctx,
                &v,
                &req,
                &super::super::Claimant::operator("ci"),
                l,
                true,
                None,
            )
        })
        .await
        .unwrap_err();
    assert_eq!(waited.message, e.message);
    assert!(env.claim_row("w", "c").await.is_none());
}
