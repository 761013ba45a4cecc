//! Claims over real HTTP: the claim → attach → publish → ready lifecycle, shared attachments, node-only plugins, one winner among concurrent writers, capacity, and why a claim waits.

use std::time::Duration;

use csivol_tests::{FakeAgent, TestDir};
use serde_json::json;

use super::{claim, claim_state, make_ready, register_volume, start};

#[tokio::test]
async fn claim_release_and_detach_lifecycle() {
    let dir = TestDir::new("server-lifecycle");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v1", "single-node-writer").await;

    // A blocking query on the claim wakes when it changes.
    let (_, c) = claim(&api, "v1", "a1", "n1", "write").await;
    let index = c["index"].as_u64().unwrap();
    let waiter = {
        let api = api.clone();
        tokio::spawn(async move {
            api.get(&format!("/v1/volumes/v1/claims/a1?index={index}&wait=20s"))
                .await
        })
    };
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    let (status, woke) = waiter.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(woke["state"], "publishing");
    assert!(woke["index"].as_u64().unwrap() > index);

    n1.report(
        json!([{"kind": "published", "volume": "v1", "alloc": "a1", "target_path": "/mnt/a1"}]),
    )
    .await;
    let (_, v) = api.get("/v1/volumes/v1").await;
    assert_eq!(v["state"], "attached");
    assert_eq!(v["claims"][0]["target_path"], "/mnt/a1");
    assert_eq!(v["secret_keys"], json!(["key"]));
    assert!(
        !v.to_string().contains("s3cret"),
        "secrets are never returned: {v}"
    );

    // Release: the node unpublishes, then unstages, then the controller detaches.
    let (status, body) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["state"], "releasing");
    assert_eq!(
        api.delete("/v1/volumes/v1/claims/a1").await.0,
        202,
        "release is idempotent"
    );
    let d = n1.desired().await;
    assert_eq!(d["unpublish"][0]["alloc"], "a1");
    assert!(d["publish"].as_array().unwrap().is_empty());
    n1.report(json!([{"kind": "unpublished", "volume": "v1", "alloc": "a1"}]))
        .await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await,
        None,
        "the claim is gone"
    );
    let d = n1.desired().await;
    assert_eq!(d["unstage"][0]["volume"], "v1");
    assert!(
        n1.desired().await["controller_ops"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no detach before the node unstaged"
    );
    // A failing unstage shows on the attachment, with its next retry.
    n1.report(json!([{"kind": "volume_error", "volume": "v1", "error": {"code": "UNAVAILABLE", "message": "busy", "final": false, "next_retry_at_ms": 4102444800000u64}}])).await;
    let (_, v) = api.get("/v1/volumes/v1").await;
    assert_eq!(
        v["attachments"][0]["error"],
        "NodeUnstageVolume failed: UNAVAILABLE: busy"
    );
    assert!(v["attachments"][0]["next_retry_at"].is_string(), "{v}");
    n1.report(json!([{"kind": "unstaged", "volume": "v1"}]))
        .await;
    let op = n1.wait_op("unpublish").await;
    assert_eq!(op["external_id"], "ext-v1");
    n1.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    let (_, v) = api.get("/v1/volumes/v1").await;
    assert_eq!(v["state"], "free", "{v}");

    let (_, events) = api.get("/v1/events?volume=v1").await;
    let kinds: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "volume-registered",
            "claim-created",
            "volume-attached",
            "claim-ready",
            "claim-releasing",
            "claim-released",
            "volume-unstaged",
            "volume-detached"
        ]
    );

    // Deregister (free now), then it is gone.
    assert_eq!(api.delete("/v1/volumes/v1").await.0, 204);
    assert_eq!(api.get("/v1/volumes/v1").await.0, 404);
}

#[tokio::test]
async fn second_claim_reuses_the_attachment_and_the_last_release_detaches() {
    let dir = TestDir::new("server-two-claims");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "single-node-multi-writer").await;
    make_ready(&api, &n1, &n1, "v", "a1").await;
    let (status, c) = claim(&api, "v", "a2", "n1", "write").await;
    assert_eq!(status, 201);
    assert_eq!(
        c["state"], "publishing",
        "already attached: straight to the node"
    );
    assert_eq!(
        claim(&api, "v", "a2", "n1", "write").await.0,
        200,
        "same claim again is idempotent"
    );
    let (status, body) = claim(&api, "v", "a2", "n1", "read").await;
    assert_eq!(status, 409, "{body}");
    n1.report(
        json!([{"kind": "published", "volume": "v", "alloc": "a2", "target_path": "/mnt/a2"}]),
    )
    .await;

    api.delete("/v1/volumes/v/claims/a1").await;
    n1.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a1"}]))
        .await;
    let d = n1.desired().await;
    assert!(
        d["unstage"].as_array().unwrap().is_empty(),
        "a claim remains: no unstage"
    );
    // An early unstaged report while a claim remains changes nothing.
    n1.report(json!([{"kind": "unstaged", "volume": "v"}]))
        .await;
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["attachments"][0]["state"], "attached");
}

