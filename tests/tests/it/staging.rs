//! A node's stagings, as orchestrators learned to get them right: one volume's node calls
//! never overlap while other volumes proceed beside them (Nomad's per-volume lock on the
//! client), and a staging several claims share is never unstaged while one of them
//! remains, also after the agent restarted (Nomad lost that count across client
//! restarts). Real server, agent and plugin, driven through the CLI; the plugin's call log
//! says when each call came in and when it was answered.

use std::collections::BTreeMap;
use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, mounted};
use crate::e2e::create_volume;

const WAIT: Duration = Duration::from_secs(60);

fn claim(c: &Cluster, volume: &str, alloc: &str, wait: bool) -> Value {
    let mut args = vec!["claim", volume, "--node", "node-1", "--alloc", alloc];
    if wait {
        args.extend(["--wait", "--timeout", "60s"]);
    }
    args.extend(["-o", "json"]);
    c.csivol(&args).ok().json()
}

fn release(c: &Cluster, volume: &str, alloc: &str, wait: bool) {
    let mut args = vec!["release", volume, "--alloc", alloc];
    if wait {
        args.extend(["--wait", "--timeout", "60s"]);
    }
    c.csivol(&args).ok();
}

/// The node calls of the plugin's call log for `volume_id` (an external id), in the order
/// they came in: (rpc, code, started, answered).
fn node_calls(c: &Cluster, external_id: &str) -> Vec<(String, String, u64, u64)> {
    let mut calls: Vec<_> = c.nodes[0]
        .plugin_calls()
        .into_iter()
        .filter(|l| l["volume_id"] == external_id)
        .filter(|l| l["rpc"].as_str().is_some_and(|r| r.starts_with("Node")))
        .map(|l| {
            (
                l["rpc"].as_str().unwrap().to_owned(),
                l["code"].as_str().unwrap().to_owned(),
                l["started_ms"].as_u64().unwrap(),
                l["at_ms"].as_u64().unwrap(),
            )
        })
        .collect();
    calls.sort_by_key(|c| c.2);
    calls
}

/// The state of `alloc`'s claim on `volume`, as `volume show` has it.
fn claim_state(c: &Cluster, volume: &str, alloc: &str) -> Option<String> {
    let v = c
        .csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json();
    v["claims"]
        .as_array()?
        .iter()
        .find(|cl| cl["alloc"] == alloc)
        .and_then(|cl| cl["state"].as_str().map(str::to_owned))
}

fn external_id(c: &Cluster, volume: &str) -> String {
    let v = c
        .csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json();
    v["external_id"].as_str().unwrap().to_owned()
}

/// No two node calls of one volume were in the plugin at once.
#[track_caller]
fn assert_serial(calls: &[(String, String, u64, u64)]) {
    for w in calls.windows(2) {
        assert!(
            w[1].2 >= w[0].3,
            "{} came in at {} while {} was running until {}: {calls:?}",
            w[1].0,
            w[1].2,
            w[0].0,
            w[0].3
        );
    }
}

