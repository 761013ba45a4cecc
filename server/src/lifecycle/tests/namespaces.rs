//! Namespaces: a volume's name is unique within its namespace, a namespace is made before
//! anything lives in it and forgotten only once nothing does, and none but `default`
//! exists below the schema that keeps them.

use csivol_api::ClaimMode;

use super::Env;

#[tokio::test]
async fn one_name_lives_in_two_namespaces_apart() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    env.volume("db", "single-node-writer").await;
    env.volume("team-a~db", "single-node-writer").await;
    let (a, b) = env
        .read(|c| {
            Ok((
                super::super::volume_view(c, "db")?,
                super::super::volume_view(c, "team-a~db")?,
            ))
        })
        .await;
    assert_eq!((a.namespace.as_str(), a.name.as_str()), ("default", "db"));
    assert_eq!((b.namespace.as_str(), b.name.as_str()), ("team-a", "db"));
    // Each takes its own claims: a single-node volume of one team holds nothing of the other's.
    env.claim("db", "a1", "n1", ClaimMode::Write).await.unwrap();
    let c = env
        .claim("team-a~db", "a1", "n1", ClaimMode::Write)
        .await
        .unwrap();
    assert_eq!((c.namespace.as_str(), c.volume.as_str()), ("team-a", "db"));
    // A hint says the command to run, with the namespace.
    let e = env
        .claim("team-a~db", "a2", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    let hint = e.hint.unwrap_or_default();
    assert!(
        hint.contains("csivol release db -n team-a --alloc a1"),
        "{hint}"
    );

    let listed = env.read(|c| super::super::namespace_views(c)).await;
    let counts: Vec<_> = listed
        .iter()
        .map(|n| (n.name.as_str(), n.volumes, n.claims))
        .collect();
    assert_eq!(counts, [("default", 1, 1), ("team-a", 1, 1)]);

    // Forgotten only once empty, naming what it holds.
    let e = env
        .write(|ctx, _| super::super::delete_namespace(ctx, "team-a", "op"))
        .await
        .unwrap_err();
    assert!(e.message.contains("`db`"), "{}", e.message);
    assert!(
        e.hint
            .as_deref()
            .unwrap_or("")
            .contains("volume list -n team-a")
    );
    let e = env
        .write(|ctx, _| super::super::delete_namespace(ctx, "default", "op"))
        .await
        .unwrap_err();
    assert!(e.message.contains("cannot be deleted"), "{}", e.message);
}

#[tokio::test]
async fn a_volume_of_a_namespace_nobody_made_is_refused_with_the_closest() {
    let env = Env::new();
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    let spec = super::spec("single-node-writer");
    let e = env
        .write(move |ctx, _| super::super::register_volume(ctx, "team-b~db", spec.clone(), "op"))
        .await
        .unwrap_err();
    assert_eq!(e.message, "no namespace `team-b`");
    let hint = e.hint.unwrap_or_default();
    assert!(
        hint.contains("did you mean `team-a`") && hint.contains("csivol namespace create team-b"),
        "{hint}"
    );
    // Made again: nothing changes; `default` always was.
    let (_, made) = env
        .write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    assert!(!made);
    let (_, made) = env
        .write(|ctx, _| super::super::create_namespace(ctx, "default", "op"))
        .await
        .unwrap();
    assert!(!made);
    let e = env
        .write(|ctx, _| super::super::create_namespace(ctx, "Bad/name", "op"))
        .await
        .unwrap_err();
    assert!(
        e.message.starts_with("invalid namespace name"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn a_created_volume_asks_its_plugin_with_its_namespace_in_the_name() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    let spec = super::create_spec();
    env.write(move |ctx, l| super::super::create_volume(ctx, "team-a~new", spec.clone(), "op", l))
        .await
        .unwrap();
    let op = env.ops_of("n1").await.remove(0);
    let payload: serde_json::Value = serde_json::from_str(&op.payload).unwrap();
    let csi_name = payload["csi_name"].as_str().unwrap();
    assert!(
        csi_name.starts_with("csivol-team-a.new-")
            && csi_name.len() == "csivol-team-a.new-".len() + 12,
        "{csi_name}"
    );
}

/// With the etcd store a cluster runs on the previous schema until `upgrade finalize`: no
/// namespace can be made then, and nothing can live in one (a server of the previous
/// release would take `team-a~db` for a volume of `default`).
#[tokio::test]
async fn below_the_schema_that_keeps_them_only_default_exists() {
    let env = Env::new();
    env.write(|ctx, _| {
        ctx.tx
            .execute_batch("DROP TABLE namespaces;")
            .map_err(crate::error::ApiError::from)
    })
    .await
    .unwrap();
    let e = env
        .write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap_err();
    assert!(
        e.hint.as_deref().unwrap_or("").contains("upgrade finalize"),
        "{e:?}"
    );
    let spec = super::spec("single-node-writer");
    let e = env
        .write(move |ctx, _| super::super::register_volume(ctx, "team-a~db", spec.clone(), "op"))
        .await
        .unwrap_err();
    assert!(e.message.contains("previous schema"), "{e:?}");
    env.volume("db", "single-node-writer").await;
    let listed = env.read(|c| super::super::namespace_views(c)).await;
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].name.as_str(), listed[0].volumes), ("default", 1));
}

