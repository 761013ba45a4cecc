//! The server over real HTTP on loopback, with real SQLite files in temp dirs. Node agents
//! are played by a test client of the agent endpoints (the real agent has its own tests).

mod connections;
mod hosting;
mod secrets;
mod state;

use std::time::Duration;

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::{Value, json};

pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) fn start(dir: &TestDir, extra: &[&str]) -> ServerProc {
    ServerProc::start(&dir.join("server"), extra)
}

pub(crate) async fn wait_volume_state(api: &Api, volume: &str, state: &str) {
    eventually(&format!("{volume} {state}"), WAIT, || async {
        let (_, v) = api.get(&format!("/v1/volumes/{volume}")).await;
        (v["state"] == state).then_some(())
    })
    .await;
}

pub(crate) async fn register_volume(api: &Api, name: &str, mode: &str) {
    let (status, body) = api
        .put(
            &format!("/v1/volumes/{name}"),
            json!({"plugin": "hp", "external_id": format!("ext-{name}"), "access_mode": mode, "attachment": "file-system", "secrets": {"key": "s3cret"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

pub(crate) async fn claim(
    api: &Api,
    volume: &str,
    alloc: &str,
    node: &str,
    mode: &str,
) -> (u16, Value) {
    api.post(
        &format!("/v1/volumes/{volume}/claims"),
        json!({"alloc": alloc, "node": node, "mode": mode}),
    )
    .await
}

pub(crate) async fn claim_state(api: &Api, volume: &str, alloc: &str) -> Option<String> {
    let (status, body) = api
        .get(&format!("/v1/volumes/{volume}/claims/{alloc}"))
        .await;
    (status == 200).then(|| body["state"].as_str().unwrap().to_owned())
}

/// Drives a claim to ready through a controller host and the node.
pub(crate) async fn make_ready(
    api: &Api,
    host: &FakeAgent,
    node: &FakeAgent,
    volume: &str,
    alloc: &str,
) {
    let (status, body) = claim(api, volume, alloc, &node.node, "write").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "attaching");
    let op = host.wait_op("publish").await;
    assert_eq!(
        op["node_id"],
        format!("csi-{}", node.node),
        "ControllerPublish names the plugin's node id"
    );
    host.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {"dev": "/dev/x"}}])).await;
    assert_eq!(
        claim_state(api, volume, alloc).await.as_deref(),
        Some("publishing")
    );
    let d = node.desired().await;
    let p = d["publish"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["alloc"] == alloc)
        .cloned()
        .expect("claim in desired state");
    assert_eq!(p["publish_context"]["dev"], "/dev/x");
    assert_eq!(
        p["secrets"]["key"], "s3cret",
        "the node gets the secrets it needs"
    );
    node.report(json!([{"kind": "published", "volume": volume, "alloc": alloc, "target_path": format!("/mnt/{alloc}")}])).await;
    assert_eq!(
        claim_state(api, volume, alloc).await.as_deref(),
        Some("ready")
    );
}

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
async fn acknowledged_claims_survive_kill_9() {
    let dir = TestDir::new("server-kill");
    let mut server = start(&dir, &[]);
    let api = server.api();
    FakeAgent::new(&server, "n1")
        .await
        .register(0, false, json!([]))
        .await;
    for i in 0..200 {
        register_volume(&api, &format!("v{i}"), "multi-node-multi-writer").await;
    }
    // Claims arrive from many clients; the server is killed while they do.
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                let r = api
                    .http_post_lenient(
                        &format!("/v1/volumes/v{i}/claims"),
                        json!({"alloc": format!("a{i}"), "node": "n1", "mode": "write"}),
                    )
                    .await;
                (i, r)
            })
        })
        .collect();
    // Kill once some claims were acknowledged.
    eventually("some claims acknowledged", WAIT, || async {
        let (_, vols) = api.get("/v1/volumes?state=attached").await;
        (vols.as_array().map_or(0, Vec::len) >= 20).then_some(())
    })
    .await;
    server.restart_after_kill();
    let mut acknowledged = Vec::new();
    for t in tasks {
        let (i, status) = t.await.unwrap();
        if status == Some(201) {
            acknowledged.push(i);
        }
    }
    assert!(
        acknowledged.len() >= 20,
        "only {} acknowledged",
        acknowledged.len()
    );
    let api = server.api();
    for i in &acknowledged {
        let (status, c) = api.get(&format!("/v1/volumes/v{i}/claims/a{i}")).await;
        assert_eq!(
            status, 200,
            "acknowledged claim a{i} lost after kill -9: {c}"
        );
    }
    // Nothing half-written: every claim that exists has its attachment.
    let (_, vols) = api.get("/v1/volumes").await;
    for v in vols.as_array().unwrap() {
        let claims = v["claims"].as_array().unwrap();
        let atts = v["attachments"].as_array().unwrap();
        assert_eq!(
            claims.len(),
            atts.len(),
            "claim without attachment or the reverse: {v}"
        );
    }
}

trait Lenient {
    async fn http_post_lenient(&self, path: &str, body: Value) -> Option<u16>;
}

impl Lenient for Api {
    /// A POST that reports a dropped connection as `None` instead of panicking.
    async fn http_post_lenient(&self, path: &str, body: Value) -> Option<u16> {
        // A client of its own, as each claimant would have.
        let own = Api::new(&self.base, self.token.as_deref());
        let answer = own.send("POST", path, Some(body)).await;
        answer.ok().map(|r| r.status.as_u16())
    }
}

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
    // not (released at once).
    assert_eq!(n2.heartbeat().await["status"], "lost");
    n2.register(0, false, json!([{"volume": "v", "alloc": "a1"}]))
        .await;
    assert_eq!(claim_state(&api, "v", "a1").await.as_deref(), Some("ready"));
    assert_eq!(claim_state(&api, "w", "b1").await, None);
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["state"], "attached", "{v}");
    assert_eq!(v["attachments"][0]["state"], "attached", "{v}");
    let desired = n2.desired().await;
    assert_eq!(desired["publish"][0]["alloc"], "a1", "{desired}");
    // The resumed claim is released the normal way, through its node.
    let (status, body) = api.delete("/v1/volumes/v/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    n2.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a1"}, {"kind": "unstaged", "volume": "v"}, {"kind": "unstaged", "volume": "w"}])).await;
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
    assert!(text.contains("blocked claim released"), "{text}");
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

#[test]
fn refuses_a_database_from_a_newer_version() {
    let dir = TestDir::new("server-schema");
    let data = dir.join("server");
    std::fs::create_dir_all(&data).unwrap();
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    conn.pragma_update(None, "user_version", 42).unwrap();
    drop(conn);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_csivol-agent"))
        .args(["server", "--listen=127.0.0.1:0"])
        .arg(format!("--data-dir={}", data.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("schema version 42, newer than this csivol-agent"),
        "{err}"
    );
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
