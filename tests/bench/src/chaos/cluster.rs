//! The chaos campaign's cluster: the real server on a data dir of its own tmpfs (so that
//! its disk can be filled and freed), and per node a real `csivol-hostpath` and a real
//! agent, each of which can be killed, restarted, stopped and continued. In HA mode, two
//! servers over a real 3-member etcd, every server, member and agent on a host of its own
//! in a routed network of namespaces ([`Net`]) whose links can be cut; the clients
//! (this process) sit in its router, which reaches every host.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use csivol_api::{self as api, Role, TokenRequest, TokenResponse};
use csivol_tests::etcd::EtcdCluster;
use csivol_tests::netns::Net;
use csivol_tests::{Proc, TestDir};
use rustix::process::{Pid, Signal, kill_process};

use super::super::client::Http;
use super::super::procs::{self, AgentSpec, Bins, Server};

#[derive(Debug)]
pub struct ChaosNode {
    pub name: String,
    pub dir: PathBuf,
    socket: PathBuf,
    token: String,
    plugin: Option<Proc>,
    agent: Option<Proc>,
    stopped: bool,
}

/// How long daemons' starts took, last time.
#[derive(Debug, Clone, Copy)]
pub struct StartTimes {
    pub server: Duration,
    pub agent: Duration,
}

impl Default for StartTimes {
    /// Guesses, until a start was timed.
    fn default() -> Self {
        Self {
            server: Duration::from_millis(100),
            agent: Duration::from_millis(300),
        }
    }
}

/// The HA mode's parts beside the servers.
#[derive(Debug)]
pub struct Ha {
    pub net: Arc<Net>,
    pub etcd: EtcdCluster,
    /// etcd members stopped (SIGSTOP) now.
    pub etcd_stopped: Vec<bool>,
    /// The CA that signed the servers' certificates.
    ca: PathBuf,
}

/// Every process of the campaign. Dropped: agents, plugins, then the servers, then etcd,
/// then the servers' tmpfs (its `TestDir` unmounts them).
#[derive(Debug)]
pub struct ChaosCluster {
    pub nodes: Vec<ChaosNode>,
    pub servers: Vec<Server>,
    /// Servers stopped (SIGSTOP) now.
    pub servers_stopped: Vec<bool>,
    /// How long a server's start and an agent's took last, from its listening for SIGTERM
    /// to its serving (registered), for the stops while they start to fall within one.
    pub start_times: StartTimes,
    pub ha: Option<Ha>,
    pub backend: PathBuf,
    pub mount: String,
    pub(super) bins: Bins,
    /// Where the servers' tmpfs is mounted (their data dirs are below it).
    disk: PathBuf,
    _disk_dir: TestDir,
}

/// The servers' disk: large enough for a long run's database, small enough to fill fast.
const DISK_SIZE: &str = "256m";

/// How often the agents list the plugin's volumes: a publication the state does not know
/// (one a restore forgot) is a confirmed finding within two listings, for the drain to act
/// on as an operator would.
const CONTROLLER_LIST_INTERVAL: Duration = Duration::from_secs(2);

/// The HA mode's servers.
pub const HA_SERVERS: usize = 2;
/// The leader's lease in HA mode (the server's least): a server cut off stops leading
/// within it.
const HA_LEASE: &str = "2s";
/// How long a client waits for one server's answer before it asks the other.
pub const HA_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Host names in the HA mode's network.
pub fn etcd_host(i: usize) -> String {
    format!("etcd-{}", i + 1)
}
pub fn server_host(i: usize) -> String {
    format!("server-{}", i + 1)
}

/// The HA mode's network: a host per etcd member, per server and per node.
pub fn ha_net(dir: &Path, nodes: u32, lifetime: Duration) -> Net {
    let mut names: Vec<String> = (0..3).map(etcd_host).collect();
    names.extend((0..HA_SERVERS).map(server_host));
    names.extend((1..=nodes).map(|i| format!("node-{i}")));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Net::new(dir, &names, lifetime)
}

