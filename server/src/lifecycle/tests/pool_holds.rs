//! Holds and the line's order against everything else: a hold let go when its claim cannot
//! use the member or the member left the pool, each claim past the bound held a member, a
//! named claim neither overtaking the line nor taking a held member, the first in line
//! taking its warmest member before a later claim takes its slot, a lapsed claim granted
//! nothing, a node with a claim in line kept, and the leader's pass due only when it is.

use std::time::Duration;

use csivol_api::{self as api, ClaimMode, ClaimRequest, ClaimState, VolumeLabelRequest};

use super::pool_line::{
    ask, free, from_pool, join, line, m1_freed_before_w1_and_w2, n3_full, pool_env, slots,
    take_both, waiting,
};
use crate::lifecycle::Claimant;

#[tokio::test]
async fn the_first_in_line_takes_its_warmest_member_before_a_later_claim_takes_its_slot() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    n3_full(&env).await;
    from_pool(&env, ask("h1", "n1", Some("k1"), false), None)
        .await
        .unwrap();
    from_pool(&env, ask("h2", "n1", Some("k2"), false), None)
        .await
        .unwrap();
    clock.set(1_001_000);
    from_pool(&env, ask("first", "n3", Some("k2"), true), None)
        .await
        .unwrap();
    join(&env, &clock, &[(1_002_000, "second", "n3")]).await;
    free(&env, "m2", "h2", "n1").await;
    free(&env, "m1", "h1", "n1").await;
    assert_eq!(
        line(&env).await,
        waiting(&["first", "second"]),
        "no slot on n3"
    );
    // One slot frees on n3. m1 is offered first: `first` would rather have m2 (its key),
    // and takes it now, with the slot; `second` does not take m1, and the slot, before it.
    slots(&env, "n3", 2).await;
    env.write(|ctx, l| crate::lifecycle::serve_lines(ctx, l))
        .await
        .unwrap();
    assert_ne!(env.claim_state("m2", "first").await, None, "first got m2");
    assert_eq!(env.claim_row("m1", "second").await, None);
    assert_eq!(line(&env).await, waiting(&["second"]));
    assert!(
        env.last_message("pool-member-chosen", "n3")
            .await
            .contains("member m2 for cache key `k2`: warm: same key `k2`, from the line")
    );
}

#[tokio::test]
async fn a_hold_is_let_go_once_its_claim_cannot_use_the_member_or_the_member_left_the_pool() {
    for gone in ["node out of service", "member left the pool"] {
        let (env, _clock) = m1_freed_before_w1_and_w2(Duration::ZERO).await;
        assert_eq!(
            line(&env).await,
            [
                ("w1".to_owned(), Some("m1".to_owned())),
                ("w2".to_owned(), None)
            ]
        );
        if gone == "node out of service" {
            // w1's node can take no volume: m1, held for it, goes to w2 at the next pass.
            env.write(|ctx, l| {
                crate::lifecycle::set_eligibility(ctx, "n3", api::Eligibility::Ineligible, "op", l)
            })
            .await
            .unwrap();
            env.write(|ctx, l| crate::lifecycle::serve_lines(ctx, l))
                .await
                .unwrap();
            assert_ne!(env.claim_state("m1", "w2").await, None, "{gone}: w2 got m1");
            assert_eq!(line(&env).await, waiting(&["w1"]), "{gone}");
            assert!(env.last_message("pool-member-held", "n3").await.ends_with(
                "member m1 no longer held for the first in line: it cannot start there"
            ));
        } else {
            // m1 leaves the pool: its hold goes with it, and m2, freed, is held for w1 in
            // its stead; w2, after it, does not take it.
            let unset = VolumeLabelRequest {
                set: Default::default(),
                remove: vec!["pool".to_owned()],
            };
            env.write(move |ctx, l| {
                crate::lifecycle::set_volume_labels(ctx, "m1", &unset, "op", l).map(|_| ())
            })
            .await
            .unwrap();
            free(&env, "m2", "h2", "n1").await;
            assert_eq!(env.claim_row("m2", "w2").await, None, "{gone}");
            assert_eq!(
                line(&env).await,
                [
                    ("w1".to_owned(), Some("m2".to_owned())),
                    ("w2".to_owned(), None)
                ],
                "{gone}"
            );
        }
    }
}