#[tokio::test]
async fn node_only_plugins_need_no_controller() {
    let dir = TestDir::new("server-node-only");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    let plugin = json!({
        "id": "hp",
        "info": {"name": "x", "vendor_version": "1"},
        "capabilities": {"controller_service": false, "volume_accessibility_constraints": false},
        "node": {"info": {"node_id": "n1", "max_volumes_per_node": 0}, "capabilities": {"stage_unstage_volume": false, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}},
    });
    let (status, _) = n1
        .api
        .post("/v1/nodes/n1/register", json!({"plugins": [plugin]}))
        .await;
    assert_eq!(status, 200);
    register_volume(&api, "v", "single-node-writer").await;
    let (_, c) = claim(&api, "v", "a", "n1", "write").await;
    assert_eq!(c["state"], "publishing");
    n1.report(json!([{"kind": "published", "volume": "v", "alloc": "a", "target_path": "/t"}]))
        .await;
    api.delete("/v1/volumes/v/claims/a").await;
    n1.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a"}, {"kind": "unstaged", "volume": "v"}])).await;
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["state"], "free", "{v}");
}

#[tokio::test]
async fn sixty_four_concurrent_writers_one_wins() {
    let dir = TestDir::new("server-race");
    let server = start(&dir, &[]);
    let api = server.api();
    for n in ["n1", "n2"] {
        FakeAgent::new(&server, n)
            .await
            .register(0, false, json!([]))
            .await;
    }
    register_volume(&api, "v", "multi-node-single-writer").await;
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                claim(
                    &api,
                    "v",
                    &format!("alloc-{i}"),
                    if i % 2 == 0 { "n1" } else { "n2" },
                    "write",
                )
                .await
            })
        })
        .collect();
    let mut created = 0;
    let mut conflicts = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            201 => created += 1,
            409 => {
                assert_eq!(body["error"]["code"], "conflict");
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("already has a writer"),
                    "{body}"
                );
                conflicts += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((created, conflicts), (1, 63));
}

#[tokio::test]
async fn capacity_is_enforced_per_node_and_plugin() {
    let dir = TestDir::new("server-capacity");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(1, true, json!([])).await;
    register_volume(&api, "a", "single-node-writer").await;
    register_volume(&api, "b", "single-node-writer").await;
    make_ready(&api, &n1, &n1, "a", "x").await;
    let (status, body) = claim(&api, "b", "y", "n1", "write").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no free slot"),
        "{body}"
    );
    let dry_run = || async {
        let (status, dry) = api
            .post(
                "/v1/volumes/b/claims",
                json!({"alloc": "y", "node": "n1", "mode": "write", "dry_run": true}),
            )
            .await;
        assert_eq!(status, 200, "{dry}");
        dry
    };
    let dry = dry_run().await;
    assert_eq!(
        (dry["accepted"].clone(), dry["error"]["code"].clone()),
        (json!(false), json!("conflict"))
    );
    // The slot stays in use until the volume is unpublished, unstaged and detached.
    api.delete("/v1/volumes/a/claims/x").await;
    n1.report(json!([{"kind": "unpublished", "volume": "a", "alloc": "x"}]))
        .await;
    assert_eq!(dry_run().await["accepted"], false, "still staged");
    n1.report(json!([{"kind": "unstaged", "volume": "a"}]))
        .await;
    assert_eq!(dry_run().await["accepted"], false, "still detaching");
    let op = n1.wait_op("unpublish").await;
    n1.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    assert_eq!(dry_run().await["accepted"], true);
    assert_eq!(claim(&api, "b", "y", "n1", "write").await.0, 201);
    let (_, node) = api.get("/v1/nodes/n1").await;
    assert_eq!(node["plugins"][0]["used"], 1);
    assert_eq!(node["plugins"][0]["max_volumes"], 1);
}

