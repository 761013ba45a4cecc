//! Live attach limits through the CLI on real processes: a node plugin's
//! `max_volumes_per_node` is read again while the node runs (every `--node-limits-refresh`,
//! and at once after a ControllerPublishVolume or NodeStageVolume answered
//! RESOURCE_EXHAUSTED); `node show` has the change, the next claim decision counts it, and
//! a claim refused for it says so. The reference plugin's `<backend>/limits/<node>` stands
//! for the storage system's limit changing.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts};
use crate::e2e::create_volume;

const WAIT: Duration = Duration::from_secs(60);

fn set_limit(c: &Cluster, node: &str, limit: u32) {
    let dir = c.dir.join("backend/limits");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(node), format!("{limit}\n")).unwrap();
}

/// The node's plugin entry in `node show -o json`.
fn node_plugin(c: &Cluster) -> Value {
    let n = c
        .csivol(&["node", "show", "node-1", "-o", "json"])
        .ok()
        .json();
    n["plugins"][0].clone()
}

/// Waits until `node show` has the plugin's limit at `limit`, changed for `reason`.
fn wait_limit(c: &Cluster, limit: u64, reason: &str) -> Value {
    wait_for(&format!("the limit to be read as {limit}"), WAIT, || {
        let p = node_plugin(c);
        (p["max_volumes"] == limit
            && p["limit_change"]["to"] == limit
            && p["limit_change"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains(reason)))
        .then_some(p)
    })
}

fn claim(c: &Cluster, volume: &str, wait: bool) -> crate::cluster::Out {
    let mut args = vec!["claim", volume, "--node", "node-1", "--alloc", "job"];
    if wait {
        args.extend(["--wait", "--timeout", "60s"]);
    }
    c.csivol(&args)
}

/// A claim refused for room names the lowered limit and why it was read.
fn assert_refused_for_the_lowered_limit(c: &Cluster, volume: &str, from: u32, reason: &str) {
    let out = claim(c, volume, false);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("has no free slot"), "{out:?}");
    assert!(
        out.stderr
            .contains(&format!("its limit was lowered from {from} to 1 at")),
        "{out:?}"
    );
    assert!(out.stderr.contains(reason), "{out:?}");
}

#[test]
fn a_limit_read_again_is_counted_by_the_next_claim_and_shown() {
    let c = Cluster::start(
        "limits-refresh",
        "30s",
        vec![NodeOpts {
            plugin_args: vec!["--max-volumes-per-node=3".into()],
            agent_args: vec!["--node-limits-refresh=1s".into()],
        }],
    );
    for v in ["v1", "v2"] {
        create_volume(&c, v, "single-node-writer");
    }
    claim(&c, "v1", true).ok();
    assert!(node_plugin(&c).get("limit_change").is_none());

    set_limit(&c, "node-1", 1);
    let p = wait_limit(&c, 1, "read every 1s");
    assert_eq!(p["limit_change"]["from"], 3, "{p}");
    assert!(p["limit_read_at"].is_string(), "{p}");
    let shown = c.csivol(&["node", "show", "node-1"]).ok().stdout.clone();
    assert!(
        shown.contains("limit of hostpath: lowered from 3 to 1 at"),
        "{shown}"
    );
    assert!(
        shown.contains("NodeGetInfo read again: read every 1s"),
        "{shown}"
    );
    let events = c
        .csivol(&["events", "--node", "node-1", "-o", "json"])
        .ok()
        .json();
    let changed: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "node-limit-changed")
        .collect();
    assert_eq!(changed.len(), 1, "{events}");
    assert!(
        changed[0]["message"]
            .as_str()
            .unwrap()
            .contains("changed from 3 to 1"),
        "{events}"
    );

    // The next claim decision counts the lowered limit.
    assert_refused_for_the_lowered_limit(&c, "v2", 3, "read every 1s");
    // Queued for room, it starts once the limit is raised again.
    c.csivol(&[
        "claim", "v2", "--node", "node-1", "--alloc", "job", "--queue",
    ])
    .ok();
    set_limit(&c, "node-1", 2);
    wait_limit(&c, 2, "read every 1s");
    wait_for("the queued claim to be ready", WAIT, || {
        let v = c
            .csivol(&["volume", "show", "v2", "-o", "json"])
            .ok()
            .json();
        (v["claims"][0]["state"] == "ready").then_some(())
    });
}

/// A node whose plugin holds 3 volumes, with one claimed; the storage system's limit then
/// drops to 1 and a second claim, still placed by the server's count, meets the plugin's
/// RESOURCE_EXHAUSTED. Waits until the node read its limit again for `reason`.
fn exhausted_at_the_second_claim(name: &str, plugin_args: &[&str], reason: &str) -> Cluster {
    // The periodic read is far off: only the RESOURCE_EXHAUSTED makes the node read it.
    let mut plugin_args: Vec<String> = plugin_args.iter().map(|a| (*a).to_owned()).collect();
    plugin_args.push("--max-volumes-per-node=3".into());
    let c = Cluster::start(
        name,
        "30s",
        vec![NodeOpts {
            plugin_args,
            agent_args: vec!["--node-limits-refresh=1h".into()],
        }],
    );
    for v in ["v1", "v2", "v3"] {
        create_volume(&c, v, "single-node-writer");
    }
    claim(&c, "v1", true).ok();
    set_limit(&c, "node-1", 1);
    claim(&c, "v2", false).ok();
    let p = wait_limit(&c, 1, reason);
    assert_eq!(p["limit_change"]["from"], 3, "{p}");
    c
}

#[test]
fn a_controller_publish_answering_resource_exhausted_reads_the_limit_at_once() {
    let reason = "ControllerPublishVolume to this node answered RESOURCE_EXHAUSTED";
    let c = exhausted_at_the_second_claim("limits-publish", &[], reason);
    let v2 = c
        .csivol(&["volume", "show", "v2", "-o", "json"])
        .ok()
        .json();
    assert_ne!(v2["claims"][0]["state"], "ready", "{v2}");
    assert_refused_for_the_lowered_limit(&c, "v3", 3, reason);
}

#[test]
fn a_node_stage_answering_resource_exhausted_reads_the_limit_at_once() {
    // No ControllerPublishVolume: the node plugin itself holds the limit at NodeStageVolume.
    let reason = "NodeStageVolume answered RESOURCE_EXHAUSTED";
    let mut c = exhausted_at_the_second_claim("limits-stage", &["--no-controller"], reason);
    assert!(
        c.nodes[0]
            .plugin_calls()
            .iter()
            .all(|l| l["rpc"] != "ControllerPublishVolume"),
        "a plugin without PUBLISH_UNPUBLISH_VOLUME is not controller-published to"
    );
    assert_refused_for_the_lowered_limit(&c, "v3", 3, reason);

    // An agent that starts again registers the limit it reads then.
    c.kill_agent(0);
    set_limit(&c, "node-1", 2);
    c.start_agent(0);
    let p = wait_limit(&c, 2, "registration");
    assert_eq!(p["limit_change"]["from"], 1, "{p}");
}
