//! Volume expansion through the CLI on real processes: online while claimed (the new size in
//! `volume show` and in the plugin's NodeGetVolumeStats), offline refused while claimed and
//! done after release (the file system grown by the next node to stage it), refused without the capability, and shrinking refused.

use std::path::Path;
use std::time::Duration;

use csivol_csi::CsiEndpoint;
use csivol_csi::csi::v1 as csi;

use csivol_tests::wait_for;

use crate::cluster::{Cluster, NodeOpts, Out};
use crate::e2e::create_volume;

const MIB: u64 = 1 << 20;

fn node_with(plugin_args: &[&str]) -> Vec<NodeOpts> {
    vec![NodeOpts {
        plugin_args: plugin_args.iter().map(|s| (*s).to_owned()).collect(),
        ..NodeOpts::default()
    }]
}

fn claim(c: &Cluster, volume: &str, alloc: &str) -> Out {
    let out = c.csivol(&[
        "claim",
        volume,
        "--node",
        "node-1",
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    assert_eq!(out.ok().json()["state"], "ready", "{out:?}");
    out
}

fn release(c: &Cluster, volume: &str, alloc: &str) {
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

/// The error `-o json` prints on stderr (its last line, after any progress notes).
fn error_of(out: &Out) -> serde_json::Value {
    let last = out.stderr.lines().last().unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("stderr is not JSON ({e}): {out:?}"));
    v["error"].clone()
}

fn expand(c: &Cluster, volume: &str, size: &str) -> Out {
    c.csivol(&[
        "volume",
        "expand",
        volume,
        "--capacity",
        size,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ])
}

/// The expansion calls node-1's plugin received, in order.
fn expand_calls(c: &Cluster) -> Vec<String> {
    c.nodes[0]
        .plugin_calls()
        .iter()
        .filter_map(|call| call["rpc"].as_str().map(str::to_owned))
        .filter(|r| r.contains("Expand"))
        .collect()
}

/// The total bytes the plugin's NodeGetVolumeStats reports for the volume at `target`.
fn stats_total(c: &Cluster, external_id: &str, target: &Path) -> i64 {
    let socket = c.nodes[0].dir.join("plugin.sock");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = CsiEndpoint::Unix(socket).connection(Duration::from_secs(10));
        let mut node = csi::node_client::NodeClient::new(conn);
        let r = node
            .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                volume_id: external_id.to_owned(),
                volume_path: target.display().to_string(),
                staging_target_path: String::new(),
            })
            .await
            .expect("NodeGetVolumeStats")
            .into_inner();
        r.usage
            .iter()
            .find(|u| u.unit == csi::volume_usage::Unit::Bytes as i32)
            .expect("bytes usage")
            .total
    })
}

#[test]
fn online_expansion_grows_a_claimed_volume_and_shrinking_is_refused() {
    let c = Cluster::start("expand-online", "30s", node_with(&[]));
    create_volume(&c, "grow", "single-node-writer");
    let claimed = claim(&c, "grow", "job-1");
    let target = claimed.json()["target_path"].as_str().unwrap().to_owned();
    let shown = c
        .csivol(&["volume", "show", "grow", "-o", "json"])
        .ok()
        .json();
    let external_id = shown["external_id"].as_str().unwrap().to_owned();
    assert_eq!(shown["capacity_bytes"], MIB);
    assert_eq!(
        stats_total(&c, &external_id, Path::new(&target)),
        MIB as i64
    );

    let out = expand(&c, "grow", "2MiB");
    let v = out.ok().json();
    assert_eq!(v["capacity_bytes"], 2 * MIB, "{out:?}");
    assert!(v.get("expansion").is_none(), "done: {v}");
    // With -o json, stderr carries nothing but errors.
    assert_eq!(out.stderr, "", "{out:?}");
    // Grown on the node under the workload, which kept its claim.
    assert_eq!(
        stats_total(&c, &external_id, Path::new(&target)),
        2 * MIB as i64
    );
    let shown = c
        .csivol(&["volume", "show", "grow", "-o", "json"])
        .ok()
        .json();
    assert_eq!(shown["claims"][0]["state"], "ready");
    let rpcs = expand_calls(&c);
    assert_eq!(rpcs, ["ControllerExpandVolume", "NodeExpandVolume"]);

    // The same size again changes nothing; a smaller one is refused (exit 2).
    let again = expand(&c, "grow", "2097152");
    let v = again.ok().json();
    assert_eq!(v["capacity_bytes"], 2 * MIB, "{again:?}");
    assert!(v.get("expansion").is_none(), "nothing to do: {v}");
    let shrink = expand(&c, "grow", "1MiB");
    assert_eq!(shrink.code, 2, "{shrink:?}");
    assert!(
        shrink
            .stderr
            .contains("shrinking it to 1 MiB is not supported"),
        "{shrink:?}"
    );
    // A size that does not parse is a usage error naming the units.
    let bad = expand(&c, "grow", "2 parsecs");
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("unknown unit `parsecs`"), "{bad:?}");
    release(&c, "grow", "job-1");
}

