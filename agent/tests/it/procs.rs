//! The real processes of the node agent's end-to-end tests: a `csivol-server serve` that can
//! be restarted on its port, a `csivol-agent run`, and the API steps the tests share.

use std::path::{Path, PathBuf};
use std::process::Command;

use csivol_tests::{Api, Proc, TestDir, bin_path, eventually};
use serde_json::{Value, json};

use super::support::{Hostpath, WAIT};

/// A `csivol-server serve` on a fixed loopback port, so it can be restarted where the
/// agent expects it.
pub struct Server {
    pub proc: Proc,
    data_dir: PathBuf,
    port: u16,
    extra: Vec<String>,
    dir: PathBuf,
    runs: u32,
    pub api: Api,
}

impl Server {
    pub async fn start(dir: &TestDir, extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let data_dir = dir.join("server");
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let (proc, api) = Self::spawn(&data_dir, port, &extra, &dir.join("server.1.log")).await;
        Self {
            proc,
            data_dir,
            port,
            extra,
            dir: dir.path().to_owned(),
            runs: 1,
            api,
        }
    }

    pub async fn spawn(data_dir: &Path, port: u16, extra: &[String], log: &Path) -> (Proc, Api) {
        let mut cmd = Command::new(bin_path("csivol-server"));
        cmd.arg("serve")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "info");
        let mut proc = Proc::spawn("csivol-server serve", cmd, log);
        let token_file = data_dir.join("operator.token");
        let url = format!("http://127.0.0.1:{port}");
        let api = eventually("the server to answer", WAIT, || {
            let exited = proc.exited();
            let url = url.clone();
            let token_file = token_file.clone();
            async move {
                if let Some(status) = exited {
                    panic!("the server exited with {status}");
                }
                let token = std::fs::read_to_string(&token_file).ok()?;
                let api = Api::new(&url, Some(token.trim()));
                let health = api.send("GET", "/v1/health", None).await;
                let ok = health.is_ok_and(|r| r.status.is_success());
                ok.then_some(api)
            }
        })
        .await;
        (proc, api)
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub async fn restart(&mut self) {
        self.proc.kill();
        self.start_again().await;
    }

    /// Its data dir.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Starts the server again where it was, after it was stopped (its `proc` killed).
    pub async fn start_again(&mut self) {
        self.runs += 1;
        let log = self.dir.join(format!("server.{}.log", self.runs));
        let (proc, api) = Self::spawn(&self.data_dir, self.port, &self.extra, &log).await;
        self.proc = proc;
        self.api = api;
    }

    /// A node token for `node`, in a file.
    pub async fn node_token(&self, dir: &TestDir, node: &str) -> PathBuf {
        let (status, t) = self
            .api
            .post(
                "/v1/tokens",
                json!({"role": "node", "node": node, "controllers": ["hp"]}),
            )
            .await;
        assert_eq!(status, 201, "{t}");
        let path = dir.join(format!("{node}.token"));
        std::fs::write(&path, t["token"].as_str().unwrap()).unwrap();
        path
    }
}

/// A `csivol-agent run` process.
pub struct AgentProc {
    pub proc: Proc,
    args: Vec<String>,
    log: PathBuf,
    pub data_dir: PathBuf,
    runs: u32,
}

