//! Fencing end to end: a fence method that is a bash script "powering off" a node (it kills
//! the node's agent and plugin by pid and unmounts the node's mounts), run by the real server
//! for `csivol fence` and for the auto-fence policy; failing and hanging methods; a fenced
//! node brought back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out, PLUGIN, mounted};

const WAIT: Duration = Duration::from_secs(60);

/// The fence script. Its mode file (`<cluster>/fence-mode`) says what it does: `off` (the
/// default) powers the node off and exits 0, `noop` exits 0 leaving the node running (a
/// method that lies, or a node powered on again at once), `fail` exits 1, `hang` hangs past any timeout
/// (its `sleep` child records its pid, so the test can check it was killed too).
const SCRIPT: &str = r#"#!/bin/bash
set -u
dir="$1"
mode=$(cat "$(dirname "$dir")/fence-mode" 2>/dev/null || echo off)
case "$mode" in
fail)
    echo "bmc of $CSIVOL_FENCE_NODE refused: power state unknown" >&2
    exit 1
    ;;
noop)
    echo "confirmed off (this test's node keeps running)"
    exit 0
    ;;
hang)
    sleep 300 &
    echo $! > "$(dirname "$dir")/hang.pid"
    wait
    exit 0
    ;;
esac
# Power off: the node's processes die, its mounts go.
for p in agent plugin; do
    kill -9 "$(cat "$dir/$p.pid")" 2>/dev/null || true
done
awk '{print $5}' /proc/self/mountinfo | grep "^$dir/" | sort -r | while read -r m; do
    umount -l "$m"
done
echo "node $CSIVOL_FENCE_NODE powered off (label dir=$CSIVOL_FENCE_LABEL_DIR)"
exit 0
"#;

/// A cluster of two nodes whose server fences node-2 with the script; `extra` is added to
/// the method (e.g. `auto_fence_after`).
fn cluster(name: &str, timeout: &str, extra: &str) -> Cluster {
    Cluster::start_with_config(name, "2s", vec![NodeOpts::default(); 2], |dir| {
        let script = dir.join("fence.sh");
        std::fs::write(&script, SCRIPT).unwrap();
        format!(
            "[[fence]]\nname = \"script\"\ncommand = [\"bash\", \"{}\", \"{{dir}}\"]\ntimeout = \"{timeout}\"\nnodes = [\"node-2\"]\n{extra}\n\n\
             [node_labels.node-2]\ndir = \"{}\"\n",
            script.display(),
            dir.join("node-2").display()
        )
    })
}

fn set_mode(c: &Cluster, mode: &str) {
    std::fs::write(c.dir.join("fence-mode"), mode).unwrap();
}

/// A volume claimed ready by `alloc` on `node`; returns the target path.
fn claimed(c: &Cluster, volume: &str, node: &str, alloc: &str) -> PathBuf {
    create(c, volume);
    let out = claim(c, volume, node, alloc);
    PathBuf::from(out.ok().json()["target_path"].as_str().unwrap())
}

fn create(c: &Cluster, volume: &str) {
    c.create_volume_spec(
        volume,
        &format!(
            "name = \"{volume}\"\nplugin = \"{PLUGIN}\"\naccess_mode = \"single-node-writer\"\nattachment = \"file-system\"\ncapacity_bytes = 1048576\n"
        ),
    );
}

fn claim(c: &Cluster, volume: &str, node: &str, alloc: &str) -> Out {
    c.csivol(&[
        "claim",
        volume,
        "--node",
        node,
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ])
}

/// Makes node-2 stop answering without dying: a hung machine, mounts and all.
fn hang_agent(c: &Cluster) {
    let pid = c.nodes[1].agent_pid().expect("agent running");
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
}

