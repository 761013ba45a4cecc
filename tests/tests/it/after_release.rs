//! `--wait` after a release, through the CLI on real processes: an operation asked for
//! while the volume is still being unstaged and detached (a window the reference plugin's
//! `--delay` holds open) waits for the release to finish and then runs: an offline
//! expansion, a deletion, a modification, a snapshot, a claim on another node; without
//! `--wait` the refusal says the volume is being released and how to wait, never to release
//! it again. A held operation survives a restart of the server.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out};
use crate::e2e::create_volume;

const MIB: u64 = 1 << 20;

/// Nodes whose plugin (node and controller) runs with `plugin_args`.
fn nodes(n: usize, plugin_args: &[&str]) -> Vec<NodeOpts> {
    (0..n)
        .map(|_| NodeOpts {
            plugin_args: plugin_args.iter().map(|s| (*s).to_owned()).collect(),
            ..NodeOpts::default()
        })
        .collect()
}

/// The reference plugin's unstage and detach held long enough that a command run right
/// after `release --wait` finds the volume still attached, on a loaded machine too.
const SLOW_TAKEDOWN: [&str; 4] = [
    "--delay",
    "NodeUnstageVolume=4s",
    "--delay",
    "ControllerUnpublishVolume=3s",
];

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

/// `release --wait`: back once the claim is gone, the volume still being unstaged and
/// detached behind it.
fn release_wait(c: &Cluster, volume: &str, alloc: &str) {
    c.csivol(&[
        "release",
        volume,
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
}

fn show(c: &Cluster, volume: &str) -> Value {
    c.csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json()
}

/// The RPCs node `i`'s plugin answered, in order.
fn rpcs(c: &Cluster, i: usize) -> Vec<String> {
    c.nodes[i]
        .plugin_calls()
        .iter()
        .filter_map(|call| call["rpc"].as_str().map(str::to_owned))
        .collect()
}

/// Where `rpc` was answered last in `calls` (panics when it never was).
fn last(calls: &[String], rpc: &str) -> usize {
    calls
        .iter()
        .rposition(|c| c == rpc)
        .unwrap_or_else(|| panic!("{rpc} was never called: {calls:?}"))
}

/// The window is open: the claim is gone, its node still has the volume.
fn assert_still_attached(c: &Cluster, volume: &str) {
    let v = show(c, volume);
    assert_eq!(v["claims"].as_array().map(Vec::len), Some(0), "{v}");
    assert_ne!(
        v["attachments"].as_array().map(Vec::len),
        Some(0),
        "the release must still be under way for this test to mean anything: {v}"
    );
}

/// A refusal without `--wait`: exit 4 (conflict), saying the volume is being released and
/// offering `--wait`, never telling to release what was released.
fn assert_refused_as_releasing(out: &Out) {
    assert_eq!(out.code, 4, "{out:?}");
    assert!(
        out.stderr.contains("still being released"),
        "the error says the release is under way: {out:?}"
    );
    let hint = out
        .stderr
        .lines()
        .find(|l| l.starts_with("hint:"))
        .unwrap_or_else(|| panic!("a hint: {out:?}"));
    assert!(hint.contains("--wait"), "{out:?}");
    assert!(
        !hint.contains("csivol release") && !hint.contains("release its claims"),
        "the hint never asks for the release again: {out:?}"
    );
}

#[test]
fn an_offline_expansion_after_a_release_waits_for_the_detach() {
    let mut args = vec!["--expansion", "offline"];
    args.extend(SLOW_TAKEDOWN);
    let c = Cluster::start("after-release-expand", "30s", nodes(1, &args));
    create_volume(&c, "tv", "single-node-writer");
    claim(&c, "tv", "node-1", "near").ok();
    release_wait(&c, "tv", "near");
    assert_still_attached(&c, "tv");

    let refused = c.csivol(&["volume", "expand", "tv", "--capacity", "2MiB"]);
    assert_refused_as_releasing(&refused);
    assert!(
        refused.stderr.contains("expands volumes only offline"),
        "{refused:?}"
    );

    let out = c.csivol(&[
        "volume",
        "expand",
        "tv",
        "--capacity",
        "2MiB",
        "--wait",
        "--timeout",
        "60s",
    ]);
    out.ok();
    // Off a terminal, each step of the wait is a line.
    assert!(
        out.stderr.contains("once its release has finished"),
        "{out:?}"
    );
    assert!(out.stderr.contains("waiting for its release"), "{out:?}");
    assert!(
        out.stderr.contains("expanded volume tv to 2 MiB"),
        "{out:?}"
    );
    let v = show(&c, "tv");
    assert_eq!(v["capacity_bytes"], 2 * MIB, "{v}");
    // Grown in storage; the file system grows on the next node to stage it.
    assert_eq!(v["expansion"]["when_staged"], true, "{v}");
    // The spec's order for an offline expansion: after ControllerUnpublishVolume.
    let calls = rpcs(&c, 0);
    assert!(
        last(&calls, "ControllerUnpublishVolume") < last(&calls, "ControllerExpandVolume"),
        "{calls:?}"
    );
    let events = c
        .csivol(&["events", "--volume", "tv", "-o", "json"])
        .ok()
        .json();
    assert!(
        events.as_array().unwrap().iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("release has finished: ControllerExpandVolume"))),
        "{events}"
    );
}

