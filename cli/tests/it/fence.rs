//! `csivol fence`: its refusals, plan, confirmation and evidence, against a real server
//! whose fence method is a shell command.

use csivol_tests::{FakeAgent, TestDir, eventually};
use serde_json::json;

use crate::support::{Env, WAIT, make_ready};

#[tokio::test]
async fn fence_refuses_plans_asks_and_records() {
    let conf = TestDir::new("cli-fence-config");
    std::fs::write(
        conf.join("server.toml"),
        "[[fence]]\nname = \"bmc\"\n\
         command = [\"sh\", \"-c\", \"echo chassis power off: $CSIVOL_FENCE_NODE\"]\n\
         timeout = \"10s\"\nnodes = [\"n1\"]\n",
    )
    .unwrap();
    let config = format!("--config={}", conf.join("server.toml").display());
    let env = Env::start_with("fence", &["--heartbeat-ttl=1s", &config]);
    env.volume("v1", "single-node-writer").await;
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

    snap!(env.run(&["fence", "n1", "--reason", "test", "--yes"]).await, @r#"
    exit: 4
    --- stdout
    --- stderr
    error: failed to fence node n1: node `n1` is ready (heard from within the heartbeat TTL); fencing powers it off
    hint: fence only a lost node; to power off a ready one anyway: csivol fence n1 --force --reason "..."
    "#);

    drop(n1_alive);
    let api = env.api();
    eventually("n1 to be lost", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        (n["status"] == "lost").then_some(())
    })
    .await;

    snap!(env.run(&["status", "--blocked"]).await, @r#"
    exit: 6
    --- stdout
    VOLUME  LOST NODE  LOST SINCE            SELF-FENCES  BLOCKED CLAIMS  UNBLOCK WITH                                OR FENCE WITH
    v1      n1         [TIME]  no           a1              csivol unblock v1 --node n1 --reason "..."  csivol fence n1 --reason "..."
    --- stderr
    "#);
    snap!(env.run(&["fence", "n1", "--reason", "n1 hung", "--dry-run"]).await, @r#"
    exit: 0
    --- stdout
    run fence method bmc for node n1: sh -c 'echo chassis power off: $CSIVOL_FENCE_NODE' (timeout 10s), then mark it fenced
    would:
      force-release the claim of alloc a1 on volume v1 held by node n1, lost since [TIME], without the node
      force-detach volume v1 from node n1, lost since [TIME]: ControllerUnpublishVolume without the node
    --- stderr
    "#);
    snap!(env.run(&["fence", "n2", "--reason", "x", "--force", "--dry-run"]).await, @r#"
    exit: 2
    --- stdout
    --- stderr
    error: failed to fence node n2: no fence method applies to node `n2`
    hint: add a [[fence]] method for it to the server's config file; if the node is really off, run: csivol unblock --node n2 --reason "..."
    "#);
    snap!(env.run(&["fence", "n1", "--reason", "n1 hung"]).await, @r#"
    exit: 2
    --- stdout
    --- stderr
    This will:
      run fence method bmc for node n1: sh -c 'echo chassis power off: $CSIVOL_FENCE_NODE' (timeout 10s), then mark it fenced
      force-release the claim of alloc a1 on volume v1 held by node n1, lost since [TIME], without the node
      force-detach volume v1 from node n1, lost since [TIME]: ControllerUnpublishVolume without the node
    The fence method powers node n1 off; only a confirmed fence (exit 0) frees its volumes.
    error: refusing to fence node n1 without confirmation: stdin is not a terminal; nothing was changed
    hint: check what it will do with --dry-run, then run it again with --yes
    "#);
    snap!(env.run(&["fence", "n1", "--reason", "n1 hung", "--yes"]).await, @r#"
    exit: 0
    --- stdout
    fenced node n1 (fence #1) by method bmc: sh -c 'echo chassis power off: $CSIVOL_FENCE_NODE' exited 0 in [DURATION]
      by operator:[TOKEN-ID] at [TIME]: n1 hung
      | stdout:
      | chassis power off: n1
    done:
      force-released the claim of alloc a1 on volume v1 held by node n1, lost since [TIME]
      force-detaching volume v1 from node n1, lost since [TIME]
    --- stderr
    "#);
    snap!(env.run(&["fence", "n1", "--reason", "again", "--yes"]).await, @r#"
    exit: 4
    --- stdout
    --- stderr
    error: failed to fence node n1: node `n1` is fenced already; its volumes were unblocked then
    hint: `csivol node show n1` shows its fence history
    "#);
    let r = env.run(&["node", "show", "n1", "-o", "json"]).await;
    assert_eq!(r.code, 0, "{r}");
    let node = r.json();
    assert_eq!(node["status"], "fenced", "{node}");
    assert_eq!(
        node["fences"][0]["output"],
        "stdout:\nchassis power off: n1\n"
    );
    let r = env.run(&["status", "--blocked"]).await;
    assert_eq!(r.code, 0, "nothing is blocked after the fence: {r}");
}

/// `csivol node label`: what it prints, the lacking label shown where the operator looks,
/// and the refusals with their next step.
#[tokio::test]
async fn node_label_sets_what_the_fence_method_needs() {
    let conf = TestDir::new("cli-node-label-config");
    std::fs::write(
        conf.join("server.toml"),
        "[[fence]]\nname = \"ipmi\"\ncommand = [\"fence_ipmilan\", \"--ip\", \"{bmc}\"]\nnodes = [\"n*\"]\n\n\
         [node_labels.n1]\nrack = \"4\"\n",
    )
    .unwrap();
    let config = format!("--config={}", conf.join("server.toml").display());
    let env = Env::start_with("node-label", &[&config]);
    let n1 = FakeAgent::new(&env.server, "n1").await;
    n1.register_labeled(0, false, json!([]), json!({"bmc": "10.6.6.6"}))
        .await;

    let r = env.run(&["node", "show", "n1"]).await;
    let fence_rows: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.contains("labels:") || l.contains("fence method:"))
        .collect();
    insta::assert_snapshot!(fence_rows.join("\n"), @r"
      labels:          rack=4
      agent labels:    bmc=10.6.6.6 (as its agent reports them; not used to fence it)
      fence method:    method ipmi lacks label bmc for n1: csivol node label n1 bmc=…
    ");

    snap!(env.run(&["node", "label", "n1", "bmc=10.0.0.11", "zone=a"]).await, @r"
    exit: 0
    --- stdout
    labels of node n1: bmc=10.0.0.11, rack=4, zone=a
    fence method: ipmi
    --- stderr
    ");
    snap!(env.run(&["node", "label", "n1", "zone-"]).await, @r"
    exit: 0
    --- stdout
    labels of node n1: bmc=10.0.0.11, rack=4
    fence method: ipmi
    --- stderr
    ");
    snap!(env.run(&["node", "label", "n1", "rack=5"]).await, @r#"
    exit: 2
    --- stdout
    --- stderr
    error: label `rack` of node `n1` is set in the server's config file (rack = "4" under [node_labels.n1]); the API does not change it
    hint: change it in the config file of every server and restart them, or remove it there to set it with csivol node label
    "#);
    snap!(env.run(&["node", "label", "n1", "bmc"]).await, @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid value 'bmc' for '<KEY=VALUE|KEY->...': `bmc`: expected KEY=VALUE to set a label or KEY- to remove it, e.g. bmc=10.0.0.12

    For more information, try '--help'.
    ");
    let r = env
        .run(&["node", "label", "n1", "bmc-", "-o", "json"])
        .await;
    assert_eq!(r.json()["fence_lacks"]["labels"], json!(["bmc"]), "{r}");
}
