//! Controller operations: retries and failures of ControllerPublish, and volumes created and deleted through the controller.

use csivol_tests::{FakeAgent, TestDir, eventually};
use serde_json::json;

use super::{WAIT, claim, register_volume, start};

#[tokio::test]
async fn controller_errors_retry_or_fail_the_claim() {
    let dir = TestDir::new("server-op-errors");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "single-node-writer").await;
    claim(&api, "v", "a", "n1", "write").await;
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "op_error", "op": op["id"], "attempt": op["attempt"], "error": {"code": "UNAVAILABLE", "message": "backend busy", "final": false}}])).await;
    let (_, c) = api.get("/v1/volumes/v/claims/a").await;
    assert_eq!(c["state"], "attaching");
    assert!(
        c["error"]
            .as_str()
            .unwrap()
            .contains("UNAVAILABLE: backend busy"),
        "{c}"
    );
    assert!(c["next_retry_at"].is_string(), "{c}");
    // A stale report (old attempt) is ignored; the retry comes back with the next attempt.
    let retry = eventually("the retried operation", WAIT, || async {
        let d = n1.desired().await;
        d["controller_ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["attempt"] == 1)
            .cloned()
    })
    .await;
    assert_eq!(retry["id"], op["id"]);
    n1.report(json!([{"kind": "op_error", "op": retry["id"], "attempt": retry["attempt"], "error": {"code": "INVALID_ARGUMENT", "message": "bad volume", "final": true}}])).await;
    let (_, c) = api.get("/v1/volumes/v/claims/a").await;
    assert_eq!(c["state"], "failed");
    assert!(c["error"].as_str().unwrap().contains("bad volume"));
    let d = n1.desired().await;
    assert_eq!(
        d["unpublish"][0]["alloc"], "a",
        "the node cleans up a failed claim"
    );
}

#[tokio::test]
async fn volume_create_and_delete_go_through_the_controller() {
    let dir = TestDir::new("server-create");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    let spec = json!({"plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system", "capacity_bytes": 1048576});
    let (status, v) = api.post("/v1/volumes/new/create", spec.clone()).await;
    assert_eq!((status, v["state"].clone()), (202, json!("creating")));
    assert_eq!(
        api.post("/v1/volumes/new/create", spec).await.0,
        200,
        "idempotent"
    );
    let op = n1.wait_op("create").await;
    assert_eq!(op["capacity_bytes"], 1048576);
    n1.report(json!([{"kind": "created", "op": op["id"], "attempt": op["attempt"], "external_id": "hp-1", "capacity_bytes": 1048576, "context": {"k": "v"}}])).await;
    let (_, v) = api.get("/v1/volumes/new").await;
    assert_eq!(
        (v["state"].clone(), v["external_id"].clone()),
        (json!("free"), json!("hp-1"))
    );
    let (status, v) = api.delete("/v1/volumes/new?delete=true").await;
    assert_eq!((status, v["state"].clone()), (202, json!("deleting")));
    let op = n1.wait_op("delete").await;
    n1.report(json!([{"kind": "deleted", "op": op["id"], "attempt": op["attempt"]}]))
        .await;
    assert_eq!(api.get("/v1/volumes/new").await.0, 404);
}
