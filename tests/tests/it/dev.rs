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
/// How long a dev cluster may take to come up on a busy machine.
const START_WAIT: Duration = Duration::from_secs(300);

/// A dev cluster run by its real program, with a home of its own for the CLI's defaults.
pub struct Dev {
    pub dir: PathBuf,
    pub home: PathBuf,
    pub url: String,
    pub runs: u32,
    pub nodes: u32,
    /// More `csivol-server dev` flags.
    pub extra: Vec<String>,
}

impl Dev {
    /// Starts dev mode without waiting for it to be up.
    fn spawn(&mut self) -> Proc {
        self.runs += 1;
        let mut cmd = Command::new(bin_path("csivol-server"));
        cmd.args(self.args())
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env("RUST_LOG", "info");
        Proc::spawn("csivol-server dev", cmd, &self.log())
    }

    pub fn start(&mut self) -> Proc {
        let proc = self.spawn();
        // Up once the CLI finds the cluster and the demo volume is created (a first run
        // records it as `creating` until its CreateVolume is through: a claim then would be
        // refused as too early).
        // Generous: several dev clusters may start at once beside other tests.
        wait_for("dev mode up", START_WAIT, || {
            let out = self.csivol(&["volume", "show", "demo-data", "-o", "json"]);
            (out.code == 0 && out.json()["state"] != "creating").then_some(())
        });
        proc
    }

    fn args(&self) -> Vec<String> {
        vec![
            "dev".to_owned(),
            format!("--dir={}", self.dir.display()),
            format!("--listen={}", self.url.trim_start_matches("https://")),
            format!("--nodes={}", self.nodes),
        ]
        .into_iter()
        .chain(self.extra.iter().cloned())
        .collect()
    }

    /// The output of the latest run.
    fn log(&self) -> PathBuf {
        self.dir.with_extension(format!("{}.log", self.runs))
    }

    /// A shell command with the CLI's environment from the dev dir's `env` file alone: no
    /// `csivol` on `PATH` but what the file puts there.
    pub fn sourced(&self, command: &str) -> Out {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!(
                "source {} && {command}",
                self.dir.join("env").display()
            ))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", &self.home)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null());
        run(cmd)
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

