//! A block target is its device, not the device's number: loop devices are reused by
//! number, so a target whose `/dev/loopN` was detached behind csivol's back and set up
//! again on another file shows the recorded `MAJOR:MINOR`, a live device and a size, and
//! is another volume's device all the same. The agent finds it by what the kernel says of
//! the device besides its number, reports the drift and repairs it: the target shows the
//! volume's own bytes again. With a running agent, and with an agent started again over it.

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use csivol_tests::loops::{LoopGuard, backing_file, loop_devices_under, reuse_number};
use csivol_tests::{TestDir, eventually};
use rustix::process::{Pid, Signal, kill_process};

use super::procs::{
    Logs, OneNode, claim, create_volume_as, fast_config, gone, ready, wait_events, wait_volume,
};
use super::support::WAIT;

const VOLUME_BYTES: &[u8] = b"the volume's own bytes";
const OTHER_BYTES: &[u8] = b"another volume's bytes";
const AT: u64 = 4096;

/// The reference plugin's two block shapes: a loop device set up at stage and bound at the
/// target, and the same with its node bound inside the staging directory.
const SHAPES: &[(&str, &[&str])] = &[
    ("stage sets the loop device up, publish binds it", &[]),
    (
        "stage binds the loop device in the staging directory",
        &["--node-shape=stage-device"],
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_target_whose_loop_device_number_was_reused_is_repaired() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: loop devices need root");
        return;
    }
    for (i, (name, plugin_args)) in SHAPES.iter().enumerate() {
        eprintln!("--- {name}");
        let dir = TestDir::new(&format!("device-reused-{}", i + 1));
        let _loops = LoopGuard::new(dir.path());
        reused(&dir, plugin_args).await;
    }
}

async fn reused(dir: &TestDir, plugin_args: &[&str]) {
    let config = fast_config(dir, "2m");
    let OneNode {
        server: _server,
        api,
        hp,
        mut agent,
    } = OneNode::start(dir, &[], plugin_args, &[&config]).await;
    let logs = Logs(&agent);
    create_volume_as(&api, "v1", "single-node-writer", "block-device").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;
    write_at(&target, VOLUME_BYTES);
    let image = dir.join("other.img");
    make_image(&image, OTHER_BYTES);

    // Behind a running agent (held still while the number changes hands, so that it
    // cannot see the device detached in between): the loop device is detached and the
    // number set up again on another volume's image.
    let pid = Pid::from_raw(agent.proc.pid() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    let taken = reuse(dir, &image);
    kill_process(pid, Signal::CONT).unwrap();
    let drift = wait_events(&api, "v1", "claim-drift", 1).await;
    let message = drift[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("but another device has taken that number"),
        "{drift:?}"
    );
    wait_events(&api, "v1", "claim-repaired", 1).await;
    repaired(&api, &target, &taken).await;

    // Again, with the agent down meanwhile: its recovery holds the target to the device
    // recorded, and publishes it again.
    drop(logs);
    agent.proc.kill();
    let again = reuse(dir, &dir.join("other-2.img"));
    agent.restart_after_kill();
    let _logs = Logs(&agent);
    repaired(&api, &target, &again).await;
    assert!(
        agent
            .log()
            .contains("but another device has taken that number"),
        "the recovery says why it published again"
    );

    // Released: the devices set up on other images were never the volume's and are left
    // as they are.
    let (status, body) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    gone(&api, "v1", "a1").await;
    wait_volume(&api, "v1", "free").await;
    for t in [&taken, &again].into_iter().filter(|t| t.ours) {
        assert_eq!(backing_file(&t.device), Some(t.image.clone()));
    }
    hp.assert_no_lifecycle_violation();
}

/// A loop device number given to another image.
struct Taken {
    device: PathBuf,
    rdev: u64,
    image: PathBuf,
    /// Whether the number went to this test's image; another process may have set the
    /// free number up in between, which is a reuse all the same.
    ours: bool,
}

/// Detaches the volume's loop device and sets its number up again on `image`.
fn reuse(dir: &TestDir, image: &Path) -> Taken {
    if !image.exists() {
        make_image(image, OTHER_BYTES);
    }
    let volume_devices = loop_devices_under(&dir.join("backend"));
    assert_eq!(
        volume_devices.len(),
        1,
        "the volume's loop device: {volume_devices:?}"
    );
    let device = volume_devices[0].clone();
    let rdev = std::fs::metadata(&device).unwrap().rdev();
    let ours = reuse_number(&device, image);
    Taken {
        device,
        rdev,
        image: image.to_owned(),
        ours,
    }
}

/// Waits until the claim is ready on a device other than the one `taken`, showing the
/// volume's bytes.
async fn repaired(api: &csivol_tests::Api, target: &Path, taken: &Taken) {
    eventually(
        "the target to show the volume's device again",
        WAIT,
        || async {
            let back = ready(api, "v1", "a1").await;
            let rdev = std::fs::metadata(&back).ok()?.rdev();
            (back == target
                && rdev != taken.rdev
                && read_at(target).as_deref() == Some(VOLUME_BYTES))
            .then_some(())
        },
    )
    .await;
}

/// Another volume's image: `bytes` where the volume's own are, the size of the volume.
fn make_image(path: &Path, bytes: &[u8]) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(1 << 20).unwrap();
    f.write_all_at(bytes, AT).unwrap();
}

fn write_at(target: &Path, bytes: &[u8]) {
    let dev = std::fs::OpenOptions::new()
        .write(true)
        .open(target)
        .unwrap();
    dev.write_all_at(bytes, AT).unwrap();
    dev.sync_all().unwrap();
}

fn read_at(target: &Path) -> Option<Vec<u8>> {
    let dev = std::fs::File::open(target).ok()?;
    let mut buf = vec![0; VOLUME_BYTES.len()];
    dev.read_exact_at(&mut buf, AT).ok()?;
    Some(buf)
}