#[tokio::test]
async fn claims_say_why_they_wait_and_dry_runs_say_where_they_start() {
    let dir = TestDir::new("server-no-host");
    let server = start(&dir, &[]);
    let api = server.api();
    // The plugin has a controller service, but no agent hosts it.
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    register_volume(&api, "v", "single-node-writer").await;
    let (status, dry) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a", "node": "n1", "mode": "write", "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(dry, json!({"accepted": true, "state": "attaching"}));
    claim(&api, "v", "a", "n1", "write").await;
    let (_, c) = api.get("/v1/volumes/v/claims/a").await;
    assert_eq!(c["state"], "attaching");
    assert!(
        c["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no healthy agent hosts the controller of plugin `hp`"),
        "{c}"
    );
    let (_, v) = api.get("/v1/volumes/v").await;
    assert!(v["attachments"][0]["error"].is_string(), "{v}");
    // Once a host registers, the operation is handed out.
    n1.register(0, true, json!([])).await;
    n1.wait_op("publish").await;

    let (_, events) = api.get("/v1/events?alloc=a").await;
    let kinds: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["claim-created"]);
    // `index` alone pages without blocking.
    let last = events[0]["index"].as_u64().unwrap();
    let started = std::time::Instant::now();
    let (_, later) = api.get(&format!("/v1/events?index={last}&alloc=a")).await;
    assert_eq!(later, json!([]));
    assert!(started.elapsed() < Duration::from_secs(5), "did not block");
    let (status, body) = api.get("/v1/nodes/ghost").await;
    assert_eq!(status, 404);
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol node list"),
        "{body}"
    );
}

/// `?wait=` on a claim's POST and DELETE: the answer leaves once the claim moves on past
/// what the request committed (the claim's next state; 204 once a released claim is gone),
/// or when the wait passes; a malformed wait is refused before anything is recorded.
#[tokio::test]
async fn held_claims_and_releases_answer_when_the_claim_moves_on() {
    let dir = TestDir::new("server-held");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v1", "single-node-writer").await;
    let req = json!({"alloc": "a1", "node": "n1", "mode": "write"});

    let (status, body) = api
        .post("/v1/volumes/v1/claims?wait=soon", req.clone())
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid `wait` `soon`"),
        "{body}"
    );
    assert_eq!(
        claim_state(&api, "v1", "a1").await,
        None,
        "nothing recorded"
    );

    // Recorded `attaching`; answered once ControllerPublishVolume moved it on.
    let held = {
        let (api, req) = (api.clone(), req.clone());
        tokio::spawn(async move {
            api.send("POST", "/v1/volumes/v1/claims?wait=30s", Some(req))
                .await
        })
    };
    let op = n1.wait_op("publish").await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await.as_deref(),
        Some("attaching"),
        "the claim is recorded while its answer is held"
    );
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    let raw = held.await.unwrap().expect("an answer");
    assert_eq!(raw.status.as_u16(), 201);
    let c: serde_json::Value = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(c["state"], "publishing", "{c}");
    assert!(raw.index.unwrap() >= c["index"].as_u64().unwrap());

    // Nothing changes: the claim as it is, once the wait has passed.
    let started = std::time::Instant::now();
    let (status, c) = api
        .post("/v1/volumes/v1/claims?wait=300ms", req.clone())
        .await;
    assert_eq!((status, c["state"].as_str()), (200, Some("publishing")));
    assert!(started.elapsed() >= Duration::from_millis(300));

    // Ready: where a claim goes, so answered at once however long the wait.
    n1.report(json!([{"kind": "published", "volume": "v1", "alloc": "a1", "target_path": "/t"}]))
        .await;
    let (status, c) = api.post("/v1/volumes/v1/claims?wait=5m", req.clone()).await;
    assert_eq!((status, c["state"].as_str()), (200, Some("ready")));

    // A held release answers 204 once the node has unpublished and the claim is gone.
    let held = {
        let api = api.clone();
        tokio::spawn(async move {
            api.send("DELETE", "/v1/volumes/v1/claims/a1?wait=30s", None)
                .await
        })
    };
    csivol_tests::eventually("the release recorded", Duration::from_secs(30), || async {
        (claim_state(&api, "v1", "a1").await.as_deref() == Some("releasing")).then_some(())
    })
    .await;
    n1.report(json!([{"kind": "unpublished", "volume": "v1", "alloc": "a1"}]))
        .await;
    let raw = held.await.unwrap().expect("an answer");
    assert_eq!(raw.status.as_u16(), 204, "{:?}", raw.body);
    assert!(raw.body.is_empty());
    assert!(raw.index.is_some(), "the index to follow the volume from");
    assert_eq!(claim_state(&api, "v1", "a1").await, None);
    let (status, body) = api.delete("/v1/volumes/v1/claims/a1?wait=1s").await;
    assert_eq!(status, 404, "a gone claim is not held: {body}");
}