#[test]
fn offline_expansion_is_refused_while_claimed_and_works_after_release() {
    let c = Cluster::start(
        "expand-offline",
        "30s",
        node_with(&["--expansion", "offline"]),
    );
    create_volume(&c, "cold", "single-node-writer");
    claim(&c, "cold", "job-1");
    let refused = expand(&c, "cold", "3MiB");
    assert_eq!(refused.code, 4, "{refused:?}");
    let e = error_of(&refused);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("expands volumes only offline, and `cold` is in use on node-1"),
        "{e}"
    );
    assert!(
        e["hint"]
            .as_str()
            .unwrap()
            .starts_with("release its claims first"),
        "{e}"
    );
    release(&c, "cold", "job-1");
    c.wait_free("cold");
    // The plugin grows the storage, and says a node must grow the file system: nowhere
    // staged now, so that waits for the next node to stage it.
    let out = expand(&c, "cold", "3MiB");
    let waiting = out.ok().json();
    assert_eq!(waiting["capacity_bytes"], 3 * MIB, "{waiting}");
    assert_eq!(waiting["expansion"]["when_staged"], true, "{waiting}");
    let external_id = waiting["external_id"].as_str().unwrap().to_owned();
    let human = c.csivol(&["volume", "show", "cold"]).ok().stdout.clone();
    assert!(
        human
            .contains("grown to 3 MiB in storage; the next node to stage it grows its file system"),
        "{human}"
    );
    // The next claim stages it, and its node grows the file system (NodeExpandVolume).
    let claimed = claim(&c, "cold", "job-2");
    let target = claimed.json()["target_path"].as_str().unwrap().to_owned();
    wait_for("the node's part done", Duration::from_secs(30), || {
        let v = c
            .csivol(&["volume", "show", "cold", "-o", "json"])
            .ok()
            .json();
        v["expansion"].is_null().then_some(())
    });
    assert_eq!(
        stats_total(&c, &external_id, Path::new(&target)),
        3 * MIB as i64
    );
    let said = c
        .csivol(&["events", "--volume", "cold", "-o", "json"])
        .ok()
        .json();
    assert!(
        said.as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "volume-expanded"),
        "{said}"
    );
    release(&c, "cold", "job-2");
}

#[test]
fn expansion_is_refused_where_the_plugin_cannot_expand() {
    let c = Cluster::start(
        "expand-disabled",
        "30s",
        node_with(&["--disable", "expand-volume"]),
    );
    create_volume(&c, "fixed", "single-node-writer");
    let out = expand(&c, "fixed", "2MiB");
    assert_eq!(out.code, 2, "{out:?}");
    let e = error_of(&out);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("plugin `hostpath` cannot expand volumes"),
        "{e}"
    );
    assert!(e["hint"].as_str().is_some_and(|h| !h.is_empty()), "{e}");
    let shown = c
        .csivol(&["volume", "show", "fixed", "-o", "json"])
        .ok()
        .json();
    assert_eq!(shown["capacity_bytes"], MIB);
    assert!(shown.get("expansion").is_none());
}

