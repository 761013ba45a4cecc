//! `--mode full`: N real node agents, each with its own real `csivol-hostpath` (node and
//! controller service) on a unix socket, all plugins sharing one backend directory, and the
//! check at the end that the plugins hold nothing the server does not know of.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::bail;
use csivol_api::{self as api, Role, TokenRequest, TokenResponse};
use csivol_tests::Proc;

use super::client::Http;
use super::procs::{self, AgentSpec, Bins};
use super::sim::node_name;

#[derive(Debug)]
pub struct RealNode {
    pub name: String,
    pub dir: PathBuf,
    pub socket: PathBuf,
    plugin: Proc,
    agent: Option<Proc>,
    /// Whether its agent samples its volumes' usage.
    volume_stats: bool,
}

/// The agents and plugins of a full-mode run. Dropping it kills the agents first (they
/// must not see their plugin vanish under a call), then the plugins.
#[derive(Debug)]
pub struct FullCluster {
    pub nodes: Vec<RealNode>,
    pub backend: PathBuf,
}

impl FullCluster {
    /// Starts one plugin per node and waits until each listens.
    pub async fn start_plugins(
        bins: &Bins,
        root: &Path,
        count: u32,
        mount: &str,
    ) -> anyhow::Result<Self> {
        let backend = root.join("backend");
        let mut nodes = Vec::new();
        for i in 1..=count {
            let name = node_name(i);
            let dir = root.join(&name);
            let (plugin, socket) = procs::start_plugin(bins, &name, &dir, &backend, mount)?;
            nodes.push(RealNode {
                name,
                dir,
                socket,
                plugin,
                agent: None,
                volume_stats: true,
            });
        }
        for n in &mut nodes {
            let log = n.dir.join("plugin.log");
            procs::wait_socket(&mut n.plugin, &n.socket, &log).await?;
        }
        Ok(Self { nodes, backend })
    }

    /// Creates a node token for each node and starts its agent; waits until every node is
    /// registered and ready. `split_stats`: every second node's agent (node 2, 4, ...)
    /// samples no volume usage (`volume_stats = false`).
    pub async fn start_agents(
        &mut self,
        bins: &Bins,
        http: &Http,
        ready_exists: bool,
        node_concurrency: Option<u32>,
        split_stats: bool,
    ) -> anyhow::Result<()> {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            n.volume_stats = !(split_stats && i % 2 == 1);
            let req = TokenRequest {
                role: Role::Node,
                node: Some(n.name.clone()),
                name: None,
                ttl_ms: None,
                controllers: vec![super::PLUGIN.to_owned()],
                capabilities: Vec::new(),
                volumes: Vec::new(),
                namespaces: Vec::new(),
            };
            let t: TokenResponse = http
                .post("/v1/tokens", &req)
                .await?
                .expect(&format!("token for {}", n.name), &[201])?
                .json()?;
            n.agent = Some(procs::start_agent(
                bins,
                &AgentSpec {
                    node: &n.name,
                    node_dir: &n.dir,
                    server: &http.base,
                    token: &t.token,
                    socket: &n.socket,
                    ready_exists,
                    node_concurrency,
                    controller_list_interval: None,
                    wrapper: &[],
                    ca: None,
                    volume_stats: n.volume_stats,
                },
            )?);
        }
        let want = self.nodes.len();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            for n in &mut self.nodes {
                if let Some(status) = n.agent.as_mut().and_then(Proc::exited) {
                    bail!(
                        "the agent of {} exited with {status}: {}",
                        n.name,
                        procs::tail(&n.dir.join("agent.log"), 20)
                    );
                }
            }
            let nodes: Vec<api::Node> = http.get("/v1/nodes").await?.json()?;
            let ready = nodes
                .iter()
                .filter(|n| n.status == api::NodeStatus::Ready)
                .count();
            if ready >= want {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("only {ready} of {want} agents registered within 60s; see their logs");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    pub fn agent_pids(&self) -> Vec<u32> {
        self.nodes
            .iter()
            .filter_map(|n| n.agent.as_ref().map(Proc::pid))
            .collect()
    }

    /// The agents that sample volume usage (`true`) or not, with their nodes' names.
    pub fn agents_with_stats(&self, stats: bool) -> (Vec<u32>, Vec<String>) {
        self.nodes
            .iter()
            .filter(|n| n.volume_stats == stats)
            .filter_map(|n| n.agent.as_ref().map(|a| (a.pid(), n.name.clone())))
            .unzip()
    }

    pub fn plugin_pids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.plugin.pid()).collect()
    }

    /// Processes that exited although nobody stopped them.
    pub fn exited(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for n in &mut self.nodes {
            if let Some(s) = n.plugin.exited() {
                out.push(format!("the plugin of {} exited with {s}", n.name));
            }
            if let Some(s) = n.agent.as_mut().and_then(Proc::exited) {
                out.push(format!("the agent of {} exited with {s}", n.name));
            }
        }
        out
    }

    /// What the plugins and agents still hold once the server says every volume is free.
    pub fn leftovers(&self, root: &Path) -> Vec<String> {
        let nodes: Vec<(String, PathBuf)> = self
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.dir.clone()))
            .collect();
        leftovers(&self.backend, &nodes, root)
    }
}