#[tokio::test]
async fn a_claim_in_line_whose_lease_lapsed_leaves_when_a_member_frees_and_gets_nothing() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    take_both(&env).await;
    clock.set(1_001_000);
    let mut leased = ask("w1", "n2", None, true);
    leased.claim.ttl_ms = Some(1_000);
    from_pool(&env, leased, None).await.unwrap();
    from_pool(&env, ask("w2", "n2", None, true), None)
        .await
        .unwrap();
    // Before the leader's pass takes w1 out of the line, m1 frees: w2 gets it.
    clock.set(1_010_000);
    free(&env, "m1", "h1", "n1").await;
    assert_eq!(env.claim_row("m1", "w1").await, None);
    assert_ne!(env.claim_state("m1", "w2").await, None, "w2 got m1");
    assert!(line(&env).await.is_empty());
    assert!(
        env.last_message("pool-line-left", "n2")
            .await
            .ends_with("its lease lapsed")
    );
}

#[tokio::test]
async fn a_named_claim_on_a_member_neither_overtakes_the_line_nor_takes_a_held_member() {
    // The line first: w1 waits on n3 (no slot), m1 frees and stays free; n3 gets a slot,
    // and a named claim on m1 finds w1 served before it.
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    n3_full(&env).await;
    take_both(&env).await;
    join(&env, &clock, &[(1_001_000, "w1", "n3")]).await;
    free(&env, "m1", "h1", "n1").await;
    assert_eq!(line(&env).await, waiting(&["w1"]));
    slots(&env, "n3", 2).await;
    let e = env
        .claim("m1", "x", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    // Refused, its write undone: w1, which it would have overtaken, stands in its way.
    assert!(e.message.contains("held by alloc w1 on node n3"), "{e:?}");
    assert_eq!(env.claim_row("m1", "x").await, None);
    // With --queue, it waits behind w1, which got m1 first.
    let mut queued = ClaimRequest::new("x", "n2", ClaimMode::Write);
    queued.queue = true;
    assert_eq!(
        env.claim_with("m1", queued).await.unwrap().state,
        ClaimState::Queued
    );
    assert_ne!(env.claim_state("m1", "w1").await, None, "w1 got m1 first");
    assert!(line(&env).await.is_empty());

    // A hold: m1 is held for w1, first in line past the bound.
    let (env, clock) = pool_env(Duration::ZERO).await;
    n3_full(&env).await;
    take_both(&env).await;
    join(&env, &clock, &[(1_001_000, "w1", "n3")]).await;
    free(&env, "m1", "h1", "n1").await;
    assert_eq!(line(&env).await, [("w1".to_owned(), Some("m1".to_owned()))]);
    let e = env
        .claim("m1", "x", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    assert!(
        e.message
            .contains("volume `m1` is held for the first claim in pool `cache`'s line"),
        "{e:?}"
    );
    assert!(
        !e.message.contains("ci") && !e.message.contains("w1"),
        "{e:?}"
    );
    assert!(e.hint.unwrap().contains("--queue"));
    // With --queue it waits behind the hold, and gets m1 once w1 leaves the line.
    let mut queued = ClaimRequest::new("x", "n2", ClaimMode::Write);
    queued.queue = true;
    assert_eq!(
        env.claim_with("m1", queued).await.unwrap().state,
        ClaimState::Queued
    );
    env.write(|ctx, l| crate::lifecycle::serve_lines(ctx, l))
        .await
        .unwrap();
    assert_eq!(env.claim_state("m1", "x").await, Some(ClaimState::Queued));
    env.write(|ctx, l| {
        crate::lifecycle::leave_line(ctx, "cache", "w1", &Claimant::operator("ci"), l)
    })
    .await
    .unwrap();
    assert!(line(&env).await.is_empty());
    assert_ne!(
        env.claim_state("m1", "x").await,
        Some(ClaimState::Queued),
        "x granted"
    );
}

#[tokio::test]
async fn the_leaders_pass_over_the_lines_is_due_only_when_an_offer_or_a_lapse_would_change_them() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    let due = |now: i64| {
        let limits = env.limits.clone();
        env.read(move |c| crate::lifecycle::lines_due(c, now, &limits))
    };
    n3_full(&env).await;
    take_both(&env).await;
    clock.set(1_001_000);
    let mut leased = ask("w1", "n3", None, true);
    leased.claim.ttl_ms = Some(600_000);
    from_pool(&env, leased, None).await.unwrap();
    free(&env, "m1", "h1", "n1").await;
    // w1 waits for a slot on n3, m1 free: nothing for the pass to do, however often asked.
    assert!(!due(1_002_000).await);
    // Past the bound, m1 is to be held for it.
    assert!(due(1_302_000).await);
    // A slot frees on n3: m1 is to be granted.
    slots(&env, "n3", 2).await;
    assert!(due(1_002_000).await);
    env.write(|ctx, l| crate::lifecycle::serve_lines(ctx, l))
        .await
        .unwrap();
    assert_ne!(env.claim_state("m1", "w1").await, None, "w1 got m1");
    // A claim in line whose lease lapsed is due to leave.
    from_pool(&env, ask("w2", "n2", None, true), None)
        .await
        .unwrap();
    assert!(!due(1_002_000).await);
    env.write(|ctx, _| {
        crate::lifecycle::renew_in_line(ctx, "cache", "w2", Some(1_000), &Claimant::operator("ci"))
    })
    .await
    .unwrap()
    .unwrap();
    assert!(due(1_003_000).await);
}

#[tokio::test]
async fn a_node_with_a_claim_in_a_pools_line_is_not_removed_until_it_leaves() {
    let (env, clock) = pool_env(Duration::from_secs(300)).await;
    take_both(&env).await;
    join(&env, &clock, &[(1_001_000, "w1", "n2")]).await;
    let remove = || env.write(|ctx, _| crate::lifecycle::remove_node(ctx, "n2", "op"));
    let e = remove().await.unwrap_err();
    assert!(
        e.message
            .contains("node `n2`: 1 claim for it waits in pools' lines (alloc w1 in pool cache)"),
        "{e:?}"
    );
    assert!(
        e.hint
            .unwrap()
            .contains("csivol release --pool cache --alloc w1")
    );
    assert_eq!(line(&env).await, waiting(&["w1"]));
    env.write(|ctx, l| {
        crate::lifecycle::leave_line(ctx, "cache", "w1", &Claimant::operator("ci"), l)
    })
    .await
    .unwrap();
    remove().await.unwrap();
}

#[tokio::test]
async fn each_claim_past_the_bound_is_held_a_member_not_only_the_first_in_line() {
    let (env, clock) = pool_env(Duration::ZERO).await;
    n3_full(&env).await;
    take_both(&env).await;
    join(
        &env,
        &clock,
        &[
            (1_001_000, "w1", "n3"),
            (1_002_000, "w2", "n3"),
            (1_003_000, "w3", "n2"),
        ],
    )
    .await;
    free(&env, "m1", "h1", "n1").await;
    // w1 holds m1 already: m2 is held for w2, next past the bound, and w3 does not take it.
    free(&env, "m2", "h2", "n1").await;
    assert_eq!(env.claim_row("m2", "w3").await, None);
    assert_eq!(
        line(&env).await,
        [
            ("w1".to_owned(), Some("m1".to_owned())),
            ("w2".to_owned(), Some("m2".to_owned())),
            ("w3".to_owned(), None)
        ]
    );
}
