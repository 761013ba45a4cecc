//! Who decides how a node is fenced: only the operator. Probes as an attacker holding one
//! node's token (or root on it) would run them: the node's agent reports labels meant to
//! point its fence at another machine, to pick another method, or to escape its fence, then
//! goes silent. The fence methods are a script that records the command line it was run
//! with (the fake below the line: it powers nothing off), run by the real server.

use std::path::PathBuf;
use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, PLUGIN, mounted};

const WAIT: Duration = Duration::from_secs(60);

/// The fence "method": appends its arguments, one run per line, to the file named first.
const RECORDER: &str = r#"#!/bin/bash
set -u
log="$1"
shift
echo "$*" >> "$log"
echo "powered off: $*"
exit 0
"#;

/// A cluster of two nodes; node-2's agent reports `agent_labels`; `config` is the fence
/// configuration, `{rec}` in it standing for the recorder's `"bash", "<script>", "<log>"`.
fn cluster(name: &str, config: &str, agent_labels: &[&str]) -> Cluster {
    let node2 = NodeOpts {
        agent_args: agent_labels
            .iter()
            .map(|l| format!("--label={l}"))
            .collect(),
        ..NodeOpts::default()
    };
    Cluster::start_with_config(name, "2s", vec![NodeOpts::default(), node2], |dir| {
        let script = dir.join("recorder.sh");
        std::fs::write(&script, RECORDER).unwrap();
        let rec = format!(
            "\"bash\", \"{}\", \"{}\"",
            script.display(),
            dir.join("fenced.log").display()
        );
        config.replace("{rec}", &rec)
    })
}

