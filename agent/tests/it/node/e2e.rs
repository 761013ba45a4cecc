//! The agent binary with the real server and a real plugin: claims made through the API
//! become real mounts; kill -9 of the agent mid-way; a lost node coming back; self-fencing
//! while the server is down.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::{Api, Proc, TestDir, bin_path, eventually, is_mounted, wait_for};
use serde_json::{Value, json};

use super::support::{Hostpath, WAIT};

/// A `csivol-agent server` on a fixed loopback port, so it can be restarted where the
/// agent expects it.
struct Server {
    proc: Proc,
    data_dir: PathBuf,
    port: u16,
    extra: Vec<String>,
    dir: PathBuf,
    runs: u32,
    api: Api,
}

impl Server {
    async fn start(dir: &TestDir, extra: &[&str]) -> Self {
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

    async fn spawn(data_dir: &Path, port: u16, extra: &[String], log: &Path) -> (Proc, Api) {
        let mut cmd = Command::new(bin_path("csivol-agent"));
        cmd.arg("server")
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen=127.0.0.1:{port}"))
            .args(extra)
            .env("RUST_LOG", "info");
        let mut proc = Proc::spawn("csivol-agent server", cmd, log);
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
                let ok = reqwest::get(format!("{url}/v1/health"))
                    .await
                    .is_ok_and(|r| r.status().is_success());
                ok.then_some(api)
            }
        })
        .await;
        (proc, api)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn restart(&mut self) {
        self.proc.kill();
        self.runs += 1;
        let log = self.dir.join(format!("server.{}.log", self.runs));
        let (proc, api) = Self::spawn(&self.data_dir, self.port, &self.extra, &log).await;
        self.proc = proc;
        self.api = api;
    }

    /// A node token for `node`, in a file.
    async fn node_token(&self, dir: &TestDir, node: &str) -> PathBuf {
        let (status, t) = self
            .api
            .post("/v1/tokens", json!({"role": "node", "node": node}))
            .await;
        assert_eq!(status, 201, "{t}");
        let path = dir.join(format!("{node}.token"));
        std::fs::write(&path, t["token"].as_str().unwrap()).unwrap();
        path
    }
}

/// A `csivol-agent node` process.
struct AgentProc {
    proc: Proc,
    args: Vec<String>,
    log: PathBuf,
    data_dir: PathBuf,
    runs: u32,
}