/// A claim arriving while the volume's last claim is being unstaged waits for the
/// unstage to finish before anything is staged again, while another volume's claim on
/// the same node is staged and published during that unstage.
#[test]
fn one_volumes_node_calls_are_serial_while_other_volumes_proceed() {
    let c = Cluster::start(
        "staging-serial",
        "10s",
        vec![NodeOpts {
            plugin_args: vec!["--delay=NodeUnstageVolume=4s".into()],
            ..NodeOpts::default()
        }],
    );
    create_volume(&c, "slow", "single-node-writer");
    create_volume(&c, "other", "single-node-writer");
    let (slow, other) = (external_id(&c, "slow"), external_id(&c, "other"));
    claim(&c, "slow", "a1", true);
    release(&c, "slow", "a1", false);
    // The unpublish is done; the unstage (4 s in the plugin) has come in or is about to.
    wait_for("slow's NodeUnpublishVolume", WAIT, || {
        node_calls(&c, &slow)
            .iter()
            .any(|(rpc, code, ..)| rpc == "NodeUnpublishVolume" && code == "OK")
            .then_some(())
    });
    claim(&c, "slow", "a2", false);
    let b = claim(&c, "other", "b1", true);
    assert_eq!(b["state"], "ready");
    wait_for("slow's second claim to be ready", WAIT, || {
        (claim_state(&c, "slow", "a2").as_deref() == Some("ready")).then_some(())
    });

    let slow_calls = node_calls(&c, &slow);
    assert_serial(&slow_calls);
    let unstage = slow_calls
        .iter()
        .find(|(rpc, code, ..)| rpc == "NodeUnstageVolume" && code == "OK")
        .expect("slow was unstaged");
    let restage = slow_calls
        .iter()
        .rfind(|(rpc, ..)| rpc == "NodeStageVolume")
        .expect("slow was staged again");
    assert!(restage.2 >= unstage.3, "{slow_calls:?}");
    // The other volume did not queue behind the slow unstage.
    let other_calls = node_calls(&c, &other);
    assert_serial(&other_calls);
    let other_stage = other_calls
        .iter()
        .find(|(rpc, ..)| rpc == "NodeStageVolume")
        .expect("other was staged");
    assert!(
        other_stage.2 < unstage.3,
        "other's NodeStageVolume came in at {} only after slow's unstage ended at {}",
        other_stage.2,
        unstage.3
    );
    for path in c.all_mounts() {
        assert!(mounted(&path));
    }
}

/// Two claims share one staging; the agent is killed and restarted between and after
/// releases; the staging stays until the last claim goes, and is unstaged exactly once.
#[test]
fn a_shared_staging_outlives_agent_restarts_while_a_claim_remains() {
    let mut c = Cluster::start("staging-shared", "10s", vec![NodeOpts::default()]);
    create_volume(&c, "shared", "multi-node-multi-writer");
    let id = external_id(&c, "shared");
    let t1 = claim(&c, "shared", "a1", true);
    let t2 = claim(&c, "shared", "a2", true);
    let target = |v: &Value| std::path::PathBuf::from(v["target_path"].as_str().unwrap());
    let (t1, t2) = (target(&t1), target(&t2));
    let staging = c.nodes[0]
        .agent_dir()
        .join("staging")
        .join("hostpath")
        .join("shared");
    assert!(mounted(&staging) && mounted(&t1) && mounted(&t2));
    let count = |c: &Cluster, rpc: &str| {
        node_calls(c, &id)
            .iter()
            .filter(|(r, code, ..)| r == rpc && code == "OK")
            .count()
    };
    assert_eq!(
        count(&c, "NodeStageVolume"),
        1,
        "one staging for both claims"
    );

    c.kill_agent(0);
    c.start_agent(0);
    c.wait_node_status(0, "ready");
    release(&c, "shared", "a1", true);
    assert!(!mounted(&t1), "a1's target is unpublished");
    assert!(
        mounted(&staging) && mounted(&t2),
        "a2 still uses the staging"
    );
    assert_eq!(count(&c, "NodeUnstageVolume"), 0);

    // Once more across a restart, now with one claim left.
    c.kill_agent(0);
    c.start_agent(0);
    c.wait_node_status(0, "ready");
    assert_eq!(claim_state(&c, "shared", "a2").as_deref(), Some("ready"));
    assert!(mounted(&staging) && mounted(&t2));
    assert_eq!(count(&c, "NodeUnstageVolume"), 0);
    assert_eq!(count(&c, "NodeStageVolume"), 1, "nothing was staged again");

    release(&c, "shared", "a2", true);
    // The claim is gone once its target is unpublished; the agent unstages after that,
    // so wait for the unstage rather than read the call log once.
    wait_for("the staging's NodeUnstageVolume", WAIT, || {
        (count(&c, "NodeUnstageVolume") > 0 && c.all_mounts().is_empty()).then_some(())
    });
    let calls = node_calls(&c, &id);
    assert_serial(&calls);
    assert_eq!(count(&c, "NodeUnstageVolume"), 1, "{calls:?}");
    assert!(c.all_mounts().is_empty(), "{:?}", c.all_mounts());
    let by_rpc: BTreeMap<&str, usize> = calls.iter().fold(BTreeMap::new(), |mut m, c| {
        *m.entry(c.0.as_str()).or_default() += 1;
        m
    });
    assert_eq!(by_rpc.get("NodeUnpublishVolume"), Some(&2), "{calls:?}");
}
