//! Every plugin shape csivol knows of, with the agent's default flags: the reference
//! plugin in each of its `--node-shape` modes (and `--no-stage`, `--publish-without-mount`)
//! taken through the node-truth scenario: claim, ready, data written, each mount the
//! plugin made removed behind the agent (drift, repaired, the data still there), the agent
//! killed and started again (recovered without publishing again), released, nothing left.
//! A plugin shape someone reports is one more row of [`SHAPES`].

use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};

use csivol_tests::loops::LoopGuard;
use csivol_tests::{Api, TestDir, eventually};
use rustix::mount::{UnmountFlags, unmount};
use serde_json::Value;

use super::procs::{
    Logs, OneNode, claim, claim_state, create_volume_as, fast_config, gone, ready, wait_events,
    wait_volume,
};
use super::support::WAIT;

/// What a shape ends in with default agent flags.
enum Outcome {
    /// Ready, repaired after each drift, recovered after kill -9, cleaned up at release.
    Works,
    /// Never ready, saying why while the claim waits; a release ends the wait.
    NeverReady { waits_for: &'static str },
}

pub struct Shape {
    pub name: &'static str,
    pub plugin_args: &'static [&'static str],
    pub block: bool,
    outcome: Outcome,
    /// What the agent observes the plugin make at the staging path (`None`: no staging)
    /// and at the target, as `csivol plugin show` and `csivol-agent check` say it.
    pub staged_as: Option<&'static str>,
    pub published_as: &'static str,
}

impl Shape {
    /// Whether csivol can use the plugin with default agent flags.
    pub fn works(&self) -> bool {
        matches!(self.outcome, Outcome::Works)
    }
}