#[test]
fn status_shows_an_expansion_under_way_with_its_last_error() {
    let c = Cluster::start(
        "expand-progress",
        "30s",
        node_with(&[
            "--fail",
            "NodeExpandVolume=UNAVAILABLE:1",
            "--delay",
            // The retry's delay is the window in which `status` must catch the error:
            // wide enough for a loaded machine.
            "NodeExpandVolume=10s",
        ]),
    );
    create_volume(&c, "slow", "single-node-writer");
    claim(&c, "slow", "job-1");
    let started = c.csivol(&["volume", "expand", "slow", "--capacity", "2MiB"]);
    assert!(
        started
            .ok()
            .stderr
            .contains("expanding volume slow to 2 MiB"),
        "{started:?}"
    );
    // The node's first NodeExpandVolume fails and is retried: `status` and `volume show`
    // say where it stands and why.
    let status = wait_for(
        "status to show the failed node expansion",
        Duration::from_secs(30),
        || {
            let out = c.csivol(&["status"]);
            out.stdout
                .contains("(last error: NodeExpandVolume on node-1 failed: UNAVAILABLE")
                .then_some(out)
        },
    );
    assert!(
        status
            .stdout
            .contains("expansions:\n  slow: expanding to 2 MiB: node-1 pending"),
        "{status:?}"
    );
    let shown = c.csivol(&["volume", "show", "slow"]);
    let text = &shown.ok().stdout;
    assert!(
        text.contains("expanding to 2 MiB: node-1 pending")
            && text.contains("NodeExpandVolume on node-1 failed: UNAVAILABLE"),
        "{shown:?}"
    );
    // Waiting on the same capacity follows it to the end.
    let out = expand(&c, "slow", "2MiB");
    let v = out.ok().json();
    assert_eq!(v["capacity_bytes"], 2 * MIB, "{out:?}");
    assert!(v.get("expansion").is_none(), "{v}");
    let status = c.csivol(&["status"]);
    assert!(!status.ok().stdout.contains("expansions:"), "{status:?}");
    release(&c, "slow", "job-1");
}

#[test]
fn a_failed_expansion_exits_1_with_the_plugins_error_and_may_be_asked_again() {
    let c = Cluster::start(
        "expand-failed",
        "30s",
        node_with(&["--fail", "ControllerExpandVolume=OUT_OF_RANGE:1"]),
    );
    create_volume(&c, "full", "single-node-writer");
    let out = expand(&c, "full", "2MiB");
    assert_eq!(out.code, 1, "{out:?}");
    let e = error_of(&out);
    assert!(
        e["message"].as_str().unwrap().contains(
            "could not be expanded to 2 MiB: ControllerExpandVolume failed: OUT_OF_RANGE"
        ),
        "{e}"
    );
    let shown = c
        .csivol(&["volume", "show", "full", "-o", "json"])
        .ok()
        .json();
    assert_eq!(shown["capacity_bytes"], MIB);
    assert_eq!(shown["expansion"]["phase"], "failed", "{shown}");
    // The plugin fails only once: asked again, it grows.
    let again = expand(&c, "full", "2MiB");
    assert_eq!(again.ok().json()["capacity_bytes"], 2 * MIB, "{again:?}");
}

#[test]
fn a_node_only_plugin_grows_a_claimed_volume_from_its_node() {
    let c = Cluster::start(
        "expand-node-only",
        "30s",
        node_with(&["--disable", "controller-expand-volume"]),
    );
    create_volume(&c, "local", "single-node-writer");
    let claimed = claim(&c, "local", "job-1");
    let target = claimed.json()["target_path"].as_str().unwrap().to_owned();
    let out = expand(&c, "local", "2MiB");
    let v = out.ok().json();
    assert_eq!(v["capacity_bytes"], 2 * MIB, "{out:?}");
    assert!(v.get("expansion").is_none(), "done: {v}");
    let external_id = v["external_id"].as_str().unwrap().to_owned();
    assert_eq!(
        stats_total(&c, &external_id, Path::new(&target)),
        2 * MIB as i64
    );
    // No controller step: the node grew it.
    let rpcs = expand_calls(&c);
    assert_eq!(rpcs, ["NodeExpandVolume"]);
    let said = c
        .csivol(&["events", "--volume", "local", "-o", "json"])
        .ok()
        .json();
    assert!(
        said.as_array().unwrap().iter().any(|e| e["message"]
            .as_str()
            .is_some_and(|m| m.contains("expands on its nodes only"))),
        "{said}"
    );
    release(&c, "local", "job-1");
}

/// The ControllerExpandVolume calls node-1's plugin answered, by code.
fn controller_expand_codes(c: &Cluster) -> Vec<String> {
    c.nodes[0]
        .plugin_calls()
        .iter()
        .filter(|l| l["rpc"] == "ControllerExpandVolume")
        .map(|l| l["code"].as_str().unwrap().to_owned())
        .collect()
}

fn show_json(c: &Cluster, volume: &str) -> serde_json::Value {
    c.csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json()
}

