//! The server's claim queue and leases over real HTTP, with node agents played by the test:
//! queued claims granted in arrival order in the transaction that frees room; leases that
//! release through the node and never from a lost node.

use std::time::{Duration, SystemTime};

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::{Value, json};

use super::{claim_state, make_ready, register_volume, start, wait_volume_state};

const WAIT: Duration = Duration::from_secs(20);

/// A server with a controller host (`host`) and a node (`n2`), both registered.
async fn host_and_node(dir: &TestDir, args: &[&str]) -> (ServerProc, Api, FakeAgent, FakeAgent) {
    let server = start(dir, args);
    let api = server.api();
    let host = FakeAgent::new(&server, "host").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    host.register(0, true, json!([])).await;
    n2.register(0, false, json!([])).await;
    (server, api, host, n2)
}

async fn queue_claim(api: &Api, volume: &str, alloc: &str, node: &str) -> (u16, Value) {
    api.post(
        &format!("/v1/volumes/{volume}/claims"),
        json!({"alloc": alloc, "node": node, "mode": "write", "queue": true}),
    )
    .await
}

async fn event_kinds(api: &Api, volume: &str, alloc: &str) -> Vec<String> {
    let (_, events) = api.get(&format!("/v1/events?volume={volume}")).await;
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["alloc"] == alloc)
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn queued_claims_are_granted_in_arrival_order() {
    let dir = TestDir::new("server-queue");
    let (_server, api, host, n2) = host_and_node(&dir, &[]).await;
    register_volume(&api, "v", "single-node-single-writer").await;
    make_ready(&api, &host, &n2, "v", "a1").await;

    let (status, q2) = queue_claim(&api, "v", "a2", "n2").await;
    assert_eq!(status, 201, "{q2}");
    assert_eq!(q2["state"], "queued");
    assert_eq!(q2["queue_position"], 1);
    // Asking again is the same claim.
    let (status, again) = queue_claim(&api, "v", "a2", "n2").await;
    assert_eq!((status, &again["state"]), (200, &json!("queued")));
    let (status, q3) = queue_claim(&api, "v", "a3", "n2").await;
    assert_eq!((status, &q3["queue_position"]), (201, &json!(2)), "{q3}");
    // Without --queue nobody overtakes the line, and the refusal says how to join it.
    let (status, refused) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a4", "node": "n2", "mode": "read"}),
        )
        .await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("--queue"),
        "{refused}"
    );
    // A claim that can never succeed is refused, not queued.
    register_volume(&api, "ro", "multi-node-reader-only").await;
    let (status, body) = queue_claim(&api, "ro", "w", "n2").await;
    assert_eq!(status, 422, "{body}");
    let (_, listed) = api.get("/v1/claims?volume=v&state=queued").await;
    let allocs: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["alloc"].as_str().unwrap())
        .collect();
    assert_eq!(allocs, ["a2", "a3"]);

    // The holder leaves: the head of the queue gets the volume in that same transaction.
    let (status, _) = api.delete("/v1/volumes/v/claims/a1").await;
    assert_eq!(status, 202);
    n2.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a1"}]))
        .await;
    let state = claim_state(&api, "v", "a2").await.unwrap();
    assert!(
        ["pending", "attaching", "publishing"].contains(&state.as_str()),
        "{state}"
    );
    assert!(
        event_kinds(&api, "v", "a2")
            .await
            .contains(&"claim-granted".to_owned())
    );
    let (_, a3) = api.get("/v1/volumes/v/claims/a3").await;
    assert_eq!(
        (&a3["state"], &a3["queue_position"]),
        (&json!("queued"), &json!(1))
    );

    // Releasing a queued claim takes it out of the line.
    let (status, _) = api.delete("/v1/volumes/v/claims/a3").await;
    assert_eq!(status, 202);
    assert_eq!(claim_state(&api, "v", "a3").await, None);
    assert!(
        event_kinds(&api, "v", "a3")
            .await
            .contains(&"claim-dequeued".to_owned())
    );
}