    /// What dev mode and each node's agent and plugin said, for a failing test: the
    /// test's directory is gone once it has failed.
    fn print_logs(&self) {
        let mut logs: Vec<PathBuf> = (1..=self.runs)
            .map(|run| self.dir.with_extension(format!("{run}.log")))
            .collect();
        for node in (1..=self.nodes).map(|n| self.dir.join(format!("node-{n}"))) {
            logs.push(node.join("agent.log"));
            logs.push(node.join("plugin.log"));
        }
        for log in logs {
            let text = read(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!("--- {} (last {} lines)", log.display(), tail.len());
            for line in tail {
                eprintln!("{line}");
            }
        }
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
        if std::thread::panicking() {
            self.print_logs();
        }
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

/// Longer than dev mode may take to stop by its own bounds (75 s for the agents to take
/// their nodes down, then 75 s for the plugins, then the server): on a busy machine a
/// take-down may use much of its time, and dev mode is still right to wait for it.
const STOP_WAIT: Duration = Duration::from_secs(240);

/// Ctrl-C, as a terminal sends it, and the wait for dev mode to finish stopping.
pub fn interrupt(mut proc: Proc) {
    let pid = Pid::from_raw(proc.pid() as i32).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    let status = wait_for("dev mode stopped", STOP_WAIT, || proc.exited());
    assert!(status.success(), "dev mode exited with {status}");
}

/// The kinds of a JSON list of events, in order.
fn kinds(events: &Value) -> Vec<&str> {
    events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect()
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[test]
fn ctrl_c_and_resume_keeps_the_claim_and_its_data() {
    ctrl_c_and_resume("dev-resume", &[]);
}

/// With a heartbeat TTL shorter than dev mode takes to stop, the node used to be lost
/// while the server outlived its agent, and its claim released when it came back. A
/// planned stop leaves the node `stopped`, and a claim nobody released comes back.
#[test]
fn ctrl_c_with_a_short_ttl_keeps_the_claim_and_its_data() {
    let (_test, events) = ctrl_c_and_resume("dev-resume-ttl", &["--heartbeat-ttl=3s"]);
    let kinds = kinds(&events);
    assert!(kinds.contains(&"node-stopping"), "{kinds:?}");
    assert!(
        !kinds.contains(&"claim-released"),
        "nobody released it: {kinds:?}"
    );
}

/// A Ctrl-C while dev mode is still starting (its server up, its nodes not yet) stops it in
/// order, as one after it is up: it used to come before dev mode listened for it and kill
/// dev mode outright, its children dying with it.
#[test]
fn ctrl_c_while_starting_stops_in_order() {
    let test = TestDir::new("dev-early-ctrl-c");
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
        nodes: 1,
        extra: Vec::new(),
    };
    let proc = dev.spawn();
    wait_for("dev mode's server to listen", START_WAIT, || {
        read(&dev.log())
            .filter(|log| log.contains("csivol server listening"))
            .map(|_| ())
    });
    interrupt(proc);
    assert!(
        mounts_under(&dev.dir).is_empty(),
        "{:?}",
        mounts_under(&dev.dir)
    );
}

/// Claim `demo-data`, write into it, Ctrl-C, start again on the same directory: the claim
/// is ready again with its data. Returns the test dir and the event log of the second run.
fn ctrl_c_and_resume(name: &str, extra: &[&str]) -> (TestDir, Value) {
    let test = TestDir::new(name);
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
        nodes: 1,
        extra: extra.iter().map(|s| (*s).to_owned()).collect(),
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
    let kinds = kinds(&events);
    assert!(
        kinds.contains(&"claim-drift") && kinds.contains(&"claim-repaired"),
        "the resume is in the event log: {kinds:?}"
    );
    let all = dev.csivol(&["events", "-o", "json"]).ok().json();
    interrupt(proc);
    assert!(mounts_under(&dev.dir).is_empty());
    (test, all)
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
        nodes: 1,
        extra: Vec::new(),
    };
    interrupt(first.start());
    let first_token = read(&token_file).expect("dev mode wrote the CLI's token");

    // `start` waits until the CLI, with no token given, reaches the second cluster.
    let mut second = Dev {
        dir: test.join("second"),
        home: first.home.clone(),
        url: first.url.clone(),
        runs: 0,
        nodes: 1,
        extra: Vec::new(),
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
        nodes: 1,
        extra: Vec::new(),
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
        nodes: 1,
        extra: Vec::new(),
    };
    let proc = dev.start();
    let new = kill_and_restart_by_hand(&dev, "node-1");
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
        (!alive(new)).then_some(())
    });
    interrupt(proc);
}

fn pid_in(path: &Path) -> i32 {
    read(path).unwrap().trim().parse().unwrap()
}

/// Whether process `pid` runs (a zombie waiting to be reaped does not).
fn alive(pid: i32) -> bool {
    read(Path::new(&format!("/proc/{pid}/stat"))).is_some_and(|s| !s.contains(") Z "))
}

