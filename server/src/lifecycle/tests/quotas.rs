//! Namespaces' quotas: a volume, its capacity, a claim or a growth past a bound is refused
//! in the write that would pass it, saying what is used, the limit and who uses most, and
//! taken once something is freed; a namespace without a quota is bounded by nothing.

use csivol_api::{self as api, ClaimMode, Quota};

use super::Env;
use crate::error::ApiError;

const MIB: u64 = 1 << 20;

async fn quota(env: &Env, ns: &str, q: Quota) -> api::Namespace {
    let ns = ns.to_owned();
    env.write(move |ctx, _| super::super::set_namespace_quota(ctx, &ns, &q, "op"))
        .await
        .unwrap()
}

/// Creates volume `name` (a key) of `bytes`.
async fn create(env: &Env, name: &str, bytes: u64) -> Result<(), ApiError> {
    let mut spec = super::create_spec();
    spec.capacity_bytes = bytes;
    let n = name.to_owned();
    env.write(move |ctx, l| super::super::create_volume(ctx, &n, spec.clone(), "op", l))
        .await
        .map(|_| ())
}

fn refused(e: &ApiError, wants: &[&str]) {
    assert_eq!(e.code(), api::ErrorCode::Conflict, "{e:?}");
    for w in wants {
        assert!(e.message.contains(w), "`{w}` in {e:?}");
    }
    let hint = e.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("csivol namespace quota"), "{e:?}");
}

#[tokio::test]
async fn a_namespace_takes_what_its_quota_allows_and_no_more() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    let shown = quota(
        &env,
        "team-a",
        Quota {
            volumes: Some(2),
            capacity_bytes: Some(3 * MIB),
            claims: Some(1),
            fresh_volumes: None,
        },
    )
    .await;
    assert_eq!(shown.quota.as_ref().and_then(|q| q.volumes), Some(2));

    // Capacity: 2 MiB fits, another 2 MiB would make 4 of 3.
    create(&env, "team-a~a", 2 * MIB).await.unwrap();
    let e = create(&env, "team-a~b", 2 * MIB).await.unwrap_err();
    refused(
        &e,
        &[
            "namespace `team-a` is at its quota of 3.0 MiB of capacity: 2.0 MiB used",
            "volume `b` would make it 4.0 MiB",
            "volume `a` holds most (2.0 MiB)",
        ],
    );
    // Nothing of the refused volume is recorded.
    assert!(env.read(|c| c.volume("team-a~b")).await.is_none());
    create(&env, "team-a~b", MIB).await.unwrap();
    // Volumes: two of two.
    let e = create(&env, "team-a~c", 0).await.unwrap_err();
    refused(
        &e,
        &["quota of 2 volume(s): 2 used", "volume `c` would make it 3"],
    );
    // Another namespace, and `default`, are not bounded by team-a's quota.
    create(&env, "c", 8 * MIB).await.unwrap();

    // Growing counts what it grows by.
    let e = env
        .write(|ctx, l| {
            let req = api::ExpandRequest {
                capacity_bytes: 3 * MIB,
                cancel: false,
            };
            super::super::expand_volume(ctx, "team-a~b", &req, "op", l, false)
        })
        .await
        .unwrap_err();
    refused(&e, &["growing volume `b` would make it 5.0 MiB"]);

    // Raised, the bound takes one more.
    quota(
        &env,
        "team-a",
        Quota {
            volumes: Some(3),
            capacity_bytes: Some(3 * MIB),
            claims: Some(1),
            fresh_volumes: None,
        },
    )
    .await;
    // Claims: one held; a second refused until the first is released.
    env.volume("team-a~r", "multi-node-multi-writer").await;
    env.claim("team-a~r", "a1", "n1", ClaimMode::Write)
        .await
        .unwrap();
    let e = env
        .claim("team-a~r", "a2", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    refused(
        &e,
        &[
            "quota of 1 claim(s): 1 used",
            "a claim of volume `r` would make it 2",
            "holds most (1)",
        ],
    );
    env.release("team-a~r", "a1").await.unwrap();
    if env.claim_state("team-a~r", "a1").await.is_some() {
        let gone = api::Report::Unpublished {
            volume: "team-a~r".into(),
            alloc: "a1".into(),
        };
        env.report("n1", vec![gone]).await;
    }
    assert_eq!(env.claim_state("team-a~r", "a1").await, None);
    env.claim("team-a~r", "a2", "n1", ClaimMode::Write)
        .await
        .unwrap();

    // The view shows what is used against each bound; an empty quota removes it.
    let shown = env
        .read(|c| super::super::namespace_view(c, "team-a"))
        .await;
    assert_eq!(
        (shown.volumes, shown.capacity_bytes, shown.claims),
        (3, 3 * MIB, 1),
        "{shown:?}"
    );
    let cleared = quota(&env, "team-a", Quota::default()).await;
    assert_eq!(cleared.quota, None);
    create(&env, "team-a~d", 8 * MIB).await.unwrap();
}

#[tokio::test]
async fn a_quota_is_set_only_on_a_namespace_that_exists() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    let e = env
        .write(|ctx, _| {
            super::super::set_namespace_quota(
                ctx,
                "team-z",
                &Quota {
                    claims: Some(1),
                    ..Quota::default()
                },
                "op",
            )
        })
        .await
        .unwrap_err();
    assert!(e.message.contains("no namespace `team-z`"), "{e:?}");
    // `default` takes one too.
    let shown = quota(
        &env,
        "default",
        Quota {
            volumes: Some(0),
            ..Quota::default()
        },
    )
    .await;
    assert_eq!(shown.quota.and_then(|q| q.volumes), Some(0));
    let e = create(&env, "x", 0).await.unwrap_err();
    refused(&e, &["namespace `default` is at its quota of 0 volume(s)"]);
}
