//! Every route of the API × every kind of token, against a real server: each answer is a
//! refusal exactly where the route's rule says it is. The rules are written here again,
//! by hand, and must be the server's table: a route added to the server without a row
//! here, or with another rule than the one written here, fails this test.

use std::collections::BTreeSet;

use csivol_server::http::routes::{Need, TABLE as ROUTES};
use csivol_tests::TestDir;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{WAIT, start};

/// Who may call each route: (method, path template, rule).
const EXPECTED: &[(&str, &str, &str)] = &[
    ("get", "/v1/health", "anyone"),
    ("get", "/v1/metrics", "read@cluster"),
    ("post", "/v1/tokens", "manage-tokens@cluster"),
    ("get", "/v1/tokens", "manage-tokens@cluster"),
    ("delete", "/v1/tokens/{id}", "manage-tokens@cluster"),
    ("get", "/v1/namespaces", "read@listed"),
    ("get", "/v1/namespaces/{name}", "read@namespace"),
    ("put", "/v1/namespaces/{name}", "create-delete@cluster"),
    (
        "put",
        "/v1/namespaces/{name}/quota",
        "create-delete@cluster",
    ),
    ("delete", "/v1/namespaces/{name}", "create-delete@cluster"),
    ("get", "/v1/volumes", "read@listed"),
    ("get", "/v1/volumes/{name}", "read@named"),
    ("put", "/v1/volumes/{name}", "create-delete@named"),
    ("delete", "/v1/volumes/{name}", "create-delete@named"),
    ("post", "/v1/volumes/{name}/create", "create-delete@named"),
    ("post", "/v1/volumes/{name}/expand", "expand-modify@named"),
    ("post", "/v1/volumes/{name}/modify", "expand-modify@named"),
    ("post", "/v1/volumes/{name}/adopt", "create-delete@named"),
    ("post", "/v1/snapshots/{name}/adopt", "snapshot@named"),
    ("post", "/v1/volumes/{name}/claims", "claim@named"),
    ("get", "/v1/volumes/{name}/claims/{alloc}", "read@named"),
    ("delete", "/v1/volumes/{name}/claims/{alloc}", "claim@named"),
    (
        "post",
        "/v1/volumes/{name}/claims/{alloc}/renew",
        "claim@named",
    ),
    ("get", "/v1/claims", "read@listed"),
    ("post", "/v1/fresh-claims", "claim@chosen"),
    ("post", "/v1/volumes/{name}/unblock", "unblock-detach@named"),
    ("post", "/v1/volumes/{name}/detach", "unblock-detach@named"),
    (
        "post",
        "/v1/volumes/{name}/eligibility",
        "expand-modify@named",
    ),
    ("post", "/v1/volumes/{name}/labels", "expand-modify@chosen"),
    ("get", "/v1/pools", "read@chosen"),
    ("get", "/v1/pools/{name}", "read@chosen"),
    ("put", "/v1/pools/{name}", "create-delete@chosen"),
    ("delete", "/v1/pools/{name}", "create-delete@chosen"),
    ("post", "/v1/pools/{name}/claims", "claim@chosen"),
    ("get", "/v1/pools/{name}/claims/{alloc}", "read@chosen"),
    ("delete", "/v1/pools/{name}/claims/{alloc}", "claim@chosen"),
    (
        "post",
        "/v1/pools/{name}/claims/{alloc}/renew",
        "claim@chosen",
    ),
    ("get", "/v1/nodes", "read@cluster"),
    ("get", "/v1/nodes/{node}", "read@cluster"),
    ("delete", "/v1/nodes/{node}", "manage-nodes@cluster"),
    (
        "post",
        "/v1/nodes/{node}/eligibility",
        "manage-nodes@cluster",
    ),
    ("post", "/v1/nodes/{node}/labels", "manage-nodes@cluster"),
    ("post", "/v1/nodes/{node}/unblock", "fence@cluster"),
    ("post", "/v1/nodes/{node}/fence", "fence@cluster"),
    ("post", "/v1/nodes/{node}/register", "own-node"),
    ("post", "/v1/nodes/{node}/heartbeat", "own-node"),
    ("get", "/v1/nodes/{node}/desired", "own-node"),
    ("get", "/v1/nodes/{node}/channel", "own-node"),
    ("post", "/v1/nodes/{node}/reports", "own-node"),
    ("post", "/v1/nodes/{node}/stopping", "own-node"),
    ("get", "/v1/plugins", "read@unnamed"),
    ("get", "/v1/plugins/{id}", "read@unnamed"),
    ("get", "/v1/plugins/{id}/volumes", "read@cluster"),
    ("get", "/v1/plugins/{id}/snapshots", "read@cluster"),
    ("get", "/v1/plugins/{id}/controllers", "read@unnamed"),
    (
        "post",
        "/v1/plugins/{id}/controllers",
        "manage-nodes@cluster",
    ),
    ("get", "/v1/snapshots", "read@listed"),
    ("get", "/v1/snapshots/{name}", "read@named"),
    ("put", "/v1/snapshots/{name}", "snapshot@named"),
    ("delete", "/v1/snapshots/{name}", "snapshot@named"),
    ("get", "/v1/group-snapshots", "read@cluster"),
    ("get", "/v1/group-snapshots/{name}", "read@cluster"),
    ("put", "/v1/group-snapshots/{name}", "snapshot@cluster"),
    ("delete", "/v1/group-snapshots/{name}", "snapshot@cluster"),
    ("get", "/v1/events", "read@filtered"),
    ("get", "/v1/controller-findings", "read@cluster"),
    ("get", "/v1/backup", "backup@cluster"),
];

