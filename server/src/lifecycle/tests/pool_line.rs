//! A pool's line: claims from a pool made with `--queue` wait for any member, and a member
//! that frees goes to the first in line that can take it, the line and a member's own queue
//! keeping one order by arrival; warmth chooses members, never claims; the first in line is
//! held a member once it waited past `pool_hold_after`; leases, releases and late copies.

use std::time::Duration;

use csivol_api::{
    self as api, ClaimMode, ClaimRequest, ClaimState, PoolChoice, PoolClaimRequest, PoolSpec,
    Report, VolumeLabelRequest,
};

use super::{Env, registration};
use crate::clock::Clock;
use crate::error::ApiResult;
use crate::lifecycle::Claimant;

/// Pool `cache` of the volumes labelled `pool=cache`.
pub(super) async fn make_pool(env: &Env) {
    let spec = PoolSpec {
        selector: [("pool".to_owned(), "cache".to_owned())].into(),
        linger_ms: None,
    };
    env.write(move |ctx, _| crate::lifecycle::create_pool(ctx, "cache", &spec, "op"))
        .await
        .unwrap();
}

/// Nodes `n1` and `n2`, and pool `cache` of members `m1` and `m2` (single-node-writer),
/// stamped by a clock the test moves.
pub(super) async fn pool_env(hold_after: Duration) -> (Env, Clock) {
    let clock = Clock::held_at(1_000_000);
    let mut env = Env::with_clock(clock.clone());
    env.limits.pool_hold_after = hold_after;
    env.register("n1", false, &[]).await;
    env.register("n2", false, &[]).await;
    for m in ["m1", "m2"] {
        env.volume(m, "single-node-writer").await;
        label(&env, m).await;
    }
    make_pool(&env).await;
    (env, clock)
}

pub(super) async fn label(env: &Env, volume: &str) {
    let set = VolumeLabelRequest {
        set: [("pool".to_owned(), "cache".to_owned())].into(),
        remove: Vec::new(),
    };
    let v = volume.to_owned();
    env.write(move |ctx, l| {
        crate::lifecycle::set_volume_labels(ctx, &v, &set, "op", l)?;
        crate::lifecycle::serve_lines(ctx, l).map(|_| ())
    })
    .await
    .unwrap();
}

/// What a claim from pool `cache` asks.
pub(super) fn ask(alloc: &str, node: &str, key: Option<&str>, queue: bool) -> PoolClaimRequest {
    let mut claim = ClaimRequest::new(alloc, node, ClaimMode::Write);
    claim.queue = queue;
    PoolClaimRequest {
        claim,
        cache_key: key.map(str::to_owned),
        restore_keys: Vec::new(),
    }
}

pub(super) async fn from_pool(
    env: &Env,
    req: PoolClaimRequest,
    sent_at: Option<i64>,
) -> ApiResult<api::Claim> {
    env.write(move |ctx, l| {
        crate::lifecycle::claim_from_pool(
            ctx,
            "cache",
            &req,
            &Claimant::operator("ci"),
            l,
            false,
            sent_at,
        )
    })
    .await
    .map(|(c, _)| c)
}

/// `h1` and `h2` on node `n1` take both members.
pub(super) async fn take_both(env: &Env) {
    for alloc in ["h1", "h2"] {
        from_pool(env, ask(alloc, "n1", None, false), None)
            .await
            .unwrap();
    }
}

/// Releases `alloc`'s claim on `volume` (its job succeeded: its key becomes the member's)
/// and has `node` report it unpublished: the member is free.
pub(super) async fn free(env: &Env, volume: &str, alloc: &str, node: &str) {
    let (v, a) = (volume.to_owned(), alloc.to_owned());
    env.write(move |ctx, _| {
        crate::lifecycle::release_claim(ctx, &v, &a, &Claimant::operator("ci"))??;
        crate::lifecycle::released_from_pool(ctx, &v, &a, true)
    })
    .await
    .unwrap();
    let report = Report::Unpublished {
        volume: volume.into(),
        alloc: alloc.into(),
    };
    env.report(node, vec![report]).await;
    assert!(env.claim_row(volume, alloc).await.is_none());
}

