//! A node that stops heartbeating blocks its volumes until it returns or an operator unblocks or detaches them, explicitly and on the record.

use csivol_tests::{FakeAgent, TestDir, eventually};
use serde_json::json;

use super::{WAIT, claim, claim_state, make_ready, register_volume, start, wait_volume_state};

#[tokio::test]
async fn lost_node_blocks_and_comes_back() {
    let dir = TestDir::new("server-loss");
    let server = start(&dir, &["--heartbeat-ttl=1s"]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    n1.register(0, true, json!([])).await;
    n2.register(0, false, json!([])).await;
    register_volume(&api, "v", "single-node-writer").await;
    register_volume(&api, "w", "single-node-writer").await;
    make_ready(&api, &n1, &n2, "v", "a1").await;
    make_ready(&api, &n1, &n2, "w", "b1").await;

    // n1 keeps heartbeating, n2 stops: n2 is lost and its volumes blocked.
    let _beating = n1.keep_alive();
    wait_volume_state(&api, "v", "blocked").await;
    let (_, node) = api.get("/v1/nodes/n2").await;
    assert_eq!(node["status"], "lost");
    assert!(node["lost_at"].is_string());
    let (status, body) = claim(&api, "v", "a2", "n1", "write").await;
    assert_eq!(status, 423, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("n2"),
        "names the lost node: {body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol unblock v"),
        "{body}"
    );
    assert_eq!(claim(&api, "x", "a", "n2", "write").await.0, 404);
    let (status, body) = api.delete("/v1/volumes/v/claims/a1").await;
    assert_eq!(
        status, 423,
        "releasing a blocked claim needs the node or an unblock: {body}"
    );

    // n2 returns: a heartbeat is answered `lost`, so it registers with what is still
    // mounted: a1 is (nobody released it, its workload may still run: ready again), b1 is
    // not (nobody released it either: published again, not released).
    assert_eq!(n2.heartbeat().await["status"], "lost");
    n2.register(0, false, json!([{"volume": "v", "alloc": "a1"}]))
        .await;
    assert_eq!(claim_state(&api, "v", "a1").await.as_deref(), Some("ready"));
    assert_eq!(
        claim_state(&api, "w", "b1").await.as_deref(),
        Some("publishing")
    );
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["state"], "attached", "{v}");
    assert_eq!(v["attachments"][0]["state"], "attached", "{v}");
    let desired = n2.desired().await;
    let mut allocs: Vec<&str> = desired["publish"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["alloc"].as_str().unwrap())
        .collect();
    allocs.sort_unstable();
    assert_eq!(allocs, ["a1", "b1"], "{desired}");
    // Both are released the normal way, through their node.
    for (volume, alloc) in [("v", "a1"), ("w", "b1")] {
        let (status, body) = api
            .delete(&format!("/v1/volumes/{volume}/claims/{alloc}"))
            .await;
        assert_eq!(status, 202, "{body}");
    }
    n2.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a1"}, {"kind": "unpublished", "volume": "w", "alloc": "b1"}, {"kind": "unstaged", "volume": "v"}, {"kind": "unstaged", "volume": "w"}])).await;
    for volume in ["v", "w"] {
        let op = eventually("unpublish ops", WAIT, || async {
            let d = n1.desired().await;
            d["controller_ops"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["op"] == "unpublish" && o["volume"] == volume)
                .cloned()
        })
        .await;
        n1.report(
            json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
        )
        .await;
    }
    for volume in ["v", "w"] {
        let (_, v) = api.get(&format!("/v1/volumes/{volume}")).await;
        assert_eq!(v["state"], "free", "{v}");
    }
    let (_, events) = api.get("/v1/events?node=n2").await;
    let text = events.to_string();
    assert!(
        text.contains("node-lost") && text.contains("node-returned"),
        "{text}"
    );
    assert!(text.contains("claim-resumed"), "{text}");
    assert!(text.contains("claim-republished"), "{text}");
    assert!(!text.contains("blocked claim released"), "{text}");
}