impl ChaosCluster {
    /// Starts the cluster: one server, or with `net` (made by [`ha_net`]) the HA mode's.
    /// `max_connections`: each server's `--max-connections`.
    pub async fn start(
        bins: &Bins,
        root: &Path,
        nodes: u32,
        mount: &str,
        heartbeat_ttl: Duration,
        max_connections: usize,
        net: Option<Arc<Net>>,
    ) -> anyhow::Result<Self> {
        let limit = [format!("--max-connections={max_connections}")];
        // The tmpfs lives outside the run's dir: the end-of-run accounting counts every
        // mount below that dir as left over.
        let disk_dir = TestDir::new("chaos-disk");
        let disk = disk_dir.join("disk");
        let (servers, ha) = match net {
            None => {
                // The data dir is the tmpfs; the server's log sits beside it, on a disk
                // that has room.
                let data_dir = disk.join("server");
                std::fs::create_dir_all(&data_dir)?;
                mount_tmpfs(&data_dir)?;
                let server =
                    Server::start(bins, &data_dir, heartbeat_ttl, None, &[], &limit).await?;
                (vec![server], None)
            }
            Some(net) => start_ha(bins, root, &disk, net, heartbeat_ttl, &limit).await?,
        };
        let mut c = Self {
            nodes: Vec::new(),
            start_times: StartTimes::default(),
            servers_stopped: vec![false; servers.len()],
            servers,
            ha,
            backend: root.join("backend"),
            mount: mount.to_owned(),
            bins: bins.clone(),
            disk,
            _disk_dir: disk_dir,
        };
        let http = c.http()?;
        for i in 1..=nodes {
            let name = format!("node-{i}");
            let t: TokenResponse = http
                .post(
                    "/v1/tokens",
                    &TokenRequest {
                        role: Role::Node,
                        node: Some(name.clone()),
                        name: None,
                        ttl_ms: None,
                        controllers: vec![crate::PLUGIN.to_owned()],
                        capabilities: Vec::new(),
                        volumes: Vec::new(),
                        namespaces: Vec::new(),
                    },
                )
                .await?
                .expect(&format!("token for {name}"), &[201])?
                .json()?;
            c.nodes.push(ChaosNode {
                dir: root.join(&name),
                socket: root.join(&name).join("plugin.sock"),
                name,
                token: t.token,
                plugin: None,
                agent: None,
                stopped: false,
            });
        }
        for i in 0..c.nodes.len() {
            c.start_plugin(i).await?;
            c.start_agent(i)?;
        }
        c.wait_ready(Duration::from_secs(60)).await?;
        Ok(c)
    }

    /// A client of every server.
    pub fn http(&self) -> anyhow::Result<Http> {
        let token = &self.servers[0].token;
        match &self.ha {
            None => Http::new(&self.servers[0].url, token),
            Some(ha) => Http::cluster(&self.urls(), token, &ha.ca, HA_REQUEST_TIMEOUT),
        }
    }

    /// The servers' URLs, comma-separated.
    fn urls(&self) -> String {
        let urls: Vec<&str> = self.servers.iter().map(|s| s.url.as_str()).collect();
        urls.join(",")
    }

    pub async fn start_plugin(&mut self, i: usize) -> anyhow::Result<()> {
        let n = &mut self.nodes[i];
        // A killed plugin leaves its socket file: removed first, so that the wait below
        // sees the new plugin's.
        let _ = std::fs::remove_file(&n.socket);
        let (mut plugin, socket) =
            procs::start_plugin(&self.bins, &n.name, &n.dir, &self.backend, &self.mount)?;
        let log = n.dir.join("plugin.log");
        procs::wait_socket(&mut plugin, &socket, &log).await?;
        n.socket = socket;
        n.plugin = Some(plugin);
        Ok(())
    }

    pub fn start_agent(&mut self, i: usize) -> anyhow::Result<()> {
        let urls = self.urls();
        let ha = self.ha.as_ref();
        let n = &mut self.nodes[i];
        let wrapper = ha.map(|h| h.net.host(&n.name).prefix()).unwrap_or_default();
        n.agent = Some(procs::start_agent(
            &self.bins,
            &AgentSpec {
                node: &n.name,
                node_dir: &n.dir,
                server: &urls,
                token: &n.token,
                socket: &n.socket,
                ready_exists: self.mount == "none",
                node_concurrency: None,
                controller_list_interval: Some(CONTROLLER_LIST_INTERVAL),
                wrapper: &wrapper,
                ca: ha.map(|h| h.ca.as_path()),
                volume_stats: true,
            },
        )?);
        n.stopped = false;
        Ok(())
    }