fn events(c: &Cluster, node: &str) -> Vec<Value> {
    c.csivol(&["events", "--node", node, "-o", "json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .clone()
}

fn node(c: &Cluster, name: &str) -> Value {
    c.csivol(&["node", "show", name, "-o", "json"]).ok().json()
}

fn plugin_calls(c: &Cluster, i: usize, rpc: &str) -> usize {
    c.nodes[i]
        .plugin_calls()
        .iter()
        .filter(|call| call["rpc"] == rpc)
        .count()
}

fn gone(pid_file: &Path) -> bool {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// `csivol fence` on a hung node: refused while it is ready, then, once lost, the script
/// powers it off, the evidence is in the event log, its volume is unblocked and claimed
/// elsewhere; brought back, the node re-mounts nothing and becomes ready holding nothing.
#[test]
fn fence_unblocks_with_evidence_and_the_node_comes_back_clean() {
    let mut c = cluster("fence", "20s", "");
    let t = claimed(&c, "vol", "node-2", "a1");
    assert!(mounted(&t));
    create(&c, "spare");

    let refused = c.csivol(&["fence", "node-2", "--reason", "test", "--yes"]);
    assert_eq!(refused.code, 4, "a ready node is not fenced: {refused:?}");
    assert!(
        refused.stderr.contains("node `node-2` is ready") && refused.stderr.contains("--force"),
        "{refused:?}"
    );
    assert_eq!(node(&c, "node-2")["status"], "ready");
    assert!(mounted(&t), "nothing was done");
    let none = c.csivol(&["fence", "node-1", "--reason", "test", "--dry-run"]);
    assert_eq!(none.code, 4, "node-1 is ready: {none:?}");

    hang_agent(&c);
    c.wait_node_status(1, "lost");
    let blocked = c.csivol(&["status", "--blocked", "-o", "json"]);
    assert_eq!(blocked.code, 6);
    assert_eq!(
        blocked.json()[0]["fence"],
        "csivol fence node-2 --reason \"...\"",
        "{blocked:?}"
    );
    assert_eq!(blocked.json()[0]["fence_method"], "script");

    let dry = c.csivol(&["fence", "node-2", "--reason", "hung", "--dry-run"]);
    assert!(
        dry.ok()
            .stdout
            .contains("run fence method script for node node-2: bash")
            && dry.stdout.contains("force-release the claim of alloc a1"),
        "{dry:?}"
    );
    assert!(mounted(&t), "a dry run does nothing");
    let unconfirmed = c.csivol(&["fence", "node-2", "--reason", "hung"]);
    assert_eq!(
        unconfirmed.code, 2,
        "no --yes without a terminal: {unconfirmed:?}"
    );

    let fenced = c.csivol(&[
        "fence",
        "node-2",
        "--reason",
        "node-2 hung, BMC answers",
        "--yes",
        "-o",
        "json",
    ]);
    let out = fenced.ok().json();
    assert_eq!(out["fence"]["ok"], true, "{out}");
    assert_eq!(out["fence"]["exit_status"], 0);
    assert!(
        out["fence"]["output"]
            .as_str()
            .unwrap()
            .contains("node node-2 powered off"),
        "{out}"
    );
    assert_eq!(out["actions"][0]["action"], "force-release", "{out}");
    assert!(!mounted(&t), "the script unmounted the node's mounts");
    assert!(
        gone(&c.nodes[1].dir.join("agent.pid")),
        "the agent was killed"
    );

    let taken = claim(&c, "vol", "node-1", "a2");
    assert_eq!(taken.ok().json()["state"], "ready");
    let t2 = PathBuf::from(taken.json()["target_path"].as_str().unwrap());

    let evs = events(&c, "node-2");
    let fence_event = evs
        .iter()
        .find(|e| e["kind"] == "node-fenced")
        .unwrap_or_else(|| panic!("a node-fenced event: {evs:?}"));
    let msg = fence_event["message"].as_str().unwrap();
    assert!(
        msg.contains("by method script")
            && msg.contains("exited 0")
            && msg.contains("node node-2 powered off")
            && msg.contains("node-2 hung, BMC answers"),
        "{msg}"
    );
    assert!(
        fence_event["actor"]
            .as_str()
            .unwrap()
            .starts_with("operator:")
    );
    let released = evs
        .iter()
        .find(|e| e["kind"] == "claim-force-released")
        .expect("the unblock's event");
    assert!(
        released["message"].as_str().unwrap().contains("fence #1"),
        "the unblock names its evidence: {released}"
    );
    let shown = node(&c, "node-2");
    assert_eq!(shown["status"], "fenced");
    assert_eq!(shown["fences"][0]["ok"], true);
    assert_eq!(shown["fences"][0]["method"], "script");
    let human = c.csivol(&["node", "show", "node-2"]);
    assert!(human.ok().stdout.contains("confirmed off"), "{human:?}");
    let refused = claim(&c, "spare", "node-2", "x");
    assert_eq!(refused.code, 6, "no claim on a fenced node: {refused:?}");
    assert!(refused.stderr.contains("was fenced"), "{refused:?}");

    // Powered on again: the agent finds its records, re-mounts nothing, and the node is
    // ready once it registered holding nothing.
    let publishes = plugin_calls(&c, 1, "NodePublishVolume");
    c.kill_agent(1);
    c.start_plugin(1);
    c.start_agent(1);
    c.wait_node_status(1, "ready");
    assert!(c.nodes[1].mounts().is_empty(), "{:?}", c.nodes[1].mounts());
    assert_eq!(
        plugin_calls(&c, 1, "NodePublishVolume"),
        publishes,
        "the fenced node published nothing again"
    );
    let returned = events(&c, "node-2");
    assert!(
        returned.iter().any(|e| e["kind"] == "node-returned"
            && e["message"].as_str().unwrap().contains("holding nothing")),
        "{returned:?}"
    );
    assert!(mounted(&t2), "node-1's claim is untouched");
    assert_eq!(c.csivol(&["status", "--blocked"]).code, 0);
}

/// A fence that exits 1, or hangs past its timeout, changes nothing and says why.
#[test]
fn a_failed_or_hung_fence_changes_nothing() {
    // A timeout a failing script meets even on a loaded machine (at 1s, one did not).
    let c = cluster("fence-fails", "5s", "");
    let t = claimed(&c, "vol", "node-2", "a1");
    hang_agent(&c);
    c.wait_node_status(1, "lost");

    set_mode(&c, "fail");
    let failed = c.csivol(&["fence", "node-2", "--reason", "try", "--yes"]);
    assert_eq!(failed.code, 1, "{failed:?}");
    assert!(
        failed.stderr.contains("did not confirm it off")
            && failed.stderr.contains("exited with status 1")
            && failed.stderr.contains("bmc of node-2 refused")
            && failed.stderr.contains("nothing was changed"),
        "{failed:?}"
    );
    assert!(failed.stderr.contains("hint: "), "{failed:?}");

    set_mode(&c, "hang");
    let hung = c.csivol(&["fence", "node-2", "--reason", "try again", "--yes"]);
    assert_eq!(hung.code, 1, "{hung:?}");
    assert!(hung.stderr.contains("past its timeout"), "{hung:?}");
    wait_for("the hung fence's child to be killed", WAIT, || {
        gone(&c.dir.join("hang.pid")).then_some(())
    });

    let shown = node(&c, "node-2");
    assert_eq!(shown["status"], "lost", "{shown}");
    let fences = shown["fences"].as_array().unwrap();
    assert_eq!(fences.len(), 2, "{shown}");
    assert_eq!(fences[0]["timed_out"], true);
    assert_eq!(fences[1]["exit_status"], 1);
    assert!(fences.iter().all(|f| f["ok"] == false));
    let v = c
        .csivol(&["volume", "show", "vol", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["state"], "blocked", "{v}");
    assert!(mounted(&t), "nothing was taken down");
    let kinds: Vec<_> = events(&c, "node-2")
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "node-fence-failed").count(),
        2,
        "{kinds:?}"
    );
    assert!(
        !kinds.iter().any(|k| k == "claim-force-released"),
        "{kinds:?}"
    );
}

/// `auto_fence_after`: the server fences a node lost that long by itself and frees its
/// volumes, with no operator; the actor is the policy.
#[test]
fn auto_fence_frees_a_lost_nodes_volumes() {
    let c = cluster("auto-fence", "20s", "auto_fence_after = \"1s\"");
    let t = claimed(&c, "vol", "node-2", "a1");
    let before = node(&c, "node-2");
    assert_eq!(before["fence_method"], "script");
    assert!(before["next_fence_at"].is_null(), "not lost: {before}");
    hang_agent(&c);
    c.wait_node_status(1, "fenced");
    assert!(!mounted(&t));
    let taken = claim(&c, "vol", "node-1", "a2");
    assert_eq!(taken.ok().json()["state"], "ready");
    let evs = events(&c, "node-2");
    let fenced = evs
        .iter()
        .find(|e| e["kind"] == "node-fenced")
        .expect("node-fenced");
    assert_eq!(fenced["actor"], "policy:script", "{fenced}");
    assert!(
        evs.iter()
            .any(|e| e["kind"] == "claim-force-released" && e["actor"] == "policy:script"),
        "{evs:?}"
    );
    let summary = c.csivol(&["status", "-o", "json"]).ok().json();
    assert_eq!(summary["nodes_by_status"]["fenced"], 1, "{summary}");
}

/// `--force` fences a ready node; its agent, still running here (the method only says it
/// is off), learns that it is fenced, takes every mount down without publishing anything
/// again, says so by registering holding nothing, and is ready again.
#[test]
fn a_fenced_node_that_still_runs_takes_everything_down() {
    let c = cluster("fence-forced", "20s", "");
    let t = claimed(&c, "vol", "node-2", "a1");
    set_mode(&c, "noop");
    let publishes = plugin_calls(&c, 1, "NodePublishVolume");
    let fenced = c.csivol(&[
        "fence",
        "node-2",
        "--force",
        "--reason",
        "retire it",
        "--yes",
        "-o",
        "json",
    ]);
    let out = fenced.ok().json();
    assert_eq!(out["fence"]["ok"], true, "{out}");
    assert_eq!(out["actions"][0]["action"], "force-release", "{out}");
    wait_for("node-2 to take its mounts down", WAIT, || {
        c.nodes[1].mounts().is_empty().then_some(())
    });
    assert!(!mounted(&t));
    c.wait_node_status(1, "ready");
    assert_eq!(plugin_calls(&c, 1, "NodePublishVolume"), publishes);
    let evs = events(&c, "node-2");
    let kinds: Vec<&str> = evs.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in [
        "node-lost",
        "node-fenced",
        "claim-force-released",
        "node-returned",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    assert!(
        !kinds.contains(&"claim-resumed"),
        "the released claim is not resumed: {kinds:?}"
    );
    let again = claim(&c, "vol", "node-2", "a2");
    assert_eq!(again.ok().json()["state"], "ready", "usable again");
}

/// A planned stop is not a death: node-1's agent stopped with SIGTERM shows `stopped`, is
/// not fenced while node-2, hung at the same moment, is lost and auto-fenced (same method,
/// same `auto_fence_after`), and its claim is ready again, untouched, when it starts.
#[test]
fn a_planned_stop_is_not_fenced_within_its_grace() {
    let mut c = Cluster::start_with_config(
        "planned-stop",
        "4s",
        vec![NodeOpts::default(); 2],
        |dir| {
            let script = dir.join("fence.sh");
            std::fs::write(&script, SCRIPT).unwrap();
            let mut toml = format!(
                "[[fence]]\nname = \"script\"\ncommand = [\"bash\", \"{}\", \"{{dir}}\"]\ntimeout = \"20s\"\n\
                 nodes = [\"node-1\", \"node-2\"]\nauto_fence_after = \"1s\"\n",
                script.display()
            );
            for n in ["node-1", "node-2"] {
                toml.push_str(&format!(
                    "\n[node_labels.{n}]\ndir = \"{}\"\n",
                    dir.join(n).display()
                ));
            }
            toml
        },
    );
    let t1 = claimed(&c, "vol1", "node-1", "a1");
    std::fs::write(t1.join("work.txt"), "kept").unwrap();
    claimed(&c, "vol2", "node-2", "a2");
    let publishes = plugin_calls(&c, 0, "NodePublishVolume");

    c.stop_agent(0);
    c.wait_node_status(0, "stopped");
    hang_agent(&c);
    // node-2 is lost at the TTL and fenced a second later; node-1, silent as long, is not.
    c.wait_node_status(1, "fenced");
    let n1 = node(&c, "node-1");
    assert_eq!(n1["status"], "stopped", "{n1}");
    assert_eq!(n1["stopped"]["took_down"], false, "{n1}");
    assert!(n1["stopped"]["lost_at"].is_string(), "{n1}");
    let kinds: Vec<String> = events(&c, "node-1")
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.iter().any(|k| k == "node-stopping"), "{kinds:?}");
    for k in ["node-lost", "node-fenced", "claim-force-released"] {
        assert!(!kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
    let summary = c.csivol(&["status", "-o", "json"]).ok().json();
    assert_eq!(summary["nodes_by_status"]["stopped"], 1, "{summary}");
    assert_eq!(summary["nodes_by_status"]["fenced"], 1, "{summary}");
    let (_, metrics) = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(c.api().get("/v1/metrics"));
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(
        metrics.contains("csivol_nodes{state=\"stopped\"} 1"),
        "{metrics}"
    );
    // The claim is held; its volume stayed mounted, as the agent left it.
    let v = c
        .csivol(&["volume", "show", "vol1", "-o", "json"])
        .ok()
        .json();
    assert_eq!(v["claims"][0]["state"], "ready", "{v}");
    assert!(mounted(&t1));

    c.start_agent(0);
    c.wait_node_status(0, "ready");
    let v = wait_for("vol1's claim ready on node-1 again", WAIT, || {
        let v = c
            .csivol(&["volume", "show", "vol1", "-o", "json"])
            .ok()
            .json();
        (v["claims"][0]["state"] == "ready").then_some(v)
    });
    assert_eq!(v["claims"][0]["node"], "node-1", "{v}");
    assert_eq!(
        std::fs::read_to_string(t1.join("work.txt")).unwrap(),
        "kept"
    );
    assert_eq!(
        plugin_calls(&c, 0, "NodePublishVolume"),
        publishes,
        "found as it was left, not published again"
    );
}
