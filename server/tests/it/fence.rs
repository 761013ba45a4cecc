//! Fencing at the server, with a stand-in agent: labels and which method applies, the
//! command and its evidence (secrets masked), and a fenced node's return holding leftovers.

use csivol_tests::{FakeAgent, TestDir};
use serde_json::json;

use crate::{claim_state, make_ready, register_volume, start, wait_volume_state};

/// A method for n2 that says the node is off and prints its environment's secret (which the
/// evidence must not keep).
const CONFIG: &str = r#"
[[fence]]
name = "ipmi"
command = ["sh", "-c", "echo \"off: $CSIVOL_FENCE_NODE at $1 (pw $IPMI_PASSWORD)\"", "fence", "{bmc}"]
timeout = "10s"
nodes = ["n2"]
env = { IPMI_PASSWORD = "s3cret-pw" }

[node_labels.n2]
bmc = "10.0.0.12"
"#;

#[tokio::test]
async fn a_fenced_node_returns_holding_leftovers_and_is_ready_once_clean() {
    let dir = TestDir::new("server-fence");
    std::fs::write(dir.join("server.toml"), CONFIG).unwrap();
    let config = format!("--config={}", dir.join("server.toml").display());
    let server = start(&dir, &["--heartbeat-ttl=1s", &config]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    n1.register(0, true, json!([])).await;
    n2.register_labeled(0, false, json!([]), json!({"bmc": "10.6.6.6", "rack": "4"}))
        .await;
    // Both nodes beat until the claim is ready (a loaded machine can take longer than the
    // TTL to get there); then n2 falls silent and is lost.
    let _beating = n1.keep_alive();
    let n2_beating = n2.keep_alive();
    let (_, node) = api.get("/v1/nodes/n2").await;
    assert_eq!(
        node["labels"],
        json!({"bmc": "10.0.0.12"}),
        "only the operator's labels are the node's labels: {node}"
    );
    assert_eq!(
        node["agent_labels"],
        json!({"bmc": "10.6.6.6", "rack": "4"}),
        "the agent's are shown apart: {node}"
    );
    assert_eq!(node["fence_method"], "ipmi");
    let (_, n1_shown) = api.get("/v1/nodes/n1").await;
    assert!(n1_shown["fence_method"].is_null(), "{n1_shown}");

    register_volume(&api, "v", "single-node-writer").await;
    make_ready(&api, &n1, &n2, "v", "a1").await;
    drop(n2_beating);
    wait_volume_state(&api, "v", "blocked").await;

    let (status, body) = api.post("/v1/nodes/n2/fence", json!({"reason": " "})).await;
    assert_eq!(status, 422, "a reason is required: {body}");
    let (status, body) = api
        .post("/v1/nodes/n1/fence", json!({"reason": "x", "force": true}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"], "no fence method applies to node `n1`",
        "{body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol unblock --node n1"),
        "{body}"
    );

    let (status, plan) = api
        .post(
            "/v1/nodes/n2/fence",
            json!({"reason": "gone", "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["command"][4], "10.0.0.12", "{plan}");
    assert!(plan["fence"].is_null());
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("blocked")
    );

    let (status, done) = api
        .post("/v1/nodes/n2/fence", json!({"reason": "gone"}))
        .await;
    assert_eq!(status, 200, "{done}");
    let output = done["fence"]["output"].as_str().unwrap();
    assert!(
        output.contains("off: n2 at 10.0.0.12 (pw <redacted>)"),
        "{output}"
    );
    assert!(!done.to_string().contains("s3cret-pw"), "{done}");
    assert_eq!(claim_state(&api, "v", "a1").await, None, "force-released");
    let (_, events) = api.get("/v1/events?node=n2").await;
    assert!(!events.to_string().contains("s3cret-pw"), "{events}");
    let (status, again) = api
        .post("/v1/nodes/n2/fence", json!({"reason": "again"}))
        .await;
    assert_eq!(status, 409, "fenced already: {again}");

    // The node comes back still holding the released claim: it stays fenced, its desired
    // state lists nothing, and the event log says the node takes the claim down.
    assert_eq!(n2.heartbeat().await["status"], "lost");
    n2.register(0, false, json!([{"volume": "v", "alloc": "a1"}]))
        .await;
    let (_, node) = api.get("/v1/nodes/n2").await;
    assert_eq!(node["status"], "fenced", "{node}");
    let desired = n2.desired().await;
    assert_eq!(desired["status"], "fenced", "{desired}");
    assert_eq!(desired["publish"], json!([]), "{desired}");
    assert_eq!(claim_state(&api, "v", "a1").await, None, "not resumed");
    let (_, events) = api.get("/v1/events?node=n2").await;
    assert!(
        events.to_string().contains("claim-taken-down")
            && events.to_string().contains("still holding 1 publication"),
        "{events}"
    );
    // Clean now: ready.
    n2.register(0, false, json!([])).await;
    let (_, node) = api.get("/v1/nodes/n2").await;
    assert_eq!(node["status"], "ready", "{node}");
    assert_eq!(node["fences"][0]["ok"], true, "{node}");
    assert_eq!(
        node["fences"][0]["actor"].as_str().unwrap()[..9],
        *"operator:"
    );

    let (status, metrics) = api.get("/v1/metrics").await;
    assert_eq!(status, 200);
    let text = metrics
        .as_str()
        .map_or_else(|| metrics.to_string(), str::to_owned);
    assert!(
        text.contains("csivol_fences_total{state=\"ok\"} 1"),
        "{text}"
    );
}

/// `auto_fence_after`: a failing automatic fence is retried with backoff and shows on the
/// node and in the metrics; once the method confirms the node off, it is fenced and its
/// volume freed, by the policy.
#[tokio::test]
async fn a_failing_auto_fence_is_retried_and_shown() {
    let dir = TestDir::new("server-auto-fence");
    let marker = dir.join("bmc-answers");
    std::fs::write(
        dir.join("server.toml"),
        format!(
            "[[fence]]\nname = \"auto\"\ncommand = [\"sh\", \"-c\", \"test -e {} || {{ echo 'bmc timeout' >&2; exit 3; }}\"]\n\
             timeout = \"5s\"\nauto_fence_after = \"200ms\"\n",
            marker.display()
        ),
    )
    .unwrap();
    let config = format!("--config={}", dir.join("server.toml").display());
    let server = start(&dir, &["--heartbeat-ttl=1s", &config]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    n1.register(0, true, json!([])).await;
    n2.register(0, false, json!([])).await;
    let _beating = n1.keep_alive();
    let n2_beating = n2.keep_alive();
    register_volume(&api, "v", "single-node-writer").await;
    make_ready(&api, &n1, &n2, "v", "a1").await;
    drop(n2_beating);

    let node = csivol_tests::eventually("a failed automatic fence", crate::WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n2").await;
        (n["fence_failures"].as_u64() >= Some(1)).then_some(n)
    })
    .await;
    assert_eq!(node["status"], "lost", "{node}");
    assert!(
        node["fence_error"]
            .as_str()
            .unwrap()
            .contains("exited with status 3"),
        "{node}"
    );
    assert!(
        node["next_fence_at"].is_string(),
        "a retry is planned: {node}"
    );
    let (_, metrics) = api.get("/v1/metrics").await;
    let text = metrics.as_str().unwrap_or_default().to_owned();
    assert!(text.contains("csivol_nodes_fence_failing 1"), "{text}");
    assert!(
        text.contains("csivol_fences_total{state=\"failed\"}"),
        "{text}"
    );
    assert_eq!(
        claim_state(&api, "v", "a1").await.as_deref(),
        Some("blocked")
    );

    std::fs::write(&marker, "").unwrap();
    let node = csivol_tests::eventually("the retried fence", crate::WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n2").await;
        (n["status"] == "fenced").then_some(n)
    })
    .await;
    assert_eq!(node["fence_failures"], 0, "{node}");
    assert!(node["fence_error"].is_null(), "{node}");
    assert_eq!(claim_state(&api, "v", "a1").await, None, "freed");
    let (_, events) = api.get("/v1/events?node=n2").await;
    let events = events.as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "node-fence-failed" && e["actor"] == "policy:auto"),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "claim-force-released" && e["actor"] == "policy:auto"),
        "{events:?}"
    );
}