/// The line as `pool show` lists it: (alloc, held member).
pub(super) async fn line(env: &Env) -> Vec<(String, Option<String>)> {
    env.read(|c| crate::lifecycle::pool_view(c, "cache", 0))
        .await
        .line
        .into_iter()
        .map(|w| (w.alloc, w.held))
        .collect()
}

pub(super) fn waiting(allocs: &[&str]) -> Vec<(String, Option<String>)> {
    allocs.iter().map(|a| ((*a).to_owned(), None)).collect()
}

#[tokio::test]
async fn a_freed_member_goes_to_the_first_in_line_whatever_its_warmth_and_one_order_holds() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    let h1 = from_pool(&env, ask("h1", "n1", Some("k1"), false), None)
        .await
        .unwrap();
    let h2 = from_pool(&env, ask("h2", "n1", Some("k2"), false), None)
        .await
        .unwrap();
    assert_eq!((h1.volume.as_str(), h2.volume.as_str()), ("m1", "m2"));
    // Every member taken: without --queue refused, with it in line, the answer says where.
    let e = from_pool(&env, ask("w0", "n2", None, false), None)
        .await
        .unwrap_err();
    assert!(
        e.message.contains("no member of pool `cache` is free"),
        "{e:?}"
    );
    assert!(e.hint.unwrap().contains("--queue"));
    clock.set(1_001_000);
    let w1 = from_pool(&env, ask("w1", "n2", Some("k1"), true), None)
        .await
        .unwrap();
    assert_eq!(
        (w1.volume.as_str(), w1.state, w1.queue_position),
        ("", ClaimState::Queued, Some(1))
    );
    let pool = w1.pool.unwrap();
    assert_eq!(
        (pool.pool.as_str(), pool.choice),
        ("cache", PoolChoice::Waiting)
    );
    clock.set(1_002_000);
    let w2 = from_pool(&env, ask("w2", "n2", Some("k2"), true), None)
        .await
        .unwrap();
    assert_eq!(w2.queue_position, Some(2));
    assert_eq!(line(&env).await, waiting(&["w1", "w2"]));
    // Asked again, the same claim in line answers as it stands: one claim in line.
    let again = from_pool(&env, ask("w1", "n2", Some("k1"), true), None)
        .await
        .unwrap();
    assert_eq!(again.queue_position, Some(1));
    assert_eq!(line(&env).await, waiting(&["w1", "w2"]));
    // A named claim queued on m1 after both.
    clock.set(1_003_000);
    let mut named = ClaimRequest::new("n", "n1", ClaimMode::Write);
    named.queue = true;
    assert_eq!(
        env.claim_with("m1", named).await.unwrap().state,
        ClaimState::Queued
    );

    // m2 frees with key k2, warm for w2: it goes to w1 all the same, the first in line.
    clock.set(1_004_000);
    free(&env, "m2", "h2", "n1").await;
    assert_ne!(env.claim_state("m2", "w1").await, None, "w1 got m2");
    assert_eq!(env.claim_row("m2", "w2").await, None);
    assert_eq!(line(&env).await, waiting(&["w2"]));
    // m1 frees: w2 came before the named claim queued on m1, and gets it first.
    free(&env, "m1", "h1", "n1").await;
    assert_ne!(env.claim_state("m1", "w2").await, None, "w2 got m1");
    assert_eq!(env.claim_state("m1", "n").await, Some(ClaimState::Queued));
    assert!(line(&env).await.is_empty());
    let chosen = env.events_of("pool-member-chosen").await;
    assert_eq!(
        chosen[2..],
        ["pool-member-chosen m2 n2 w1", "pool-member-chosen m1 n2 w2"]
    );
    assert!(env.last_message("pool-member-chosen", "n2").await.contains(
        "member m1 for cache key `k2`: warm: prefix `k` (its key `k1`), from the line after \
             waiting 2s"
    ));
    // Granted, the claim answers through its member, with why.
    let c = env
        .read(|c| crate::lifecycle::pool_claim(c, "cache", "w2", 0))
        .await;
    assert_eq!(c.volume, "m1");
    assert_eq!(c.pool.unwrap().choice, PoolChoice::Prefix);

    // A named claim queued before a claim in line goes first.
    clock.set(1_005_000);
    let w3 = from_pool(&env, ask("w3", "n2", None, true), None)
        .await
        .unwrap();
    assert_eq!(w3.state, ClaimState::Queued);
    free(&env, "m1", "w2", "n2").await;
    assert_ne!(env.claim_state("m1", "n").await, Some(ClaimState::Queued));
    assert_eq!(line(&env).await, waiting(&["w3"]));
    assert_eq!(
        env.events_of("pool-line-joined").await,
        [
            "pool-line-joined - n2 w1",
            "pool-line-joined - n2 w2",
            "pool-line-joined - n2 w3"
        ]
    );
}