pub const SHAPES: &[Shape] = &[
    Shape {
        name: "stage mounts the volume at the staging path, publish binds the staging",
        plugin_args: &[],
        block: false,
        outcome: Outcome::Works,
        staged_as: Some("mount"),
        published_as: "mount",
    },
    Shape {
        name: "stage makes nothing, publish binds the plugin's own directory (the Kubernetes reference driver)",
        plugin_args: &["--node-shape=stage-nothing"],
        block: false,
        outcome: Outcome::Works,
        staged_as: Some("none"),
        published_as: "mount",
    },
    Shape {
        name: "no STAGE_UNSTAGE_VOLUME, publish mounts at the target",
        plugin_args: &["--no-stage"],
        block: false,
        outcome: Outcome::Works,
        staged_as: None,
        published_as: "mount",
    },
    Shape {
        name: "stage binds a directory, publish binds a subdirectory of the staging",
        plugin_args: &["--node-shape=publish-subdir"],
        block: false,
        outcome: Outcome::Works,
        staged_as: Some("mount"),
        published_as: "mount",
    },
    Shape {
        name: "block: stage binds the device node in the staging directory, publish at the target",
        plugin_args: &["--node-shape=stage-device"],
        block: true,
        outcome: Outcome::Works,
        staged_as: Some("mounts-inside"),
        published_as: "device",
    },
    Shape {
        name: "publish answers OK and makes nothing at the target (a broken plugin)",
        plugin_args: &["--publish-without-mount"],
        block: false,
        outcome: Outcome::NeverReady {
            waits_for: "target of v1 is no longer mounted",
        },
        staged_as: Some("mount"),
        published_as: "none",
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_plugin_shape_with_default_agent_flags() {
    for (i, shape) in SHAPES.iter().enumerate() {
        eprintln!("--- shape {}: {}", i + 1, shape.name);
        let dir = TestDir::new(&format!("node-shape-{}", i + 1));
        let _loops = LoopGuard::new(dir.path());
        match shape.outcome {
            Outcome::Works => works(&dir, shape).await,
            Outcome::NeverReady { waits_for } => never_ready(&dir, shape, waits_for).await,
        }
    }
}

const DATA: &[u8] = b"written through the target";

/// Writes `DATA` through the target: a file in a directory, bytes on a device.
fn write(target: &Path, block: bool) {
    if block {
        let dev = std::fs::OpenOptions::new()
            .write(true)
            .open(target)
            .unwrap();
        dev.write_all_at(DATA, 4096).unwrap();
        dev.sync_all().unwrap();
    } else {
        std::fs::write(target.join("data.txt"), DATA).unwrap();
    }
}

/// Reads `DATA` back through the target, or says why not.
fn read(target: &Path, block: bool) -> Result<Vec<u8>, String> {
    if block {
        let meta = std::fs::metadata(target).map_err(|e| e.to_string())?;
        if !meta.file_type().is_block_device() {
            return Err(format!("{} is no block device", target.display()));
        }
        let dev = std::fs::File::open(target).map_err(|e| e.to_string())?;
        let mut buf = vec![0; DATA.len()];
        dev.read_exact_at(&mut buf, 4096)
            .map_err(|e| e.to_string())?;
        Ok(buf)
    } else {
        std::fs::read(target.join("data.txt")).map_err(|e| e.to_string())
    }
}

async fn start(dir: &TestDir, shape: &Shape, ready_timeout: &str) -> OneNode {
    let config = fast_config(dir, ready_timeout);
    let node = OneNode::start(dir, &[], shape.plugin_args, &[&config]).await;
    let attachment = if shape.block {
        "block-device"
    } else {
        "file-system"
    };
    create_volume_as(&node.api, "v1", "single-node-writer", attachment).await;
    claim(&node.api, "v1", "a1").await;
    node
}

/// The mounts the plugin made below the agent's data dir, sorted (stagings first).
fn plugin_mounts(dir: &TestDir, data_dir: &Path) -> Vec<PathBuf> {
    let data_dir = data_dir.canonicalize().unwrap();
    let mut mounts: Vec<PathBuf> = dir
        .mounts()
        .into_iter()
        .filter(|m| m.starts_with(&data_dir))
        .collect();
    mounts.sort();
    mounts
}

async fn kinds(api: &Api, query: &str) -> Vec<String> {
    let (_, e) = api.get(&format!("/v1/events?{query}")).await;
    e.as_array()
        .map(|a| {
            a.iter()
                .map(|e| e["kind"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn works(dir: &TestDir, shape: &Shape) {
    let OneNode {
        server: _server,
        api,
        hp,
        mut agent,
    } = start(dir, shape, "2m").await;
    let logs = Logs(&agent);
    let target = ready(&api, "v1", "a1").await;
    write(&target, shape.block);
    let made = plugin_mounts(dir, &agent.data_dir);
    assert!(
        !made.is_empty(),
        "{}: the plugin mounted something",
        shape.name
    );
    // What the agent observed the plugin make, as `csivol plugin show` lists it.
    let (_, plugin) = api.get("/v1/plugins/hp").await;
    let n = &plugin["nodes"][0];
    assert_eq!(n["ready_check"], "mount", "{plugin}");
    assert_eq!(
        n["observed"]["staging"].as_str(),
        shape.staged_as,
        "{plugin}"
    );
    assert_eq!(n["observed"]["target"], shape.published_as, "{plugin}");

    // Each mount the plugin made, removed behind the agent: drift, repaired, same data.
    for (i, m) in made.iter().enumerate() {
        unmount(m, UnmountFlags::empty())
            .unwrap_or_else(|e| panic!("{}: unmount {}: {e}", shape.name, m.display()));
        let drift = wait_events(&api, "v1", "claim-drift", i + 1).await;
        eprintln!("drift of {}: {}", m.display(), drift[i]["message"]);
        wait_events(&api, "v1", "claim-repaired", i + 1).await;
        assert_eq!(ready(&api, "v1", "a1").await, target);
        assert_eq!(
            read(&target, shape.block).as_deref(),
            Ok(DATA),
            "{}: the volume's data at the target after {} was repaired",
            shape.name,
            m.display()
        );
        assert_eq!(
            plugin_mounts(dir, &agent.data_dir),
            made,
            "{}: repaired to what the plugin made, no mount doubled",
            shape.name
        );
    }

    // kill -9 and a start over the same mounts: recovery keeps what the plugin made.
    let published = hp.count("NodePublishVolume", "OK");
    let registered = kinds(&api, "node=n1")
        .await
        .iter()
        .filter(|k| *k == "node-registered")
        .count();
    drop(logs);
    agent.restart_after_kill();
    let _logs = Logs(&agent);
    eventually("the restarted agent to register", WAIT, || async {
        let n = kinds(&api, "node=n1")
            .await
            .iter()
            .filter(|k| *k == "node-registered")
            .count();
        (n > registered).then_some(())
    })
    .await;
    assert_eq!(ready(&api, "v1", "a1").await, target);
    assert_eq!(
        read(&target, shape.block).as_deref(),
        Ok(DATA),
        "{}",
        shape.name
    );
    assert_eq!(
        hp.count("NodePublishVolume", "OK"),
        published,
        "{}: recovered without publishing again",
        shape.name
    );
    let drifts = kinds(&api, "volume=v1")
        .await
        .iter()
        .filter(|k| *k == "claim-drift")
        .count();
    assert_eq!(
        drifts,
        made.len(),
        "{}: no drift at the restart",
        shape.name
    );

    // Released: nothing of it is left on the node.
    let (status, body) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    gone(&api, "v1", "a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(
        plugin_mounts(dir, &agent.data_dir).is_empty(),
        "{}: {:?}",
        shape.name,
        dir.mounts()
    );
    hp.assert_no_lifecycle_violation();
}

async fn never_ready(dir: &TestDir, shape: &Shape, waits_for: &str) {
    let OneNode {
        server: _server,
        api,
        hp: _hp,
        agent,
    } = start(dir, shape, "5m").await;
    let _logs = Logs(&agent);
    let c: Value = eventually("the claim to say what it waits for", WAIT, || async {
        claim_state(&api, "v1", "a1")
            .await
            .filter(|c| c["waiting"].is_object())
    })
    .await;
    assert_eq!(c["state"], "publishing", "{}: {c}", shape.name);
    let reason = c["waiting"]["reason"].as_str().unwrap();
    assert!(reason.contains(waits_for), "{}: {c}", shape.name);
    // The release does not wait for the readiness timeout.
    let (status, _) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202);
    gone(&api, "v1", "a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(
        dir.mounts().is_empty(),
        "{}: {:?}",
        shape.name,
        dir.mounts()
    );
}
