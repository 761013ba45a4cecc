//! A token's scope over two servers and a real 3-member etcd: a token narrowed to volume
//! patterns through one server is narrowed through the other, which read it from etcd.

use csivol_tests::etcd::start_ha;
use csivol_tests::{TestDir, eventually};
use serde_json::json;

use super::{WAIT, register_volume};

#[tokio::test]
async fn a_token_narrowed_through_one_server_is_narrowed_through_the_other() {
    let dir = TestDir::new("ha-scopes");
    let ha = start_ha(&dir, &[]);
    let (a, b) = (ha.a.api(), ha.b.api());
    for v in ["build-1", "db-1"] {
        register_volume(&a, v, "multi-node-multi-writer").await;
    }
    let (status, t) = a
        .post(
            "/v1/tokens",
            json!({"role": "claimer", "volumes": ["build-*"], "name": "ci"}),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    let ci_on_b = b.with_token(t["token"].as_str());
    eventually(
        "B to know the token and the volumes made through A",
        WAIT,
        || async { (ci_on_b.get("/v1/volumes/build-1").await.0 == 200).then_some(()) },
    )
    .await;
    let (status, body) = ci_on_b.get("/v1/volumes/db-1").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        "this token is narrowed to volumes `build-*`, and volume `db-1` is not one of them"
    );
    let (status, listed) = ci_on_b.get("/v1/volumes").await;
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["build-1"], "{listed}");
    // And B shows the token as it was made.
    let (_, tokens) = b.get("/v1/tokens").await;
    let ci = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .unwrap();
    assert_eq!(ci["volumes"], json!(["build-*"]), "{tokens}");
    assert_eq!(ci["capabilities"], json!(["read", "claim"]), "{tokens}");
}