/// Registers `node` with room for `n` volumes of the plugin.
pub(super) async fn slots(env: &Env, node: &str, n: u32) {
    let mut req = serde_json::to_value(registration(node, false, &[])).unwrap();
    req["plugins"][0]["node"]["info"]["max_volumes_per_node"] = n.into();
    let req: api::RegisterRequest = serde_json::from_value(req).unwrap();
    let n = node.to_owned();
    env.write(move |ctx, l| crate::lifecycle::register_node(ctx, &n, &req, l))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_claim_that_cannot_start_is_passed_over_until_it_waited_past_the_bound() {
    for (hold_after, held) in [(Duration::from_secs(300), false), (Duration::ZERO, true)] {
        let (env, _clock) = m1_freed_before_w1_and_w2(hold_after).await;
        if held {
            // w1 waited past the bound: m1 is held for it, and w2 does not take it.
            assert_eq!(env.claim_row("m1", "w2").await, None);
            assert_eq!(
                line(&env).await,
                [
                    ("w1".to_owned(), Some("m1".to_owned())),
                    ("w2".to_owned(), None)
                ]
            );
            assert!(
                env.last_message("pool-member-held", "n3")
                    .await
                    .contains("member m1 held for the first in line")
            );
            // Nor does a new claim without --queue.
            let e = from_pool(&env, ask("x", "n2", None, false), None)
                .await
                .unwrap_err();
            assert!(e.message.contains("2 held"), "{e:?}");
            // n3 gets a second slot (its plugin says so when it registers again): the
            // leader's pass gives w1 its member.
            slots(&env, "n3", 2).await;
            env.write(|ctx, l| crate::lifecycle::serve_lines(ctx, l))
                .await
                .unwrap();
            assert_ne!(env.claim_state("m1", "w1").await, None, "w1 got m1");
            assert_eq!(line(&env).await, waiting(&["w2"]));
        } else {
            // w1 cannot start on n3 (no free slot): w2, after it, takes m1 now.
            assert_ne!(env.claim_state("m1", "w2").await, None, "w2 got m1");
            assert_eq!(line(&env).await, waiting(&["w1"]));
        }
    }
}

#[tokio::test]
async fn a_claim_leaves_the_line_when_released_or_lapsed_and_a_late_copy_does_not_join_again() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    take_both(&env).await;
    let mut leased = ask("w1", "n2", None, true);
    leased.claim.ttl_ms = Some(10_000);
    let w1 = from_pool(&env, leased.clone(), Some(1_000_000))
        .await
        .unwrap();
    assert!(w1.expires_at.is_some());
    from_pool(&env, ask("w2", "n2", None, true), None)
        .await
        .unwrap();
    // Renewed, the lease runs from now.
    clock.set(1_008_000);
    env.write(|ctx, _| {
        crate::lifecycle::renew_in_line(ctx, "cache", "w1", None, &Claimant::operator("ci"))
    })
    .await
    .unwrap()
    .unwrap();
    clock.set(1_012_000);
    env.write(|ctx, l| crate::lifecycle::serve_lines(ctx, l))
        .await
        .unwrap();
    assert_eq!(line(&env).await, waiting(&["w1", "w2"]), "renewed in time");
    clock.set(1_018_000);
    let lapsed = env
        .write(|ctx, l| crate::lifecycle::expire_leases(ctx, l))
        .await
        .unwrap();
    assert_eq!(lapsed, 1);
    assert_eq!(line(&env).await, waiting(&["w2"]));
    assert!(
        env.last_message("pool-line-left", "n2")
            .await
            .contains("left the line after waiting 18s: its lease lapsed")
    );
    // A late copy of w1's request, sent before it left, does not join again.
    let e = from_pool(&env, leased, Some(1_000_000)).await.unwrap_err();
    assert!(e.message.contains("pool `cache`'s line"), "{e:?}");
    assert_eq!(line(&env).await, waiting(&["w2"]));

    // Released, w2 leaves the line, and a freed member goes to nobody.
    let left = env
        .write(|ctx, l| {
            crate::lifecycle::leave_line(ctx, "cache", "w2", &Claimant::operator("ci"), l)
        })
        .await
        .unwrap();
    assert!(left);
    assert!(line(&env).await.is_empty());
    assert_eq!(env.events_of("pool-line-left").await.len(), 2);
    free(&env, "m1", "h1", "n1").await;
    assert!(env.claim_row("m1", "w2").await.is_none());
    // A claim on a node that does not exist does not wait: it is refused, named.
    let e = from_pool(&env, ask("w4", "nowhere", None, true), None)
        .await
        .unwrap_err();
    assert!(e.message.contains("nowhere"), "{e:?}");
    // A pool deleted takes its line with it.
    let w3 = from_pool(&env, ask("w3", "n2", None, true), None)
        .await
        .unwrap();
    assert_eq!(w3.volume, "m1", "m1 is free: no wait");
    from_pool(&env, ask("w5", "n2", None, true), None)
        .await
        .unwrap();
    assert_eq!(line(&env).await, waiting(&["w5"]));
    env.write(|ctx, l| crate::lifecycle::delete_pool(ctx, "cache", "op", l))
        .await
        .unwrap();
    assert!(
        env.last_message("pool-line-left", "n2")
            .await
            .ends_with("its pool was deleted")
    );
    assert!(env.read(|c| c.pool_line(None)).await.is_empty());
}