#[tokio::test]
async fn unblock_and_detach_are_explicit_and_recorded() {
    let dir = TestDir::new("server-unblock");
    let server = start(&dir, &["--heartbeat-ttl=1s"]);
    let api = server.api();
    let host = FakeAgent::new(&server, "host").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    host.register(0, true, json!([])).await;
    n2.register(0, false, json!([])).await;
    register_volume(&api, "v", "single-node-writer").await;
    make_ready(&api, &host, &n2, "v", "a1").await;
    let _beating = host.keep_alive();
    wait_volume_state(&api, "v", "blocked").await;

    let (status, body) = api
        .post("/v1/volumes/v/detach", json!({"node": "n2", "reason": "x"}))
        .await;
    assert_eq!(
        status, 423,
        "a lost node cannot release through itself: {body}"
    );
    assert!(body["error"]["hint"].as_str().unwrap().contains("--force"));
    let (status, body) = api
        .post("/v1/volumes/v/unblock", json!({"reason": ""}))
        .await;
    assert_eq!(status, 422, "a reason is required: {body}");
    let (status, plan) = api
        .post(
            "/v1/volumes/v/unblock",
            json!({"reason": "n2 is powered off", "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["dry_run"], true);
    let actions: Vec<_> = plan["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["force-release", "force-detach"]);
    assert!(plan["actions"][0]["lost_since"].is_string());
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("blocked"),
        "a dry run changes nothing"
    );

    let reader = {
        let (_, t) = api.post("/v1/tokens", json!({"role": "reader"})).await;
        api.with_token(t["token"].as_str())
    };
    assert_eq!(
        reader
            .post("/v1/volumes/v/unblock", json!({"reason": "r"}))
            .await
            .0,
        403
    );

    let (status, plan) = api
        .post(
            "/v1/nodes/n2/unblock",
            json!({"reason": "n2 is powered off"}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(claim_state(&api, "v", "a1").await, None, "force-released");
    let op = host.wait_op("unpublish").await;
    assert_eq!(
        op["node_id"], "csi-n2",
        "ControllerUnpublish names the lost node, without asking it"
    );
    // Until the controller has detached it, a single-node volume waits for the new node.
    let (status, c) = claim(&api, "v", "a2", "host", "write").await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["state"], "pending");
    host.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    let publish = host.wait_op("publish").await;
    assert_eq!(publish["node_id"], "csi-host");
    let (_, events) = api.get("/v1/events?volume=v").await;
    let unblock = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "volume-unblocked")
        .expect("unblock event");
    assert!(
        unblock["message"]
            .as_str()
            .unwrap()
            .contains("n2 is powered off")
    );
    assert!(unblock["actor"].as_str().unwrap().starts_with("operator:"));
    let detached = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "volume-detached")
        .expect("detach event");
    assert!(
        detached["message"]
            .as_str()
            .unwrap()
            .contains("force-detached"),
        "{detached}"
    );

    // Detach on a live node releases its claims through the node.
    host.report(json!([{"kind": "controller_published", "op": publish["id"], "attempt": publish["attempt"], "publish_context": {}}])).await;
    let (status, plan) = api
        .post(
            "/v1/volumes/v/detach",
            json!({"node": "host", "reason": "maintenance"}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["actions"][0]["action"], "release");
    assert_eq!(
        claim_state(&api, "v", "a2").await.as_deref(),
        Some("releasing")
    );
    let (status, _) = api
        .post(
            "/v1/volumes/v/detach",
            json!({"node": "host", "reason": "x", "force": true}),
        )
        .await;
    assert_eq!(status, 409, "--force is for lost nodes only");
}

/// A node stopped in order holds its claims where they are; a claim whose attachment was
/// made while its node stopped is published once the node registers again, not left
/// attaching.
#[tokio::test]
async fn a_claim_attached_while_its_node_stopped_moves_on_when_it_registers_again() {
    let dir = TestDir::new("server-stopped");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    n1.register(0, true, json!([])).await;
    n2.register(0, false, json!([])).await;
    register_volume(&api, "v", "single-node-writer").await;
    let (status, body) = claim(&api, "v", "a1", "n2", "write").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "attaching");
    let op = n1.wait_op("publish").await;

    let (status, body) = n2
        .api
        .post("/v1/nodes/n2/stopping", json!({"took_down": false}))
        .await;
    assert_eq!(status, 200, "{body}");
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["attachments"][0]["state"], "attached", "{v}");
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("attaching"),
        "nothing moves while the node is stopped"
    );

    n2.register(0, false, json!([])).await;
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("publishing"),
        "the node is back: its claim goes on to be published"
    );
    let desired = n2.desired().await;
    assert!(
        desired["publish"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["alloc"] == "a1"),
        "{desired}"
    );
}