/// A caller of the matrix: the token it shows and, for a node token, whether the path
/// names its own node; for a token narrowed to `build-*`, whether the path names a volume
/// (or snapshot) it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Anonymous,
    Reader,
    Claimer,
    Operator,
    OwnNode,
    OtherNode,
    /// `--role reader --capability snapshot --capability expand-modify`.
    Custom,
    /// `--role claimer --volumes 'build-*'`, on a path naming `build-x`.
    NarrowedOwn,
    /// The same token, on a path naming `db-x`.
    NarrowedOther,
    /// `--role claimer --namespace team-a`, on a path naming namespace `team-a` (the query's
    /// `namespace`, or the namespace a namespace's path names).
    SpacedOwn,
    /// The same token, on a path naming namespace `team-b`.
    SpacedOther,
}

/// The capabilities of each preset, written from the roles' meaning.
fn capabilities(who: Who) -> &'static [&'static str] {
    use Who::*;
    const ALL: &[&str] = &[
        "read",
        "claim",
        "release-any",
        "create-delete",
        "snapshot",
        "expand-modify",
        "unblock-detach",
        "fence",
        "manage-nodes",
        "manage-tokens",
        "backup",
    ];
    match who {
        Anonymous | OwnNode | OtherNode => &[],
        Reader => &["read"],
        Claimer | NarrowedOwn | NarrowedOther | SpacedOwn | SpacedOther => &["read", "claim"],
        Custom => &["read", "snapshot", "expand-modify"],
        Operator => ALL,
    }
}

/// Whether a path reads the namespace a request names: what lives in namespaces, and what
/// lives in `default` only so far (the rest is the cluster's).
fn reads_namespace(path: &str) -> bool {
    [
        "/v1/volumes",
        "/v1/claims",
        "/v1/events",
        "/v1/snapshots",
        "/v1/group-snapshots",
        "/v1/pools",
        "/v1/fresh-claims",
    ]
    .iter()
    .any(|p| path.starts_with(p))
}