#[tokio::test]
async fn a_claim_whose_node_is_outside_a_members_topology_is_passed_over_even_past_the_bound() {
    let clock = Clock::held_at(1_000_000);
    let mut env = Env::with_clock(clock.clone());
    env.limits.pool_hold_after = Duration::ZERO;
    env.register_in("na", "a").await;
    env.register_in("nb", "b").await;
    for (m, z) in [("ma", "a"), ("mb", "b")] {
        env.zonal_volume(m, "single-node-writer", &[z]).await;
        label(&env, m).await;
    }
    make_pool(&env).await;
    let ha = from_pool(&env, ask("ha", "na", None, false), None)
        .await
        .unwrap();
    let hb = from_pool(&env, ask("hb", "nb", None, false), None)
        .await
        .unwrap();
    assert_eq!((ha.volume.as_str(), hb.volume.as_str()), ("ma", "mb"));
    join(
        &env,
        &clock,
        &[(1_001_000, "wb", "nb"), (1_002_000, "wa", "na")],
    )
    .await;
    // ma frees: wb, first in line and past the bound, can never use it (zone a); wa can.
    env.release("ma", "ha").await.unwrap();
    env.report(
        "na",
        vec![Report::Unpublished {
            volume: "ma".into(),
            alloc: "ha".into(),
        }],
    )
    .await;
    assert_ne!(env.claim_state("ma", "wa").await, None, "wa got ma");
    assert_eq!(line(&env).await, waiting(&["wb"]));
    // A claim no member's topology reaches does not wait at all.
    env.register_in("nc", "c").await;
    let e = from_pool(&env, ask("wc", "nc", None, true), None)
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("no member of pool `cache` can ever take this claim"),
        "{e:?}"
    );
}