impl AgentProc {
    pub fn start(
        dir: &TestDir,
        server: &Server,
        token: &Path,
        hp: &Hostpath,
        extra: &[&str],
    ) -> Self {
        let data_dir = dir.join("agent");
        let mut args = vec![
            "run".to_owned(),
            format!("--server={}", server.url()),
            "--node=n1".to_owned(),
            format!("--data-dir={}", data_dir.display()),
            format!("--token-file={}", token.display()),
            format!("--plugin=hp=unix://{}", hp.socket.display()),
            format!("--controller=hp=unix://{}", hp.socket.display()),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = dir.join("agent");
        let proc = Self::spawn(&args, &log, 1);
        Self {
            proc,
            args,
            log,
            data_dir,
            runs: 1,
        }
    }

    pub fn spawn(args: &[String], log: &Path, run: u32) -> Proc {
        let mut cmd = Command::new(bin_path("csivol-agent"));
        cmd.args(args).env("RUST_LOG", "csivol_agent=debug");
        Proc::spawn(
            "csivol-agent run",
            cmd,
            &log.with_extension(format!("{run}.log")),
        )
    }

    /// Another `csivol-agent run` with the same flags (the same data dir), logging to `log`.
    pub fn another(&self, log: &Path) -> Proc {
        let mut cmd = Command::new(bin_path("csivol-agent"));
        cmd.args(&self.args).env("RUST_LOG", "csivol_agent=debug");
        Proc::spawn("a second csivol-agent run", cmd, log)
    }

    /// SIGKILL, then start again with the same flags.
    pub fn restart_after_kill(&mut self) {
        self.proc.kill();
        self.runs += 1;
        self.proc = Self::spawn(&self.args, &self.log, self.runs);
    }

    /// One text value from the agent's own database, read as an operator would.
    pub fn db_state(&self, sql: &str) -> Option<String> {
        let db = rusqlite::Connection::open_with_flags(
            self.data_dir.join("agent.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .ok()?;
        db.query_row(sql, [], |r| r.get(0)).ok()
    }

    pub fn log(&self) -> String {
        (1..=self.runs)
            .map(|r| {
                std::fs::read_to_string(self.log.with_extension(format!("{r}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n--- restarted ---\n")
    }
}

/// Creates a file-system volume through the server (the agent runs CreateVolume as
/// controller host).
pub async fn create_volume(api: &Api, name: &str, mode: &str) {
    create_volume_as(api, name, mode, "file-system").await;
}

/// Creates a volume with the attachment given (`file-system`, `block-device`), once an
/// agent has registered the plugin: the server refuses a plugin no node runs.
pub async fn create_volume_as(api: &Api, name: &str, mode: &str, attachment: &str) {
    eventually("plugin hp registered", WAIT, || async {
        (api.get("/v1/plugins/hp").await.0 == 200).then_some(())
    })
    .await;
    let (status, body) = api
        .post(
            &format!("/v1/volumes/{name}/create"),
            json!({"plugin": "hp", "access_mode": mode, "attachment": attachment, "capacity_bytes": 1 << 20}),
        )
        .await;
    assert!(status == 202 || status == 200, "{status} {body}");
    wait_volume(api, name, "free").await;
}

pub async fn wait_volume(api: &Api, name: &str, state: &str) -> Value {
    eventually(&format!("volume {name} {state}"), WAIT, || async {
        let (_, v) = api.get(&format!("/v1/volumes/{name}")).await;
        (v["state"] == state).then_some(v)
    })
    .await
}

pub async fn claim(api: &Api, volume: &str, alloc: &str) {
    let (status, body) = api
        .post(
            &format!("/v1/volumes/{volume}/claims"),
            json!({"alloc": alloc, "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

pub async fn claim_state(api: &Api, volume: &str, alloc: &str) -> Option<Value> {
    let (status, body) = api
        .get(&format!("/v1/volumes/{volume}/claims/{alloc}"))
        .await;
    (status == 200).then_some(body)
}

/// Waits for the claim to be ready and returns its target path.
pub async fn ready(api: &Api, volume: &str, alloc: &str) -> PathBuf {
    let c = eventually(&format!("claim {volume}/{alloc} ready"), WAIT, || async {
        claim_state(api, volume, alloc)
            .await
            .filter(|c| c["state"] == "ready")
    })
    .await;
    PathBuf::from(c["target_path"].as_str().unwrap())
}

pub async fn gone(api: &Api, volume: &str, alloc: &str) {
    eventually(&format!("claim {volume}/{alloc} gone"), WAIT, || async {
        claim_state(api, volume, alloc)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// Shows the agent's log when a test fails.
pub struct Logs<'a>(pub &'a AgentProc);

impl Drop for Logs<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.0.log());
        }
    }
}

/// The usual test node: a server, node `n1`'s reference plugin and its agent.
pub struct OneNode {
    pub server: Server,
    pub api: Api,
    pub hp: Hostpath,
    pub agent: AgentProc,
}

impl OneNode {
    pub async fn start(
        dir: &TestDir,
        server_args: &[&str],
        plugin_args: &[&str],
        agent_args: &[&str],
    ) -> Self {
        let server = Server::start(dir, server_args).await;
        let api = server.api.clone();
        let token = server.node_token(dir, "n1").await;
        let hp = Hostpath::start(dir, "n1", plugin_args);
        let agent = AgentProc::start(dir, &server, &token, &hp, agent_args);
        Self {
            server,
            api,
            hp,
            agent,
        }
    }
}

/// An agent config with a short resync, so that drift is found within a test's patience.
pub fn fast_config(dir: &TestDir, ready_timeout: &str) -> String {
    let path = dir.join("agent.toml");
    std::fs::write(
        &path,
        format!("resync_interval = \"300ms\"\nvolume_ready_timeout = \"{ready_timeout}\"\n"),
    )
    .unwrap();
    format!("--config={}", path.display())
}

pub async fn events(api: &Api, volume: &str) -> Vec<Value> {
    let (_, e) = api.get(&format!("/v1/events?volume={volume}")).await;
    e.as_array().cloned().unwrap_or_default()
}

/// Waits for `n` events of `kind` on `volume` and returns them.
pub async fn wait_events(api: &Api, volume: &str, kind: &str, n: usize) -> Vec<Value> {
    eventually(
        &format!("{n} {kind} event(s) on {volume}"),
        WAIT,
        || async {
            let found: Vec<Value> = events(api, volume)
                .await
                .into_iter()
                .filter(|e| e["kind"] == kind)
                .collect();
            (found.len() >= n).then_some(found)
        },
    )
    .await
}

pub fn staging_of(agent: &AgentProc, volume: &str) -> PathBuf {
    agent.data_dir.join("staging").join("hp").join(volume)
}
