//! How full a volume is, through real binaries: a file written into a claimed volume's
//! real bind mount shows in `volume show`, `claim list -o wide`, `-o json` and
//! `/v1/metrics` within a resync; crossing the filling threshold is one `volume-filling`
//! event naming the claim's alloc and labels, however the volume hovers around it; a plugin
//! without GET_VOLUME_STATS is said not to report usage.

use std::path::PathBuf;
use std::time::Duration;

use csivol_tests::{TestDir, wait_for};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts};
use crate::e2e::create_volume;

/// The agents' config: a resync every second, so that samples follow the writes quickly.
fn fast_resync(dir: &TestDir) -> NodeOpts {
    let path = dir.join("agent.toml");
    std::fs::write(&path, "resync_interval = \"1s\"\n").unwrap();
    NodeOpts {
        agent_args: vec![format!("--config={}", path.display())],
        ..Default::default()
    }
}

/// Claims `volume` for `alloc` on node-1 with a label; its target path.
fn claim(c: &Cluster, volume: &str, alloc: &str) -> PathBuf {
    let out = c
        .csivol(&[
            "claim",
            volume,
            "--node",
            "node-1",
            "--alloc",
            alloc,
            "--label",
            "job=https://ci.example/jobs/7",
            "--wait",
            "--timeout",
            "60s",
            "-o",
            "json",
        ])
        .ok()
        .json();
    PathBuf::from(out["target_path"].as_str().expect("a target path"))
}

/// The claim's usage as `volume show -o json` has it.
fn usage(c: &Cluster, volume: &str) -> Value {
    let v = c
        .csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json();
    v["claims"][0]["usage"].clone()
}

/// Waits until the claim's used bytes are `used`, give or take a block of the directory.
fn wait_used(c: &Cluster, volume: &str, used: u64) -> Value {
    wait_for(
        &format!("{volume}'s usage to show {used} bytes used"),
        Duration::from_secs(60),
        || {
            let u = usage(c, volume);
            let got = u["bytes"]["used"].as_u64()?;
            (got.abs_diff(used) < 4096).then_some(u)
        },
    )
}

fn write(target: &std::path::Path, bytes: usize) {
    std::fs::write(target.join("data"), vec![7u8; bytes]).unwrap();
}

/// The `volume-filling` events of `volume`.
fn filling_events(c: &Cluster, volume: &str) -> Vec<Value> {
    let events = c
        .csivol(&["events", "--volume", volume, "-o", "json"])
        .ok()
        .json();
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "volume-filling")
        .cloned()
        .collect()
}

#[test]
fn a_file_written_into_a_claimed_volume_shows_in_its_usage_and_a_filling_volume_is_told_once() {
    let conf = TestDir::new("usage-agent-conf");
    let c = Cluster::start("usage", "10s", vec![fast_resync(&conf)]);
    create_volume(&c, "data", "single-node-writer");
    let target = claim(&c, "data", "job-1");

    // 200 KiB of a 1 MiB volume: the plugin counts its files' bytes.
    write(&target, 200 << 10);
    let u = wait_used(&c, "data", 200 << 10);
    assert_eq!(u["reported"], "sampled", "{u}");
    assert_eq!(u["bytes"]["total"], 1 << 20, "{u}");
    assert!(u["inodes"]["total"].as_u64().is_some_and(|n| n > 0), "{u}");

    let show = c.csivol(&["volume", "show", "data"]).ok().stdout.clone();
    assert!(
        show.contains("USED/SIZE") && show.contains("(20%)"),
        "{show}"
    );
    let wide = c
        .csivol(&["claim", "list", "-o", "wide"])
        .ok()
        .stdout
        .clone();
    assert!(
        wide.contains("USED/SIZE") && wide.contains("200 KiB/1 MiB (20%)"),
        "{wide}"
    );
    let status = c.csivol(&["status"]).ok().stdout.clone();
    assert!(
        status.contains("USED/SIZE") && status.contains("(20%)"),
        "{status}"
    );

    let metrics = c.metrics();
    for name in [
        "csivol_volume_used_bytes",
        "csivol_volume_available_bytes",
        "csivol_volume_capacity_bytes",
        "csivol_volume_used_inodes",
        "csivol_volume_available_inodes",
        "csivol_volume_capacity_inodes",
    ] {
        let series = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("volume=\"data\""));
        let series = series.unwrap_or_else(|| panic!("no {name} for data in:\n{metrics}"));
        assert!(
            series.contains("node=\"node-1\"") && series.contains("plugin=\"hostpath\""),
            "{series}"
        );
    }
    assert!(
        metrics.contains(&format!(
            "csivol_volume_used_bytes{{volume=\"data\",node=\"node-1\",plugin=\"hostpath\",namespace=\"default\"}} {}",
            200 << 10
        )),
        "{metrics}"
    );
    assert!(filling_events(&c, "data").is_empty(), "20% is not filling");

    // Past 85%: one event, naming the alloc and its labels.
    write(&target, 900 << 10);
    wait_used(&c, "data", 900 << 10);
    let events = wait_for("a volume-filling event", Duration::from_secs(30), || {
        let e = filling_events(&c, "data");
        (!e.is_empty()).then_some(e)
    });
    assert_eq!(events.len(), 1, "{events:?}");
    let message = events[0]["message"].as_str().unwrap();
    assert!(
        message.contains("job-1") && message.contains("job=https://ci.example/jobs/7"),
        "{message}"
    );
    assert_eq!(events[0]["alloc"], "job-1", "{events:?}");

    // Hovering around the threshold is no new crossing: just below it, then above again.
    for bytes in [850 << 10, 920 << 10, 860 << 10, 950 << 10] {
        write(&target, bytes);
        wait_used(&c, "data", bytes as u64);
    }
    assert_eq!(filling_events(&c, "data").len(), 1, "no flapping");

    // Fallen clear below it, and past it again: a second crossing.
    write(&target, 100 << 10);
    wait_used(&c, "data", 100 << 10);
    write(&target, 1000 << 10);
    wait_used(&c, "data", 1000 << 10);
    wait_for(
        "a second volume-filling event",
        Duration::from_secs(30),
        || (filling_events(&c, "data").len() == 2).then_some(()),
    );
}

#[test]
fn a_plugin_without_volume_stats_is_said_not_to_report_usage() {
    let conf = TestDir::new("usage-agent-conf-nostats");
    let mut opts = fast_resync(&conf);
    opts.plugin_args = vec!["--disable".into(), "volume-stats".into()];
    let c = Cluster::start("usage-nostats", "10s", vec![opts]);
    create_volume(&c, "data", "single-node-writer");
    claim(&c, "data", "job-1");
    let u = wait_for("the claim's usage", Duration::from_secs(60), || {
        let u = usage(&c, "data");
        (!u.is_null()).then_some(u)
    });
    assert_eq!(u["reported"], "not_reported", "{u}");
    let show = c.csivol(&["volume", "show", "data"]);
    assert_eq!(show.code, 0, "{show:?}");
    assert!(
        show.stdout.contains("the plugin does not report usage"),
        "{show:?}"
    );
    let wide = c.csivol(&["claim", "list", "-o", "wide"]);
    assert_eq!(wide.code, 0, "{wide:?}");
    assert!(
        wide.stdout.contains("not reported")
            && wide.stderr.contains("the plugin does not report usage"),
        "{wide:?}"
    );
    assert!(
        !c.metrics().contains("csivol_volume_used_bytes{"),
        "no usage series without usage"
    );
}