/// The command lines the fence methods ran, in order.
fn fenced(c: &Cluster) -> Vec<String> {
    std::fs::read_to_string(c.dir.join("fenced.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A volume claimed ready on node-2, whose agent then stops answering (a hung machine:
/// its mounts stay); returns the target path once node-2 is lost.
fn claimed_then_silent(c: &Cluster) -> PathBuf {
    c.create_volume_spec(
        "vol",
        &format!(
            "name = \"vol\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\nattachment = \"file-system\"\ncapacity_bytes = 1048576\n"
        ),
    );
    let out = c.csivol(&[
        "claim",
        "vol",
        "--node",
        "node-2",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    let target = PathBuf::from(out.ok().json()["target_path"].as_str().unwrap());
    let pid = c.nodes[1].agent_pid().expect("agent running");
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    c.wait_node_status(1, "lost");
    target
}

fn node(c: &Cluster, name: &str) -> Value {
    c.csivol(&["node", "show", name, "-o", "json"]).ok().json()
}

fn volume_state(c: &Cluster) -> Value {
    c.csivol(&["volume", "show", "vol", "-o", "json"])
        .ok()
        .json()["state"]
        .clone()
}

/// The attack as it was reported: node-2's agent says its BMC is node-1's and goes
/// silent; `csivol fence node-2` must not power off node-1, nor free node-2's volume on
/// the strength of it. The operator's own label is what the method uses, and it stays in
/// the state across a server restart.
#[test]
fn a_node_cannot_point_its_fence_at_another_machine() {
    let config = "[[fence]]\nname = \"ipmi\"\ncommand = [{rec}, \"--ip\", \"{bmc}\"]\nnodes = [\"node-*\"]\n\n\
                  [node_labels.node-1]\nbmc = \"10.0.0.1\"\n";
    let mut c = cluster("fence-target", config, &["bmc=10.0.0.1"]);
    let t = claimed_then_silent(&c);

    let refused = c.csivol(&["fence", "node-2", "--reason", "hung", "--yes"]);
    assert_eq!(fenced(&c), Vec::<String>::new(), "nothing ran: {refused:?}");
    let shown = node(&c, "node-2");
    assert_eq!(shown["agent_labels"]["bmc"], "10.0.0.1", "shown: {shown}");
    assert!(shown["labels"].get("bmc").is_none(), "not trusted: {shown}");
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("method ipmi lacks label bmc for node-2")
            && refused
                .stderr
                .contains("hint: set it: csivol node label node-2 bmc=…"),
        "{refused:?}"
    );
    assert_eq!(volume_state(&c), "blocked");
    assert!(mounted(&t), "nothing was taken down");

    let blocked = c.csivol(&["status", "--blocked", "-o", "wide"]);
    assert_eq!(blocked.code, 6, "{blocked:?}");
    assert!(
        blocked
            .stdout
            .contains("method ipmi lacks label bmc for node-2: csivol node label node-2 bmc=…"),
        "{blocked:?}"
    );
    let json = c.csivol(&["status", "--blocked", "-o", "json"]).json();
    assert!(json[0]["fence"].is_null(), "{json}");
    assert_eq!(json[0]["fence_lacks"]["method"], "ipmi", "{json}");
    assert_eq!(json[0]["fence_lacks"]["labels"][0], "bmc", "{json}");

    // The operator says where node-2's BMC is; the fence acts on that machine.
    c.csivol(&["node", "label", "node-2", "bmc=10.0.0.2", "rack=4"])
        .ok();
    let evs = c
        .csivol(&["events", "--node", "node-2", "-o", "json"])
        .ok()
        .json();
    let labelled = evs
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "node-labelled")
        .unwrap_or_else(|| panic!("a node-labelled event: {evs}"));
    assert!(
        labelled["actor"].as_str().unwrap().starts_with("operator:")
            && labelled["message"]
                .as_str()
                .unwrap()
                .contains("bmc=10.0.0.2"),
        "{labelled}"
    );
    c.kill_server();
    c.start_server();
    c.wait_node_status(1, "lost");
    assert_eq!(node(&c, "node-2")["labels"]["bmc"], "10.0.0.2", "kept");
    let done = c.csivol(&["fence", "node-2", "--reason", "hung", "--yes", "-o", "json"]);
    assert_eq!(done.ok().json()["fence"]["ok"], true, "{done:?}");
    assert_eq!(fenced(&c), ["--ip 10.0.0.2"]);
    assert_ne!(volume_state(&c), "blocked");
}

/// Agent labels choose no method: node-2 says it is in rack 5 (it is in rack 4), which
/// would have the fence cut outlet 7 of rack 5, another machine's.
#[test]
fn a_node_cannot_choose_its_fence_method() {
    let config = "[[fence]]\nname = \"pdu-rack4\"\ncommand = [{rec}, \"--rack\", \"4\", \"--outlet\", \"{outlet}\"]\nlabels = { rack = \"4\" }\n\n\
                  [[fence]]\nname = \"pdu-rack5\"\ncommand = [{rec}, \"--rack\", \"5\", \"--outlet\", \"{outlet}\"]\nlabels = { rack = \"5\" }\n\n\
                  [node_labels.node-2]\noutlet = \"7\"\n";
    let c = cluster("fence-choice", config, &["rack=5"]);
    let _t = claimed_then_silent(&c);

    let refused = c.csivol(&["fence", "node-2", "--reason", "hung", "--yes"]);
    assert_eq!(fenced(&c), Vec::<String>::new(), "nothing ran: {refused:?}");
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("no fence method applies to node `node-2` by the labels an operator set")
            && refused.stderr.contains(
                "method pdu-rack5 would apply by the label rack=5 that its agent reports, which the method does not trust"
            ),
        "{refused:?}"
    );
    assert_eq!(volume_state(&c), "blocked");

    c.csivol(&["node", "label", "node-2", "rack=4"]).ok();
    assert_eq!(node(&c, "node-2")["fence_method"], "pdu-rack4");
    c.csivol(&["fence", "node-2", "--reason", "hung", "--yes"])
        .ok();
    assert_eq!(fenced(&c), ["--rack 4 --outlet 7"]);
}

/// Agent labels cannot make a node unfenceable either: node-2 claims to be in maintenance,
/// which selects a method the policy never runs; the policy fences it by rack 4's method,
/// the one its operator's labels select.
#[test]
fn a_node_cannot_make_itself_unfenceable() {
    let config = "[[fence]]\nname = \"maintenance\"\ncommand = [{rec}, \"by-hand\"]\nlabels = { maintenance = \"yes\" }\n\n\
                  [[fence]]\nname = \"rack4\"\ncommand = [{rec}, \"--ip\", \"{bmc}\"]\nlabels = { rack = \"4\" }\nauto_fence_after = \"1s\"\n\n\
                  [node_labels.node-2]\nrack = \"4\"\nbmc = \"10.0.0.2\"\n";
    let c = cluster("fence-escape", config, &["maintenance=yes"]);
    assert_eq!(node(&c, "node-2")["fence_method"], "rack4");
    let t = claimed_then_silent(&c);
    wait_for("the policy to fence node-2", WAIT, || {
        (node(&c, "node-2")["status"] == "fenced").then_some(())
    });
    assert_eq!(fenced(&c), ["--ip 10.0.0.2"]);
    assert!(
        mounted(&t),
        "the recorder powers nothing off; the mount stays"
    );
}

/// The policy does not run a method whose command lacks an operator's label, whatever the
/// agent reports in its place; it fences once the operator set it, with that value.
#[test]
fn the_policy_waits_for_the_operators_label() {
    let config = "[[fence]]\nname = \"ipmi\"\ncommand = [{rec}, \"--ip\", \"{bmc}\"]\nnodes = [\"node-*\"]\nauto_fence_after = \"1s\"\n";
    let c = cluster("fence-policy-waits", config, &["bmc=10.0.0.1"]);
    let _t = claimed_then_silent(&c);
    let shown = node(&c, "node-2");
    assert_eq!(fenced(&c), Vec::<String>::new(), "{shown}");
    assert!(shown["next_fence_at"].is_null(), "nothing planned: {shown}");
    assert_eq!(shown["fence_lacks"]["labels"][0], "bmc", "{shown}");
    c.csivol(&["node", "label", "node-2", "bmc=10.0.0.2"]).ok();
    wait_for("the policy to fence node-2", WAIT, || {
        (node(&c, "node-2")["status"] == "fenced").then_some(())
    });
    assert_eq!(fenced(&c), ["--ip 10.0.0.2"]);
}

/// `trust_agent_labels` lets an agent's label select a method, never fill its command: a
/// key that fills a placeholder is refused when the server starts, naming the method.
#[test]
fn trusting_an_agent_label_that_fills_the_command_is_refused_at_start() {
    let dir = csivol_tests::TestDir::new("fence-trust-config");
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        "[[fence]]\nname = \"ipmi\"\ncommand = [\"fence_ipmilan\", \"--ip\", \"{bmc}\"]\ntrust_agent_labels = [\"bmc\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(csivol_tests::bin_path("csivol-server"))
        .args(["serve", "--listen=127.0.0.1:0"])
        .arg(format!("--data-dir={}", dir.join("data").display()))
        .arg(format!("--config={}", config.display()))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "fence method `ipmi` trusts the agent's label `bmc`, which fills `{bmc}` in its command"
        ),
        "{stderr}"
    );
}
