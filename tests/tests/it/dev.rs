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
        let mut cmd = Command::new(bin_path("csivol-server"));
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
        let proc = Proc::spawn("csivol-server dev", cmd, &log);
        // Up once the CLI finds the cluster and the demo volume is created (a first run
        // records it as `creating` until its CreateVolume is through: a claim then would be
        // refused as too early).
        wait_for("dev mode up", WAIT, || {
            let out = self.csivol(&["volume", "show", "demo-data", "-o", "json"]);
            (out.code == 0 && out.json()["state"] != "creating").then_some(())
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

/// Dev mode's children run in process groups of their own (a terminal's Ctrl-C reaches dev
/// mode only), so a test that fails after dev mode was killed stops them itself, by the
/// pids dev mode wrote.
impl Drop for Dev {
    fn drop(&mut self) {
        let Ok(nodes) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for node in nodes.flatten() {
            for file in ["agent.pid", "plugin.pid"] {
                let Some(raw) = std::fs::read_to_string(node.path().join(file))
                    .ok()
                    .and_then(|p| p.trim().parse::<i32>().ok())
                else {
                    continue;
                };
                // Only a process of this dev cluster: a pid of one that exited may have
                // been reused since.
                let ours = std::fs::read(format!("/proc/{raw}/cmdline")).is_ok_and(|c| {
                    String::from_utf8_lossy(&c).contains(&*self.dir.to_string_lossy())
                });
                if let (true, Some(pid)) = (ours, Pid::from_raw(raw)) {
                    let _ = kill_process(pid, Signal::KILL);
                }
            }
        }
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

/// A second dev cluster in another directory leaves the CLI working with no flags: the
/// token an earlier dev cluster wrote is replaced; a token the user put there never is.
#[test]
fn a_second_dev_cluster_replaces_the_first_ones_token_not_the_users() {
    let test = TestDir::new("dev-second");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let home = test.join("home");
    let token_file = home.join(".config/csivol/token");
    let mut first = Dev {
        dir: test.join("first"),
        home: home.clone(),
        url: format!("https://127.0.0.1:{port}"),
        runs: 0,
    };
    interrupt(first.start());
    let first_token = read(&token_file).expect("dev mode wrote the CLI's token");

    // `start` waits until the CLI, with no token given, reaches the second cluster.
    let mut second = Dev {
        dir: test.join("second"),
        home: first.home.clone(),
        url: first.url.clone(),
        runs: 0,
    };
    let proc = second.start();
    let second_token = read(&token_file).unwrap();
    assert_ne!(first_token, second_token);
    assert_eq!(
        second_token.trim(),
        read(&second.dir.join("server/operator.token"))
            .unwrap()
            .trim()
    );
    assert!(second.csivol(&["status"]).code == 0);
    interrupt(proc);

    // A token the user put there is theirs: a dev cluster leaves it, and a refused token
    // says where it came from.
    std::fs::write(&token_file, "csivol_mine\n").unwrap();
    let mut third = Dev {
        dir: test.join("third"),
        home: second.home.clone(),
        url: second.url.clone(),
        runs: 0,
    };
    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.arg("dev")
        .arg(format!("--dir={}", third.dir.display()))
        .arg(format!(
            "--listen={}",
            third.url.trim_start_matches("https://")
        ))
        .env("HOME", &third.home)
        .env_remove("XDG_CONFIG_HOME");
    third.runs += 1;
    let log = third.dir.with_extension("log");
    let proc = Proc::spawn("csivol-server dev", cmd, &log);
    wait_for("the third dev cluster up", WAIT, || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|l| l.contains("csivol dev cluster is up"))
    });
    assert_eq!(read(&token_file).unwrap(), "csivol_mine\n");
    let out = third.csivol(&["status"]);
    assert_eq!(out.code, 7, "{out:?}");
    assert!(
        out.stderr.contains("token from") && out.stderr.contains("hint: pass the right token"),
        "{out:?}"
    );
    interrupt(proc);
}

/// After `kill -9` of a node's agent, dev mode prints the command that brings that node
/// back, and that command does (dev mode runs one node unless told otherwise).
#[test]
fn a_killed_agent_comes_back_with_the_command_dev_mode_prints() {
    let test = TestDir::new("dev-restart-hint");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut dev = Dev {
        dir: test.join("csivol-dev"),
        home: test.join("home"),
        url: format!("https://127.0.0.1:{port}"),
        runs: 0,
    };
    let proc = dev.start();
    let pid_file = dev.dir.join("node-1/agent.pid");
    let pid = |path: &Path| -> i32 { read(path).unwrap().trim().parse().unwrap() };
    let old = pid(&pid_file);
    kill_process(Pid::from_raw(old).unwrap(), Signal::KILL).unwrap();
    let log = dev.dir.with_extension("1.log");
    let line = wait_for("dev mode to say how to bring node-1 back", WAIT, || {
        let text = read(&log)?;
        let mut lines = text
            .lines()
            .skip_while(|l| !l.starts_with("node-1 agent exited"));
        lines.next()?;
        lines.next().map(|l| l.trim().to_owned())
    });
    assert!(
        line.contains("csivol-agent run ") && line.contains("--node=node-1"),
        "{line}"
    );
    let status = Command::new("sh").arg("-c").arg(&line).status().unwrap();
    assert!(status.success());
    let new = wait_for("a new agent pid", WAIT, || {
        read(&pid_file)
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|p| *p != old)
    });
    // The node registers again: a second node-registered event.
    wait_for("node-1 registered again", WAIT, || {
        let out = dev.csivol(&["events", "--node", "node-1", "-o", "json"]);
        let events = out.ok().json();
        let n = events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "node-registered")
            .count();
        (n >= 2).then_some(())
    });
    // Started by hand, it is stopped by hand, before dev mode stops the rest.
    kill_process(Pid::from_raw(new).unwrap(), Signal::TERM).unwrap();
    wait_for("the hand-started agent to stop", WAIT, || {
        (!Path::new(&format!("/proc/{new}")).exists()
            || read(Path::new(&format!("/proc/{new}/stat"))).is_some_and(|s| s.contains(") Z ")))
        .then_some(())
    });
    interrupt(proc);
}
