//! Volume labels and pools below the schema that keeps them.

use std::collections::BTreeMap;

use csivol_api::{ClaimMode, ClaimRequest, PoolClaimRequest, PoolSpec, VolumeLabelRequest};

use super::Env;
use crate::lifecycle::Claimant;

/// With the etcd store a cluster runs on the previous schema until `upgrade finalize`:
/// labelling a volume, making a pool and claiming from one are refused then (a server of
/// the previous release would neither keep nor honour them), and a volume registered
/// without labels is registered as before.
#[tokio::test]
async fn below_the_schema_that_keeps_them_labels_and_pools_are_refused() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.write(|ctx, _| {
        ctx.tx
            .execute_batch(
                "DROP TABLE volume_labels;
                 DROP TABLE pools;
                 DROP TABLE volume_cache_keys;
                 DROP TABLE pool_claims;",
            )
            .map_err(crate::error::ApiError::from)
    })
    .await
    .unwrap();
    let pool: BTreeMap<String, String> = [("pool".to_owned(), "cache".to_owned())].into();
    let set = VolumeLabelRequest {
        set: pool.clone(),
        remove: Vec::new(),
    };
    let e = env
        .write(move |ctx, l| super::super::set_volume_labels(ctx, "v", &set, "op", l))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    let spec = PoolSpec {
        selector: pool.clone(),
        linger_ms: None,
    };
    let e = env
        .write(move |ctx, _| super::super::create_pool(ctx, "cache", &spec, "op"))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    let req = PoolClaimRequest {
        claim: ClaimRequest::new("a1", "n1", ClaimMode::Write),
        cache_key: None,
        restore_keys: Vec::new(),
    };
    let e = env
        .write(move |ctx, l| {
            super::super::claim_from_pool(
                ctx,
                "cache",
                &req,
                &Claimant::operator("op"),
                l,
                false,
                None,
            )
        })
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    let mut labelled = super::spec("single-node-writer");
    labelled.external_id = "ext-w".into();
    labelled.labels = pool;
    let e = env
        .write(move |ctx, _| super::super::register_volume(ctx, "w", labelled.clone(), "op"))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    env.volume("plain", "single-node-writer").await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
}

/// Among members as warm for a claim, the one whose cache was used longest ago goes: the
/// caches of the keys jobs come back to often stay theirs, whatever the members' names.
#[tokio::test]
async fn among_members_as_warm_the_cache_used_longest_ago_goes_first() {
    use super::pool_line::{ask, from_pool, label, make_pool};
    use crate::store::Txn;

    let clock = crate::clock::Clock::held_at(1_000_000);
    let env = Env::with_clock(clock.clone());
    env.register("n1", false, &[]).await;
    for m in ["m1", "m2", "m3"] {
        env.volume(m, "single-node-writer").await;
        label(&env, m).await;
    }
    make_pool(&env).await;
    // Keys recorded (as at successful releases) m3 first, then m1, then m2: all share
    // `branch-0` with the next claim's key.
    for (at, m, key) in [
        (1_001_000, "m3", "branch-03"),
        (1_002_000, "m1", "branch-01"),
        (1_003_000, "m2", "branch-02"),
    ] {
        clock.set(at);
        env.write(move |ctx, _| ctx.set_cache_key(m, key))
            .await
            .unwrap();
    }
    clock.set(1_004_000);
    let c = from_pool(&env, ask("a1", "n1", Some("branch-04"), false), None)
        .await
        .unwrap();
    assert_eq!(c.volume, "m3", "{c:?}");
    let why = c.pool.as_ref().map(|p| p.why.clone()).unwrap_or_default();
    assert_eq!(why, "warm: prefix `branch-0` (its key `branch-03`)");
    // The same key still goes first however recently it was used.
    let c = from_pool(&env, ask("a2", "n1", Some("branch-02"), false), None)
        .await
        .unwrap();
    assert_eq!(c.volume, "m2", "{c:?}");
}
