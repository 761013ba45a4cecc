//! Namespaces over two servers and a real 3-member etcd: a namespace, a token narrowed to
//! it and a quota made through one server hold through the other, and the quota's last
//! unit is taken once, whichever server each claim goes to.

use csivol_tests::etcd::start_ha;
use csivol_tests::{FakeAgent, TestDir, eventually};
use serde_json::json;

use super::WAIT;

#[tokio::test]
async fn a_namespace_its_token_and_its_quota_hold_through_either_server() {
    let dir = TestDir::new("ha-namespaces");
    let ha = start_ha(&dir, &[]);
    let (a, b) = (ha.a.api(), ha.b.api());
    let n1 = FakeAgent::new(&ha.a, "n1").await;
    n1.register(0, true, json!([])).await;
    let _beating = n1.keep_alive();
    for ns in ["team-a", "team-b"] {
        let (status, body) = a.put(&format!("/v1/namespaces/{ns}"), json!({})).await;
        assert_eq!(status, 201, "{body}");
        let (status, body) = a
            .put(
                &format!("/v1/volumes/db?namespace={ns}"),
                json!({"plugin": "hp", "external_id": format!("ext-{ns}"),
                       "access_mode": "multi-node-multi-writer", "attachment": "file-system"}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, q) = a
        .put("/v1/namespaces/team-a/quota", json!({"claims": 1}))
        .await;
    assert_eq!(status, 200, "{q}");
    let (status, t) = a
        .post(
            "/v1/tokens",
            json!({"role": "claimer", "namespaces": ["team-a"], "name": "ci-team-a"}),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    let ci_on_b = b.with_token(t["token"].as_str());
    eventually(
        "B to know the token and the quota made through A",
        WAIT,
        || async {
            let (status, ns) = b.get("/v1/namespaces/team-a").await;
            (status == 200
                && ns["quota"]["claims"] == 1
                && ci_on_b.get("/v1/volumes/db?namespace=team-a").await.0 == 200)
                .then_some(())
        },
    )
    .await;

    // Through B, the team's token touches its namespace and nothing of the other's.
    let (status, body) = ci_on_b.get("/v1/volumes/db?namespace=team-b").await;
    assert_eq!(status, 403, "{body}");
    let claim = |alloc: &str| json!({"alloc": alloc, "node": "n1", "mode": "write"});
    let (status, body) = ci_on_b
        .post("/v1/volumes/db/claims?namespace=team-b", claim("b1"))
        .await;
    assert_eq!(status, 403, "{body}");
    let (status, c) = ci_on_b
        .post("/v1/volumes/db/claims?namespace=team-a", claim("a1"))
        .await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["namespace"], "team-a", "{c}");

    // The quota's one claim is taken: a second, through A, is refused with its use.
    let ci_on_a = a.with_token(t["token"].as_str());
    let (status, body) = ci_on_a
        .post("/v1/volumes/db/claims?namespace=team-a", claim("a2"))
        .await;
    assert_eq!(status, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("namespace `team-a` is at its quota of 1 claim(s): 1 used"),
        "{body}"
    );
    // Another namespace is not bounded by it.
    let (status, body) = b
        .post("/v1/volumes/db/claims?namespace=team-b", claim("b1"))
        .await;
    assert_eq!(status, 201, "{body}");
    let (_, shown) = a.get("/v1/namespaces/team-a").await;
    assert_eq!(
        (shown["claims"].as_u64(), shown["volumes"].as_u64()),
        (Some(1), Some(1)),
        "{shown}"
    );
}
