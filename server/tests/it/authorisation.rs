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
    ("get", "/v1/metrics", "read"),
    ("post", "/v1/tokens", "operate"),
    ("get", "/v1/tokens", "operate"),
    ("delete", "/v1/tokens/{id}", "operate"),
    ("get", "/v1/volumes", "read"),
    ("get", "/v1/volumes/{name}", "read"),
    ("put", "/v1/volumes/{name}", "operate"),
    ("delete", "/v1/volumes/{name}", "operate"),
    ("post", "/v1/volumes/{name}/create", "operate"),
    ("post", "/v1/volumes/{name}/expand", "operate"),
    ("post", "/v1/volumes/{name}/modify", "operate"),
    ("post", "/v1/volumes/{name}/adopt", "operate"),
    ("post", "/v1/snapshots/{name}/adopt", "operate"),
    ("post", "/v1/volumes/{name}/claims", "claim"),
    ("get", "/v1/volumes/{name}/claims/{alloc}", "read"),
    ("delete", "/v1/volumes/{name}/claims/{alloc}", "claim"),
    ("post", "/v1/volumes/{name}/claims/{alloc}/renew", "claim"),
    ("get", "/v1/claims", "read"),
    ("post", "/v1/volumes/{name}/unblock", "operate"),
    ("post", "/v1/volumes/{name}/detach", "operate"),
    ("post", "/v1/volumes/{name}/eligibility", "operate"),
    ("post", "/v1/volumes/{name}/labels", "operate"),
    ("get", "/v1/pools", "read"),
    ("get", "/v1/pools/{name}", "read"),
    ("put", "/v1/pools/{name}", "operate"),
    ("delete", "/v1/pools/{name}", "operate"),
    ("post", "/v1/pools/{name}/claims", "claim"),
    ("get", "/v1/nodes", "read"),
    ("get", "/v1/nodes/{node}", "read"),
    ("delete", "/v1/nodes/{node}", "operate"),
    ("post", "/v1/nodes/{node}/eligibility", "operate"),
    ("post", "/v1/nodes/{node}/labels", "operate"),
    ("post", "/v1/nodes/{node}/unblock", "operate"),
    ("post", "/v1/nodes/{node}/fence", "operate"),
    ("post", "/v1/nodes/{node}/register", "own-node"),
    ("post", "/v1/nodes/{node}/heartbeat", "own-node"),
    ("get", "/v1/nodes/{node}/desired", "own-node"),
    ("get", "/v1/nodes/{node}/channel", "own-node"),
    ("post", "/v1/nodes/{node}/reports", "own-node"),
    ("post", "/v1/nodes/{node}/stopping", "own-node"),
    ("get", "/v1/plugins", "read"),
    ("get", "/v1/plugins/{id}", "read"),
    ("get", "/v1/plugins/{id}/volumes", "read"),
    ("get", "/v1/plugins/{id}/snapshots", "read"),
    ("get", "/v1/plugins/{id}/controllers", "read"),
    ("post", "/v1/plugins/{id}/controllers", "operate"),
    ("get", "/v1/snapshots", "read"),
    ("get", "/v1/snapshots/{name}", "read"),
    ("put", "/v1/snapshots/{name}", "operate"),
    ("delete", "/v1/snapshots/{name}", "operate"),
    ("get", "/v1/group-snapshots", "read"),
    ("get", "/v1/group-snapshots/{name}", "read"),
    ("put", "/v1/group-snapshots/{name}", "operate"),
    ("delete", "/v1/group-snapshots/{name}", "operate"),
    ("get", "/v1/events", "read"),
    ("get", "/v1/controller-findings", "read"),
    ("get", "/v1/backup", "operate"),
];

/// A caller of the matrix: the token it shows and, for a node token, whether the path
/// names its own node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    Anonymous,
    Reader,
    Claimer,
    Operator,
    OwnNode,
    OtherNode,
}

/// Whether `who` may call a route of `rule`: the presets, written from the roles' meaning.
fn allowed(rule: &str, who: Who) -> bool {
    use Who::*;
    match rule {
        "anyone" => true,
        "read" => matches!(who, Reader | Claimer | Operator),
        "claim" => matches!(who, Claimer | Operator),
        "operate" => who == Operator,
        "own-node" => matches!(who, Operator | OwnNode),
        other => panic!("no rule `{other}` in this test"),
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

#[tokio::test]
async fn every_route_refuses_exactly_the_callers_its_rule_refuses() {
    let server_rules: BTreeSet<(&str, &str, &str)> = ROUTES
        .iter()
        .map(|r| (r.method, r.path, r.need.as_str()))
        .collect();
    let written: BTreeSet<(&str, &str, &str)> = EXPECTED.iter().copied().collect();
    assert_eq!(
        server_rules.difference(&written).collect::<Vec<_>>(),
        Vec::<&(&str, &str, &str)>::new(),
        "routes of the server without this rule here: add them to EXPECTED"
    );
    assert_eq!(
        written.difference(&server_rules).collect::<Vec<_>>(),
        Vec::<&(&str, &str, &str)>::new(),
        "rules written here that the server does not have"
    );
    assert!(ROUTES.iter().any(|r| r.need == Need::OwnNode));

    let dir = TestDir::new("server-authorisation");
    let server = start(&dir, &[]);
    let api = server.api();
    let mut tokens = Vec::new();
    for body in [
        json!({"role": "reader"}),
        json!({"role": "claimer"}),
        json!({"role": "node", "node": "n1"}),
    ] {
        let (status, t) = api.post("/v1/tokens", body).await;
        assert_eq!(status, 201, "{t}");
        tokens.push(t["token"].as_str().unwrap().to_owned());
    }
    let addr = server.url.trim_start_matches("http://").to_owned();
    let callers = [
        (Who::Anonymous, None),
        (Who::Reader, Some(tokens[0].as_str())),
        (Who::Claimer, Some(tokens[1].as_str())),
        (Who::Operator, Some(server.token.as_str())),
        (Who::OwnNode, Some(tokens[2].as_str())),
        (Who::OtherNode, Some(tokens[2].as_str())),
    ];
    let mut wrong = Vec::new();
    let mut checked = 0;
    for &(method, template, rule) in EXPECTED {
        for (who, token) in callers {
            let node = if who == Who::OtherNode { "n2" } else { "n1" };
            if who == Who::OtherNode && !template.contains("{node}") {
                continue;
            }
            let path = template
                .replace("{name}", "authz-v")
                .replace("{alloc}", "authz-a")
                .replace("{id}", "authz-x")
                .replace("{node}", node);
            let status = status_of(&addr, method, &path, token).await;
            checked += 1;
            let refused = status == 401 || status == 403;
            let want = if allowed(rule, who) {
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
    assert!(checked > EXPECTED.len() * 5, "{checked} requests");
    // A method a route does not take is answered 405, whoever asks, and runs nothing.
    for (who, token) in [
        (Who::Operator, Some(server.token.as_str())),
        (Who::Reader, Some(tokens[0].as_str())),
    ] {
        let status = status_of(&addr, "patch", "/v1/volumes", token).await;
        if status != 405 {
            wrong.push(format!("PATCH /v1/volumes as {who:?}: {status}, want 405"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
