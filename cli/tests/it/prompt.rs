//! The confirmation prompt of destructive commands, on a real pseudo-terminal (util-linux
//! `script`): "n" exits 2 and changes nothing on the server, "y" goes through.

use csivol_tests::{FakeAgent, eventually};
use serde_json::{Value, json};

use crate::support::{Env, PROMPT, Terminal, WAIT, make_ready, on_terminal};

/// The server's view of everything a destructive command could change.
async fn state(env: &Env) -> Value {
    let api = env.api();
    let mut all = json!({});
    for path in ["/v1/volumes", "/v1/claims", "/v1/nodes", "/v1/events"] {
        let (status, body) = api.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        all[path] = body;
    }
    // Heartbeats move on their own; everything else must not.
    for node in all["/v1/nodes"].as_array_mut().unwrap() {
        let node = node.as_object_mut().unwrap();
        assert!(node.remove("last_heartbeat").is_some(), "{node:?}");
        node.remove("silent_ms");
    }
    all
}

#[tokio::test]
async fn deregister_asks_and_no_keeps_the_volume() {
    let env = Env::start("prompt-deregister");
    env.volume("v1", "single-node-writer").await;
    let before = state(&env).await;

    let r = on_terminal(&env, &["volume", "deregister", "v1"], Terminal::Answer("n")).await;
    snap!(r, @"
    exit: 2
    --- stdout
    This deregisters volume v1: csivol forgets it; the storage itself (external id ext-v1) is kept in plugin hp.
    Proceed? [y/N] n
    error: cancelled; nothing was changed
    --- stderr
    ");
    assert_eq!(state(&env).await, before, "answering n changed the server");

    let r = on_terminal(&env, &["volume", "deregister", "v1"], Terminal::Answer("y")).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains(PROMPT), "{r}");
    assert!(r.stdout.contains("deregistered volume v1"), "{r}");
    assert_eq!(env.run(&["volume", "show", "v1"]).await.code, 3);
}

#[tokio::test]
async fn unblock_asks_and_no_leaves_the_volume_blocked() {
    let env = Env::start_with("prompt-unblock", &["--heartbeat-ttl=1s"]);
    env.volume("v1", "single-node-writer").await;
    // n2 hosts the controller and stays; n1 holds v1 and is lost.
    let n2 = env.node("n2", 0).await;
    let _n2_alive = n2.keep_alive();
    let n1 = FakeAgent::new(&env.server, "n1").await;
    n1.register(0, false, json!([])).await;
    let n1_alive = n1.keep_alive();
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n2, &n1, "v1", "a1").await;
    drop(n1_alive);
    let api = env.api();
    eventually("n1 to be lost", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        (n["status"] == "lost").then_some(())
    })
    .await;
    assert_eq!(env.run(&["status", "--blocked", "-q"]).await.code, 6);
    let before = state(&env).await;

    let args = ["unblock", "v1", "--reason", "n1 powered off"];
    let r = on_terminal(&env, &args, Terminal::Answer("n")).await;
    snap!(r, @"
    exit: 2
    --- stdout
    This will:
      force-release the claim of alloc a1 on volume v1 held by node n1, lost since [TIME], without the node
      force-detach volume v1 from node n1, lost since [TIME]: ControllerUnpublishVolume without the node
    csivol cannot prove that a lost node stopped writing: unblock only a node that is really gone or fenced, or its data may be corrupted.
    Proceed? [y/N] n
    error: cancelled; nothing was changed
    --- stderr
    ");
    assert_eq!(state(&env).await, before, "answering n changed the server");
    assert_eq!(env.run(&["status", "--blocked", "-q"]).await.code, 6);

    let r = on_terminal(&env, &args, Terminal::Answer("y")).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains(PROMPT), "{r}");
    let (_, claims) = api.get("/v1/claims").await;
    assert_eq!(claims, json!([]), "the claim of a1 was force-released");
    let (_, events) = api.get("/v1/events").await;
    assert!(
        events.to_string().contains("n1 powered off"),
        "the reason is in the event log: {events}"
    );
}