/// `POST /v1/nodes/{node}/labels`: only an operator sets the labels a fence uses; they
/// outlive the agent's registrations, are events with who set them, and are kept apart
/// from what the agent reports; keys of the config file stay the file's.
#[tokio::test]
async fn only_an_operator_labels_a_node() {
    let dir = TestDir::new("server-node-labels");
    std::fs::write(
        dir.join("server.toml"),
        "[[fence]]\nname = \"ipmi\"\ncommand = [\"fence_ipmilan\", \"--ip\", \"{bmc}\", \"--pdu\", \"{pdu}\"]\nnodes = [\"n*\"]\n\n\
         [node_labels.n2]\npdu = \"a\"\n",
    )
    .unwrap();
    let config = format!("--config={}", dir.join("server.toml").display());
    let server = start(&dir, &[&config]);
    let api = server.api();
    let n2 = FakeAgent::new(&server, "n2").await;
    n2.register_labeled(0, false, json!([]), json!({"bmc": "10.6.6.6"}))
        .await;
    let (_, node) = api.get("/v1/nodes/n2").await;
    assert!(node["fence_method"].is_null(), "{node}");
    assert_eq!(
        node["fence_lacks"],
        json!({"method": "ipmi", "labels": ["bmc"]}),
        "{node}"
    );

    let set = json!({"set": {"bmc": "10.0.0.12"}});
    let (status, body) = n2.api.post("/v1/nodes/n2/labels", set.clone()).await;
    assert_eq!(status, 403, "not the node's own agent: {body}");
    let (_, claimer) = api.post("/v1/tokens", json!({"role": "claimer"})).await;
    let as_claimer = api.with_token(claimer["token"].as_str());
    let (status, body) = as_claimer.post("/v1/nodes/n2/labels", set.clone()).await;
    assert_eq!(status, 403, "nor a claimer: {body}");
    let (status, body) = api.post("/v1/nodes/n9/labels", set.clone()).await;
    assert_eq!(status, 404, "{body}");

    let (status, node) = api.post("/v1/nodes/n2/labels", set).await;
    assert_eq!(status, 200, "{node}");
    assert_eq!(node["labels"], json!({"bmc": "10.0.0.12", "pdu": "a"}));
    assert_eq!(node["agent_labels"], json!({"bmc": "10.6.6.6"}));
    assert_eq!(node["fence_method"], "ipmi", "{node}");
    // The agent registers again, saying something else: the operator's labels stay.
    n2.register_labeled(0, false, json!([]), json!({"bmc": "10.6.6.7"}))
        .await;
    let (_, node) = api.get("/v1/nodes/n2").await;
    assert_eq!(node["labels"]["bmc"], "10.0.0.12", "{node}");
    assert_eq!(node["agent_labels"]["bmc"], "10.6.6.7", "{node}");
    let (status, plan) = api
        .post(
            "/v1/nodes/n2/fence",
            json!({"reason": "check", "dry_run": true, "force": true}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        plan["command"],
        json!(["fence_ipmilan", "--ip", "10.0.0.12", "--pdu", "a"])
    );

    let (status, body) = api
        .post("/v1/nodes/n2/labels", json!({"set": {"pdu": "b"}}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("label `pdu` of node `n2` is set in the server's config file"),
        "{body}"
    );
    let (status, body) = api
        .post(
            "/v1/nodes/n2/labels",
            json!({"set": {"rack": "4\u{1b}[2J"}}),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("`labels.rack` holds the control character U+001B"),
        "{body}"
    );

    let (status, node) = api
        .post("/v1/nodes/n2/labels", json!({"remove": ["bmc"]}))
        .await;
    assert_eq!(status, 200, "{node}");
    assert_eq!(node["fence_lacks"]["labels"], json!(["bmc"]), "{node}");
    let (_, events) = api.get("/v1/events?node=n2").await;
    let labelled: Vec<_> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "node-labelled")
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        labelled,
        [
            "operator labels: bmc=10.0.0.12",
            "operator labels: removed bmc=10.0.0.12"
        ],
        "{events}"
    );
}
