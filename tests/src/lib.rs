//! Support for tests that run csivol's real binaries: temp dirs whose mounts are undone even
//! when a test fails, child processes stopped by pid, and condition waits with deadlines.
//! The end-to-end tests and the load benchmark of the workspace live in this crate too.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::mount::{UnmountFlags, unmount};

/// A temporary directory that, when dropped, first unmounts everything mounted below it
/// (deepest first), then removes it. A panicking test leaks neither mounts nor files.
#[derive(Debug)]
pub struct TestDir {
    dir: tempfile::TempDir,
}

impl TestDir {
    pub fn new(prefix: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("csivol-{prefix}-"))
            .tempdir()
            .expect("create temp dir");
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Mount points below this directory, from `/proc/self/mountinfo`.
    pub fn mounts(&self) -> Vec<PathBuf> {
        mounts_under(self.path())
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let mut mounts = self.mounts();
        mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for m in mounts {
            // Lazy detach: a process still holding a file open must not stop the cleanup.
            let _ = unmount(&m, UnmountFlags::DETACH);
        }
    }
}

/// Mount points at or below `root`, in mount-table order.
pub fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .filter(|p| p.starts_with(&root))
        .collect()
}

/// Whether `path` is a mount point.
pub fn is_mounted(path: &Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_owned());
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .any(|p| Path::new(p) == path)
}

/// A child process that is killed (SIGKILL, by pid) when dropped, unless it already exited.
#[derive(Debug)]
pub struct Proc {
    child: Option<Child>,
    pub name: String,
}

impl Proc {
    /// Starts `cmd` with stdin closed; stdout and stderr go to `log` so a failing test can
    /// show what the process said.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Self {
        let out = fs::File::create(log).expect("create log file");
        let err = out.try_clone().expect("clone log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("failed to start {name}: {e}"));
        Self {
            child: Some(child),
            name: name.to_owned(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("process is running").id()
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then wait up to `timeout` for the exit status; SIGKILL after that.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("valid pid");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// Whether the process has exited (and reaps it if so).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `cond` every few milliseconds until it returns `Some`, or panics with `what` once
/// `timeout` has passed. Tests wait on conditions, never on fixed sleeps.
pub fn wait_for<T>(what: &str, timeout: Duration, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Path of a binary built by this workspace, next to the running test executable.
///
/// Test executables live in `target/<profile>/deps/`; the binaries one level up.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run the tests with `cargo test --workspace` so every binary is built",
        path.display()
    );
    path
}
