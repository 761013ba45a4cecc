//! Dev mode as a new user runs it: claim a demo volume, write into it, Ctrl-C, start again
//! on the same directory: the claim is ready again with its data at its target.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::{Proc, TestDir, bin_path, is_mounted, mounts_under, wait_for};
use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;

use crate::cluster::{Out, run};

const WAIT: Duration = Duration::from_secs(60);

struct Dev {
    dir: PathBuf,
    home: PathBuf,
    url: String,
    runs: u32,
}

impl Dev {
    fn start(&mut self) -> Proc {
        self.runs += 1;
        let mut cmd = Command::new(bin_path("csivol-agent"));
        cmd.arg("dev")
            .arg(format!("--dir={}", self.dir.display()))
            .arg(format!(
                "--listen={}",
                self.url.trim_start_matches("https://")
            ))
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env("RUST_LOG", "info");
        let log = self.dir.with_extension(format!("{}.log", self.runs));
        let proc = Proc::spawn("csivol-agent dev", cmd, &log);
        // Up once the demo volumes are there and the CLI finds the cluster.
        wait_for("dev mode up", WAIT, || {
            let out = self.csivol(&["volume", "show", "demo-data", "-o", "json"]);
            (out.code == 0).then_some(())
        });
        proc
    }

    /// The CLI with no token flag and no token variable: it finds the one dev mode left.
    fn csivol(&self, args: &[&str]) -> Out {
        let mut cmd = Command::new(bin_path("csivol"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("CSIVOL_ADDR", &self.url)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null());
        run(cmd)
    }

    fn claim_of(&self, volume: &str) -> Value {
        let v = self
            .csivol(&["volume", "show", volume, "-o", "json"])
            .ok()
            .json();
        v["claims"][0].clone()
    }
}

/// Ctrl-C, as a terminal sends it, and the wait for dev mode to finish stopping.
fn interrupt(mut proc: Proc) {
    let pid = Pid::from_raw(proc.pid() as i32).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    let status = wait_for("dev mode stopped", Duration::from_secs(120), || {
        proc.exited()
    });
    assert!(status.success(), "dev mode exited with {status}");
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn ctrl_c_and_resume_keeps_the_claim_and_its_data() {
    let test = TestDir::new("dev-resume");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut dev = Dev {
        dir: test.join("csivol-dev"),
        home: test.join("home"),
        // Dev mode serves TLS with its own CA, which it leaves where the CLI looks.
        url: format!("https://127.0.0.1:{port}"),
        runs: 0,
    };
    let proc = dev.start();
    // Found over TLS with no flags: the CA is where the CLI looks, and the env file names it.
    assert!(dev.home.join(".config/csivol/ca.pem").exists());
    let env = read(&dev.dir.join("env")).unwrap();
    assert!(env.contains("export CSIVOL_CACERT="), "{env}");
    assert!(env.contains("export CSIVOL_ADDR=https://"), "{env}");
    let claimed = dev
        .csivol(&[
            "claim",
            "demo-data",
            "--node",
            "node-1",
            "--alloc",
            "job-1",
            "--wait",
            "--timeout",
            "60s",
            "-o",
            "json",
        ])
        .ok()
        .json();
    let target = PathBuf::from(claimed["target_path"].as_str().unwrap());
    std::fs::write(target.join("before.txt"), "written before Ctrl-C").unwrap();

    interrupt(proc);
    // Each agent took its node down through its plugin: nothing is left mounted.
    assert!(
        mounts_under(&dev.dir).is_empty(),
        "{:?}",
        mounts_under(&dev.dir)
    );

    let proc = dev.start();
    wait_for("the claim ready again, with its data", WAIT, || {
        let c = dev.claim_of("demo-data");
        let ready = c["state"] == "ready";
        let data = read(&target.join("before.txt"));
        if ready {
            // Never ready on an empty local directory.
            assert_eq!(
                data.as_deref(),
                Some("written before Ctrl-C"),
                "ready without the volume at {}: {c}",
                target.display()
            );
        }
        ready.then_some(())
    });
    assert!(is_mounted(&target));
    let events = dev
        .csivol(&["events", "--volume", "demo-data", "-o", "json"])
        .ok()
        .json();
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"claim-drift") && kinds.contains(&"claim-repaired"),
        "the resume is in the event log: {kinds:?}"
    );
    interrupt(proc);
    assert!(mounts_under(&dev.dir).is_empty());
}
