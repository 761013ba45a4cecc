//! The controller queue through the CLI on real processes: a burst of detaches does not
//! hold an attach behind it, and the backlog is visible in `plugin show` (depth by kind,
//! the oldest wait, how long each running operation waited), in `status` (a warning past
//! the server's threshold) and in the metrics.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, PLUGIN};
use crate::e2e::create_volume;

const WAIT: Duration = Duration::from_secs(120);

fn plugin(c: &Cluster) -> Value {
    c.csivol(&["plugin", "show", PLUGIN, "-o", "json"])
        .ok()
        .json()
}

/// When each ControllerPublishVolume and ControllerUnpublishVolume came in, in order.
fn controller_calls(c: &Cluster) -> Vec<(String, u64)> {
    let mut calls: Vec<(String, u64)> = c.nodes[0]
        .plugin_calls()
        .iter()
        .filter_map(|l| {
            let rpc = l["rpc"].as_str()?;
            rpc.starts_with("ControllerUnpublish")
                .then(|| ("unpublish".to_owned(), l["started_ms"].as_u64().unwrap()))
                .or_else(|| {
                    rpc.starts_with("ControllerPublish")
                        .then(|| ("publish".to_owned(), l["started_ms"].as_u64().unwrap()))
                })
        })
        .collect();
    calls.sort_by_key(|c| c.1);
    calls
}

#[test]
fn an_attach_is_not_held_behind_a_detach_burst_and_the_backlog_shows() {
    const BURST: usize = 6;
    // One node: its controller operations run one at a time, each detach 1 s in the plugin.
    let c = Cluster::start_with_config(
        "queue",
        "30s",
        vec![NodeOpts {
            plugin_args: vec!["--delay=ControllerUnpublishVolume=1500ms".into()],
            ..NodeOpts::default()
        }],
        |_| "controller_queue_warning = \"1s\"\n".into(),
    );
    for i in 0..=BURST {
        create_volume(&c, &format!("v{i}"), "single-node-writer");
    }
    for i in 0..BURST {
        c.csivol(&[
            "claim",
            &format!("v{i}"),
            "--node",
            "node-1",
            "--alloc",
            "job",
            "--wait",
            "--timeout",
            "60s",
        ])
        .ok();
    }
    for i in 0..BURST {
        c.csivol(&["release", &format!("v{i}"), "--alloc", "job"])
            .ok();
    }
    // The burst: detaches waiting behind the one running.
    let shown = wait_for("the detaches to queue up", WAIT, || {
        let p = plugin(&c);
        (p["queue"]["waiting"]["unpublish"]["count"].as_u64() >= Some(BURST as u64 - 2))
            .then_some(p)
    });
    let q = &shown["queue"];
    assert_eq!(q["concurrency"], 8);
    assert_eq!(q["warn_after_ms"], 1000);
    assert_eq!(q["running"][0]["kind"], "unpublish", "{q}");
    let table = c.csivol(&["plugin", "show", PLUGIN]).ok().stdout.clone();
    assert!(
        table.contains("waiting:") && table.contains("unpublish"),
        "{table}"
    );
    assert!(table.contains("running:"), "{table}");
    // Past the threshold, `status` warns, in text and JSON, and the metrics say it too.
    let status = wait_for("status to warn about the queue", WAIT, || {
        let out = c.csivol(&["status"]);
        out.stdout
            .contains("warning: plugin hostpath: its oldest controller operation has waited")
            .then_some(out)
    });
    assert!(status.stdout.contains("unpublish waiting"), "{status:?}");
    let json = c.csivol(&["status", "-o", "json"]).ok().json();
    let behind = &json["controller_queues_behind"];
    assert!(
        behind
            .as_array()
            .is_some_and(|b| b.iter().any(|q| q["plugin"] == PLUGIN)),
        "{json}"
    );
    let metrics = c.metrics();
    assert!(
        metrics.contains("csivol_controller_queue{plugin=\"hostpath\",kind=\"unpublish\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("csivol_controller_queue_oldest_seconds{plugin=\"hostpath\"}"),
        "{metrics}"
    );

    // An attach now: it runs after the detach in flight, not after the whole burst.
    let claimed = c.csivol(&[
        "claim",
        &format!("v{BURST}"),
        "--node",
        "node-1",
        "--alloc",
        "late",
        "--wait",
        "--timeout",
        "120s",
        "-o",
        "json",
    ]);
    assert_eq!(claimed.ok().json()["state"], "ready", "{claimed:?}");
    // Every operation's wait is observed, by plugin and kind.
    wait_for("the burst to drain", WAIT, || {
        (plugin(&c)["queue"]["running"]
            .as_array()
            .is_some_and(Vec::is_empty))
        .then_some(())
    });
    // Then the rest of the burst.
    let calls = controller_calls(&c);
    let publish_at = calls
        .iter()
        .rfind(|(k, _)| k == "publish")
        .expect("the late claim's ControllerPublishVolume")
        .1;
    let detaches_before = calls
        .iter()
        .filter(|(k, t)| k == "unpublish" && *t < publish_at)
        .count();
    let detaches_after = calls
        .iter()
        .filter(|(k, t)| k == "unpublish" && *t > publish_at)
        .count();
    assert!(
        detaches_after >= 2,
        "the attach overtook the waiting detaches: {detaches_before} before it, {detaches_after} after: {calls:?}"
    );
    let metrics = c.metrics();
    let count = |kind: &str| -> f64 {
        let key = format!(
            "csivol_controller_op_wait_seconds_count{{plugin=\"hostpath\",kind=\"{kind}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(count("unpublish"), BURST as f64, "{metrics}");
    assert_eq!(count("publish"), BURST as f64 + 1.0, "{metrics}");
}