    /// The pid of node `i`'s agent, if it runs.
    pub fn agent_pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].agent.as_ref().map(Proc::pid)
    }

    pub fn kill_plugin(&mut self, i: usize) {
        if let Some(mut p) = self.nodes[i].plugin.take() {
            p.kill();
        }
    }

    pub fn kill_agent(&mut self, i: usize) {
        if let Some(mut a) = self.nodes[i].agent.take() {
            a.kill();
        }
        self.nodes[i].stopped = false;
    }

    /// SIGTERM to node `i`'s agent, as a service manager stops it: its exit status (`None`:
    /// it had not exited within `timeout`, and was killed, or there was none).
    pub async fn terminate_agent(
        &mut self,
        i: usize,
        timeout: Duration,
    ) -> Option<std::process::ExitStatus> {
        let mut agent = self.nodes[i].agent.take()?;
        self.nodes[i].stopped = false;
        procs::terminate(&mut agent, timeout).await
    }

    /// Starts node `i`'s agent and sends it SIGTERM while it starts: `delay` after it
    /// listens for the signal. It is left stopped.
    pub async fn interrupt_agent_start(
        &mut self,
        i: usize,
        delay: Duration,
        timeout: Duration,
    ) -> anyhow::Result<procs::Interrupted> {
        self.start_agent(i)?;
        let log = self.nodes[i].dir.join("agent.log");
        let mut agent = self.nodes[i].agent.take().expect("just started");
        procs::catches_term(&mut agent, &log, timeout).await?;
        tokio::time::sleep(delay).await;
        let status = procs::terminate(&mut agent, timeout).await;
        // Whether it had registered is for the caller to ask the server.
        Ok(procs::Interrupted {
            status,
            complete: false,
        })
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to node `i`'s agent.
    pub fn pause_agent(&mut self, i: usize, stop: bool) {
        let n = &mut self.nodes[i];
        if let Some(a) = &n.agent {
            signal(a.pid(), stop);
            n.stopped = stop;
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to server `i`; `false` when it does not run
    /// (a restart that failed left it down), so there was nothing to signal.
    pub fn pause_server(&mut self, i: usize, stop: bool) -> bool {
        if !self.servers[i].running() {
            self.servers_stopped[i] = false;
            return false;
        }
        signal(self.servers[i].pid(), stop);
        self.servers_stopped[i] = stop;
        true
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`) to etcd member `i`.
    pub fn pause_etcd(&mut self, i: usize, stop: bool) {
        let Some(ha) = self.ha.as_mut() else { return };
        if let Some(pid) = ha.etcd.members[i].pid() {
            signal(pid, stop);
            ha.etcd_stopped[i] = stop;
        }
    }

    /// Waits until etcd member `i` answers its health check again (it has a leader and
    /// serves a linearizable read): a member just restarted, continued or reconnected is
    /// not yet part of the quorum, and taking another one down before it is would leave
    /// none.
    pub async fn etcd_member_healthy(
        cluster: &tokio::sync::Mutex<Self>,
        i: usize,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let Some(url) = cluster
            .lock()
            .await
            .ha
            .as_ref()
            .map(|h| h.etcd.members[i].health_url().to_owned())
        else {
            return Ok(());
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let u = url.clone();
            if tokio::task::spawn_blocking(move || csivol_tests::etcd::healthy_at(&u)).await? {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "etcd member {} was not healthy again within {timeout:?} of its healing",
                    i + 1
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The data dir of server `i` (the tmpfs that [`ChaosCluster::fill_disk`] fills).
    fn server_dir(&self, i: usize) -> PathBuf {
        if self.ha.is_some() {
            self.disk.join(server_host(i))
        } else {
            self.disk.join("server")
        }
    }

    /// Fills server `i`'s disk to the last byte.
    pub fn fill_disk(&self, i: usize) -> anyhow::Result<()> {
        let path = self.server_dir(i).join("filler");
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("failed to create {}", path.display()))?;
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        while f.write_all(&[0u8; 512]).is_ok() {}
        Ok(())
    }

    /// Frees every server's disk.
    pub fn free_disk(&self) {
        for i in 0..self.servers.len() {
            let _ = std::fs::remove_file(self.server_dir(i).join("filler"));
        }
    }

    /// After the faults: the disk freed, every agent continued, every dead process
    /// restarted; the nodes ready again.
    pub async fn heal(&mut self) -> anyhow::Result<Vec<String>> {
        let mut unexpected = Vec::new();
        self.free_disk();
        if let Some(ha) = self.ha.as_mut() {
            ha.net.heal();
            for i in 0..ha.etcd.members.len() {
                if ha.etcd_stopped[i] {
                    ha.etcd_stopped[i] = false;
                    signal(ha.etcd.members[i].pid().unwrap_or(0), false);
                }
                if !ha.etcd.members[i].is_running() {
                    ha.etcd.restart(i);
                }
            }
        }
        for i in 0..self.servers.len() {
            if self.servers_stopped[i] {
                self.pause_server(i, false);
            }
            if let Some(status) = self.servers[i].proc.exited() {
                unexpected.push(format!(
                    "server {} exited with {status}: {}",
                    i + 1,
                    self.servers[i].log_tail()
                ));
                self.servers[i].kill_and_restart().await?;
            } else if !self.servers[i].running() {
                // A restart during the faults failed (that fault reported it): again now.
                self.servers[i].kill_and_restart().await?;
            }
        }
        for i in 0..self.nodes.len() {
            if self.nodes[i].stopped {
                self.pause_agent(i, false);
            }
            let name = self.nodes[i].name.clone();
            match self.nodes[i].plugin.as_mut().map(Proc::exited) {
                Some(None) => {}
                Some(Some(status)) => {
                    unexpected.push(format!("the plugin of {name} exited with {status}"));
                    self.start_plugin(i).await?;
                }
                None => self.start_plugin(i).await?,
            }
            match self.nodes[i].agent.as_mut().map(Proc::exited) {
                Some(None) => {}
                Some(Some(status)) => {
                    unexpected.push(format!(
                        "the agent of {name} exited with {status}: {}",
                        procs::tail(&self.nodes[i].dir.join("agent.log"), 10)
                    ));
                    self.start_agent(i)?;
                }
                None => self.start_agent(i)?,
            }
        }
        self.wait_ready(Duration::from_secs(120)).await?;
        Ok(unexpected)
    }

    async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let http = self.http()?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ready = match http
                .get("/v1/nodes")
                .await
                .and_then(|r| r.json::<Vec<api::Node>>())
            {
                Ok(nodes) => nodes
                    .iter()
                    .filter(|n| n.status == api::NodeStatus::Ready)
                    .count(),
                Err(_) => 0,
            };
            if ready >= self.nodes.len() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "only {ready} of {} nodes were ready within {timeout:?}; see their agent.log",
                    self.nodes.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Copies the servers' logs (kept beside their tmpfs, which goes away) into `dir`.
    /// The servers, for the slow-body client.
    pub fn slow_targets(&self) -> anyhow::Result<Vec<super::slowbody::Target>> {
        let urls: Vec<String> = self.servers.iter().map(|s| s.url.clone()).collect();
        super::slowbody::targets(&urls, self.ha.as_ref().map(|h| h.ca.as_path()))
    }

    /// How many times a server logged that it reached its connection limit (each time
    /// after it had been below it), over every server's log.
    pub fn connection_limit_reached(&self) -> u64 {
        (0..self.servers.len())
            .map(|i| {
                std::fs::read_to_string(self.server_dir(i).with_extension("log"))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("connection limit reached"))
                    .count() as u64
            })
            .sum()
    }

    pub fn save_server_log(&self, dir: &Path) {
        for i in 0..self.servers.len() {
            let log = self.server_dir(i).with_extension("log");
            let name = log.file_name().unwrap_or_default().to_owned();
            let _ = std::fs::copy(&log, dir.join(name));
        }
    }

    /// (name, dir) of every node, for the observers.
    pub fn node_dirs(&self) -> Vec<(String, PathBuf)> {
        self.nodes
            .iter()
            .map(|n| (n.name.clone(), n.dir.clone()))
            .collect()
    }
}

impl Drop for ChaosCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(a) = n.agent.as_mut() {
                a.kill();
            }
        }
        for n in &mut self.nodes {
            if let Some(p) = n.plugin.as_mut() {
                p.kill();
            }
        }
        for s in &mut self.servers {
            s.proc.kill();
        }
        // etcd goes with `ha`, its members killed by pid as they drop.
    }
}

/// SIGSTOP (`true`) or SIGCONT (`false`) to `pid`.
fn signal(pid: u32, stop: bool) {
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = kill_process(pid, if stop { Signal::STOP } else { Signal::CONT });
    }
}

/// The HA mode's servers and etcd, each on its host of `net`: certificates for the
/// servers' addresses, then the members, then the servers (each data dir a tmpfs).
async fn start_ha(
    bins: &Bins,
    root: &Path,
    disk: &Path,
    net: Arc<Net>,
    heartbeat_ttl: Duration,
    extra: &[String],
) -> anyhow::Result<(Vec<Server>, Option<Ha>)> {
    let tls = root.join("tls");
    let mut cmd = Command::new(&bins.server);
    cmd.args(["tls", "init", &format!("--dir={}", tls.display())]);
    for i in 0..HA_SERVERS {
        cmd.arg(format!("--server-name={}", net.host(&server_host(i)).addr));
    }
    let out = cmd
        .output()
        .context("failed to run csivol-server tls init")?;
    if !out.status.success() {
        bail!(
            "csivol-server tls init failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let etcd_dir = root.join("etcd");
    std::fs::create_dir_all(&etcd_dir)?;
    let etcd = {
        let (net, dir) = (Arc::clone(&net), etcd_dir.clone());
        tokio::task::spawn_blocking(move || {
            let hosts: Vec<_> = (0..3).map(|i| net.host(&etcd_host(i))).collect();
            EtcdCluster::start_on(&dir, &hosts)
        })
        .await
        .context("etcd did not start")?
    };
    let mut args = vec![
        "--store=etcd".to_owned(),
        format!("--etcd-endpoints={}", etcd.endpoints()),
        format!("--secrets-key-file={}", root.join("secrets.key").display()),
        format!("--tls-cert={}", tls.join("server.pem").display()),
        format!("--tls-key={}", tls.join("server-key.pem").display()),
        format!("--etcd-lease-ttl={HA_LEASE}"),
    ];
    args.extend(extra.iter().cloned());
    let mut servers: Vec<Server> = Vec::new();
    for i in 0..HA_SERVERS {
        let host = net.host(&server_host(i));
        let data_dir = disk.join(server_host(i));
        std::fs::create_dir_all(&data_dir)?;
        mount_tmpfs(&data_dir)?;
        let listen = format!("{}:0", host.addr);
        let mut s = Server::start_on(
            bins,
            &data_dir,
            &listen,
            heartbeat_ttl,
            None,
            &host.prefix(),
            &args,
        )
        .await?;
        if let Some(first) = servers.first() {
            s.token = first.token.clone();
        }
        servers.push(s);
    }
    let ha = Ha {
        net,
        etcd_stopped: vec![false; etcd.members.len()],
        etcd,
        ca: tls.join("ca.pem"),
    };
    Ok((servers, Some(ha)))
}

fn mount_tmpfs(path: &Path) -> anyhow::Result<()> {
    use rustix::mount::{MountFlags, mount};
    let opts = std::ffi::CString::new(format!("size={DISK_SIZE}"))?;
    mount(
        "tmpfs",
        path,
        "tmpfs",
        MountFlags::empty(),
        Some(opts.as_c_str()),
    )
    .with_context(|| {
        format!(
            "failed to mount a tmpfs for the server's data dir at {}\nhint: the chaos campaign \
             fills and frees the server's disk, which needs root (as the tests run)",
            path.display()
        )
    })
}
