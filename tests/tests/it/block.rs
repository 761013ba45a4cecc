//! Block volumes through csivol (`attachment = "block-device"`): the reference plugin on
//! real loop devices (`--mount bind`, as root), claimed and released through the CLI. The
//! bytes are written and read through the device at the claim's target; the readiness
//! check looks at the device itself, so a target that lost it drifts and is repaired.

use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::loops::{LoopGuard, loop_devices_under};
use csivol_tests::{TestDir, wait_for};
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out};

const WAIT: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;
const JOB1: &[u8] = b"written through the device by job-1";

/// Nodes whose agents resync every second, so drift is found quickly.
fn nodes(conf: &TestDir, n: usize) -> Vec<NodeOpts> {
    let file = conf.join("agent.toml");
    std::fs::write(&file, "resync_interval = \"1s\"\n").unwrap();
    vec![
        NodeOpts {
            plugin_args: vec!["--mount=bind".into()],
            agent_args: vec![format!("--config={}", file.display())],
        };
        n
    ]
}

fn create_block_volume(c: &Cluster, name: &str) {
    c.create_volume_spec(
        name,
        &format!(
            "name = \"{name}\"\nplugin = \"{}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"block-device\"\ncapacity_bytes = {}\n",
            crate::cluster::PLUGIN,
            8 * MIB
        ),
    );
}

fn claim(c: &Cluster, volume: &str, node: &str, alloc: &str) -> PathBuf {
    let out = c.csivol(&[
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
    ]);
    assert_eq!(out.ok().json()["state"], "ready", "{out:?}");
    PathBuf::from(out.json()["target_path"].as_str().expect("a target path"))
}

fn release(c: &Cluster, volume: &str, alloc: &str) -> Out {
    c.csivol(&[
        "release",
        volume,
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ])
}

fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

fn write_through(target: &Path, offset: u64, bytes: &[u8]) {
    let device = std::fs::OpenOptions::new()
        .write(true)
        .open(target)
        .unwrap();
    device.write_all_at(bytes, offset).unwrap();
    device.sync_all().unwrap();
}

fn read_through(target: &Path, offset: u64, len: usize) -> Vec<u8> {
    let device = std::fs::File::open(target).unwrap();
    let mut buf = vec![0; len];
    device.read_exact_at(&mut buf, offset).unwrap();
    buf
}

fn event_kinds(c: &Cluster, volume: &str) -> Vec<String> {
    let events = c
        .csivol(&["events", "--volume", volume, "-o", "json"])
        .ok()
        .json();
    events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect()
}

fn claim_state(c: &Cluster, volume: &str, alloc: &str) -> Value {
    let v = c
        .csivol(&["volume", "show", volume, "-o", "json"])
        .ok()
        .json();
    v["claims"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["alloc"] == alloc).cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn block_bytes_survive_release_and_a_claim_on_another_node() {
    let mut loops = LoopGuard::default();
    let conf = TestDir::new("block-conf");
    let c = Cluster::start("block-bytes", "30s", nodes(&conf, 2));
    loops.watch(c.dir.path());
    create_block_volume(&c, "disk");

    let t1 = claim(&c, "disk", "node-1", "job-1");
    assert!(is_block_device(&t1), "{} is the device", t1.display());
    write_through(&t1, 5 * MIB, JOB1);
    release(&c, "disk", "job-1").ok();
    assert!(!t1.exists(), "released: the target is gone");

    // Again on the same node, then on another node with a loop device of its own.
    let t2 = claim(&c, "disk", "node-1", "job-2");
    assert_eq!(read_through(&t2, 5 * MIB, JOB1.len()), JOB1);
    write_through(&t2, MIB, b"and by job-2");
    release(&c, "disk", "job-2").ok();

    let t3 = claim(&c, "disk", "node-2", "job-3");
    assert!(t3.starts_with(c.nodes[1].agent_dir()), "{}", t3.display());
    assert!(is_block_device(&t3));
    assert_eq!(read_through(&t3, 5 * MIB, JOB1.len()), JOB1);
    assert_eq!(read_through(&t3, MIB, 12), b"and by job-2");
    release(&c, "disk", "job-3").ok();
    wait_for("the volume to be free", WAIT, || {
        let v = c
            .csivol(&["volume", "show", "disk", "-o", "json"])
            .ok()
            .json();
        (v["state"] == "free").then_some(())
    });
    assert!(c.all_mounts().is_empty(), "{:?}", c.all_mounts());
}

#[test]
fn a_block_target_that_lost_its_device_drifts_and_is_repaired() {
    let mut loops = LoopGuard::default();
    let conf = TestDir::new("block-drift-conf");
    let c = Cluster::start("block-drift", "30s", nodes(&conf, 1));
    loops.watch(c.dir.path());
    create_block_volume(&c, "disk");
    let target = claim(&c, "disk", "node-1", "job-1");
    write_through(&target, 2 * MIB, b"before the drift");

    // The device is taken away from the target behind csivol's back: the target is left
    // a plain empty file, which exists but is not the volume.
    let status = Command::new("umount").arg(&target).status().unwrap();
    assert!(status.success());
    assert!(target.exists() && !is_block_device(&target));

    let repaired = |what: &str, drifts: usize| {
        wait_for(
            &format!("{what}: the drift found and repaired"),
            WAIT,
            || {
                let kinds = event_kinds(&c, "disk");
                let count = |k: &str| kinds.iter().filter(|x| *x == k).count();
                (count("claim-drift") >= drifts
                    && count("claim-repaired") >= drifts
                    && claim_state(&c, "disk", "job-1")["state"] == "ready")
                    .then_some(())
            },
        );
        assert!(is_block_device(&target), "the device is back at the target");
        assert_eq!(read_through(&target, 2 * MIB, 16), b"before the drift");
    };
    repaired("unmounted", 1);

    // The loop device itself is detached: the target is still a device node, of a device
    // with nothing behind it. The agent takes the target down and publishes it again.
    let devices = loop_devices_under(c.dir.path());
    assert_eq!(devices.len(), 1, "{devices:?}");
    let status = Command::new("losetup")
        .arg("--detach")
        .arg(&devices[0])
        .status()
        .unwrap();
    assert!(status.success());
    repaired("detached", 2);
    release(&c, "disk", "job-1").ok();
    assert!(!target.exists(), "released: the target is gone");
}