/// A claimer token's claim, bounded by `claims_per_claimer`, without `release-any`.
fn claimer(token: &'static str) -> Claimant<'static> {
    Claimant {
        actor: token,
        token,
        bounded: true,
        any_claim: false,
    }
}

async fn from_pool_as(
    env: &Env,
    req: PoolClaimRequest,
    who: Claimant<'static>,
) -> ApiResult<api::Claim> {
    env.write(move |ctx, l| {
        crate::lifecycle::claim_from_pool(ctx, "cache", &req, &who, l, false, None)
    })
    .await
    .map(|(c, _)| c)
}

#[tokio::test]
async fn a_claim_in_line_is_its_tokens_and_another_tokens_repeat_is_refused() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    take_both(&env).await;
    clock.set(1_001_000);
    from_pool_as(&env, ask("w1", "n2", None, true), claimer("a"))
        .await
        .unwrap();
    // The same request from token b is not answered with token a's claim in line.
    let e = from_pool_as(&env, ask("w1", "n2", None, true), claimer("b"))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("for another token") && !e.message.contains("`a`"),
        "{e:?}"
    );
    assert!(e.hint.unwrap().contains("--alloc"));
    // From token a, it is.
    let again = from_pool_as(&env, ask("w1", "n2", None, true), claimer("a"))
        .await
        .unwrap();
    assert_eq!(again.queue_position, Some(1));
    assert_eq!(line(&env).await, waiting(&["w1"]));
}

#[tokio::test]
async fn a_claim_in_line_counts_against_its_tokens_claims_per_claimer() {
    let (mut env, clock) = pool_env(Duration::from_secs(300)).await;
    env.limits.claims_per_claimer = 1;
    take_both(&env).await;
    clock.set(1_001_000);
    from_pool_as(&env, ask("w1", "n2", None, true), claimer("t"))
        .await
        .unwrap();
    assert_eq!(env.read(|c| c.claims_held_by("t")).await, Some(1));
    let e = from_pool_as(&env, ask("w2", "n2", None, true), claimer("t"))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("holds 1 claim (queued ones included)"),
        "{e:?}"
    );
    assert_eq!(line(&env).await, waiting(&["w1"]));
    // Granted a member, its claim is counted once still.
    free(&env, "m1", "h1", "n1").await;
    free(&env, "m2", "h2", "n1").await;
    assert_ne!(env.claim_state("m1", "w1").await, None, "w1 got m1");
    assert_eq!(env.read(|c| c.claims_held_by("t")).await, Some(1));
}

/// n3 with one slot, taken by volume `other`.
pub(super) async fn n3_full(env: &Env) {
    slots(env, "n3", 1).await;
    env.volume("other", "single-node-writer").await;
    env.claim("other", "o", "n3", ClaimMode::Write)
        .await
        .unwrap();
}

/// Claims from pool `cache` join its line, each at its time: (time, alloc, node).
pub(super) async fn join(env: &Env, clock: &Clock, claims: &[(i64, &str, &str)]) {
    for &(t, alloc, node) in claims {
        clock.set(t);
        from_pool(env, ask(alloc, node, None, true), None)
            .await
            .unwrap();
    }
}

/// Both members taken, w1 waiting in line for a slot on n3 (full) and w2 on n2 behind it;
/// then m1 frees (held for w1 past `hold_after`, else given to w2).
pub(super) async fn m1_freed_before_w1_and_w2(hold_after: Duration) -> (Env, Clock) {
    let (env, clock) = pool_env(hold_after).await;
    n3_full(&env).await;
    take_both(&env).await;
    join(
        &env,
        &clock,
        &[(1_001_000, "w1", "n3"), (1_002_000, "w2", "n2")],
    )
    .await;
    free(&env, "m1", "h1", "n1").await;
    (env, clock)
}