/// An expansion the storage cannot give (more than its pool has: OUT_OF_RANGE, final) is
/// lowered to a size it accepts, or cancelled, never below what the volume has.
#[test]
fn a_failed_expansion_is_lowered_or_cancelled_never_below_the_size_reached() {
    let c = Cluster::start(
        "expand-recover",
        "30s",
        node_with(&["--capacity", &(64 * MIB).to_string()]),
    );
    create_volume(&c, "db", "single-node-writer");
    claim(&c, "db", "job-1");
    let out = expand(&c, "db", "1GiB");
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        error_of(&out)["hint"]
            .as_str()
            .unwrap()
            .contains("--cancel"),
        "{out:?}"
    );
    let v = show_json(&c, "db");
    assert_eq!(v["expansion"]["phase"], "failed", "{v}");
    assert_eq!(v["expansion"]["capacity_bytes"], 1u64 << 30);

    // Lowered to what the pool has room for, while claimed: it grows.
    let v = expand(&c, "db", "16MiB").ok().json();
    assert_eq!(v["capacity_bytes"], 16 * MIB, "{v}");
    assert!(v.get("expansion").is_none(), "{v}");

    // Too much again; below the 16 MiB reached is refused, and nothing changes.
    assert_eq!(expand(&c, "db", "1GiB").code, 1);
    let below = expand(&c, "db", "8MiB");
    assert_eq!(below.code, 2, "{below:?}");
    assert!(
        error_of(&below)["message"]
            .as_str()
            .unwrap()
            .contains("already has 16 MiB; an expansion cannot go below the size reached"),
        "{below:?}"
    );
    assert_eq!(show_json(&c, "db")["expansion"]["phase"], "failed");

    // Cancelled: the volume keeps what it has, and says so in its events.
    let out = c.csivol(&["volume", "expand", "db", "--cancel", "-o", "json"]);
    let v = out.ok().json();
    assert!(v.get("expansion").is_none(), "{v}");
    assert_eq!(v["capacity_bytes"], 16 * MIB);
    let events = c
        .csivol(&["events", "--volume", "db", "-o", "json"])
        .ok()
        .json();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "volume-expansion-cancelled"),
        "{events}"
    );
    // Nothing is left to cancel.
    let again = c.csivol(&["volume", "expand", "db", "--cancel"]);
    assert_eq!(again.code, 4, "{again:?}");
    // Failed, then cancelled by asking for the capacity the volume has.
    assert_eq!(expand(&c, "db", "1GiB").code, 1);
    let v = expand(&c, "db", "16MiB").ok().json();
    assert!(v.get("expansion").is_none(), "{v}");
    assert_eq!(
        controller_expand_codes(&c),
        ["OUT_OF_RANGE", "OK", "OUT_OF_RANGE", "OUT_OF_RANGE"],
        "a cancel calls nothing"
    );
    release(&c, "db", "job-1");
}

/// A ControllerExpandVolume that fails with an error that may pass, and is retried, is
/// lowered in place between two attempts: the retries ask for the new size.
#[test]
fn a_retried_expansion_is_lowered_between_attempts() {
    let c = Cluster::start(
        "expand-lower",
        "30s",
        node_with(&["--fail", "ControllerExpandVolume=UNAVAILABLE:3"]),
    );
    create_volume(&c, "db", "single-node-writer");
    claim(&c, "db", "job-1");
    c.csivol(&["volume", "expand", "db", "--capacity", "8MiB"])
        .ok();
    wait_for(
        "the first attempt to fail and wait for its retry",
        Duration::from_secs(30),
        || {
            let v = show_json(&c, "db");
            v["expansion"]["error"]
                .as_str()
                .is_some_and(|e| e.contains("UNAVAILABLE") && e.contains("retrying at"))
                .then_some(())
        },
    );
    // Between attempts the request may be lowered; while an attempt runs it is refused
    // (exit 4) and asked again.
    let lowered = wait_for(
        "the expansion to be lowered",
        Duration::from_secs(60),
        || {
            let out = c.csivol(&["volume", "expand", "db", "--capacity", "2MiB", "-o", "json"]);
            match out.code {
                0 => Some(out),
                4 => None,
                _ => panic!("{out:?}"),
            }
        },
    );
    assert_eq!(lowered.json()["expansion"]["capacity_bytes"], 2 * MIB);
    let v = expand(&c, "db", "2MiB").ok().json();
    assert_eq!(v["capacity_bytes"], 2 * MIB, "{v}");
    assert!(v.get("expansion").is_none(), "{v}");
    let codes = controller_expand_codes(&c);
    assert_eq!(codes.last().map(String::as_str), Some("OK"), "{codes:?}");
    assert_eq!(codes.iter().filter(|c| *c == "UNAVAILABLE").count(), 3);
    let recorded: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            c.dir
                .join("backend/volumes")
                .join(format!("{}.json", v["external_id"].as_str().unwrap())),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        recorded["capacity_bytes"],
        2 * MIB,
        "the storage got the lower size"
    );
    release(&c, "db", "job-1");
}
