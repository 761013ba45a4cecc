//! Support for tests that run csivol's real binaries: temp dirs whose mounts are undone even
//! when a test fails, child processes stopped by pid, and condition waits with deadlines.
//! The end-to-end tests of the workspace live in this crate too; the load benchmark
//! (`tests/bench`, crate `csivol-bench`) uses this support as well.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use csivol_client::Body;
use serde_json::{Value, json};

use rustix::mount::{UnmountFlags, unmount};

pub mod etcd;
pub mod idle;
pub mod loops;
pub mod netns;
pub mod proxy;
pub mod sniffer;

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
    /// Starts `cmd` with stdin closed; stdout and stderr are appended to `log` so a failing
    /// test can show what the process said (across restarts too).
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Self {
        let out = fs::File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("open log file");
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

    /// SIGSTOP (`true`) or SIGCONT (`false`): a process paused as a stalled machine is, then
    /// resumed where it stopped.
    pub fn pause(&self, stop: bool) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).expect("valid pid");
        let signal = if stop {
            rustix::process::Signal::STOP
        } else {
            rustix::process::Signal::CONT
        };
        rustix::process::kill_process(pid, signal).expect("signal the process");
    }

    /// Whether the process runs: started, not killed, not exited (reaped if it has).
    pub fn running(&mut self) -> bool {
        self.child.is_some() && self.exited().is_none()
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

/// Runs `cmd` to its end (killed by pid if it outlives `timeout`, which fails the test) and
/// returns its exit status and what it printed (stdout and stderr together).
pub fn run_to_exit(name: &str, cmd: Command, timeout: Duration) -> (ExitStatus, String) {
    let out = tempfile::NamedTempFile::new().expect("temp file for output");
    let mut proc = Proc::spawn(name, cmd, out.path());
    let status = wait_for(&format!("{name} to exit"), timeout, || proc.exited());
    (status, fs::read_to_string(out.path()).unwrap_or_default())
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

/// A `csivol-server serve` process on a free loopback port, with its data dir.
#[derive(Debug)]
pub struct ServerProc {
    pub proc: Proc,
    pub data_dir: PathBuf,
    pub url: String,
    /// The operator token the server created on first start.
    pub token: String,
    /// The command the server runs under (see [`ServerProc::start_via`]), if any.
    wrapper: Vec<String>,
    args: Vec<String>,
    /// Environment variables set for it (see [`ServerProc::restart_with_env`]).
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl ServerProc {
    /// Starts the server with `data_dir` (created if missing), listening on port 0, plus
    /// `extra` flags (e.g. `--heartbeat-ttl=1s`). Waits until `/v1/health` answers.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Self {
        Self::start_via(&[], data_dir, "127.0.0.1:0", extra)
    }

    /// Like [`ServerProc::start`], listening on `listen`, with the server run by `wrapper`
    /// (e.g. `prlimit --nofile=…` or `nsenter --net=…`): a wrapper that execs the server,
    /// as those do, keeps the pid the server's, so it is still stopped by pid.
    pub fn start_via(wrapper: &[&str], data_dir: &Path, listen: &str, extra: &[&str]) -> Self {
        let mut args = vec![
            "serve".to_owned(),
            format!("--data-dir={}", data_dir.display()),
            format!("--listen={listen}"),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let log = data_dir.with_extension("log");
        let wrapper = wrapper.iter().map(|s| (*s).to_owned()).collect();
        Self::spawn(data_dir.to_owned(), wrapper, args, Vec::new(), log)
    }

    fn spawn(
        data_dir: PathBuf,
        wrapper: Vec<String>,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Self {
        let addr_file = data_dir.join("server.addr");
        let _ = fs::remove_file(&addr_file);
        let server = bin_path("csivol-server");
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(server);
                cmd
            }
            None => Command::new(server),
        };
        cmd.args(&args)
            .env("RUST_LOG", "info,csivol_server::store::replicated=debug")
            .envs(env.iter().map(|(k, v)| (k, v)));
        let log_file = log;
        let mut proc = Proc::spawn("csivol-server serve", cmd, &log_file);
        // Generous: a server over etcd waits for etcd at start, and a debug build starts
        // slowly on a machine busy with other builds.
        let url = wait_for("the server to listen", Duration::from_secs(120), || {
            if let Some(status) = proc.exited() {
                panic!(
                    "server exited with {status}: {}",
                    fs::read_to_string(&log_file).unwrap_or_default()
                );
            }
            fs::read_to_string(&addr_file)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        });
        // A second server over an etcd cluster another server created writes no token
        // file: its tests take the first server's token.
        let shared_store = args.iter().any(|a| a == "--store=etcd");
        let token = match fs::read_to_string(data_dir.join("operator.token")) {
            Ok(t) => t.trim().to_owned(),
            Err(_) if shared_store => String::new(),
            Err(e) => panic!("operator token: {e}"),
        };
        Self {
            proc,
            data_dir,
            url,
            token,
            wrapper,
            args,
            env,
            log: log_file,
        }
    }

    /// SIGKILL, then start again on the same data dir (and a new port).
    pub fn restart_after_kill(&mut self) {
        self.proc.kill();
        let fresh = Self::spawn(
            self.data_dir.clone(),
            self.wrapper.clone(),
            self.args.clone(),
            self.env.clone(),
            self.log.clone(),
        );
        *self = fresh;
    }

    /// Stops the server in order (SIGTERM: requests in flight are answered), then starts
    /// it again on the same data dir and flags with `env` as its environment's additions
    /// (a server started on a fixed `--listen` keeps its address). The token stays the
    /// one the test gave it.
    pub fn restart_with_env(&mut self, env: &[(&str, &str)]) {
        self.proc.terminate(Duration::from_secs(30));
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let token = std::mem::take(&mut self.token);
        let fresh = Self::spawn(
            self.data_dir.clone(),
            self.wrapper.clone(),
            self.args.clone(),
            env,
            self.log.clone(),
        );
        *self = fresh;
        if self.token.is_empty() {
            self.token = token;
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn api(&self) -> Api {
        Api::new(&self.url, Some(&self.token))
    }
}

/// The API client as tests use it: every call returns the status and the parsed body
/// (or `Null`), whatever the status, so a test can check refusals as well as answers.
/// Built on the shared client (`csivol-client`), whose [`Api::send`] it exposes for tests
/// that look at headers or want a dropped connection as an error instead of a panic.
#[derive(Debug, Clone)]
pub struct Api {
    client: csivol_client::Client,
    pub base: String,
    pub token: Option<String>,
}

impl Api {
    pub fn new(base: &str, token: Option<&str>) -> Self {
        let token = token.map(str::to_owned);
        Self {
            client: Self::build(base, token.clone()),
            base: base.trim_end_matches('/').to_owned(),
            token,
        }
    }

    /// A client of an `https://` server that trusts `ca`, presenting `identity` (a client
    /// certificate and its key) when given.
    pub fn with_tls(
        base: &str,
        token: Option<&str>,
        ca: &Path,
        identity: Option<(&Path, &Path)>,
    ) -> Self {
        let tls = csivol_client::tls::client_config(Some(ca), identity).expect("TLS setup");
        let token = token.map(str::to_owned);
        Self {
            client: csivol_client::Client::builder(base)
                .token(token.clone())
                .tls(tls)
                .build()
                .expect("an HTTP client"),
            base: base.trim_end_matches('/').to_owned(),
            token,
        }
    }

    fn build(base: &str, token: Option<String>) -> csivol_client::Client {
        let mut b = csivol_client::Client::builder(base).token(token);
        // Plain HTTP needs no trust roots. Without a TLS configuration of its own, each new
        // client loads the system's (tens of milliseconds, far more on a busy machine), and
        // some tests make a client per simulated claimant, by the hundred.
        if base.starts_with("http://") {
            csivol_client::tls::install_provider();
            b = b.tls(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            );
        }
        b.build().expect("an HTTP client")
    }

    pub fn with_token(&self, token: Option<&str>) -> Self {
        let token = token.map(str::to_owned);
        Self {
            client: self.client.with_token(token.clone()),
            base: self.base.clone(),
            token,
        }
    }

    /// The shared client under this one.
    pub fn client(&self) -> &csivol_client::Client {
        &self.client
    }

    /// A request whose answer comes back as it was sent, or the error if none came.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<csivol_client::Raw, csivol_client::Error> {
        let method = csivol_client::Method::from_bytes(method.as_bytes()).expect("method");
        let body = body.as_ref().map_or(Body::None, Body::Json);
        self.client.send(method, path, body, None).await
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let raw = (self.send(method, path, body).await).unwrap_or_else(|e| panic!("{path}: {e}"));
        let text = String::from_utf8_lossy(&raw.body).into_owned();
        let value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (raw.status.as_u16(), value)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("PUT", path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.call("DELETE", path, None).await
    }

    /// Sends raw bytes as a JSON body (for malformed-input tests).
    pub async fn raw(&self, method: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
        let method = csivol_client::Method::from_bytes(method.as_bytes()).expect("method");
        // A connection of its own: the server may close it after refusing the body, and a
        // pooled connection closed under a later request would fail that request.
        let own = Self::build(&self.base, self.token.clone());
        let raw = (own.send::<()>(method, path, Body::Bytes(body), None).await).expect("send");
        let text = String::from_utf8_lossy(&raw.body).into_owned();
        (
            raw.status.as_u16(),
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

/// Async form of [`wait_for`]: polls `cond` until it yields, or panics after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut cond: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A stand-in for a node agent, for tests of what sits above the agent (the server, the
/// CLI): a token bound to the node and calls of the agent endpoints.
pub struct FakeAgent {
    pub api: Api,
    pub node: String,
}

impl FakeAgent {
    /// A node whose token may host plugin `hp`'s controller.
    pub async fn new(server: &ServerProc, node: &str) -> Self {
        Self::with_controllers(server, node, &["hp"]).await
    }

    /// A node whose token may host the controllers of `controllers` only.
    pub async fn with_controllers(server: &ServerProc, node: &str, controllers: &[&str]) -> Self {
        let (status, t) = server
            .api()
            .post(
                "/v1/tokens",
                json!({"role": "node", "node": node, "controllers": controllers}),
            )
            .await;
        assert_eq!(status, 201, "{t}");
        Self {
            api: server.api().with_token(t["token"].as_str()),
            node: node.to_owned(),
        }
    }

    /// Registers with plugin `hp` (node service, max `max` volumes); `controller` makes it a
    /// host of the plugin's controller, which needs ControllerPublish.
    /// Registers with the given plugin shape; the answer as it comes.
    pub async fn try_register(&self, max: u32, controller: bool, published: Value) -> (u16, Value) {
        self.try_register_labeled(max, controller, published, json!({}))
            .await
    }

    /// [`FakeAgent::try_register`] reporting node `labels` too.
    pub async fn try_register_labeled(
        &self,
        max: u32,
        controller: bool,
        published: Value,
        labels: Value,
    ) -> (u16, Value) {
        let plugin = json!({
            "id": "hp",
            "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
            "capabilities": {"controller_service": true, "volume_accessibility_constraints": false},
            "node": {
                "info": {"node_id": format!("csi-{}", self.node), "max_volumes_per_node": max},
                "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}
            },
            "controller": if controller { json!({"create_delete_volume": true, "publish_unpublish_volume": true, "list_volumes": false, "list_volumes_published_nodes": false, "publish_readonly": false, "single_node_multi_writer": false}) } else { Value::Null },
        });
        self.api
            .post(
                &format!("/v1/nodes/{}/register", self.node),
                json!({"plugins": [plugin], "published": published, "labels": labels}),
            )
            .await
    }

    /// [`FakeAgent::try_register`], which must succeed.
    pub async fn register(&self, max: u32, controller: bool, published: Value) -> Value {
        self.register_labeled(max, controller, published, json!({}))
            .await
    }

    /// [`FakeAgent::register`] reporting node `labels` too.
    pub async fn register_labeled(
        &self,
        max: u32,
        controller: bool,
        published: Value,
        labels: Value,
    ) -> Value {
        let (status, body) = self
            .try_register_labeled(max, controller, published, labels)
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Heartbeats every 200 ms until the returned guard is dropped, so the node stays
    /// ready while a test lets another one be lost.
    pub fn keep_alive(&self) -> KeepAlive {
        let api = self.api.clone();
        let path = format!("/v1/nodes/{}/heartbeat", self.node);
        KeepAlive(tokio::spawn(async move {
            loop {
                api.post(&path, json!({})).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }))
    }

    pub async fn heartbeat(&self) -> Value {
        let (status, body) = self
            .api
            .post(&format!("/v1/nodes/{}/heartbeat", self.node), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn desired(&self) -> Value {
        let (status, body) = self
            .api
            .get(&format!("/v1/nodes/{}/desired", self.node))
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn report(&self, reports: Value) {
        let (status, body) = self
            .api
            .post(
                &format!("/v1/nodes/{}/reports", self.node),
                json!({"reports": reports}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }

    /// Waits for a controller operation of `op` kind in the desired state, returns it.
    pub async fn wait_op(&self, op: &str) -> Value {
        eventually(
            &format!("a {op} operation for {}", self.node),
            Duration::from_secs(20),
            || async {
                let d = self.desired().await;
                d["controller_ops"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["op"] == op)
                    .cloned()
            },
        )
        .await
    }
}

/// Stops a [`FakeAgent::keep_alive`] heartbeat loop when dropped.
#[derive(Debug)]
pub struct KeepAlive(tokio::task::JoinHandle<()>);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.abort();
    }
}
