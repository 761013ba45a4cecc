//! Loop devices that tests attach (through the reference plugin's block volumes), found by
//! their backing files and detached even when a test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Detaches, when dropped, every loop device whose backing file lies below its root, so a
/// failing test leaves none behind. Declare it before what attaches devices and after the
/// `TestDir` holding their images: it then drops after the processes stopped and before
/// the directory is removed. A root given later ([`LoopGuard::watch`]) suits a directory
/// made by what it guards.
#[derive(Debug, Default)]
pub struct LoopGuard(Option<PathBuf>);

impl LoopGuard {
    pub fn new(root: &Path) -> Self {
        Self(Some(root.to_owned()))
    }

    pub fn watch(&mut self, root: &Path) {
        self.0 = Some(root.to_owned());
    }
}

impl Drop for LoopGuard {
    fn drop(&mut self) {
        let Some(root) = &self.0 else { return };
        for device in loop_devices_under(root) {
            let _ = Command::new("losetup")
                .arg("--detach")
                .arg(&device)
                .status();
        }
    }
}

/// The loop devices backed by files below `root`.
pub fn loop_devices_under(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("losetup")
        .args(["--list", "--noheadings", "--output", "NAME,BACK-FILE"])
        .output()
        .expect("run losetup");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (name, file) = l.trim().split_once(char::is_whitespace)?;
            // A deleted backing file is listed with " (deleted)" appended.
            let file = file.trim().trim_end_matches(" (deleted)");
            Path::new(file)
                .starts_with(root)
                .then(|| PathBuf::from(name))
        })
        .collect()
}

/// Waits until `count` loop devices are backed by files under `root`, for 10 s at most: a
/// detached device that something still holds open (a prober that opened the new device,
/// a bind mount being released) is cleared by the kernel when the last holder closes it.
#[track_caller]
pub fn assert_loop_devices(root: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let devices = loop_devices_under(root);
        if devices.len() == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected {count} loop device(s) under {}, found {devices:?}",
            root.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The file backing the loop device `device` (`/dev/loopN`), as the kernel shows it.
pub fn backing_file(device: &Path) -> Option<PathBuf> {
    let name = device.file_name()?.to_str()?;
    let file =
        std::fs::read_to_string(format!("/sys/class/block/{name}/loop/backing_file")).ok()?;
    Some(PathBuf::from(file.trim_end()))
}

/// Detaches `device` behind whoever set it up and sets its number up again on `image`, as
/// a reuse of the number does. Returns whether the number went to `image`: another process
/// may set the free number up in between, which is a reuse all the same (and that device
/// is left alone). A detached device that something still holds open is cleared once it
/// is closed; until then the number is busy, for 10 s at most.
pub fn reuse_number(device: &Path, image: &Path) -> bool {
    let was = backing_file(device);
    run_losetup(&["--detach".as_ref(), device.as_os_str()]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let e = match run_losetup(&[device.as_os_str(), image.as_os_str()]) {
            Ok(()) => return true,
            Err(e) => e,
        };
        let now = backing_file(device);
        if now.is_some() && now != was {
            eprintln!(
                "{} was set up on {} by another process",
                device.display(),
                now.unwrap_or_default().display()
            );
            return false;
        }
        assert!(Instant::now() < deadline, "{e}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn run_losetup(args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = Command::new("losetup")
        .args(args)
        .output()
        .map_err(|e| format!("failed to run losetup: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "losetup {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}
