//! Stagings a node keeps after a release when the volume's pool lingers.

use std::collections::BTreeMap;

use csivol_api::{
    AttachmentState, ClaimMode, ClaimRequest, ClaimState, Eligibility, ErrorCode, PoolChoice,
    PoolClaimRequest, PoolSpec, Report, VolumeLabelRequest,
};

use super::{Env, published};
use crate::lifecycle::Claimant;

/// Controller host `ctl`, nodes `n1` and `n2`, single-node-writer volume `v` in pool
/// `cache` (lingering `linger_ms`), claimed ready by `a1` on `n1`.
async fn pool_member_ready(linger_ms: Option<u64>) -> Env {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    env.register("n2", false, &[]).await;
    env.volume("v", "single-node-writer").await;
    let selector: BTreeMap<String, String> = [("pool".to_owned(), "cache".to_owned())].into();
    let set = VolumeLabelRequest {
        set: selector.clone(),
        remove: Vec::new(),
    };
    env.write(move |ctx, l| super::super::set_volume_labels(ctx, "v", &set, "op", l))
        .await
        .unwrap();
    let spec = PoolSpec {
        selector,
        linger_ms,
    };
    env.write(move |ctx, _| super::super::create_pool(ctx, "cache", &spec, "op"))
        .await
        .unwrap();
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    env.controller_published("ctl").await;
    env.report("n1", vec![published("v", "a1")]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
    env
}

/// What `node`'s desired state says of `v`: kept staged, unstaged, unpublished allocs.
async fn desired(env: &Env, node: &str) -> (bool, bool, Vec<String>) {
    let n = node.to_owned();
    let d = env
        .read(move |c| super::super::desired_state(c, &n, 1))
        .await;
    (
        d.keep_staged.iter().any(|k| k.volume == "v"),
        d.unstage.iter().any(|u| u.volume == "v"),
        d.unpublish.iter().map(|u| u.alloc.clone()).collect(),
    )
}

fn unpublished(alloc: &str) -> Report {
    Report::Unpublished {
        volume: "v".into(),
        alloc: alloc.into(),
    }
}

fn unstaged() -> Report {
    Report::Unstaged { volume: "v".into() }
}

/// `a1` released on `n1` and its target taken down: `n1` keeps the staging.
async fn released_lingering(env: &Env) {
    env.release("v", "a1").await.unwrap();
    // Listed as kept while the release is under way, so that the node unpublishes only.
    assert_eq!(desired(env, "n1").await, (true, false, vec!["a1".into()]));
    env.report("n1", vec![unpublished("a1")]).await;
    assert_eq!(env.claim_state("v", "a1").await, None);
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attached)
    );
    assert_eq!(desired(env, "n1").await, (true, false, vec![]));
    assert!(
        env.ops().await.iter().all(|o| !o.starts_with("unpublish")),
        "no ControllerUnpublish while the staging is kept: {:?}",
        env.ops().await
    );
}

/// `n1` takes the staging it kept down, for `why`.
async fn ended(env: &Env, why: &str) {
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    let m = env.last_message("staging-linger-ended", "n1").await;
    assert!(m.ends_with(why), "{m}");
}

/// The controller host `ctl` answers its first operation, a ControllerUnpublishVolume.
pub(super) async fn controller_unpublished(env: &Env) {
    let op = env.ops_of("ctl").await.remove(0);
    env.report(
        "ctl",
        vec![Report::ControllerUnpublished {
            op: op.id as u64,
            attempt: op.attempt,
        }],
    )
    .await;
}