#[test]
fn a_deletion_after_a_release_waits_for_the_detach() {
    let c = Cluster::start("after-release-delete", "30s", nodes(1, &SLOW_TAKEDOWN));
    create_volume(&c, "tv", "single-node-writer");
    claim(&c, "tv", "node-1", "near").ok();
    release_wait(&c, "tv", "near");
    assert_still_attached(&c, "tv");

    let refused = c.csivol(&["volume", "deregister", "tv", "--delete", "--yes"]);
    assert_refused_as_releasing(&refused);
    assert_eq!(show(&c, "tv")["state"], "attached", "nothing changed");

    let out = c.csivol(&[
        "volume",
        "deregister",
        "tv",
        "--delete",
        "--yes",
        "--wait",
        "--timeout",
        "60s",
    ]);
    out.ok();
    assert!(out.stderr.contains("deleted volume tv"), "{out:?}");
    assert!(
        out.stderr
            .contains("deleting once its release has finished"),
        "{out:?}"
    );
    let gone = c.csivol(&["volume", "show", "tv"]);
    assert_eq!(gone.code, 3, "{gone:?}");
    let calls = rpcs(&c, 0);
    assert!(
        last(&calls, "ControllerUnpublishVolume") < last(&calls, "DeleteVolume"),
        "{calls:?}"
    );
}

#[test]
fn a_modification_and_a_snapshot_after_a_release_run_once_it_has_finished() {
    let c = Cluster::start("after-release-settled", "30s", nodes(1, &SLOW_TAKEDOWN));
    create_volume(&c, "tv", "single-node-writer");

    // A modification: sent once the volume is detached, not between the steps of its
    // release.
    claim(&c, "tv", "node-1", "near").ok();
    release_wait(&c, "tv", "near");
    assert_still_attached(&c, "tv");
    let out = c.csivol(&[
        "volume",
        "modify",
        "tv",
        "--param",
        "iops=3000",
        "--wait",
        "--timeout",
        "60s",
    ]);
    out.ok();
    assert!(
        out.stderr.contains("once its release has finished"),
        "{out:?}"
    );
    assert_eq!(show(&c, "tv")["mutable_parameters"]["iops"], "3000");
    let calls = rpcs(&c, 0);
    assert!(
        last(&calls, "ControllerUnpublishVolume") < last(&calls, "ControllerModifyVolume"),
        "{calls:?}"
    );

    // A snapshot: cut of what the node left when it unstaged the volume.
    claim(&c, "tv", "node-1", "again").ok();
    release_wait(&c, "tv", "again");
    assert_still_attached(&c, "tv");
    let out = c.csivol(&[
        "snapshot",
        "create",
        "--name",
        "after",
        "tv",
        "--wait",
        "--timeout",
        "60s",
    ]);
    out.ok();
    assert!(
        out.stderr
            .contains("once the volume's release has finished"),
        "{out:?}"
    );
    assert!(out.stderr.contains("snapshot after is ready"), "{out:?}");
    let calls = rpcs(&c, 0);
    assert!(
        last(&calls, "NodeUnstageVolume") < last(&calls, "CreateSnapshot"),
        "{calls:?}"
    );
    assert!(
        last(&calls, "ControllerUnpublishVolume") < last(&calls, "CreateSnapshot"),
        "{calls:?}"
    );
}

