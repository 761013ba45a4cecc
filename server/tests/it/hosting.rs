//! Controller hosting is authorised: a node token for a made-up node cannot make itself a
//! plugin's controller host with a registration copied from a real one, and reports about
//! a controller operation count only from its assigned host, for its current attempt.

use csivol_tests::{FakeAgent, TestDir, eventually};
use serde_json::{Value, json};

use super::{WAIT, claim, claim_state, register_volume, start};

async fn hosting(api: &csivol_tests::Api) -> Value {
    let (status, h) = api.get("/v1/plugins/hp/controllers").await;
    assert_eq!(status, 200, "{h}");
    h["hosting"].clone()
}

#[tokio::test]
async fn controller_hosting_needs_a_grant_and_reports_need_the_assigned_host() {
    let dir = TestDir::new("server-hosting");
    let server = start(&dir, &[]);
    let api = server.api();
    let host = FakeAgent::new(&server, "host").await;
    host.register(0, true, json!([])).await;

    // The hijack: a token for a made-up node, the real host's registration copied.
    let intruder = FakeAgent::with_controllers(&server, "made-up", &[]).await;
    let (status, body) = intruder.try_register(0, true, json!([])).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("node `made-up` may not host the controller of plugin hp"),
        "{body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol plugin controllers hp --allow made-up"),
        "{body}"
    );
    assert_eq!(hosting(&api).await, json!(["host"]));
    let (_, events) = api.get("/v1/events?node=made-up").await;
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "controller-host-refused" && e["actor"] == "node:made-up"),
        "{events}"
    );
    // A token granting another plugin does not help, nor does a reader's opinion.
    let other = FakeAgent::with_controllers(&server, "other", &["not-hp"]).await;
    assert_eq!(other.try_register(0, true, json!([])).await.0, 403);
    // The same node without the controller part registers fine: only hosting is refused.
    assert_eq!(intruder.try_register(0, false, json!([])).await.0, 200);

    // An operator allows it: now it may host.
    let (status, h) = api
        .post("/v1/plugins/hp/controllers", json!({"allow": ["made-up"]}))
        .await;
    assert_eq!(status, 200, "{h}");
    assert!(
        h["allowed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["node"] == "made-up" && a["source"] == "operator"),
        "{h}"
    );
    intruder.register(0, true, json!([])).await;
    assert_eq!(hosting(&api).await, json!(["host", "made-up"]));

    // Two hosts: the publish goes to one; reports from the other, or for another attempt,
    // change nothing.
    register_volume(&api, "v1", "single-node-writer").await;
    let (status, body) = claim(&api, "v1", "a1", "host", "write").await;
    assert_eq!(status, 201, "{body}");
    let hosts = [&host, &intruder];
    let (assigned, op) = eventually("the publish to be assigned", WAIT, || async {
        for (i, h) in hosts.iter().enumerate() {
            let d = h.desired().await;
            if let Some(op) = d["controller_ops"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["op"] == "publish")
            {
                return Some((i, op.clone()));
            }
        }
        None
    })
    .await;
    let bystander = hosts[1 - assigned];
    bystander.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {"dev": "/dev/evil"}}])).await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await.as_deref(),
        Some("attaching"),
        "a report from a host the operation is not assigned to is ignored"
    );
    let stale = op["attempt"].as_u64().unwrap() + 1;
    hosts[assigned].report(json!([{"kind": "controller_published", "op": op["id"], "attempt": stale, "publish_context": {}}])).await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await.as_deref(),
        Some("attaching"),
        "a report for another attempt is ignored"
    );
    hosts[assigned].report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {"dev": "/dev/x"}}])).await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await.as_deref(),
        Some("publishing")
    );
    let d = host.desired().await;
    assert_eq!(d["publish"][0]["publish_context"]["dev"], "/dev/x");

    // Disallowing is recorded; it takes effect at the node's next registration.
    let (status, _) = api
        .post(
            "/v1/plugins/hp/controllers",
            json!({"disallow": ["made-up"]}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(intruder.try_register(0, true, json!([])).await.0, 403);
    // Readers may look, not change.
    let (_, reader) = api.post("/v1/tokens", json!({"role": "reader"})).await;
    let as_reader = api.with_token(reader["token"].as_str());
    assert_eq!(as_reader.get("/v1/plugins/hp/controllers").await.0, 200);
    assert_eq!(
        as_reader
            .post("/v1/plugins/hp/controllers", json!({"allow": ["x"]}))
            .await
            .0,
        403
    );
}
