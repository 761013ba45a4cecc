//! The node's own CSI calls, through real binaries: the agent counts every call it makes
//! to its plugin, the server exports them (`csivol_csi_call_seconds` without a node label,
//! per-node call and error counters) and `plugin show` gives each node's p50/p99 and error
//! rate; an agent's restart is read as a restart, never as counts going down.

use std::time::Duration;

use csivol_tests::{TestDir, wait_for};

use crate::cluster::{Cluster, NodeOpts};
use crate::e2e::create_volume;

/// The value of the series `name{labels...}` whose labels include every one of `having`.
fn series(metrics: &str, name: &str, having: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| having.iter().all(|h| l.contains(h)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

fn node_calls(c: &Cluster) -> Option<f64> {
    series(
        &c.metrics(),
        "csivol_node_csi_calls_total",
        &["node=\"node-1\"", "plugin=\"hostpath\""],
    )
}

fn claim_and_release(c: &Cluster, alloc: &str) {
    c.csivol(&[
        "claim",
        "data",
        "--node",
        "node-1",
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    c.csivol(&["release", "data", "--alloc", alloc, "--wait"])
        .ok();
}

#[test]
fn the_nodes_csi_calls_are_counted_and_an_agent_restart_is_no_drop() {
    let conf = TestDir::new("csi-calls-agent-conf");
    let path = conf.join("agent.toml");
    std::fs::write(&path, "resync_interval = \"1s\"\n").unwrap();
    let mut c = Cluster::start(
        "csi-calls",
        "10s",
        vec![NodeOpts {
            agent_args: vec![format!("--config={}", path.display())],
            ..Default::default()
        }],
    );
    create_volume(&c, "data", "single-node-writer");
    // The server's first count of an agent is the base the next ones are read against.
    wait_for("the node's call counter", Duration::from_secs(60), || {
        node_calls(&c)
    });
    claim_and_release(&c, "job-1");
    let metrics = wait_for(
        "NodePublishVolume in the calls histogram",
        Duration::from_secs(60),
        || {
            let m = c.metrics();
            series(
                &m,
                "csivol_csi_call_seconds_count",
                &[
                    "plugin=\"hostpath\"",
                    "method=\"NodePublishVolume\"",
                    "code=\"OK\"",
                ],
            )
            .filter(|n| *n >= 1.0)
            .map(|_| m)
        },
    );
    assert!(
        metrics.contains("# TYPE csivol_csi_call_seconds histogram"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .filter(|l| l.starts_with("csivol_csi_call_seconds"))
            .all(|l| !l.contains("node=")),
        "no node label on the histogram:\n{metrics}"
    );
    assert!(
        series(
            &metrics,
            "csivol_csi_call_seconds_bucket",
            &["method=\"NodeGetVolumeStats\"", "le=\"+Inf\""]
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert!(
        series(
            &metrics,
            "csivol_node_csi_call_errors_total",
            &["node=\"node-1\"", "plugin=\"hostpath\""]
        )
        .is_some(),
        "{metrics}"
    );

    let show = c
        .csivol(&["plugin", "show", "hostpath"])
        .ok()
        .stdout
        .clone();
    assert!(show.contains("CSI calls"), "{show}");
    let row = show
        .lines()
        .find(|l| l.contains("node-1") && l.contains("NodePublishVolume"))
        .unwrap_or_else(|| panic!("no NodePublishVolume row for node-1:\n{show}"));
    assert!(row.contains("(0.0%)") && row.contains("<="), "{row}");
    let json = c
        .csivol(&["plugin", "show", "hostpath", "-o", "json"])
        .ok()
        .json();
    let calls = json["calls"].as_array().expect("calls in the JSON");
    assert!(
        calls
            .iter()
            .any(|c| c["node"] == "node-1" && c["method"] == "NodeGetVolumeStats"),
        "{json}"
    );

    // The same `plugin show` carries the plugin's capacity (the one node hosts the
    // controller, which samples GetCapacity) beside each node's calls, in the table and in
    // the JSON: neither room of the server's memory hides the other.
    let json = wait_for(
        "the plugin's capacity beside its calls",
        Duration::from_secs(60),
        || {
            let j = c
                .csivol(&["plugin", "show", "hostpath", "-o", "json"])
                .ok()
                .json();
            let sampled = j["capacity"]["samples"]
                .as_array()
                .is_some_and(|s| !s.is_empty());
            let called = j["calls"].as_array().is_some_and(|c| !c.is_empty());
            (sampled && called).then_some(j)
        },
    );
    assert_eq!(json["capacity"]["reported"], true, "{json}");
    let show = c
        .csivol(&["plugin", "show", "hostpath"])
        .ok()
        .stdout
        .clone();
    assert!(
        show.lines().any(|l| l.trim() == "capacity:")
            && show.contains("AVAILABLE")
            && show.contains("CSI calls"),
        "{show}"
    );

    // A restart: the new agent counts from zero under a new start id, and the server goes
    // on from what it had, adding the calls the new agent made as it started (Probe,
    // GetPluginInfo, NodeGetInfo, ...: nothing is published, so nothing else calls).
    let before = node_calls(&c).unwrap();
    c.stop_agent(0);
    c.start_agent(0);
    c.wait_node_status(0, "ready");
    wait_for(
        "the new agent's calls added to the node's counter",
        Duration::from_secs(60),
        || {
            let now = node_calls(&c).unwrap_or(0.0);
            assert!(now >= before, "the counter went down: {before} then {now}");
            (now >= before + 3.0).then_some(())
        },
    );
}
