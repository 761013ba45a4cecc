//! Tokens' scopes: what a new token may hold (a subset of its maker's rights; nothing
//! cluster-wide when narrowed to volume patterns), how it is kept, and that no scoped
//! token is made below the schema that keeps scopes.

use csivol_api::{Capability, Role, TokenScope};

use super::Env;
use crate::auth::{self, Tokens};
use crate::error::ApiError;
use crate::lifecycle::{NewToken, create_token, revoke_token};

fn new(role: Role, capabilities: &[Capability], volumes: &[&str]) -> NewToken {
    NewToken {
        role,
        node: None,
        name: None,
        ttl_ms: None,
        controllers: Vec::new(),
        capabilities: capabilities.to_vec(),
        volumes: volumes.iter().map(|v| (*v).to_owned()).collect(),
        namespaces: Vec::new(),
    }
}

async fn make(
    env: &Env,
    t: NewToken,
    own: TokenScope,
) -> Result<csivol_api::TokenResponse, ApiError> {
    env.write(move |ctx, _| create_token(ctx, t.clone(), "op", &own).map(|(r, _)| r))
        .await
}

fn operator() -> TokenScope {
    TokenScope::preset(Role::Operator)
}

#[tokio::test]
async fn a_scoped_token_is_kept_and_read_back_with_its_scope() {
    let env = Env::new();
    let t = make(
        &env,
        new(Role::Claimer, &[Capability::Snapshot], &["build-*"]),
        operator(),
    )
    .await
    .unwrap();
    assert_eq!(
        t.capabilities,
        vec![Capability::Read, Capability::Claim, Capability::Snapshot]
    );
    assert_eq!(t.volumes, vec!["build-*".to_owned()]);
    let plain = make(&env, new(Role::Reader, &[], &[]), operator())
        .await
        .unwrap();
    let tokens = env.read(|c| Tokens::load(c)).await;
    let scoped = tokens
        .authenticate(Some(&format!("Bearer {}", t.token)), 0)
        .unwrap();
    assert_eq!(scoped.scope.volumes, vec!["build-*".to_owned()]);
    assert!(scoped.has(Capability::Snapshot) && !scoped.has(Capability::ReleaseAny));
    let reader = tokens
        .authenticate(Some(&format!("Bearer {}", plain.token)), 0)
        .unwrap();
    assert_eq!(reader.scope, TokenScope::preset(Role::Reader));
    // The listing shows each token's capabilities and patterns.
    let listed = env.read(|c| auth::list_tokens(c, 0)).await;
    let l = listed.iter().find(|l| l.id == t.id).unwrap();
    assert_eq!(l.capabilities, t.capabilities);
    assert_eq!(l.volumes, t.volumes);
}