/// What plugins and agents hold once the server says every volume is free: attachments
/// in the shared backend, stagings and publications in each plugin's `node.json`, marker
/// files of `--mount none` and mounts under the agents' dirs.
pub fn leftovers(backend: &Path, nodes: &[(String, PathBuf)], root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(volumes) = std::fs::read_dir(backend.join("attachments")) {
        for v in volumes.flatten() {
            for a in std::fs::read_dir(v.path()).into_iter().flatten().flatten() {
                if a.path().extension().is_some_and(|e| e == "json") {
                    out.push(format!(
                        "the backend still has attachment {}",
                        a.path().display()
                    ));
                }
            }
        }
    }
    // The backend's per-node index of attachments (`by-node/<node>/<id>`), where the
    // plugin keeps one.
    if let Ok(nodes) = std::fs::read_dir(backend.join("by-node")) {
        for n in nodes.flatten() {
            for a in std::fs::read_dir(n.path()).into_iter().flatten().flatten() {
                out.push(format!(
                    "the backend still indexes attachment {}",
                    a.path().display()
                ));
            }
        }
    }
    for (name, dir) in nodes {
        for (file, v) in plugin_node_state(&dir.join("plugin"), &mut out) {
            let staged = !v["staging"].is_null();
            let published = v["publications"].as_object().is_some_and(|m| !m.is_empty());
            for (held, what) in [(staged, "staging"), (published, "publication")] {
                if held {
                    out.push(format!(
                        "the plugin of {name} still records a {what} in {}",
                        file.display()
                    ));
                }
            }
        }
        let mut markers = 0;
        count_markers(&dir.join("agent"), &mut markers);
        if markers > 0 {
            out.push(format!(
                "{markers} volume(s) still presented (marker files) under {}",
                dir.join("agent").display()
            ));
        }
    }
    for m in csivol_tests::mounts_under(root) {
        out.push(format!("still mounted: {}", m.display()));
    }
    out
}

/// The reference plugin's per-volume state files (`<state-dir>/node/*.json`), parsed; a
/// file that does not parse is reported in `errors`.
pub fn plugin_node_state(
    state_dir: &Path,
    errors: &mut Vec<String>,
) -> Vec<(PathBuf, serde_json::Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(state_dir.join("node"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        match std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(v) => out.push((path, v)),
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    out
}

/// Counts `csivol-hostpath --mount none` marker files below `dir`.
fn count_markers(dir: &Path, count: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            count_markers(&e.path(), count);
        } else if e.file_name() == ".csivol-hostpath" {
            *count += 1;
        }
    }
}

impl Drop for FullCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(a) = n.agent.as_mut() {
                a.kill();
            }
        }
        for n in &mut self.nodes {
            n.plugin.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_name_what_is_still_held() {
        let root = csivol_tests::TestDir::new("bench-leftovers");
        let backend = root.join("backend");
        let node = root.join("node-1");
        let write = |path: PathBuf, text: &str| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        let nodes = vec![("node-1".to_owned(), node.clone())];
        write(
            node.join("plugin/node/other.json"),
            r#"{"volume_id": "other", "device": "/dev/loop9"}"#,
        );
        std::fs::create_dir_all(backend.join("attachments/hostpath-000001")).unwrap();
        assert_eq!(
            leftovers(&backend, &nodes, root.path()),
            Vec::<String>::new()
        );

        write(
            backend.join("attachments/hostpath-000001/node-1.json"),
            "{}",
        );
        write(backend.join("by-node/node-1/hostpath-000001"), "");
        write(
            node.join("plugin/node/hostpath-000001.json"),
            r#"{"volume_id": "hostpath-000001", "staging": {}}"#,
        );
        write(
            node.join("agent/targets/vol/alloc/.csivol-hostpath"),
            "hostpath-000001",
        );
        let found = leftovers(&backend, &nodes, root.path());
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(found[0].contains("attachment"), "{found:#?}");
        assert!(found[2].contains("records a staging"), "{found:#?}");
        assert!(
            found[3].starts_with("1 volume(s) still presented"),
            "{found:#?}"
        );
    }
}