#[tokio::test]
async fn leases_release_through_the_node_and_never_from_a_lost_node() {
    let dir = TestDir::new("server-leases");
    let (_server, api, host, n2) = host_and_node(&dir, &["--heartbeat-ttl=1s"]).await;
    let _host_beating = host.keep_alive();
    let n2_beating = n2.keep_alive();
    register_volume(&api, "v", "single-node-writer").await;
    register_volume(&api, "w", "single-node-writer").await;

    // A lease that runs out is released the normal way: through the node.
    make_ready(&api, &host, &n2, "v", "a1").await;
    let (status, renewed) = api
        .post("/v1/volumes/v/claims/a1/renew", json!({"ttl_ms": 800}))
        .await;
    assert_eq!(status, 200, "{renewed}");
    assert!(renewed["expires_at"].is_string(), "{renewed}");
    eventually("the lease to run out", WAIT, || async {
        (claim_state(&api, "v", "a1").await.as_deref() == Some("releasing")).then_some(())
    })
    .await;
    assert!(
        event_kinds(&api, "v", "a1")
            .await
            .contains(&"claim-expired".to_owned())
    );
    let d = n2.desired().await;
    assert_eq!(d["unpublish"][0]["alloc"], "a1", "{d}");
    n2.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a1"}]))
        .await;
    assert_eq!(claim_state(&api, "v", "a1").await, None);
    // Renewing what is gone says so.
    let (status, _) = api.post("/v1/volumes/v/claims/a1/renew", json!({})).await;
    assert_eq!(status, 404);

    // On a lost node, the lease runs out but the claim stays blocked.
    make_ready(&api, &host, &n2, "w", "b1").await;
    let (_, renewed) = api
        .post("/v1/volumes/w/claims/b1/renew", json!({"ttl_ms": 1500}))
        .await;
    let expires_at = humantime::parse_rfc3339(renewed["expires_at"].as_str().unwrap()).unwrap();
    drop(n2_beating);
    wait_volume_state(&api, "w", "blocked").await;
    // Past the lease and the server's next expiry pass (twice a second).
    eventually("the lease past due", WAIT, || async {
        (SystemTime::now() > expires_at + Duration::from_secs(2)).then_some(())
    })
    .await;
    assert_eq!(
        claim_state(&api, "w", "b1").await.as_deref(),
        Some("blocked")
    );
    // The node returns with it mounted: the claim is not resumed but released through it.
    assert_eq!(n2.heartbeat().await["status"], "lost");
    n2.register(0, false, json!([{"volume": "w", "alloc": "b1"}]))
        .await;
    assert_eq!(
        claim_state(&api, "w", "b1").await.as_deref(),
        Some("releasing")
    );
    assert!(
        event_kinds(&api, "w", "b1")
            .await
            .contains(&"claim-expired".to_owned())
    );
}

/// Found by the fault campaign: a claim being released when its node was lost must not be
/// resumed when the node returns with it still mounted; it is released through the node.
#[tokio::test]
async fn a_release_under_way_when_the_node_is_lost_survives_its_return() {
    let dir = TestDir::new("server-release-lost");
    let (_server, api, host, n2) = host_and_node(&dir, &["--heartbeat-ttl=1s"]).await;
    let _host_beating = host.keep_alive();
    register_volume(&api, "v", "single-node-writer").await;
    make_ready(&api, &host, &n2, "v", "a1").await;
    let (status, _) = api.delete("/v1/volumes/v/claims/a1").await;
    assert_eq!(status, 202);
    // n2 never answers the release: it is lost with the claim releasing.
    wait_volume_state(&api, "v", "blocked").await;
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("blocked")
    );
    assert_eq!(n2.heartbeat().await["status"], "lost");
    n2.register(0, false, json!([{"volume": "v", "alloc": "a1"}]))
        .await;
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("releasing"),
        "not resumed"
    );
    let d = n2.desired().await;
    assert_eq!(d["unpublish"][0]["alloc"], "a1", "{d}");
}

/// Found by the fault campaign: a claim whose node published it but was lost before its
/// report reached the server is not ready (it has no target path) until the report comes.
#[tokio::test]
async fn a_claim_resumed_before_its_report_waits_for_its_target_path() {
    let dir = TestDir::new("server-resume-no-path");
    let (_server, api, host, n2) = host_and_node(&dir, &["--heartbeat-ttl=1s"]).await;
    let _host_beating = host.keep_alive();
    register_volume(&api, "v", "single-node-writer").await;
    let (status, body) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a1", "node": "n2", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let op = host.wait_op("publish").await;
    host.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    // n2 publishes but is lost before it says so.
    wait_volume_state(&api, "v", "blocked").await;
    assert_eq!(n2.heartbeat().await["status"], "lost");
    n2.register(0, false, json!([{"volume": "v", "alloc": "a1"}]))
        .await;
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("publishing"),
        "not ready without a target path"
    );
    n2.report(
        json!([{"kind": "published", "volume": "v", "alloc": "a1", "target_path": "/mnt/a1"}]),
    )
    .await;
    let (_, c) = api.get("/v1/volumes/v/claims/a1").await;
    assert_eq!(
        (&c["state"], &c["target_path"]),
        (&json!("ready"), &json!("/mnt/a1"))
    );
}
