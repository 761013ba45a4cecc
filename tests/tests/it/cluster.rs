//! A csivol cluster of real processes for end-to-end tests: the server, and per node a
//! `csivol-hostpath` plugin (node and controller) and a node agent, on unix sockets and real
//! bind mounts under one temp dir; plus the `csivol` CLI as a CI pipeline would run it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::{Api, Proc, TestDir, bin_path, wait_for};
use serde_json::Value;

/// The csivol plugin id the cluster's nodes run.
pub const PLUGIN: &str = "hostpath";

/// Per-node options.
#[derive(Clone, Debug, Default)]
pub struct NodeOpts {
    /// Extra `csivol-hostpath` flags (faults, delays, `--max-volumes-per-node`).
    pub plugin_args: Vec<String>,
    /// Extra agent flags (`--fence-after`).
    pub agent_args: Vec<String>,
}

pub struct Node {
    pub name: String,
    pub dir: PathBuf,
    plugin: Option<Proc>,
    agent: Option<Proc>,
    opts: NodeOpts,
}

impl Node {
    pub fn agent_dir(&self) -> PathBuf {
        self.dir.join("agent")
    }

    pub fn plugin_state(&self) -> PathBuf {
        self.dir.join("plugin")
    }

    /// The running agent's pid (also in `<dir>/agent.pid`, for fence scripts).
    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().map(Proc::pid)
    }

    /// Mount points under this node's agent dir (its staging and target paths).
    pub fn mounts(&self) -> Vec<PathBuf> {
        csivol_tests::mounts_under(&self.agent_dir())
    }

    /// The RPCs this node's plugin served, from its call log.
    pub fn plugin_calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.plugin_state().join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

pub struct Cluster {
    pub dir: TestDir,
    pub url: String,
    listen: String,
    pub token: String,
    server: Option<Proc>,
    ttl: String,
    pub nodes: Vec<Node>,
}

