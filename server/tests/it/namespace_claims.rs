//! A claim on a volume of another namespace than `default`, held (`?wait=`) as any claim
//! is: its answer comes when the claim moves on, found by the volume's key (its
//! namespace's and its name), not after the whole wait.

use csivol_tests::{FakeAgent, TestDir};
use serde_json::json;

use super::start;

#[tokio::test]
async fn a_held_claim_in_a_namespace_answers_when_it_moves_on() {
    let dir = TestDir::new("server-namespace-held");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    let (status, body) = api.put("/v1/namespaces/team-a", json!({})).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = api
        .put(
            "/v1/volumes/db?namespace=team-a",
            json!({"plugin": "hp", "external_id": "ext-db",
                   "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let held = {
        let api = api.clone();
        tokio::spawn(async move {
            let req = json!({"alloc": "a1", "node": "n1", "mode": "write"});
            api.send(
                "POST",
                "/v1/volumes/db/claims?namespace=team-a&wait=60s",
                Some(req),
            )
            .await
        })
    };
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    let raw = held.await.unwrap().expect("an answer");
    assert_eq!(raw.status.as_u16(), 201);
    let c: serde_json::Value = serde_json::from_slice(&raw.body).unwrap();
    // Moved on from `attaching`, where the request left it: the hold saw the change.
    assert_eq!(c["state"], "publishing", "{c}");
    assert_eq!(
        (c["namespace"].as_str(), c["volume"].as_str()),
        (Some("team-a"), Some("db"))
    );
}
