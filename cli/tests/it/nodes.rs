//! Nodes as the on-call operator sees them and acts on them: heartbeats against the TTL,
//! nodes at risk, `node show`, drain, eligibility and remove.

use std::time::Duration;

use csivol_tests::{FakeAgent, eventually};
use serde_json::json;

use crate::support::{Env, WAIT, done, make_ready};

/// Heartbeats for `agent` until the task is aborted.
fn keep_alive(agent: &FakeAgent) -> tokio::task::JoinHandle<()> {
    let agent = FakeAgent {
        api: agent.api.clone(),
        node: agent.node.clone(),
    };
    tokio::spawn(async move {
        loop {
            agent.heartbeat().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
}

#[tokio::test]
async fn a_silent_node_is_shown_at_risk_before_it_is_lost() {
    // n2 registers and then says nothing: at risk after half the TTL, lost after it.
    let env = Env::start_with("at-risk", &["--heartbeat-ttl=8s"]);
    let n1 = env.node("n1", 0).await;
    let _alive = keep_alive(&n1);
    let _n2 = env.node("n2", 0).await;

    let r = env.run(&["node", "list", "-o", "json"]).await;
    let nodes = r.json();
    assert_eq!(nodes[0]["heartbeat_ttl_ms"], 8000, "{r}");
    assert!(nodes[0]["silent_ms"].as_u64().unwrap() < 8000, "{r}");

    let status = eventually("n2 to be at risk", WAIT, || async {
        let r = env.run(&["status"]).await;
        r.stdout.contains("at risk").then_some(r)
    })
    .await;
    let lines: Vec<&str> = status.stdout.lines().collect();
    assert_eq!(lines[1], "nodes:   2 (2 ready, 1 at risk)", "{status}");
    assert!(
        lines[2].starts_with("  at risk: n2: no heartbeat for ")
            && lines[2].contains("s; lost in "),
        "{status}"
    );
    let r = env.run(&["status", "-o", "json"]).await;
    assert_eq!(r.json()["nodes_at_risk"], serde_json::json!(["n2"]), "{r}");

    let r = env.run(&["node", "list"]).await;
    let n1_row = r.stdout.lines().find(|l| l.starts_with("n1 ")).unwrap();
    let n2_row = r.stdout.lines().find(|l| l.starts_with("n2 ")).unwrap();
    assert!(n1_row.contains(" ago, TTL 8s"), "{r}");
    assert!(n2_row.contains("no heartbeat for "), "{r}");
    let r = env.run(&["node", "show", "n2"]).await;
    assert!(
        r.stdout.contains("  heartbeat:       no heartbeat for "),
        "{r}"
    );

    // Once lost it is no longer "at risk": it is lost.
    eventually("n2 to be lost", WAIT, || async {
        let (_, n) = env.api().get("/v1/nodes/n2").await;
        (n["status"] == "lost").then_some(())
    })
    .await;
    let r = env.run(&["status"]).await;
    assert!(r.stdout.contains("nodes:   2 (1 lost, 1 ready)\n"), "{r}");
    let r = env.run(&["node", "show", "n2"]).await;
    assert!(
        r.stdout
            .contains("  heartbeat:       none for over 8s (the TTL)"),
        "{r}"
    );
}

#[tokio::test]
async fn drain_waits_for_owners_then_the_node_can_be_removed() {
    let env = Env::start("drain");
    env.volume("v1", "single-node-writer").await;
    env.volume("v2", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    // n2 runs the node plugin only: n1 hosts the controller, so its operations come to n1.
    let n2 = FakeAgent::new(&env.server, "n2").await;
    n2.register(0, false, json!([])).await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "v1", "a1").await;

    // A node with a claim cannot be removed; the hint is the drain.
    snap!(env.run(&["node", "remove", "n1"]).await, @r"
    exit: 4
    --- stdout
    --- stderr
    error: failed to remove node `n1`: refusing to remove node `n1`: it still has 1 claim and 1 attachment
    hint: drain it and wait for the owners to release their claims: csivol node drain n1 --wait
    ");

    // Drain: no new claims on n1 (other nodes still take them), the claim stays.
    let drain = env.spawn(&["node", "drain", "n1", "--wait", "--deadline", "1m"]);
    eventually("n1 to be draining", WAIT, || async {
        let (_, n) = env.api().get("/v1/nodes/n1").await;
        (n["eligibility"] == "draining").then_some(())
    })
    .await;
    snap!(env.run(&["claim", "v2", "--node", "n1", "--alloc", "a2"]).await, @r"
    exit: 4
    --- stdout
    --- stderr
    error: failed to claim volume `v2` for alloc `a2` on node `n1`: node `n1` is being drained: it takes no new claims
    hint: claim on another node, or make it eligible again: csivol node eligibility n1 --enable
    ");
    let r = env
        .run(&["claim", "v2", "--node", "n2", "--alloc", "a2"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let r = env.run(&["node", "show", "n1"]).await;
    assert!(
        r.stdout
            .contains("  eligibility:     draining: 1 claim left for its owner to release\n"),
        "{r}"
    );
    assert!(
        r.stdout
            .contains("\nclaims:\nVOLUME  ALLOC  MODE   STATE  TARGET PATH"),
        "{r}"
    );
    assert!(r.stdout.contains("\nrecent events:\n"), "{r}");
    assert!(r.stdout.contains("node-draining"), "{r}");

    // The owner releases; the node unmounts, unstages and the controller detaches.
    let r = env.run(&["release", "v1", "--alloc", "a1"]).await;
    assert_eq!(r.code, 0, "{r}");
    n1.report(json!([
        {"kind": "unpublished", "volume": "v1", "alloc": "a1"},
        {"kind": "unstaged", "volume": "v1"}
    ]))
    .await;
    let op = n1.wait_op("unpublish").await;
    n1.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    let r = done(drain).await;
    assert_eq!(r.code, 0, "{r}");
    assert_eq!(
        r.stdout,
        "node n1 is drained: nothing is claimed on or attached to it
"
    );
    assert!(
        r.stderr
            .starts_with("draining node n1: it still has 1 claim (v1/a1) and 1 attachment (v1)"),
        "{r}"
    );
    assert!(r.stderr.ends_with("hint: csivol node remove n1 forgets it; csivol node eligibility n1 --enable puts it back in service
"), "{r}");

    // n1 hosts the controller: it finishes v2's ControllerPublish to n2 before it goes.
    make_ready(&n1, &n2, "v2", "a2").await;

    snap!(env.run(&["node", "remove", "n1"]).await, @r"
    exit: 0
    --- stdout
    --- stderr
    removed node n1
    ");
    let r = env.run(&["node", "show", "n1"]).await;
    assert_eq!(r.code, 3, "{r}");
    let r = env.run(&["events", "--node", "n1", "-o", "json"]).await;
    let events = r.json();
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.ends_with(&["node-removed"]), "{kinds:?}");
}

#[tokio::test]
async fn eligibility_turns_new_claims_off_and_on() {
    let env = Env::start("eligibility");
    env.volume("v1", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;
    snap!(env.run(&["node", "eligibility", "n1", "--disable"]).await, @r"
    exit: 0
    --- stdout
    node n1 takes no new claims; its claims stay until their owners release them
    --- stderr
    ");
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 4, "{r}");
    let r = env.run(&["node", "list"]).await;
    assert!(r.stdout.contains("\nn1    ready, ineligible  "), "{r}");
    snap!(env.run(&["node", "eligibility", "n1", "--enable"]).await, @r"
    exit: 0
    --- stdout
    node n1 takes new claims
    --- stderr
    ");
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    // One of the two is required.
    let r = env.run(&["node", "eligibility", "n1"]).await;
    assert_eq!(r.code, 2, "{r}");
}

#[tokio::test]
async fn a_shared_volume_blocked_on_one_node_still_takes_claims() {
    let env = Env::start_with("partly-blocked", &["--heartbeat-ttl=1s"]);
    env.volume("shared", "multi-node-multi-writer").await;
    env.volume("single", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let _n1_alive = keep_alive(&n1);
    let n2 = FakeAgent::new(&env.server, "n2").await;
    n2.register(0, false, json!([])).await;
    let n2_alive = keep_alive(&n2);
    for (volume, alloc, node, agent) in [
        ("shared", "a1", "n1", &n1),
        ("shared", "a2", "n2", &n2),
        ("single", "a3", "n2", &n2),
    ] {
        let r = env
            .run(&["claim", volume, "--node", node, "--alloc", alloc])
            .await;
        assert_eq!(r.code, 0, "{r}");
        make_ready(&n1, agent, volume, alloc).await;
    }
    n2_alive.abort();
    eventually("n2 to be lost", WAIT, || async {
        let (_, n) = env.api().get("/v1/nodes/n2").await;
        (n["status"] == "lost").then_some(())
    })
    .await;
    snap!(env.run(&["volume", "list"]).await, @r"
    exit: 0
    --- stdout
    NAME    PLUGIN  ACCESS MODE              STATE                   CLAIMS              NODES
    shared  hp      multi-node-multi-writer  blocked, takes claims   1 ready, 1 blocked  n1, n2 (blocked)
    single  hp      single-node-writer       blocked, no new claims  1 blocked           n2 (blocked)
    --- stderr
    ");
    let r = env.run(&["volume", "list", "-o", "json"]).await;
    let accepts: Vec<bool> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["accepts_claims"].as_bool().unwrap())
        .collect();
    assert_eq!(accepts, [true, false], "{r}");
    let r = env
        .run(&["claim", "shared", "--node", "n1", "--alloc", "a4"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    let r = env
        .run(&["claim", "single", "--node", "n1", "--alloc", "a5"])
        .await;
    assert_eq!(r.code, 6, "{r}");
}

/// A lost node that comes back cleans up by itself, and each claim it settles is an event
/// the operator reads in `csivol events`: resumed (still mounted), republished (gone from
/// the node, but nobody released it), taken down (unblocked by an operator meanwhile).
#[tokio::test]
async fn a_returning_node_records_what_it_did_with_each_claim() {
    let env = Env::start_with("returned", &["--heartbeat-ttl=1s"]);
    for v in ["v1", "v2", "v3"] {
        env.volume(v, "single-node-writer").await;
    }
    let n1 = env.node("n1", 0).await;
    let alive = keep_alive(&n1);
    for (v, a) in [("v1", "a1"), ("v2", "a2"), ("v3", "a3")] {
        let r = env.run(&["claim", v, "--node", "n1", "--alloc", a]).await;
        assert_eq!(r.code, 0, "{r}");
        make_ready(&n1, &n1, v, a).await;
    }
    alive.abort();
    eventually("n1 to be lost", WAIT, || async {
        let (_, n) = env.api().get("/v1/nodes/n1").await;
        (n["status"] == "lost").then_some(())
    })
    .await;
    let r = env
        .run(&["unblock", "v3", "--reason", "test", "--yes"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    // Back with a1 and a3 still mounted; a2 is gone from the node.
    n1.register(
        0,
        true,
        json!([{"volume": "v1", "alloc": "a1"}, {"volume": "v3", "alloc": "a3"}]),
    )
    .await;
    let r = env.run(&["events", "--node", "n1", "-o", "json"]).await;
    let events = r.json();
    let settled: Vec<(String, String)> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            [
                "claim-resumed",
                "claim-republished",
                "claim-released",
                "claim-taken-down",
            ]
            .contains(&e["kind"].as_str().unwrap())
                && e["actor"] == "node:n1"
        })
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["alloc"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("claim-resumed", "a1"),
        ("claim-republished", "a2"),
        ("claim-taken-down", "a3"),
    ]
    .iter()
    .map(|(k, a)| ((*k).to_owned(), (*a).to_owned()))
    .collect();
    assert_eq!(settled, want, "{r}");
}

#[tokio::test]
async fn node_show_lists_its_plugins_topology() {
    let env = Env::start("topology");
    let agent = FakeAgent::new(&env.server, "n1").await;
    let plugin = json!({
        "id": "hp",
        "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
        "capabilities": {"controller_service": false, "volume_accessibility_constraints": true},
        "node": {
            "info": {"node_id": "csi-n1", "max_volumes_per_node": 0, "accessible_topology": {"zone": "a", "rack": "4"}},
            "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}
        },
    });
    let (status, body) = agent
        .api
        .post("/v1/nodes/n1/register", json!({"plugins": [plugin]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let r = env.run(&["node", "show", "n1"]).await;
    assert!(
        r.stdout.contains(
            "PLUGIN  CSI NODE ID  USED  MAX       CONTROLLER  TOPOLOGY        READY CHECK"
        ) && r
            .stdout
            .contains("hp      csi-n1       0     no limit  no          rack=4, zone=a  -"),
        "{r}"
    );
    let r = env.run(&["node", "show", "n1", "-o", "json"]).await;
    assert_eq!(
        r.json()["plugins"][0]["topology"],
        json!({"rack": "4", "zone": "a"}),
        "{r}"
    );
}

/// A claim its owner released just before its node was lost is not brought back to life
/// when the node returns: its release goes on through the node.
#[tokio::test]
async fn a_release_requested_before_the_loss_goes_on_after_the_return() {
    let env = Env::start_with("release-then-lost", &["--heartbeat-ttl=1s"]);
    env.volume("v1", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let alive = keep_alive(&n1);
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "v1", "a1").await;
    let r = env.run(&["release", "v1", "--alloc", "a1"]).await;
    assert_eq!(r.code, 0, "{r}");
    alive.abort();
    eventually("n1 to be lost", WAIT, || async {
        let (_, n) = env.api().get("/v1/nodes/n1").await;
        (n["status"] == "lost").then_some(())
    })
    .await;
    // Back, with the volume still mounted: the release goes on, the claim is not resumed.
    n1.register(0, true, json!([{"volume": "v1", "alloc": "a1"}]))
        .await;
    let (_, c) = env.api().get("/v1/volumes/v1/claims/a1").await;
    assert_eq!(c["state"], "releasing", "{c}");
    n1.report(json!([{"kind": "unpublished", "volume": "v1", "alloc": "a1"}]))
        .await;
    eventually("the claim to be gone", WAIT, || async {
        let (status, _) = env.api().get("/v1/volumes/v1/claims/a1").await;
        (status == 404).then_some(())
    })
    .await;
    let r = env.run(&["events", "--volume", "v1", "-o", "json"]).await;
    let events = r.json();
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(!kinds.contains(&"claim-resumed"), "{kinds:?}");
}