/// A loopback port that was free a moment ago (the server must come back on the same
/// address after a restart, so port 0 will not do).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    /// Starts a server with `ttl` heartbeat TTL and one node per `nodes` entry.
    pub fn start(name: &str, ttl: &str, nodes: Vec<NodeOpts>) -> Self {
        Self::start_with_config(name, ttl, nodes, |_| String::new())
    }

    /// Like [`Cluster::start`], with a server config file: `config` gets the cluster's
    /// dir (node `node-N` lives in `<dir>/node-N`) and returns the TOML.
    pub fn start_with_config(
        name: &str,
        ttl: &str,
        nodes: Vec<NodeOpts>,
        config: impl FnOnce(&Path) -> String,
    ) -> Self {
        let dir = TestDir::new(&format!("e2e-{name}"));
        let toml = config(dir.path());
        if !toml.is_empty() {
            std::fs::write(dir.join("server.toml"), toml).unwrap();
        }
        let listen = format!("127.0.0.1:{}", free_port());
        let mut c = Self {
            url: format!("http://{listen}"),
            listen,
            token: String::new(),
            server: None,
            ttl: ttl.to_owned(),
            nodes: Vec::new(),
            dir,
        };
        c.start_server();
        c.token = std::fs::read_to_string(c.dir.join("server/operator.token"))
            .unwrap()
            .trim()
            .to_owned();
        for (i, opts) in nodes.into_iter().enumerate() {
            let name = format!("node-{}", i + 1);
            let dir = c.dir.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            let token = c.node_token(&name);
            std::fs::write(dir.join("token"), token).unwrap();
            c.nodes.push(Node {
                name,
                dir,
                plugin: None,
                agent: None,
                opts,
            });
            let i = c.nodes.len() - 1;
            c.start_plugin(i);
            c.start_agent(i);
        }
        for i in 0..c.nodes.len() {
            c.wait_node_status(i, "ready");
        }
        c
    }

    pub fn api(&self) -> Api {
        Api::new(&self.url, Some(&self.token))
    }

    /// Creates a volume from the spec file text `toml` (saved as `<dir>/<name>.toml`) with
    /// `volume create --wait`; checks it came out free and returns it as JSON.
    pub fn create_volume_spec(&self, name: &str, toml: &str) -> Value {
        let spec = self.dir.join(format!("{name}.toml"));
        std::fs::write(&spec, toml).unwrap();
        let out = self.csivol(&[
            "volume",
            "create",
            spec.to_str().unwrap(),
            "--wait",
            "-o",
            "json",
        ]);
        let v = out.ok().json();
        assert_eq!(v["state"], "free", "{out:?}");
        v
    }

    /// A new token for `node`, made with the CLI; the node may host the plugin's controller.
    pub fn node_token(&self, node: &str) -> String {
        let out = self.csivol(&[
            "token",
            "create",
            "--role",
            "node",
            "--node",
            node,
            "--controller",
            PLUGIN,
            "-o",
            "json",
        ]);
        out.ok().json()["token"]
            .as_str()
            .expect("token in the answer")
            .to_owned()
    }

    pub fn start_server(&mut self) {
        let mut cmd = Command::new(bin_path("csivol-server"));
        cmd.args([
            "serve",
            &format!("--data-dir={}", self.dir.join("server").display()),
        ])
        .arg(format!("--listen={}", self.listen))
        .arg(format!("--heartbeat-ttl={}", self.ttl));
        let config = self.dir.join("server.toml");
        if config.exists() {
            cmd.arg(format!("--config={}", config.display()));
        }
        let mut proc = Proc::spawn("server", cmd, &self.dir.join("server.log"));
        let health = format!("{}/v1/health", self.url);
        wait_for("the server to answer", Duration::from_secs(30), || {
            if let Some(status) = proc.exited() {
                panic!("server exited with {status}: {}", self.log("server.log"));
            }
            reqwest_blocking_ok(&health).then_some(())
        });
        self.server = Some(proc);
    }

    pub fn kill_server(&mut self) {
        if let Some(mut p) = self.server.take() {
            p.kill();
        }
    }

    pub fn start_plugin(&mut self, i: usize) {
        let n = &self.nodes[i];
        let socket = n.dir.join("plugin.sock");
        let mut cmd = Command::new(bin_path("csivol-hostpath"));
        cmd.args([
            format!("--endpoint=unix://{}", socket.display()),
            format!("--node-id={}", n.name),
            format!("--state-dir={}", n.plugin_state().display()),
            format!("--backend-dir={}", self.dir.join("backend").display()),
        ])
        .args(&n.opts.plugin_args);
        let proc = Proc::spawn("plugin", cmd, &n.dir.join("plugin.log"));
        std::fs::write(n.dir.join("plugin.pid"), proc.pid().to_string()).unwrap();
        wait_for("the plugin socket", Duration::from_secs(20), || {
            socket.exists().then_some(())
        });
        self.nodes[i].plugin = Some(proc);
    }

    /// Kills the node's plugin and starts it again with `plugin_args` in place of its own:
    /// a plugin upgraded or reconfigured under its mounts (its state survives).
    pub fn restart_plugin_with(&mut self, i: usize, plugin_args: Vec<String>) {
        if let Some(mut p) = self.nodes[i].plugin.take() {
            p.kill();
        }
        self.nodes[i].opts.plugin_args = plugin_args;
        // `start_plugin` waits for the socket: not the one the killed plugin left.
        let _ = std::fs::remove_file(self.nodes[i].dir.join("plugin.sock"));
        self.start_plugin(i);
    }

    pub fn start_agent(&mut self, i: usize) {
        let n = &self.nodes[i];
        let endpoint = format!("unix://{}", n.dir.join("plugin.sock").display());
        let mut cmd = Command::new(bin_path("csivol-agent"));
        // A plugin started without its Controller service has no controller to host.
        let node_only = n
            .opts
            .plugin_args
            .windows(2)
            .any(|w| w[0] == "--disable" && w[1] == "controller-service")
            || n.opts
                .plugin_args
                .iter()
                .any(|a| a == "--disable=controller-service");
        cmd.args([
            "run".to_owned(),
            format!("--server={}", self.url),
            format!("--node={}", n.name),
            format!("--data-dir={}", n.agent_dir().display()),
            format!("--token-file={}", n.dir.join("token").display()),
            format!("--plugin={PLUGIN}={endpoint}"),
        ]);
        if !node_only {
            cmd.arg(format!("--controller={PLUGIN}={endpoint}"));
        }
        cmd.args(&n.opts.agent_args).env("RUST_LOG", "info");
        let proc = Proc::spawn("agent", cmd, &n.dir.join("agent.log"));
        std::fs::write(n.dir.join("agent.pid"), proc.pid().to_string()).unwrap();
        self.nodes[i].agent = Some(proc);
    }

    /// SIGTERM the node's agent, as systemd stops it, and wait for it to exit: a planned
    /// stop (it tells the server, and leaves its mounts unless told to take them down).
    pub fn stop_agent(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].agent.take() {
            let status = p
                .terminate(Duration::from_secs(60))
                .expect("the agent stops on SIGTERM");
            assert!(
                status.success(),
                "the agent exited with {status}:\n{}\n{}",
                std::fs::read_to_string(self.nodes[i].dir.join("agent.log")).unwrap_or_default(),
                self.log("server.log")
            );
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) the node's agent: paused mid-work, then resumed.
    pub fn pause_agent(&self, i: usize, stop: bool) {
        self.nodes[i]
            .agent
            .as_ref()
            .expect("the agent runs")
            .pause(stop);
    }

    /// SIGKILL the node's agent: its mounts stay, as after a crash.
    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].agent.take() {
            p.kill();
        }
    }

    pub fn log(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    /// Waits until `csivol node show` says the node has `status`.
    pub fn wait_node_status(&self, i: usize, status: &str) {
        let name = self.nodes[i].name.clone();
        wait_for(
            &format!("{name} to be {status}"),
            Duration::from_secs(30),
            || {
                let out = self.csivol(&["node", "show", &name, "-o", "json"]);
                (out.code == 0 && out.json()["status"] == status).then_some(())
            },
        );
    }

    /// Runs the `csivol` CLI against this cluster, with no TTY and no ambient config.
    pub fn csivol(&self, args: &[&str]) -> Out {
        self.csivol_as(Some(&self.token), args)
    }

    pub fn csivol_as(&self, token: Option<&str>, args: &[&str]) -> Out {
        run(self.command(token, args))
    }

    /// The `csivol` command, ready to run elsewhere (e.g. on another thread).
    pub fn command(&self, token: Option<&str>, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin_path("csivol"));
        cmd.args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("CSIVOL_ADDR", &self.url)
            .env("XDG_CONFIG_HOME", self.dir.join("cli-config"))
            .env("HOME", self.dir.join("cli-home"))
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null());
        if let Some(t) = token {
            cmd.env("CSIVOL_TOKEN", t);
        }
        cmd
    }

    /// The server's Prometheus text (`GET /v1/metrics`).
    pub fn metrics(&self) -> String {
        http_get(&format!("{}/v1/metrics", self.url), Some(&self.token))
            .expect("the server answers /v1/metrics")
    }

    /// Mount points under every node's agent dir.
    pub fn all_mounts(&self) -> Vec<PathBuf> {
        self.nodes.iter().flat_map(Node::mounts).collect()
    }

    /// Waits until `volume` is `free`: no claim holds it and it is detached from every
    /// node (a release is answered once the claim is gone; the detach follows in the
    /// node's own time).
    pub fn wait_free(&self, volume: &str) {
        wait_for(
            &format!("volume {volume} to be free"),
            Duration::from_secs(60),
            || {
                let v = self
                    .csivol(&["volume", "show", volume, "-o", "json"])
                    .ok()
                    .json();
                (v["state"] == "free").then_some(())
            },
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Agents first, so nothing mounts while the TestDir unmounts.
        for n in &mut self.nodes {
            n.agent.take();
        }
        for n in &mut self.nodes {
            n.plugin.take();
        }
        self.server.take();
    }
}

/// Runs a `csivol` command to completion.
pub fn run(mut cmd: Command) -> Out {
    let out = cmd.output().expect("run csivol");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What a `csivol` run did.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    #[track_caller]
    pub fn ok(&self) -> &Self {
        assert_eq!(self.code, 0, "csivol failed: {self:?}");
        self
    }
}

fn reqwest_blocking_ok(url: &str) -> bool {
    http_get(url, None).is_some()
}

/// The body of a 200 answer to `GET url` (with the bearer `token`), or `None`. A plain
/// TCP + HTTP/1.1 request keeps this synchronous helper free of a runtime.
fn http_get(url: &str, token: Option<&str>) -> Option<String> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map_or((rest, "/"), |(h, p)| (h, p));
    let mut s = std::net::TcpStream::connect(host).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    if !buf.starts_with("HTTP/1.1 200") {
        return None;
    }
    let (_, body) = buf.split_once("\r\n\r\n")?;
    Some(body.to_owned())
}

/// Whether `path` exists on the node as a mount point.
pub fn mounted(path: &Path) -> bool {
    csivol_tests::is_mounted(path)
}