/// Whether `who` may call a route of `rule` at `path` (the template).
fn allowed(rule: &str, who: Who, path: &str) -> bool {
    use Who::*;
    match rule {
        "anyone" => return true,
        "own-node" => return matches!(who, Operator | OwnNode),
        _ => {}
    }
    let (capability, kind) = rule
        .split_once('@')
        .unwrap_or_else(|| panic!("no rule `{rule}` in this test"));
    if !capabilities(who).contains(&capability) {
        return false;
    }
    let narrowed = matches!(who, NarrowedOwn | NarrowedOther);
    if matches!(who, SpacedOwn | SpacedOther) {
        // A token narrowed to `team-a`: what names `team-b` is refused.
        let own = who == SpacedOwn;
        return match kind {
            "unnamed" => true,
            "listed" => own || !reads_namespace(path),
            "filtered" | "namespace" => own,
            "named" | "chosen" => own,
            "cluster" => false,
            other => panic!("no kind `{other}` in this test"),
        };
    }
    match kind {
        "listed" | "unnamed" => true,
        // Asked of one volume (`?volume=`, as the matrix does): a narrowed token must match it.
        "filtered" => who != NarrowedOther,
        "named" => who != NarrowedOther,
        // Makes or chooses a volume the server names: no pattern was given for it.
        "cluster" | "chosen" => !narrowed,
        "namespace" => true,
        other => panic!("no kind `{other}` in this test"),
    }
}

/// Sends one request and reads only the status of its answer (some answers stream, or
/// carry a whole backup).
async fn status_of(addr: &str, method: &str, path: &str, token: Option<&str>) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let body = if matches!(method, "post" | "put") {
        "{}"
    } else {
        ""
    };
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "{} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        method.to_uppercase(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read = async {
        while !head.ends_with(b"\r\n") {
            if stream.read(&mut byte).await.expect("read") == 0 {
                break;
            }
            head.push(byte[0]);
        }
    };
    tokio::time::timeout(WAIT, read)
        .await
        .unwrap_or_else(|_| panic!("no answer to {method} {path} within {WAIT:?}"));
    let line = String::from_utf8_lossy(&head);
    line.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in `{line}` for {method} {path}"))
}

