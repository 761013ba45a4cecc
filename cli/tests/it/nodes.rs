//! Nodes as the on-call operator sees them: heartbeats against the TTL and nodes at risk.

use std::time::Duration;

use csivol_tests::{FakeAgent, eventually};

use crate::support::{Env, WAIT};

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