#[tokio::test]
async fn a_token_creates_and_revokes_only_tokens_within_its_own_rights() {
    let env = Env::new();
    let maker = TokenScope {
        capabilities: [
            Capability::Read,
            Capability::Claim,
            Capability::ManageTokens,
        ]
        .into_iter()
        .collect(),
        volumes: Vec::new(),
        namespaces: Vec::new(),
    };
    // Within: a claimer, or one narrowed further.
    make(&env, new(Role::Claimer, &[], &[]), maker.clone())
        .await
        .unwrap();
    // Beyond: a capability it lacks, named.
    let e = make(
        &env,
        new(Role::Claimer, &[Capability::ReleaseAny], &[]),
        maker.clone(),
    )
    .await
    .unwrap_err();
    assert_eq!(crate::http::error::status(e.kind), 403);
    assert_eq!(
        e.message,
        "a token can create only tokens with a subset of its own rights; this one does not \
         hold capability `release-any`"
    );
    let e = make(&env, new(Role::Operator, &[], &[]), maker.clone())
        .await
        .unwrap_err();
    assert!(e.message.contains("capability `backup`"), "{}", e.message);
    // A node token needs `manage-nodes`.
    let mut node = new(Role::Node, &[], &[]);
    node.node = Some("n1".into());
    let e = make(&env, node, maker.clone()).await.unwrap_err();
    assert!(e.message.contains("a node token"), "{}", e.message);

    // A narrowed maker (as a lifecycle caller; a narrowed token cannot hold
    // `manage-tokens` itself) makes only tokens its patterns cover.
    let narrowed = TokenScope {
        volumes: vec!["build-*".into()],
        ..maker.clone()
    };
    make(
        &env,
        new(Role::Claimer, &[], &["build-a*"]),
        narrowed.clone(),
    )
    .await
    .unwrap();
    let e = make(&env, new(Role::Claimer, &[], &["db-*"]), narrowed.clone())
        .await
        .unwrap_err();
    assert!(e.message.ends_with("hold volumes `db-*`"), "{}", e.message);
    let e = make(&env, new(Role::Reader, &[], &[]), narrowed)
        .await
        .unwrap_err();
    assert!(e.message.contains("every volume"), "{}", e.message);

    // Revoking an operator token takes an operator's rights.
    let op = make(&env, new(Role::Operator, &[], &[]), operator())
        .await
        .unwrap();
    let id = op.id.clone();
    let e = env
        .write(move |ctx, _| revoke_token(ctx, &id, "x", &maker))
        .await
        .unwrap_err();
    assert_eq!(crate::http::error::status(e.kind), 403);
    assert!(e.message.contains("`backup`"), "{}", e.message);
}

