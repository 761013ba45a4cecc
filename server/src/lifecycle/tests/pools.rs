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