/// A snapshot of a namespace is asked of its plugin by its key, within the spec's 128
/// bytes: a longer key is cut and told apart by a digest of the whole, the same every time.
#[test]
fn a_snapshot_is_asked_for_by_a_name_that_names_its_namespace() {
    use crate::lifecycle::ops::kinds::snapshot::csi_snapshot_name;
    assert_eq!(csi_snapshot_name("s1"), "s1");
    assert_eq!(csi_snapshot_name("team-a~s1"), "team-a~s1");
    let ns = "n".repeat(63);
    let (a, b) = (
        format!("{ns}~{}a", "s".repeat(100)),
        format!("{ns}~{}b", "s".repeat(100)),
    );
    let (ca, cb) = (csi_snapshot_name(&a), csi_snapshot_name(&b));
    assert!(ca.len() == 128 && cb.len() == 128, "{ca}");
    assert_ne!(ca, cb);
    assert_eq!(ca, csi_snapshot_name(&a));
}

/// A pool is its namespace's: with the same selector as a pool of `default`, team-a's
/// pool takes team-a's labelled volumes only, a claim from it gets one of them and never
/// `default`'s, and the namespace is not forgotten while the pool stands.
#[tokio::test]
async fn a_pool_takes_only_volumes_of_its_own_namespace() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    let spec = csivol_api::PoolSpec {
        selector: [("pool".to_owned(), "cache".to_owned())].into(),
        linger_ms: None,
    };
    for key in ["cache", "team-a~cache"] {
        let spec = spec.clone();
        env.write(move |ctx, _| super::super::create_pool(ctx, key, &spec, "op"))
            .await
            .unwrap();
    }
    // Labelled in a spec and by an operator: each volume joins its own namespace's pool.
    let mut labelled = super::spec("single-node-writer");
    labelled.labels = spec.selector.clone();
    labelled.external_id = "ext-team-a".into();
    env.write(move |ctx, _| {
        super::super::register_volume(ctx, "team-a~m1", labelled.clone(), "op")
    })
    .await
    .unwrap();
    env.volume("m0", "single-node-writer").await;
    super::pool_line::label(&env, "m0").await;
    let (ours, theirs) = env
        .read(|c| {
            Ok((
                super::super::pool_view(c, "team-a~cache", 0)?,
                super::super::pool_view(c, "cache", 0)?,
            ))
        })
        .await;
    let names = |p: &csivol_api::Pool| {
        p.members
            .iter()
            .map(|m| m.volume.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        (ours.namespace.as_str(), ours.name.as_str()),
        ("team-a", "cache")
    );
    assert_eq!(names(&ours), ["m1"]);
    assert_eq!(names(&theirs), ["m0"]);

    let req = super::pool_line::ask("job-1", "n1", None, false);
    let c = env
        .write(move |ctx, l| {
            super::super::claim_from_pool(
                ctx,
                "team-a~cache",
                &req,
                &crate::lifecycle::Claimant::operator("ci"),
                l,
                false,
                None,
            )
        })
        .await
        .unwrap()
        .0;
    assert_eq!((c.namespace.as_str(), c.volume.as_str()), ("team-a", "m1"));
    assert_eq!(c.pool.map(|p| p.pool).as_deref(), Some("cache"));

    // A namespace holding nothing but a pool is not forgotten under it.
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-b", "op"))
        .await
        .unwrap();
    env.write(move |ctx, _| super::super::create_pool(ctx, "team-b~cache", &spec, "op"))
        .await
        .unwrap();
    let e = env
        .write(|ctx, _| super::super::delete_namespace(ctx, "team-b", "op"))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("still holds pool(s) `cache`"),
        "{}",
        e.message
    );
}

/// Making or forgetting a namespace and changing its quota are operators' acts: each an
/// event with its actor and what changed, and a request that changes nothing none.
#[tokio::test]
async fn a_namespace_and_its_quota_changed_are_events_with_their_actor() {
    let env = Env::new();
    async fn all(env: &Env) -> Vec<String> {
        env.read(|c| {
            let events = c.events(0, &Default::default(), u32::MAX)?;
            Ok(events
                .into_iter()
                .filter(|e| e.kind.starts_with("namespace-"))
                .map(|e| format!("{} {}: {}", e.kind, e.actor, e.message))
                .collect::<Vec<_>>())
        })
        .await
    }
    for _ in 0..2 {
        env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op-1"))
            .await
            .unwrap();
    }
    let quota = |claims: Option<u64>, capacity_bytes: Option<u64>| csivol_api::Quota {
        claims,
        capacity_bytes,
        ..Default::default()
    };
    for q in [
        quota(Some(2), Some(10 << 20)),
        quota(Some(2), Some(10 << 20)),
        quota(None, None),
    ] {
        env.write(move |ctx, _| super::super::set_namespace_quota(ctx, "team-a", &q, "op-2"))
            .await
            .unwrap();
    }
    env.write(|ctx, _| super::super::delete_namespace(ctx, "team-a", "op-3"))
        .await
        .unwrap();
    assert_eq!(
        all(&env).await,
        [
            "namespace-created op-1: namespace team-a created",
            "namespace-quota-set op-2: quota of namespace team-a set: capacity 10.0 MiB, \
             claims 2 (was none)",
            "namespace-quota-set op-2: quota of namespace team-a set: none (was capacity \
             10.0 MiB, claims 2)",
            "namespace-deleted op-3: namespace team-a deleted",
        ]
    );
}