/// Ends every linger as if its time had run out.
async fn run_out(env: &Env) {
    env.write(|ctx, _| {
        ctx.tx
            .execute("UPDATE lingers SET until = 0", [])
            .map_err(crate::error::ApiError::from)
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_released_member_stays_staged_until_its_linger_runs_out() {
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    let m = env.last_message("staging-lingering", "n1").await;
    assert_eq!(
        m,
        "node n1 keeps the volume staged after alloc a1's release: pool cache lingers 10m"
    );
    let view = env.read(|c| super::super::volume_view(c, "v")).await;
    let linger = view.attachments[0].linger.as_ref().expect("shown");
    assert_eq!(linger.after_alloc, "a1");

    // The next claim on n1 publishes from the staging: no attach, no stage.
    env.claim("v", "a2", "n1", ClaimMode::Write).await.unwrap();
    assert_eq!(
        env.claim_state("v", "a2").await,
        Some(ClaimState::Publishing)
    );
    assert_eq!(
        env.last_message("staging-linger-ended", "n1").await,
        "the staging kept after alloc a1's release ends: claimed again on the node (alloc a2): \
         published from the staging it kept"
    );
    env.report("n1", vec![published("v", "a2")]).await;
    assert_eq!(env.claim_state("v", "a2").await, Some(ClaimState::Ready));

    // Released again, then the linger runs out: taken down like any release.
    env.release("v", "a2").await.unwrap();
    env.report("n1", vec![unpublished("a2")]).await;
    assert_eq!(desired(&env, "n1").await, (true, false, vec![]));
    let now = crate::clock::Clock::wall().now_ms();
    assert!(
        !env.read(move |c| super::super::any_linger_due(c, now))
            .await
    );
    run_out(&env).await;
    assert!(
        env.read(move |c| super::super::any_linger_due(c, now))
            .await
    );
    env.write(|ctx, l| super::super::end_due_lingers(ctx, l))
        .await
        .unwrap();
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    assert_eq!(desired(&env, "n1").await, (false, true, vec![]));
    assert!(
        env.last_message("staging-linger-ended", "n1")
            .await
            .ends_with("its linger ran out")
    );
    env.report("n1", vec![unstaged()]).await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    assert!(env.read(|c| c.lingers(None, None)).await.is_empty());
}

#[tokio::test]
async fn a_claim_on_another_node_ends_the_linger_and_waits_for_the_unstage() {
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    env.claim("v", "a2", "n2", ClaimMode::Write).await.unwrap();
    assert_eq!(env.claim_state("v", "a2").await, Some(ClaimState::Pending));
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    assert_eq!(
        env.last_message("staging-linger-ended", "n1").await,
        "the staging kept after alloc a1's release ends: alloc a2 on node n2 needs the volume, \
         which is single-node-writer"
    );
    assert_eq!(desired(&env, "n1").await, (false, true, vec![]));
    // Nothing goes to n2 while n1 holds the staging.
    assert!(env.ops().await.iter().all(|o| !o.contains(" n2 ")));
    env.report("n1", vec![unstaged()]).await;
    assert_eq!(env.claim_state("v", "a2").await, Some(ClaimState::Pending));
    controller_unpublished(&env).await;
    assert_eq!(env.attachment_state("v", "n1").await, None);
    assert_eq!(
        env.claim_state("v", "a2").await,
        Some(ClaimState::Attaching)
    );
}

#[tokio::test]
async fn a_node_lost_while_lingering_blocks_the_volume_and_says_why() {
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "no heartbeat for 30s", l))
        .await
        .unwrap();
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Blocked)
    );
    let e = env
        .claim("v", "a2", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::Blocked);
    assert!(
        e.message
            .contains("staged on lost node n1, lingering after alloc a1's release"),
        "{}",
        e.message
    );
    // Its time running out changes nothing while the node is lost: the row says why.
    run_out(&env).await;
    let now = crate::clock::Clock::wall().now_ms();
    assert!(
        !env.read(move |c| super::super::any_linger_due(c, now))
            .await
    );
    env.write(|ctx, l| super::super::end_due_lingers(ctx, l))
        .await
        .unwrap();
    let view = env.read(|c| super::super::volume_view(c, "v")).await;
    assert_eq!(view.attachments[0].state, AttachmentState::Blocked);
    assert_eq!(
        view.attachments[0].linger.as_ref().unwrap().after_alloc,
        "a1"
    );
    // An unblock frees it, and the linger with it.
    env.write(|ctx, l| {
        super::super::unblock_volume(ctx, "v", None, "the node is gone", false, "op", l).map(|_| ())
    })
    .await
    .unwrap();
    controller_unpublished(&env).await;
    assert_eq!(env.attachment_state("v", "n1").await, None);
    assert!(env.read(|c| c.lingers(None, None)).await.is_empty());
    env.claim("v", "a2", "n2", ClaimMode::Write).await.unwrap();
}

