//! Lost nodes and blocked volumes: `status --blocked` gating, the refusals a blocked volume
//! causes, and the operator actions `unblock` and `detach` with their plans, confirmation
//! and waits.

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

/// A node agent that runs plugin `hp`'s node service only, and fences itself after 30s.
async fn fencing_node(env: &Env, name: &str) -> FakeAgent {
    let agent = FakeAgent::new(&env.server, name).await;
    let plugin = json!({
        "id": "hp",
        "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
        "capabilities": {"controller_service": true, "volume_accessibility_constraints": false},
        "node": {
            "info": {"node_id": format!("csi-{name}"), "max_volumes_per_node": 0},
            "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}
        },
    });
    let (status, body) = agent
        .api
        .post(
            &format!("/v1/nodes/{name}/register"),
            json!({"plugins": [plugin], "fence_after_ms": 30000}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    agent
}

#[tokio::test]
async fn blocked_volumes_gate_and_unblock() {
    let env = Env::start_with("blocked", &["--heartbeat-ttl=1s"]);
    env.volume("v1", "single-node-writer").await;
    env.volume("v2", "single-node-writer").await;
    env.volume("v3", "single-node-writer").await;
    // n2 hosts the controller and stays; n1 runs the volumes and will be lost.
    let n2 = env.node("n2", 0).await;
    let _n2_alive = keep_alive(&n2);
    let n1 = fencing_node(&env, "n1").await;
    let n1_alive = keep_alive(&n1);

    snap!(env.run(&["status", "--blocked"]).await, @"
    exit: 0
    --- stdout
    --- stderr
    no volume is blocked
    ");
    snap!(env.run(&["status", "--blocked", "-o", "json"]).await, @"
    exit: 0
    --- stdout
    []
    --- stderr
    ");

    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n2, &n1, "v1", "a1").await;
    let r = env
        .run(&["claim", "v2", "--node", "n1", "--alloc", "a2"])
        .await;
    assert_eq!(r.code, 0, "{r}");

    // n1 stops heartbeating: lost after the 1s TTL, its volumes blocked.
    n1_alive.abort();
    let api = env.api();
    eventually("n1 to be lost", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        (n["status"] == "lost").then_some(())
    })
    .await;

    snap!(env.run(&["status", "--blocked"]).await, @r#"
    exit: 6
    --- stdout
    VOLUME  LOST NODE  LOST SINCE            SELF-FENCES     BLOCKED CLAIMS  UNBLOCK WITH                                OR FENCE WITH
    v1      n1         [TIME]  yes, after 30s  a1              csivol unblock v1 --node n1 --reason "..."  no fence method
    v2      n1         [TIME]  yes, after 30s  a2              csivol unblock v2 --node n1 --reason "..."  no fence method
    --- stderr
    hint: node n1 blocks 2 volumes; if it is really gone or fenced, unblock them all with: csivol unblock --node n1 --reason "..."
    "#);
    snap!(env.run(&["status", "--blocked", "-o", "json"]).await, @r#"
    exit: 6
    --- stdout
    [
      {
        "volume": "v1",
        "node": "n1",
        "lost_at": "[TIME]",
        "fence_after": "30s",
        "fenced_at": null,
        "allocs": [
          "a1"
        ],
        "attached": true,
        "unblock": "csivol unblock v1 --node n1 --reason \"...\"",
        "fence_method": null,
        "fence": null,
        "fence_failures": 0,
        "fence_error": null
      },
      {
        "volume": "v2",
        "node": "n1",
        "lost_at": "[TIME]",
        "fence_after": "30s",
        "fenced_at": null,
        "allocs": [
          "a2"
        ],
        "attached": true,
        "unblock": "csivol unblock v2 --node n1 --reason \"...\"",
        "fence_method": null,
        "fence": null,
        "fence_failures": 0,
        "fence_error": null
      }
    ]
    --- stderr
    "#);
    snap!(env.run(&["status", "v1", "--blocked"]).await, @r#"
    exit: 6
    --- stdout
    VOLUME  LOST NODE  LOST SINCE            SELF-FENCES     BLOCKED CLAIMS  UNBLOCK WITH                                OR FENCE WITH
    v1      n1         [TIME]  yes, after 30s  a1              csivol unblock v1 --node n1 --reason "..."  no fence method
    --- stderr
    "#);
    let r = env.run(&["status", "v3", "--blocked"]).await;
    assert_eq!(r.code, 0, "v3 is not blocked: {r}");
    snap!(env.run(&["status"]).await, @r#"
    exit: 0
    --- stdout
    volumes: 3 (2 blocked, 1 free)
    nodes:   2 (1 lost, 1 ready)

    blocked volumes:
    VOLUME  LOST NODE  LOST SINCE            SELF-FENCES     BLOCKED CLAIMS  UNBLOCK WITH                                OR FENCE WITH
    v1      n1         [TIME]  yes, after 30s  a1              csivol unblock v1 --node n1 --reason "..."  no fence method
    v2      n1         [TIME]  yes, after 30s  a2              csivol unblock v2 --node n1 --reason "..."  no fence method

    volumes:
    NAME  PLUGIN  ACCESS MODE         STATE                   CLAIMS     NODES
    v1    hp      single-node-writer  blocked, no new claims  1 blocked  n1 (blocked)
    v2    hp      single-node-writer  blocked, no new claims  1 blocked  n1 (blocked)
    v3    hp      single-node-writer  free                    -          -
    --- stderr
    hint: node n1 blocks 2 volumes; if it is really gone or fenced, unblock them all with: csivol unblock --node n1 --reason "..."
    "#);
    snap!(env.run(&["status", "--node", "n1"]).await, @r#"
    exit: 0
    --- stdout
    volumes: 2 (2 blocked)
    nodes:   1 (1 lost)

    blocked volumes:
    VOLUME  LOST NODE  LOST SINCE            SELF-FENCES     BLOCKED CLAIMS  UNBLOCK WITH                                OR FENCE WITH
    v1      n1         [TIME]  yes, after 30s  a1              csivol unblock v1 --node n1 --reason "..."  no fence method
    v2      n1         [TIME]  yes, after 30s  a2              csivol unblock v2 --node n1 --reason "..."  no fence method

    volumes:
    NAME  PLUGIN  ACCESS MODE         STATE                   CLAIMS     NODES
    v1    hp      single-node-writer  blocked, no new claims  1 blocked  n1 (blocked)
    v2    hp      single-node-writer  blocked, no new claims  1 blocked  n1 (blocked)
    --- stderr
    hint: node n1 blocks 2 volumes; if it is really gone or fenced, unblock them all with: csivol unblock --node n1 --reason "..."
    "#);

    // What a blocked volume refuses, with exit 6 and the way out.
    snap!(env.run(&["claim", "v1", "--node", "n2", "--alloc", "a3"]).await, @r#"
    exit: 6
    --- stdout
    --- stderr
    error: failed to claim volume `v1` for alloc `a3` on node `n2`: volume `v1` is single-node-writer and is claimed on node n1: alloc a1 on node n1, which was lost; the claim is blocked until that node comes back or is unblocked
    hint: if node n1 is really gone or fenced, run: csivol unblock v1 --reason "..." (or wait for the node to come back)
    "#);
    snap!(env.run(&["claim", "v1", "--node", "n2", "--alloc", "a3", "--dry-run"]).await, @r#"
    exit: 6
    --- stdout
    refused: volume `v1` is single-node-writer and is claimed on node n1: alloc a1 on node n1, which was lost; the claim is blocked until that node comes back or is unblocked
    --- stderr
    hint: if node n1 is really gone or fenced, run: csivol unblock v1 --reason "..." (or wait for the node to come back)
    "#);
    snap!(env.run(&["claim", "v3", "--node", "n1", "--alloc", "a3"]).await, @"
    exit: 6
    --- stdout
    --- stderr
    error: failed to claim volume `v3` for alloc `a3` on node `n1`: node `n1` is lost since [TIME]; no claim can be placed on it
    hint: choose another node, or bring n1's agent back
    ");
    snap!(env.run(&["release", "v1", "--alloc", "a1"]).await, @r#"
    exit: 6
    --- stdout
    --- stderr
    error: failed to release the claim of alloc `a1` on volume `v1`: the claim of alloc `a1` on volume `v1` is blocked: its node n1 was lost, so it cannot be released through the node
    hint: if node n1 is really gone or fenced, run: csivol unblock v1 --reason "..." (or wait for the node to come back)
    "#);
    snap!(env.run(&["detach", "v1", "--node", "n1", "--reason", "gone", "--yes"]).await, @r#"
    exit: 6
    --- stdout
    --- stderr
    error: failed to detach volume v1 from node n1: node `n1` is lost; its claims cannot be released through it
    hint: to detach without the node, run: csivol detach v1 --node n1 --force --reason "..."
    "#);

    // Unblock: the plan, the refusal without --yes, then the real thing.
    snap!(env.run(&["unblock", "v1", "--reason", "n1 powered off"]).await, @"
    exit: 2
    --- stdout
    --- stderr
    This will:
      force-release the claim of alloc a1 on volume v1 held by node n1, lost since [TIME], without the node
      force-detach volume v1 from node n1, lost since [TIME]: ControllerUnpublishVolume without the node
    csivol cannot prove that a lost node stopped writing: unblock only a node that is really gone or fenced, or its data may be corrupted.
    error: refusing to unblock volume v1 without confirmation: stdin is not a terminal; nothing was changed
    hint: check what it will do with --dry-run, then run it again with --yes
    ");
    assert_eq!(
        env.run(&["status", "--blocked", "-q"]).await.code,
        6,
        "nothing changed"
    );
    snap!(env.run(&["unblock", "v1", "--dry-run"]).await, @"
    exit: 0
    --- stdout
    would:
      force-release the claim of alloc a1 on volume v1 held by node n1, lost since [TIME], without the node
      force-detach volume v1 from node n1, lost since [TIME]: ControllerUnpublishVolume without the node
    --- stderr
    ");
    snap!(env.run(&["unblock", "v1", "--reason", "n1 powered off", "--dry-run", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "dry_run": true,
      "actions": [
        {
          "action": "force-release",
          "volume": "v1",
          "node": "n1",
          "alloc": "a1",
          "lost_since": "[TIME]"
        },
        {
          "action": "force-detach",
          "volume": "v1",
          "node": "n1",
          "lost_since": "[TIME]"
        }
      ]
    }
    --- stderr
    "#);

    // The force-detach is a ControllerUnpublish on n2, which --wait waits for.
    let cli = env.spawn(&[
        "unblock",
        "v1",
        "--reason",
        "n1 powered off",
        "--yes",
        "--wait",
    ]);
    let op = n2.wait_op("unpublish").await;
    assert_eq!(op["volume"], "v1");
    n2.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    let r = done(cli).await;
    assert_eq!(r.code, 0, "{r}");
    snap!(r.stdout, @"
    done:
      force-released the claim of alloc a1 on volume v1 held by node n1, lost since [TIME]
      force-detaching volume v1 from node n1, lost since [TIME]
    ");
    assert!(r.stderr.ends_with("done\n"), "{r}");
    let r = env.run(&["volume", "show", "v1", "-o", "json"]).await;
    assert_eq!(r.json()["state"], "free", "{r}");

    // detach --force on the lost node is an unblock too; the rest of n1 by node.
    snap!(env.run(&["detach", "v2", "--node", "n1", "--reason", "n1 powered off", "--force", "--dry-run"]).await, @"
    exit: 0
    --- stdout
    would:
      force-release the claim of alloc a2 on volume v2 held by node n1, lost since [TIME], without the node
      force-detach volume v2 from node n1, lost since [TIME]: ControllerUnpublishVolume without the node
    --- stderr
    ");
    snap!(env.run(&["unblock", "--node", "n1", "--reason", "n1 powered off", "--yes", "-o", "json"]).await, @r#"
    exit: 0
    --- stdout
    {
      "dry_run": false,
      "actions": [
        {
          "action": "force-release",
          "volume": "v2",
          "node": "n1",
          "alloc": "a2",
          "lost_since": "[TIME]"
        },
        {
          "action": "force-detach",
          "volume": "v2",
          "node": "n1",
          "lost_since": "[TIME]"
        }
      ]
    }
    --- stderr
    "#);
    snap!(env.run(&["status", "--blocked"]).await, @"
    exit: 0
    --- stdout
    --- stderr
    no volume is blocked
    ");
    snap!(env.run(&["unblock", "--node", "n1", "--reason", "again", "--yes"]).await, @"
    exit: 4
    --- stdout
    --- stderr
    error: failed to unblock every volume of node n1: node `n1` holds no blocked volume
    hint: `csivol status --blocked` lists blocked volumes
    ");

    let r = env.run(&["events", "--volume", "v1", "-o", "json"]).await;
    let messages: Vec<_> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        messages.contains(&"unblocked: n1 powered off".to_owned()),
        "{messages:?}"
    );
}

#[tokio::test]
async fn detach_through_a_live_node() {
    let env = Env::start("detach");
    env.volume("v1", "single-node-multi-writer").await;
    let n1 = env.node("n1", 0).await;
    for alloc in ["a1", "a2"] {
        let r = env
            .run(&["claim", "v1", "--node", "n1", "--alloc", alloc])
            .await;
        assert_eq!(r.code, 0, "{r}");
    }
    make_ready(&n1, &n1, "v1", "a1").await;
    n1.report(json!([{"kind": "published", "volume": "v1", "alloc": "a2", "target_path": "/mnt/csivol/v1/a2"}]))
        .await;

    snap!(env.run(&["detach", "v1", "--node", "n1", "--reason", "drain n1"]).await, @"
    exit: 2
    --- stdout
    --- stderr
    This will:
      release the claim of alloc a1 on volume v1 through node n1
      release the claim of alloc a2 on volume v1 through node n1
    error: refusing to detach volume v1 from node n1 without confirmation: stdin is not a terminal; nothing was changed
    hint: check what it will do with --dry-run, then run it again with --yes
    ");
    snap!(env.run(&["detach", "v1", "--node", "n1", "--reason", "drain n1", "--dry-run"]).await, @"
    exit: 0
    --- stdout
    would:
      release the claim of alloc a1 on volume v1 through node n1
      release the claim of alloc a2 on volume v1 through node n1
    --- stderr
    ");
    snap!(env.run(&["detach", "v1", "--node", "n1", "--reason", "drain n1", "--force", "--yes"]).await, @r#"
    exit: 4
    --- stdout
    --- stderr
    error: failed to force-detach volume v1 from node n1: node `n1` is ready; --force is only for a lost node
    hint: detach through the node: csivol detach v1 --node n1 --reason "..."
    "#);
    snap!(env.run(&["detach", "v1", "--node", "n2", "--reason", "drain n1", "--yes"]).await, @r"
    exit: 3
    --- stdout
    --- stderr
    error: failed to detach volume v1 from node n2: node `n2` is not registered
    hint: did you mean node `n1`? (list nodes with `csivol node list`; a node registers when its agent starts)
    ");

    let cli = env.spawn(&[
        "detach", "v1", "--node", "n1", "--reason", "drain n1", "--yes", "--wait",
    ]);
    let api = env.api();
    eventually("the claims to be released", WAIT, || async {
        let (_, v) = api.get("/v1/volumes/v1").await;
        v["claims"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["state"] == "releasing")
            .then_some(())
    })
    .await;
    n1.report(json!([
        {"kind": "unpublished", "volume": "v1", "alloc": "a1"},
        {"kind": "unpublished", "volume": "v1", "alloc": "a2"},
        {"kind": "unstaged", "volume": "v1"}
    ]))
    .await;
    let op = n1.wait_op("unpublish").await;
    n1.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    let r = done(cli).await;
    assert_eq!(r.code, 0, "{r}");
    snap!(r.stdout, @"
    done:
      releasing the claim of alloc a1 on volume v1 through node n1
      releasing the claim of alloc a2 on volume v1 through node n1
    ");

    snap!(env.run(&["detach", "v1", "--node", "n1", "--reason", "drain n1", "--yes"]).await, @"
    exit: 0
    --- stdout
    --- stderr
    nothing to do: volume v1 has no claim on node n1 to release
    ");
}