#[tokio::test]
async fn a_narrowed_token_cannot_hold_cluster_wide_capabilities_nor_a_node_token_any() {
    let env = Env::new();
    for (role, added) in [
        (Role::Operator, vec![]),
        (Role::Claimer, vec![Capability::Fence]),
        (Role::Reader, vec![Capability::Backup]),
    ] {
        let e = make(&env, new(role, &added, &["build-*"]), operator())
            .await
            .unwrap_err();
        assert!(
            e.message
                .starts_with("a token narrowed to namespaces or volumes cannot hold "),
            "{}",
            e.message
        );
    }
    let mut node = new(Role::Node, &[Capability::Read], &[]);
    node.node = Some("n1".into());
    let e = make(&env, node, operator()).await.unwrap_err();
    assert!(e.message.contains("takes no capabilities"), "{}", e.message);
    let e = make(&env, new(Role::Claimer, &[], &["build/*"]), operator())
        .await
        .unwrap_err();
    assert!(
        e.message.starts_with("invalid volume pattern"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn below_the_schema_that_keeps_scopes_only_plain_roles_are_made() {
    let env = Env::new();
    env.write(|ctx, _| {
        ctx.tx
            // What the previous schema lacks of the claims and tokens (the rest does not
            // matter here).
            .execute_batch(
                "DROP INDEX claims_claimer;
                 ALTER TABLE claims DROP COLUMN claimer;
                 ALTER TABLE claims DROP COLUMN drift;
                 ALTER TABLE claims DROP COLUMN mount;
                 ALTER TABLE tokens DROP COLUMN scope;",
            )
            .map_err(ApiError::from)
    })
    .await
    .unwrap();
    for t in [
        new(Role::Claimer, &[], &["build-*"]),
        new(Role::Reader, &[Capability::Snapshot], &[]),
    ] {
        let e = make(&env, t, operator()).await.unwrap_err();
        assert_eq!(crate::http::error::status(e.kind), 409);
        assert!(e.message.contains("previous schema"), "{}", e.message);
        assert!(
            e.hint
                .as_deref()
                .is_some_and(|h| h.contains("upgrade finalize")),
            "{:?}",
            e.hint
        );
    }
    // A plain role, and a preset's own capability named again, are no scope.
    let plain = make(
        &env,
        new(Role::Claimer, &[Capability::Claim], &[]),
        operator(),
    )
    .await
    .unwrap();
    let tokens = env.read(|c| Tokens::load(c)).await;
    let c = tokens
        .authenticate(Some(&format!("Bearer {}", plain.token)), 0)
        .unwrap();
    assert_eq!(c.scope, TokenScope::preset(Role::Claimer));
}

/// A token narrowed to namespaces: of namespaces that exist (`*` is every one), read back
/// with them, made only by a token that covers them, and holding nothing cluster-wide.
#[tokio::test]
async fn a_token_narrowed_to_namespaces_is_made_within_its_makers() {
    let env = Env::new();
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    let spaced = |role, ns: &[&str]| NewToken {
        namespaces: ns.iter().map(|n| (*n).to_owned()).collect(),
        ..new(role, &[], &[])
    };
    let t = make(
        &env,
        spaced(Role::Claimer, &["team-a", "team-a"]),
        operator(),
    )
    .await
    .unwrap();
    assert_eq!(t.namespaces, ["team-a"]);
    let tokens = env.read(|c| Tokens::load(c)).await;
    let caller = tokens
        .authenticate(Some(&format!("Bearer {}", t.token)), 0)
        .unwrap();
    assert_eq!(caller.scope.namespaces, ["team-a"]);
    let listed = env.read(|c| auth::list_tokens(c, 0)).await;
    assert_eq!(
        listed.iter().find(|l| l.id == t.id).unwrap().namespaces,
        ["team-a"]
    );
    // `*` is every namespace: no narrowing at all.
    let every = make(&env, spaced(Role::Claimer, &["*"]), operator())
        .await
        .unwrap();
    assert!(every.namespaces.is_empty());
    // A namespace that does not exist, with the closest.
    let e = make(&env, spaced(Role::Claimer, &["team-b"]), operator())
        .await
        .unwrap_err();
    assert_eq!(e.message, "no namespace `team-b`");
    assert!(e.hint.unwrap_or_default().contains("did you mean `team-a`"));
    // Nothing cluster-wide.
    let e = make(
        &env,
        NewToken {
            capabilities: vec![Capability::Fence],
            ..spaced(Role::Claimer, &["team-a"])
        },
        operator(),
    )
    .await
    .unwrap_err();
    assert!(e.message.contains("cannot hold fence"), "{}", e.message);

    // A maker narrowed to `team-a` (as a lifecycle caller) makes tokens of `team-a` only.
    env.write(|ctx, _| super::super::create_namespace(ctx, "team-b", "op"))
        .await
        .unwrap();
    let maker = TokenScope {
        capabilities: [
            Capability::Read,
            Capability::Claim,
            Capability::ManageTokens,
        ]
        .into_iter()
        .collect(),
        volumes: Vec::new(),
        namespaces: vec!["team-a".into()],
    };
    make(&env, spaced(Role::Claimer, &["team-a"]), maker.clone())
        .await
        .unwrap();
    let e = make(&env, spaced(Role::Claimer, &["team-b"]), maker.clone())
        .await
        .unwrap_err();
    assert!(
        e.message.ends_with("hold namespace `team-b`"),
        "{}",
        e.message
    );
    let e = make(&env, spaced(Role::Claimer, &[]), maker)
        .await
        .unwrap_err();
    assert!(
        e.message
            .ends_with("hold every namespace (this token covers namespaces `team-a`)"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn below_the_schema_that_keeps_namespaces_no_token_is_narrowed_to_one() {
    let env = Env::new();
    env.write(|ctx, _| {
        ctx.tx
            .execute_batch("DROP TABLE namespaces;")
            .map_err(ApiError::from)
    })
    .await
    .unwrap();
    let t = NewToken {
        namespaces: vec!["team-a".into()],
        ..new(Role::Claimer, &[], &[])
    };
    let e = make(&env, t, operator()).await.unwrap_err();
    assert!(e.message.contains("previous schema"), "{}", e.message);
    assert!(e.hint.unwrap_or_default().contains("upgrade finalize"));
}