#[tokio::test]
async fn a_pool_that_stops_lingering_ends_its_lingers() {
    // Deleted pool.
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    env.write(|ctx, l| super::super::delete_pool(ctx, "cache", "op", l))
        .await
        .unwrap();
    ended(&env, "the volume is in no pool any more").await;

    // A member drained: a drain waits for no linger.
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    env.write(|ctx, l| {
        super::super::set_volume_eligibility(ctx, "v", Eligibility::Draining, None, "op", l)
    })
    .await
    .unwrap();
    ended(&env, "the volume is out of service (draining)").await;

    // Relabelled out of its pool.
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    let req = VolumeLabelRequest {
        set: BTreeMap::new(),
        remove: vec!["pool".into()],
    };
    env.write(move |ctx, l| super::super::set_volume_labels(ctx, "v", &req, "op", l))
        .await
        .unwrap();
    ended(&env, "the volume is in no pool any more").await;

    // An operation that waits for the release (a deletion) waits for no linger.
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    env.write(|ctx, l| super::super::deregister_volume(ctx, "v", true, "op", l, true))
        .await
        .unwrap();
    ended(
        &env,
        "DeleteVolume waits for the volume's release to finish",
    )
    .await;

    // A node drained keeps nothing for a next job.
    let env = pool_member_ready(Some(600_000)).await;
    released_lingering(&env).await;
    env.write(|ctx, l| super::super::set_eligibility(ctx, "n1", Eligibility::Draining, "op", l))
        .await
        .unwrap();
    ended(&env, "the node takes no new claims (draining)").await;

    // A pool with no linger keeps nothing.
    let env = pool_member_ready(None).await;
    env.release("v", "a1").await.unwrap();
    assert_eq!(desired(&env, "n1").await, (false, false, vec!["a1".into()]));
    env.report("n1", vec![unpublished("a1")]).await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    assert!(env.events_of("staging-lingering").await.is_empty());
}

#[tokio::test]
async fn a_node_that_unstages_anyway_ends_the_linger() {
    // An agent that keeps no staging (an older one) unpublishes and unstages together.
    let env = pool_member_ready(Some(600_000)).await;
    env.release("v", "a1").await.unwrap();
    env.report("n1", vec![unpublished("a1"), unstaged()]).await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    assert!(env.read(|c| c.lingers(None, None)).await.is_empty());
    assert!(
        env.last_message("staging-linger-ended", "n1")
            .await
            .ends_with("the node unstaged the volume")
    );
}

/// A pool claim on another node prefers a member staged nowhere to one lingering on a
/// node, which it would wait for; on the lingering node, that member is `staged here`.
#[tokio::test]
async fn a_pool_claim_prefers_a_member_no_other_node_keeps_staged() {
    let env = pool_member_ready(Some(600_000)).await;
    env.volume("w", "single-node-writer").await;
    let set = VolumeLabelRequest {
        set: [("pool".to_owned(), "cache".to_owned())].into(),
        remove: Vec::new(),
    };
    env.write(move |ctx, l| super::super::set_volume_labels(ctx, "w", &set, "op", l))
        .await
        .unwrap();
    released_lingering(&env).await;
    let from_pool = |alloc: &str, node: &str| {
        let req = PoolClaimRequest {
            claim: ClaimRequest::new(alloc, node, ClaimMode::Write),
            cache_key: None,
            restore_keys: Vec::new(),
        };
        env.write(move |ctx, l| {
            super::super::claim_from_pool(
                ctx,
                "cache",
                &req,
                &Claimant::operator("ci"),
                l,
                false,
                None,
            )
            .map(|(c, _)| c)
        })
    };
    let c = from_pool("a2", "n2").await.unwrap();
    assert_eq!(c.volume, "w", "{c:?}");
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Attached),
        "v still lingers on n1"
    );
    let c = from_pool("a3", "n1").await.unwrap();
    assert_eq!(c.volume, "v", "{c:?}");
    assert_eq!(c.pool.unwrap().choice, PoolChoice::StagedHere);
    assert_eq!(
        env.claim_state("v", "a3").await,
        Some(ClaimState::Publishing)
    );
}
