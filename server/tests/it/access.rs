//! Roles and tokens, and bad input refused with a clear error.

use csivol_tests::{FakeAgent, TestDir};
use serde_json::json;

use super::{claim, register_volume, start};

#[tokio::test]
async fn roles_tokens_and_bad_input() {
    let dir = TestDir::new("server-input");
    let server = start(&dir, &[]);
    let api = server.api();
    let anon = api.with_token(None);
    assert_eq!(anon.get("/v1/health").await.0, 200, "health needs no token");
    let (status, body) = anon.get("/v1/volumes").await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (401, json!("unauthorized"))
    );
    assert_eq!(
        api.with_token(Some("csivol_wrong"))
            .get("/v1/volumes")
            .await
            .0,
        401
    );
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    // A node token acts for its own node only, and cannot read the cluster.
    let (status, body) = n1.api.post("/v1/nodes/n2/heartbeat", json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(n1.api.get("/v1/volumes").await.0, 403);
    assert_eq!(
        n1.api
            .post(
                "/v1/volumes/v/claims",
                json!({"alloc": "a", "node": "n1", "mode": "write"})
            )
            .await
            .0,
        403
    );
    let (_, t) = api.post("/v1/tokens", json!({"role": "reader"})).await;
    let reader = api.with_token(t["token"].as_str());
    assert_eq!(reader.get("/v1/volumes").await.0, 200);
    assert_eq!(reader.get("/v1/metrics").await.0, 200);
    assert_eq!(
        reader
            .post(
                "/v1/volumes/v/claims",
                json!({"alloc": "a", "node": "n1", "mode": "write"})
            )
            .await
            .0,
        403
    );
    assert_eq!(
        reader
            .post("/v1/tokens", json!({"role": "operator"}))
            .await
            .0,
        403
    );
    assert_eq!(
        api.post("/v1/tokens", json!({"role": "node"})).await.0,
        422,
        "a node token needs a node"
    );

    register_volume(&api, "v", "single-node-writer").await;
    let (status, body) = api
        .raw("POST", "/v1/volumes/v/claims", b"{not json".to_vec())
        .await;
    assert_eq!(
        (status, body["error"]["code"].clone()),
        (400, json!("invalid")),
        "{body}"
    );
    let (status, body) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a", "node": "n1", "mode": "write", "extra": 1}),
        )
        .await;
    assert_eq!(status, 422);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown field `extra`"),
        "{body}"
    );
    let (status, body) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a", "node": "n1", "mode": "rw"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    let huge = vec![b' '; 2 << 20];
    assert_eq!(api.raw("PUT", "/v1/volumes/v", huge).await.0, 413);
    for bad in ["%2E%2E%2Fx", "-x", &"x".repeat(200)] {
        let (status, body) = api.get(&format!("/v1/volumes/{bad}")).await;
        assert_eq!(status, 422, "{bad}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid volume name"),
            "{body}"
        );
    }
    let (status, body) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "../../etc", "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(api.get("/v1/volumes/nope").await.0, 404);
    assert_eq!(api.get("/v1/nodes/nope").await.0, 404);
    assert_eq!(claim(&api, "v", "a", "nope", "write").await.0, 404);
    assert_eq!(claim(&api, "nope", "a", "n1", "write").await.0, 404);
    assert_eq!(api.get("/v1/nope").await.0, 404);
    let (status, body) = api.get("/v1/volumes?state=bogus").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = api.put("/v1/volumes/ro", json!({"plugin": "hp", "external_id": "e", "access_mode": "multi-node-reader-only", "attachment": "file-system"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = claim(&api, "ro", "a", "n1", "write").await;
    assert_eq!(
        status, 422,
        "a write claim on a read-only volume can never succeed: {body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("--read-only")
    );
    // Re-registering a claimed volume with another spec is a conflict; the same spec is not.
    claim(&api, "v", "a", "n1", "write").await;
    let (status, _) = api.put("/v1/volumes/v", json!({"plugin": "hp", "external_id": "ext-v", "access_mode": "single-node-writer", "attachment": "file-system", "secrets": {"key": "s3cret"}})).await;
    assert_eq!(status, 200);
    let (status, body) = api.put("/v1/volumes/v", json!({"plugin": "hp", "external_id": "other", "access_mode": "single-node-writer", "attachment": "file-system"})).await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = api.delete("/v1/volumes/v").await;
    assert_eq!(status, 409, "deregister refused while claimed: {body}");
    let (_, metrics) = api.get("/v1/metrics").await;
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("csivol_claims{state=\"attaching\"} 1"),
        "{metrics}"
    );
}