async fn token(api: &csivol_tests::Api, body: serde_json::Value) -> String {
    let (status, t) = api.post("/v1/tokens", body).await;
    assert_eq!(status, 201, "{t}");
    t["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn every_route_refuses_exactly_the_callers_its_rule_refuses() {
    let server_rules: BTreeSet<(&str, &str, String)> = ROUTES
        .iter()
        .map(|r| (r.method, r.path, r.need.text()))
        .collect();
    let written: BTreeSet<(&str, &str, String)> = EXPECTED
        .iter()
        .map(|(m, p, r)| (*m, *p, (*r).to_owned()))
        .collect();
    assert_eq!(
        server_rules.difference(&written).collect::<Vec<_>>(),
        Vec::<&(&str, &str, String)>::new(),
        "routes of the server without this rule here: add them to EXPECTED"
    );
    assert_eq!(
        written.difference(&server_rules).collect::<Vec<_>>(),
        Vec::<&(&str, &str, String)>::new(),
        "rules written here that the server does not have"
    );
    assert!(ROUTES.iter().any(|r| r.need == Need::OwnNode));

    let dir = TestDir::new("server-authorisation");
    let server = start(&dir, &[]);
    let api = server.api();
    let reader = token(&api, json!({"role": "reader"})).await;
    let claimer = token(&api, json!({"role": "claimer"})).await;
    let node = token(&api, json!({"role": "node", "node": "n1"})).await;
    let custom = token(
        &api,
        json!({"role": "reader", "capabilities": ["snapshot", "expand-modify"]}),
    )
    .await;
    let narrowed = token(&api, json!({"role": "claimer", "volumes": ["build-*"]})).await;
    for ns in ["team-a", "team-b"] {
        let (status, body) = api.put(&format!("/v1/namespaces/{ns}"), json!({})).await;
        assert_eq!(status, 201, "{body}");
    }
    let spaced = token(&api, json!({"role": "claimer", "namespaces": ["team-a"]})).await;
    let addr = server.url.trim_start_matches("http://").to_owned();
    let callers = [
        (Who::Anonymous, None),
        (Who::Reader, Some(reader.as_str())),
        (Who::Claimer, Some(claimer.as_str())),
        (Who::Operator, Some(server.token.as_str())),
        (Who::OwnNode, Some(node.as_str())),
        (Who::OtherNode, Some(node.as_str())),
        (Who::Custom, Some(custom.as_str())),
        (Who::NarrowedOwn, Some(narrowed.as_str())),
        (Who::NarrowedOther, Some(narrowed.as_str())),
        (Who::SpacedOwn, Some(spaced.as_str())),
        (Who::SpacedOther, Some(spaced.as_str())),
    ];
    let mut wrong = Vec::new();
    let mut checked = 0;
    for &(method, template, rule) in EXPECTED {
        for (who, token) in callers {
            let node = if who == Who::OtherNode { "n2" } else { "n1" };
            if who == Who::OtherNode && !template.contains("{node}") {
                continue;
            }
            let name = if who == Who::NarrowedOther {
                "db-x"
            } else {
                "build-x"
            };
            let namespace = match who {
                Who::SpacedOwn => Some("team-a"),
                Who::SpacedOther => Some("team-b"),
                _ => None,
            };
            let name = match namespace {
                Some(ns) if template.starts_with("/v1/namespaces/") => ns,
                _ => name,
            };
            let mut path = template
                .replace("{name}", name)
                .replace("{alloc}", "authz-a")
                .replace("{id}", "authz-x")
                .replace("{node}", node);
            let mut query = Vec::new();
            if rule.ends_with("@filtered") {
                query.push(format!("volume={name}"));
            }
            if let Some(ns) = namespace.filter(|_| !template.starts_with("/v1/namespaces")) {
                query.push(format!("namespace={ns}"));
            }
            if !query.is_empty() {
                path.push_str(&format!("?{}", query.join("&")));
            }
            let status = status_of(&addr, method, &path, token).await;
            checked += 1;
            let refused = status == 401 || status == 403;
            let want = if allowed(rule, who, template) {
                "not refused".to_owned()
            } else if token.is_none() {
                "401".to_owned()
            } else {
                "403".to_owned()
            };
            let ok = match want.as_str() {
                "401" => status == 401,
                "403" => status == 403,
                _ => !refused,
            };
            if !ok {
                wrong.push(format!(
                    "{} {path} as {who:?}: {status}, want {want}",
                    method.to_uppercase()
                ));
            }
        }
    }
    assert!(checked > EXPECTED.len() * 8, "{checked} requests");
    // The whole log, not asked of one volume, is refused to a narrowed token.
    let status = status_of(&addr, "get", "/v1/events", Some(narrowed.as_str())).await;
    if status != 403 {
        wrong.push(format!("GET /v1/events as Narrowed: {status}, want 403"));
    }
    // A token narrowed to namespaces alone reads the whole log of its namespaces, and of
    // no other.
    for (path, want) in [
        ("/v1/events?namespace=team-a", 200),
        ("/v1/events?namespace=*", 200),
        ("/v1/events", 403),
        ("/v1/events?namespace=team-b", 403),
    ] {
        let status = status_of(&addr, "get", path, Some(spaced.as_str())).await;
        if status != want {
            wrong.push(format!("GET {path} as Spaced: {status}, want {want}"));
        }
    }
    // A method a route does not take is answered 405, whoever asks, and runs nothing.
    for (who, token) in [
        (Who::Operator, Some(server.token.as_str())),
        (Who::Reader, Some(reader.as_str())),
    ] {
        let status = status_of(&addr, "patch", "/v1/volumes", token).await;
        if status != 405 {
            wrong.push(format!("PATCH /v1/volumes as {who:?}: {status}, want 405"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Renewing, releasing and reading a claim, by every preset (and a narrowed claimer, and a
/// claimer given `release-any`), of a claim it made itself and of one another token made:
/// a token without `release-any` renews and releases only its own.
#[tokio::test]
async fn claims_are_renewed_and_released_by_their_own_token_or_with_release_any() {
    let dir = TestDir::new("server-authorisation-claims");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = csivol_tests::FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    super::register_volume(&api, "build-v", "multi-node-multi-writer").await;
    let with = |t: &str| api.with_token(Some(t));
    let other = with(&token(&api, json!({"role": "claimer", "name": "other"})).await);
    let reader = token(&api, json!({"role": "reader"})).await;
    let claimer = token(&api, json!({"role": "claimer"})).await;
    let narrowed = token(&api, json!({"role": "claimer", "volumes": ["build-*"]})).await;
    let any = token(
        &api,
        json!({"role": "claimer", "capabilities": ["release-any"]}),
    )
    .await;
    let node = token(&api, json!({"role": "node", "node": "n1"})).await;
    // (who, token, may claim, may change another token's claim, may read)
    let callers = [
        ("reader", reader.clone(), false, false, true),
        ("claimer", claimer.clone(), true, false, true),
        ("narrowed", narrowed.clone(), true, false, true),
        ("release-any", any.clone(), true, true, true),
        ("operator", server.token.clone(), true, true, true),
        ("node", node.clone(), false, false, false),
    ];
    let claim = |api: csivol_tests::Api, alloc: String| async move {
        api.post(
            "/v1/volumes/build-v/claims",
            json!({"alloc": alloc, "node": "n1", "mode": "write", "ttl_ms": 600_000}),
        )
        .await
    };
    let mut wrong = Vec::new();
    let mut check = |what: String, status: u16, allowed: bool| {
        let ok = if allowed {
            status != 401 && status != 403
        } else {
            status == 403
        };
        if !ok {
            wrong.push(format!(
                "{what}: {status}, want {}",
                if allowed { "not refused" } else { "403" }
            ));
        }
    };
    for (who, t, may_claim, any_claim, may_read) in &callers {
        let caller = with(t);
        let theirs = format!("theirs-{who}");
        let (s, body) = claim(other.clone(), theirs.clone()).await;
        assert_eq!(s, 201, "{body}");
        let mine = format!("mine-{who}");
        let (s, _) = claim(caller.clone(), mine.clone()).await;
        check(format!("{who} claims"), s, *may_claim);
        let claims = if *may_claim {
            vec![(mine, true), (theirs, *any_claim)]
        } else {
            vec![(theirs, false)]
        };
        for (alloc, may_change) in claims {
            let path = format!("/v1/volumes/build-v/claims/{alloc}");
            let (s, _) = caller.get(&path).await;
            check(format!("{who} reads {alloc}"), s, *may_read);
            let (s, body) = caller
                .post(&format!("{path}/renew"), json!({"ttl_ms": 600_000}))
                .await;
            check(format!("{who} renews {alloc}"), s, may_change);
            if may_change {
                assert_eq!(s, 200, "{who} renews {alloc}: {body}");
            }
            let (s, body) = caller.delete(&path).await;
            check(format!("{who} releases {alloc}"), s, may_change);
            if may_change {
                assert_eq!(s, 202, "{who} releases {alloc}: {body}");
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A token narrowed to `build-*` that may snapshot and create volumes reaches no other
/// volume's data through a request body: a snapshot of `db-1` under a `build-` name, a
/// `build-` volume cloned from `db-1`, or a snapshot adopted before its volume is known.
#[tokio::test]
async fn a_narrowed_token_reaches_no_other_volume_through_a_body() {
    let dir = TestDir::new("server-authorisation-bodies");
    let server = start(&dir, &[]);
    let api = server.api();
    super::register_volume(&api, "db-1", "single-node-writer").await;
    let narrowed = api.with_token(Some(
        &token(
            &api,
            json!({"role": "claimer", "capabilities": ["snapshot", "create-delete"], "volumes": ["build-*"]}),
        )
        .await,
    ));
    let refused = |(status, body): (u16, serde_json::Value), what: &str| {
        assert_eq!(status, 403, "{body}");
        assert_eq!(body["error"]["message"], what, "{body}");
    };
    refused(
        narrowed
            .put("/v1/snapshots/build-s", json!({"volume": "db-1"}))
            .await,
        "this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them",
    );
    refused(
        narrowed
            .post(
                "/v1/volumes/build-n/create",
                json!({"plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system", "source": {"volume": "db-1"}}),
            )
            .await,
        "this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them",
    );
    refused(
        narrowed
            .post(
                "/v1/snapshots/build-s/adopt",
                json!({"plugin": "hp", "snapshot_id": "snap-1"}),
            )
            .await,
        "this token is narrowed to volumes `build-*`, and a snapshot adopted is of a volume known only once its plugin lists it",
    );
    // Nothing was recorded of either.
    assert_eq!(api.get("/v1/snapshots/build-s").await.0, 404);
    assert_eq!(api.get("/v1/volumes/build-n").await.0, 404);
}