impl AgentProc {
    fn start(dir: &TestDir, server: &Server, token: &Path, hp: &Hostpath, extra: &[&str]) -> Self {
        let data_dir = dir.join("agent");
        let mut args = vec![
            "node".to_owned(),
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

    fn spawn(args: &[String], log: &Path, run: u32) -> Proc {
        let mut cmd = Command::new(bin_path("csivol-agent"));
        cmd.args(args).env("RUST_LOG", "csivol_agent=debug");
        Proc::spawn(
            "csivol-agent node",
            cmd,
            &log.with_extension(format!("{run}.log")),
        )
    }

    /// SIGKILL, then start again with the same flags.
    fn restart_after_kill(&mut self) {
        self.proc.kill();
        self.runs += 1;
        self.proc = Self::spawn(&self.args, &self.log, self.runs);
    }

    /// One text value from the agent's own database, read as an operator would.
    fn db_state(&self, sql: &str) -> Option<String> {
        let db = rusqlite::Connection::open_with_flags(
            self.data_dir.join("agent.db"),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .ok()?;
        db.query_row(sql, [], |r| r.get(0)).ok()
    }

    fn log(&self) -> String {
        (1..=self.runs)
            .map(|r| {
                std::fs::read_to_string(self.log.with_extension(format!("{r}.log")))
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>()
            .join("\n--- restarted ---\n")
    }
}

/// Creates a volume through the server (the agent runs CreateVolume as controller host).
async fn create_volume(api: &Api, name: &str, mode: &str) {
    let (status, body) = api
        .post(
            &format!("/v1/volumes/{name}/create"),
            json!({"plugin": "hp", "access_mode": mode, "attachment": "file-system", "capacity_bytes": 1 << 20}),
        )
        .await;
    assert!(status == 202 || status == 200, "{status} {body}");
    wait_volume(api, name, "free").await;
}

async fn wait_volume(api: &Api, name: &str, state: &str) -> Value {
    eventually(&format!("volume {name} {state}"), WAIT, || async {
        let (_, v) = api.get(&format!("/v1/volumes/{name}")).await;
        (v["state"] == state).then_some(v)
    })
    .await
}

async fn claim(api: &Api, volume: &str, alloc: &str) {
    let (status, body) = api
        .post(
            &format!("/v1/volumes/{volume}/claims"),
            json!({"alloc": alloc, "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

async fn claim_state(api: &Api, volume: &str, alloc: &str) -> Option<Value> {
    let (status, body) = api
        .get(&format!("/v1/volumes/{volume}/claims/{alloc}"))
        .await;
    (status == 200).then_some(body)
}

/// Waits for the claim to be ready and returns its target path.
async fn ready(api: &Api, volume: &str, alloc: &str) -> PathBuf {
    let c = eventually(&format!("claim {volume}/{alloc} ready"), WAIT, || async {
        claim_state(api, volume, alloc)
            .await
            .filter(|c| c["state"] == "ready")
    })
    .await;
    PathBuf::from(c["target_path"].as_str().unwrap())
}

async fn gone(api: &Api, volume: &str, alloc: &str) {
    eventually(&format!("claim {volume}/{alloc} gone"), WAIT, || async {
        claim_state(api, volume, alloc)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// Shows the agent's log when a test fails.
struct Logs<'a>(&'a AgentProc);

impl Drop for Logs<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- agent log ---\n{}", self.0.log());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_become_mounts_and_releases_detach() {
    let dir = TestDir::new("node-e2e");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    let _logs = Logs(&agent);
    let node = eventually("the node registered", WAIT, || async {
        let (status, n) = api.get("/v1/nodes/n1").await;
        (status == 200).then_some(n)
    })
    .await;
    assert_eq!(node["plugins"][0]["node_id"], "csi-n1");
    assert_eq!(node["plugins"][0]["controller"], true);

    create_volume(&api, "v1", "single-node-multi-writer").await;
    claim(&api, "v1", "a1").await;
    claim(&api, "v1", "a2").await;
    let t1 = ready(&api, "v1", "a1").await;
    let t2 = ready(&api, "v1", "a2").await;
    assert!(is_mounted(&t1) && is_mounted(&t2));
    std::fs::write(t1.join("f"), "shared").unwrap();
    assert_eq!(std::fs::read_to_string(t2.join("f")).unwrap(), "shared");
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1);
    assert_eq!(hp.count("ControllerPublishVolume", "OK"), 1);

    api.delete("/v1/volumes/v1/claims/a1").await;
    gone(&api, "v1", "a1").await;
    assert!(!t1.exists() && is_mounted(&t2));
    api.delete("/v1/volumes/v1/claims/a2").await;
    gone(&api, "v1", "a2").await;
    // The last release unstages, which lets the server controller-unpublish.
    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert_eq!(hp.count("NodeUnstageVolume", "OK"), 1);
    assert_eq!(hp.count("ControllerUnpublishVolume", "OK"), 1);
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_stage_and_publish() {
    let dir = TestDir::new("node-e2e-kill-stage");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--delay=NodePublishVolume=2s"]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    // Killed once the agent recorded the staging and while NodePublishVolume runs.
    wait_for("the volume staged and being published", WAIT, || {
        let staged = agent.db_state("SELECT state FROM stagings WHERE volume = 'v1'");
        let publishing = agent.db_state("SELECT state FROM publications WHERE volume = 'v1'");
        (staged.as_deref() == Some("staged") && publishing.as_deref() == Some("publishing"))
            .then_some(())
    });
    agent.restart_after_kill();
    let _logs = Logs(&agent);

    let target = ready(&api, "v1", "a1").await;
    assert!(is_mounted(&target));
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1, "not staged twice");
    assert_eq!(
        dir.mounts().len(),
        2,
        "no doubled mount: {:?}",
        dir.mounts()
    );

    api.delete("/v1/volumes/v1/claims/a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_unpublish_and_unstage() {
    let dir = TestDir::new("node-e2e-kill-unstage");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--delay=NodeUnstageVolume=2s"]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    ready(&api, "v1", "a1").await;
    api.delete("/v1/volumes/v1/claims/a1").await;
    // Killed once the publication is gone and while NodeUnstageVolume runs.
    wait_for("the volume being unstaged", WAIT, || {
        let unstaging = agent.db_state("SELECT state FROM stagings WHERE volume = 'v1'");
        let published = agent.db_state("SELECT group_concat(alloc) FROM publications");
        (unstaging.as_deref() == Some("unstaging") && published.is_none()).then_some(())
    });
    agent.restart_after_kill();
    let _logs = Logs(&agent);

    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert!(
        dir.mounts().is_empty(),
        "no leaked mount: {:?}",
        dir.mounts()
    );
    assert_eq!(hp.count("ControllerUnpublishVolume", "OK"), 1);
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_is_lost_and_releases_through_the_node_when_back() {
    let dir = TestDir::new("node-e2e-lost");
    let server = Server::start(&dir, &["--heartbeat-ttl=1s"]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;

    agent.proc.kill();
    wait_volume(&api, "v1", "blocked").await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await.unwrap()["state"],
        "blocked"
    );
    assert!(
        is_mounted(&target),
        "nothing is taken down without the node"
    );
    // The claim cannot be released while its node is away.
    let (status, _) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 423);

    agent.restart_after_kill();
    let _logs = Logs(&agent);
    // Back, the agent reports what it still has; the server releases it through the node.
    gone(&api, "v1", "a1").await;
    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_fences_while_the_server_is_down_and_reports_it() {
    let dir = TestDir::new("node-e2e-fence");
    let mut server = Server::start(&dir, &[]).await;
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &["--fence-after=1s"]);
    let _logs = Logs(&agent);
    let api = server.api.clone();
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;
    let (_, node) = api.get("/v1/nodes/n1").await;
    assert_eq!(node["fence_after"], "1s", "{node}");

    server.proc.kill();
    wait_for("the node to fence itself", WAIT, || {
        dir.mounts().is_empty().then_some(())
    });
    assert!(!target.exists());

    server.restart().await;
    let api = server.api.clone();
    let node = eventually("the fence reported", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        n["fenced_at"].is_string().then_some(n)
    })
    .await;
    assert_eq!(node["status"], "ready", "{node}");
    let (_, events) = api.get("/v1/events?node=n1").await;
    assert!(
        events.to_string().contains("node fenced itself"),
        "{events}"
    );
    // The server never declared the node lost, so its claim still stands: the agent
    // follows the server again and publishes it anew.
    let target = ready(&api, "v1", "a1").await;
    eventually("the target mounted again", WAIT, || async {
        is_mounted(&target).then_some(())
    })
    .await;
    hp.assert_no_lifecycle_violation();
    assert!(agent.data_dir.join("agent.db").exists());
}

/// The agent's memory with 100 published volumes: a measurement, not a check. Run with
/// `cargo test -p csivol-agent --test it rss -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it by name"]
async fn rss_with_100_published_volumes() {
    const VOLUMES: usize = 100;
    let dir = TestDir::new("node-e2e-rss");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--no-fsync"]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    let _logs = Logs(&agent);
    let rss = |field: &str| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", agent.proc.pid())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
            .unwrap()
    };
    eventually("the node registered", WAIT, || async {
        (api.get("/v1/nodes/n1").await.0 == 200).then_some(())
    })
    .await;
    println!("agent RSS after start: {} KiB", rss("VmRSS:"));
    for i in 0..VOLUMES {
        let (status, body) = api
            .post(
                &format!("/v1/volumes/v{i}/create"),
                json!({"plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system", "capacity_bytes": 1 << 20}),
            )
            .await;
        assert!(status == 202 || status == 200, "{status} {body}");
    }
    for i in 0..VOLUMES {
        wait_volume(&api, &format!("v{i}"), "free").await;
        claim(&api, &format!("v{i}"), "a").await;
    }
    for i in 0..VOLUMES {
        let target = ready(&api, &format!("v{i}"), "a").await;
        assert!(is_mounted(&target));
    }
    assert_eq!(dir.mounts().len(), 2 * VOLUMES);
    // Let a heartbeat and a resync of the desired state pass with everything published.
    let (_, node) = api.get("/v1/nodes/n1").await;
    let seen = node["last_heartbeat"].clone();
    eventually("another heartbeat", Duration::from_secs(60), || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        (n["last_heartbeat"] != seen).then_some(())
    })
    .await;
    println!(
        "agent with {VOLUMES} published volumes: VmRSS {} KiB, VmHWM (peak) {} KiB",
        rss("VmRSS:"),
        rss("VmHWM:")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_claim_shows_its_error_then_times_out_and_is_cleaned_up() {
    let dir = TestDir::new("node-e2e-failing");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--fail=NodePublishVolume=UNAVAILABLE"]);
    let config = dir.join("agent.toml");
    std::fs::write(&config, "volume_ready_timeout = \"2s\"\n").unwrap();
    let agent = AgentProc::start(
        &dir,
        &server,
        &token,
        &hp,
        &[&format!("--config={}", config.display())],
    );
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;

    // While the agent retries, operators see the last error and the next try.
    let c = eventually("the claim's error", WAIT, || async {
        claim_state(&api, "v1", "a1")
            .await
            .filter(|c| c["error"].is_string())
    })
    .await;
    assert_eq!(c["state"], "publishing", "{c}");
    assert!(
        c["error"].as_str().unwrap().starts_with("UNAVAILABLE"),
        "{c}"
    );
    assert!(c["next_retry_at"].is_string(), "{c}");

    // After volume_ready_timeout the claim fails, and what was begun is taken down.
    let (_, events) = eventually("the claim failed", WAIT, || async {
        let (status, e) = api.get("/v1/events?volume=v1").await;
        e.to_string().contains("TIMEOUT").then_some((status, e))
    })
    .await;
    assert!(
        events.to_string().contains("last error: NodePublishVolume"),
        "the timeout names the last error: {events}"
    );
    gone(&api, "v1", "a1").await;
    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_agent_comes_back_from_lost_and_stops_cleanly() {
    use rustix::process::{Pid, Signal, kill_process};
    let dir = TestDir::new("node-e2e-paused");
    let server = Server::start(&dir, &["--heartbeat-ttl=1s"]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    create_volume(&api, "v2", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    ready(&api, "v1", "a1").await;

    // Stopped (not killed): it misses its heartbeats and is marked lost.
    let pid = Pid::from_raw(agent.proc.pid() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    wait_volume(&api, "v1", "blocked").await;
    kill_process(pid, Signal::CONT).unwrap();
    // Its next heartbeat is answered `lost`: it registers again with what it has, and
    // the blocked claim is released through it.
    gone(&api, "v1", "a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());

    // Back to normal work.
    claim(&api, "v2", "b1").await;
    let target = ready(&api, "v2", "b1").await;
    let status = agent
        .proc
        .terminate(WAIT)
        .expect("the agent stops on SIGTERM");
    assert!(status.success(), "{status}\n{}", agent.log());
    assert!(
        is_mounted(&target),
        "stopping the agent leaves volumes mounted"
    );
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_fences_when_the_server_hangs() {
    use rustix::process::{Pid, Signal, kill_process};
    let dir = TestDir::new("node-e2e-hang");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &["--fence-after=1s"]);
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    ready(&api, "v1", "a1").await;

    // The server still accepts connections but answers nothing.
    let pid = Pid::from_raw(server.proc.pid() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    // Within the fence time and a heartbeat, not after a hung request's own timeout (15 s).
    let fenced = std::panic::catch_unwind(|| {
        wait_for("the node to fence itself", Duration::from_secs(10), || {
            dir.mounts().is_empty().then_some(())
        })
    });
    kill_process(pid, Signal::CONT).unwrap();
    fenced.expect("fenced while the server hung");
    eventually("the fence reported", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        n["fenced_at"].is_string().then_some(())
    })
    .await;
    hp.assert_no_lifecycle_violation();
}
