//! The chaos campaign's cluster: the real server on a data dir of its own tmpfs (so that
//! its disk can be filled and freed), and per node a real `csivol-hostpath` and a real
//! agent, each of which can be killed, restarted, stopped and continued.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use csivol_api::{self as api, Role, TokenRequest, TokenResponse};
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

/// Every process of the campaign. Dropped: agents, plugins, then the server, then the
/// server's tmpfs (its `TestDir` unmounts it).
#[derive(Debug)]
pub struct ChaosCluster {
    pub nodes: Vec<ChaosNode>,
    pub server: Server,
    pub backend: PathBuf,
    pub mount: String,
    bins: Bins,
    /// Where the server's tmpfs is mounted (its data dir is below it).
    disk: PathBuf,
    _disk_dir: TestDir,
}

/// The server's disk: large enough for a long run's database, small enough to fill fast.
const DISK_SIZE: &str = "256m";

impl ChaosCluster {
    pub async fn start(
        bins: &Bins,
        root: &Path,
        nodes: u32,
        mount: &str,
        heartbeat_ttl: Duration,
    ) -> anyhow::Result<Self> {
        // The tmpfs lives outside the run's dir: the end-of-run accounting counts every
        // mount below that dir as left over.
        let disk_dir = TestDir::new("chaos-disk");
        let disk = disk_dir.join("disk");
        // The data dir is the tmpfs; the server's log sits beside it, on a disk that has room.
        let data_dir = disk.join("server");
        std::fs::create_dir_all(&data_dir)?;
        mount_tmpfs(&data_dir)?;
        let server = Server::start(bins, &data_dir, heartbeat_ttl, None, &[], &[]).await?;
        let http = Http::new(&server.url, &server.token)?;
        let backend = root.join("backend");
        let mut out = Vec::new();
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
                    },
                )
                .await?
                .expect(&format!("token for {name}"), &[201])?
                .json()?;
            out.push(ChaosNode {
                dir: root.join(&name),
                socket: root.join(&name).join("plugin.sock"),
                name,
                token: t.token,
                plugin: None,
                agent: None,
                stopped: false,
            });
        }
        let mut c = Self {
            nodes: out,
            server,
            backend,
            mount: mount.to_owned(),
            bins: bins.clone(),
            disk,
            _disk_dir: disk_dir,
        };
        for i in 0..c.nodes.len() {
            c.start_plugin(i).await?;
            c.start_agent(i)?;
        }
        c.wait_ready(Duration::from_secs(60)).await?;
        Ok(c)
    }

    pub fn http(&self) -> anyhow::Result<Http> {
        Http::new(&self.server.url, &self.server.token)
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
        let n = &mut self.nodes[i];
        n.agent = Some(procs::start_agent(
            &self.bins,
            &AgentSpec {
                node: &n.name,
                node_dir: &n.dir,
                server: &self.server.url,
                token: &n.token,
                socket: &n.socket,
                ready_exists: self.mount == "none",
                node_concurrency: None,
            },
        )?);
        n.stopped = false;
        Ok(())
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

    /// SIGSTOP (`true`) or SIGCONT (`false`) to node `i`'s agent.
    pub fn pause_agent(&mut self, i: usize, stop: bool) {
        let n = &mut self.nodes[i];
        if let Some(a) = &n.agent
            && let Some(pid) = Pid::from_raw(a.pid() as i32)
        {
            let _ = kill_process(pid, if stop { Signal::STOP } else { Signal::CONT });
            n.stopped = stop;
        }
    }

    /// Fills the server's disk to the last byte.
    pub fn fill_disk(&self) -> anyhow::Result<()> {
        let path = self.disk.join("server").join("filler");
        let mut f = std::fs::File::create(&path)
            .with_context(|| format!("failed to create {}", path.display()))?;
        let block = vec![0u8; 1 << 20];
        while f.write_all(&block).is_ok() {}
        while f.write_all(&[0u8; 512]).is_ok() {}
        Ok(())
    }

    pub fn free_disk(&self) {
        let _ = std::fs::remove_file(self.disk.join("server").join("filler"));
    }

    /// After the faults: the disk freed, every agent continued, every dead process
    /// restarted; the nodes ready again.
    pub async fn heal(&mut self) -> anyhow::Result<Vec<String>> {
        let mut unexpected = Vec::new();
        self.free_disk();
        if let Some(status) = self.server.proc.exited() {
            unexpected.push(format!(
                "the server exited with {status}: {}",
                self.server.log_tail()
            ));
            self.server.kill_and_restart().await?;
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

    /// Copies the server's log (kept beside its tmpfs, which goes away) into `dir`.
    pub fn save_server_log(&self, dir: &Path) {
        let _ = std::fs::copy(self.disk.join("server.log"), dir.join("server.log"));
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
        self.server.proc.kill();
    }
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