#[test]
fn a_claim_on_another_node_waits_in_line_for_a_release() {
    // The first node's unpublish is slow: its claim stays `releasing` a while.
    let mut args = vec!["--delay", "NodeUnpublishVolume=4s"];
    args.extend(SLOW_TAKEDOWN);
    let c = Cluster::start("after-release-claim", "30s", nodes(2, &args));
    create_volume(&c, "tv", "single-node-writer");
    claim(&c, "tv", "node-1", "near").ok();
    let released = c.csivol(&["release", "tv", "--alloc", "near"]);
    released.ok();
    assert_eq!(show(&c, "tv")["claims"][0]["state"], "releasing");

    let refused = c.csivol(&["claim", "tv", "--node", "node-2", "--alloc", "early"]);
    assert_refused_as_releasing(&refused);
    assert!(
        refused.stderr.contains("alloc near on node node-1"),
        "{refused:?}"
    );

    let out = c.csivol(&[
        "claim",
        "tv",
        "--node",
        "node-2",
        "--alloc",
        "far",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    let ready = out.ok().json();
    assert_eq!(ready["state"], "ready", "{out:?}");
    assert_eq!(ready["node"], "node-2");
    // Queued behind the release (the event says which), granted once it was gone.
    let events = c
        .csivol(&["events", "--volume", "tv", "-o", "json"])
        .ok()
        .json();
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["alloc"] == "far")
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert_eq!(
        kinds[..3],
        ["claim-queued", "claim-granted", "claim-ready"],
        "{events}"
    );
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "claim-queued"
                && e["message"].as_str().is_some_and(
                    |m| m.contains("waits for the release of alloc near on node node-1")
                )),
        "{events}"
    );
    // node-2 staged the volume only after node-1 had unstaged it.
    let unstaged = c.nodes[0]
        .plugin_calls()
        .iter()
        .rev()
        .find(|call| call["rpc"] == "NodeUnstageVolume")
        .and_then(|call| call["at_ms"].as_u64())
        .expect("node-1 unstaged the volume");
    let staged = c.nodes[1]
        .plugin_calls()
        .iter()
        .find(|call| call["rpc"] == "NodeStageVolume")
        .and_then(|call| call["started_ms"].as_u64())
        .expect("node-2 staged the volume");
    assert!(unstaged <= staged, "{unstaged} <= {staged}");
    // The refused claim left nothing behind.
    let v = show(&c, "tv");
    let allocs: Vec<&str> = v["claims"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["alloc"].as_str())
        .collect();
    assert_eq!(allocs, ["far"], "{v}");
}

#[test]
fn a_held_expansion_survives_a_restart_of_the_server() {
    let mut c = Cluster::start(
        "after-release-restart",
        "30s",
        nodes(1, &["--expansion", "offline"]),
    );
    create_volume(&c, "tv", "single-node-writer");
    claim(&c, "tv", "node-1", "near").ok();
    // The node's agent stops in order: the release cannot go on until it is back.
    c.stop_agent(0);
    c.csivol(&["release", "tv", "--alloc", "near"]).ok();
    let out = c.csivol(&[
        "volume",
        "expand",
        "tv",
        "--capacity",
        "2MiB",
        "--wait",
        "--timeout",
        "1s",
    ]);
    assert_eq!(
        out.code, 5,
        "the wait times out, the expansion is held: {out:?}"
    );
    let v = show(&c, "tv");
    assert_eq!(v["expansion"]["after_release"], true, "{v}");

    c.kill_server();
    c.start_server();
    assert_eq!(show(&c, "tv")["expansion"]["after_release"], true);
    c.start_agent(0);
    wait_for("the held expansion to run", Duration::from_secs(60), || {
        let v = show(&c, "tv");
        (v["capacity_bytes"] == 2 * MIB).then_some(())
    });
    let calls = rpcs(&c, 0);
    assert!(
        last(&calls, "ControllerUnpublishVolume") < last(&calls, "ControllerExpandVolume"),
        "{calls:?}"
    );
}