/// `kill -9` of `node`'s agent, then the command dev mode prints to bring it back, run as
/// a user would: the new agent's pid (not dev mode's child).
fn kill_and_restart_by_hand(dev: &Dev, node: &str) -> i32 {
    let pid_file = dev.dir.join(node).join("agent.pid");
    let agent_log = dev.dir.join(node).join("agent.log");
    let registrations = |text: &str| text.matches("registered with the server").count();
    let before = registrations(&read(&agent_log).unwrap_or_default());
    let old = pid_in(&pid_file);
    kill_process(Pid::from_raw(old).unwrap(), Signal::KILL).unwrap();
    let line = wait_for(
        &format!("dev mode to say how to bring {node} back"),
        WAIT,
        || {
            let text = read(&dev.log())?;
            let mut lines = text
                .lines()
                .skip_while(|l| !l.starts_with(&format!("{node} agent exited")));
            lines.next()?;
            lines.next().map(|l| l.trim().to_owned())
        },
    );
    assert!(
        line.contains("csivol-agent run ") && line.contains(&format!("--node={node}")),
        "{line}"
    );
    let status = Command::new("sh").arg("-c").arg(&line).status().unwrap();
    assert!(status.success());
    let pid = wait_for("a new agent pid", WAIT, || {
        read(&pid_file)
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|p| *p != old)
    });
    // The shell writes `$!` before the agent runs: wait until the new agent has taken its
    // data dir (its pid in the lock file) and registered through its plugin, as a stray
    // that outlives dev mode has.
    let lock = dev.dir.join(node).join("agent").join("agent.lock");
    wait_for("the hand-started agent to register", WAIT, || {
        let holds = read(&lock).is_some_and(|p| p.trim() == pid.to_string());
        let registered = registrations(&read(&agent_log).unwrap_or_default()) > before;
        (holds && registered).then_some(())
    });
    pid
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Dev mode killed outright (SIGKILL: it can stop nothing itself) takes its agents and
/// plugins with it. An agent started by hand is not its child and stays; the next dev mode
/// on the directory refuses to start beside it, naming its pid and the command to stop it.
#[test]
fn children_die_with_a_killed_dev_mode_and_a_stray_agent_is_named() {
    let test = TestDir::new("dev-killed");
    let mut dev = Dev {
        dir: test.join("csivol-dev"),
        home: test.join("home"),
        url: format!("https://127.0.0.1:{}", free_port()),
        runs: 0,
        nodes: 2,
        extra: Vec::new(),
    };
    let mut proc = dev.start();
    let stray = kill_and_restart_by_hand(&dev, "node-1");
    let children = [
        pid_in(&dev.dir.join("node-1/plugin.pid")),
        pid_in(&dev.dir.join("node-2/plugin.pid")),
        pid_in(&dev.dir.join("node-2/agent.pid")),
    ];
    proc.kill();
    wait_for("dev mode's children to die with it", WAIT, || {
        children.iter().all(|p| !alive(*p)).then_some(())
    });
    assert!(
        alive(stray),
        "the hand-started agent is nobody's child: {:?}\n{}",
        read(Path::new(&format!("/proc/{stray}/stat"))),
        read(&dev.dir.join("node-1/agent.log")).unwrap_or_default()
    );

    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.args(dev.args())
        .env("HOME", &dev.home)
        .env_remove("XDG_CONFIG_HOME");
    let (status, out) = csivol_tests::run_to_exit("csivol-server dev", cmd, WAIT);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!(
            "error: a csivol-agent is already running on the data dir of node-1 (pid {stray})"
        )) && out.contains(&format!("stop it with `kill {stray}`")),
        "{out}"
    );
    kill_process(Pid::from_raw(stray).unwrap(), Signal::TERM).unwrap();
    wait_for("the hand-started agent to stop", WAIT, || {
        (!alive(stray)).then_some(())
    });
}

/// A second dev cluster on another port, beside the first: its banner names the env file
/// that reaches it, and that file alone gives a working CLI (on PATH, with the address,
/// token and CA). The CLI's default CA is then the second's; reaching the first through the
/// defaults fails with a hint that names the dev cluster the CA came from.
#[test]
fn a_second_dev_cluster_says_how_to_reach_it_and_whose_ca_the_cli_holds() {
    let test = TestDir::new("dev-two");
    let home = test.join("home");
    let mut first = Dev {
        dir: test.join("first"),
        home: home.clone(),
        url: format!("https://127.0.0.1:{}", free_port()),
        runs: 0,
        nodes: 1,
        extra: Vec::new(),
    };
    let one = first.start();
    let mut second = Dev {
        dir: test.join("second"),
        home,
        url: format!("https://127.0.0.1:{}", free_port()),
        runs: 0,
        nodes: 1,
        extra: Vec::new(),
    };
    let two = second.start();
    let banner = read(&second.log()).unwrap();
    let env = second.dir.canonicalize().unwrap().join("env");
    assert!(
        banner.contains(&format!("\n  source {}\n  csivol status\n", env.display())),
        "{banner}"
    );
    let env_text = read(&env).unwrap();
    assert!(
        env_text.contains(&format!("export CSIVOL_ADDR={}\n", second.url)),
        "{env_text}"
    );
    let out = second.sourced("csivol status");
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.contains("nodes:   1 (1 ready)"), "{out:?}");

    let out = first.csivol(&["status"]);
    assert_eq!(out.code, 8, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "which the dev cluster in {} wrote",
            second.dir.canonicalize().unwrap().display()
        )) && out.stderr.contains("run `source DIR/env`"),
        "{out:?}"
    );
    assert_eq!(first.sourced("csivol status").code, 0);

    // A scheme that does not match the server's is named, with the right address.
    let plain = first.url.replace("https://", "http://");
    let out = first.sourced(&format!("csivol --addr {plain} status"));
    assert_eq!(out.code, 8, "{out:?}");
    assert!(
        out.stderr.contains(&format!(
            "error: the csivol server at {plain} speaks TLS: use {}",
            first.url
        )),
        "{out:?}"
    );
    interrupt(two);
    interrupt(one);
}
