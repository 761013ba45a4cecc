//! `csivol-server dev`: a whole csivol cluster on this machine, in the foreground: the server,
//! N node agents and one `csivol-hostpath` plugin per node (node and controller), with state
//! under one directory. Starting again on the same directory resumes the same state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use csivol_api as api;
use csivol_client::{Body, Method};
use tokio::process::Command;

use self::children::{Kid, stop, watch_children};
use self::handoff::{
    Banner, DEV_PLUGIN, env_file_text, offer_cli_ca, offer_cli_token, print_banner, write_private,
};
use crate::cli::DevArgs;
use crate::config::ServerConfig;
use crate::server::Server;

mod children;
mod handoff;

/// Volumes dev mode creates (name, access mode) for a newcomer to claim.
const DEMO_VOLUMES: [(&str, &str); 3] = [
    ("demo-data", "single-node-writer"),
    ("demo-shared", "multi-node-multi-writer"),
    ("demo-readonly", "multi-node-reader-only"),
];

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    // From the first step: a Ctrl-C while the cluster starts is kept for the orderly stop
    // below, not taken by the default action (which would leave the children to die with
    // dev mode, their volumes not taken down).
    let mut shutdown = csivol_daemon::Shutdown::listen();
    if args.nodes == 0 || args.nodes > 64 {
        bail!("--nodes must be between 1 and 64");
    }
    let agent_exe = sibling("csivol-agent")?;
    let plugin_exe = sibling("csivol-hostpath")?;
    // Passable for workloads on their way to targets below it, not listable; the server's
    // data dir inside is 0700, the tokens 0600.
    csivol_daemon::modes::dir_logged(&args.dir, csivol_daemon::modes::PASSABLE, "dev dir")
        .with_context(|| format!("failed to create {}", args.dir.display()))?;
    let dir = args.dir.canonicalize()?;
    let mount = mount_mode(&args, &dir);
    refuse_stray_agents(&dir, args.nodes)?;

    // TLS with a CA of the dev cluster's own (made once, kept in DIR/tls); agents present
    // node certificates, so mutual TLS is exercised too.
    let tls_dir = dir.join("tls");
    let tls = if args.no_tls {
        None
    } else {
        if !crate::tls::Files::in_dir(&tls_dir).ca.exists() {
            let nodes: Vec<String> = (1..=args.nodes).map(|i| format!("node-{i}")).collect();
            crate::tls::init(&tls_dir, &[], &nodes)?;
        }
        Some(crate::tls::Files::in_dir(&tls_dir))
    };
    let server = Server::start(server_config(&args, &dir, tls.as_ref())).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", server.addr);
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = server_stopped.await;
    }));
    let token_path = dir
        .join("server")
        .join(crate::identity::OPERATOR_TOKEN_FILE);
    let token = std::fs::read_to_string(&token_path)
        .with_context(|| format!("failed to read {}", token_path.display()))?
        .trim()
        .to_owned();
    let client = {
        let mut b = csivol_client::Client::builder(&url).token(Some(token.clone()));
        if let Some(f) = &tls {
            b = b.tls(
                csivol_client::tls::client_config(Some(&f.ca), None).map_err(anyhow::Error::msg)?,
            );
        }
        DevClient(b.build()?)
    };

    let mut children: Vec<Kid> = Vec::new();
    let nodes = Nodes {
        dir: &dir,
        url: &url,
        mount: &mount,
        tls: tls.as_ref(),
        tls_dir: &tls_dir,
        agent_exe: &agent_exe,
        plugin_exe: &plugin_exe,
    };
    let started: anyhow::Result<()> = async {
        for i in 1..=args.nodes {
            nodes.start(i, &client, &mut children).await?;
        }
        if !args.no_demo_volumes {
            client
                .wait_for_nodes(args.nodes, Duration::from_secs(60), &mut children)
                .await?;
            for (name, mode) in DEMO_VOLUMES {
                client.create_volume(name, mode).await?;
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = started {
        stop(&mut children, &dir, &mut shutdown).await;
        let _ = stop_server.send(());
        return Err(e);
    }

    // The CLI built beside this program (`cargo build --release` builds them together).
    let cli = agent_exe.with_file_name("csivol");
    let cli = cli.is_file().then_some(cli);
    let env_file = dir.join("env");
    std::fs::write(
        &env_file,
        env_file_text(
            &url,
            &token_path,
            tls.as_ref().map(|f| f.ca.as_path()),
            cli.as_deref(),
        ),
    )?;
    let cli_token = offer_cli_token(&token, &dir);
    let cli_ca = tls.as_ref().and_then(|f| offer_cli_ca(&f.ca, &dir));
    print_banner(&Banner {
        url: &url,
        token: &token_path,
        env: &env_file,
        cli: cli.as_deref(),
        defaults: cli_token.is_some() && (tls.is_none() || cli_ca.is_some()),
        nodes: args.nodes,
        mount: &mount,
        dir: &dir,
    });

    // A child that dies (say, an agent killed to see a node fail) does not stop the others:
    // that is what a node failure looks like. Ctrl-C stops everything.
    let watch = watch_children(&mut children);
    tokio::select! {
        () = shutdown.wait() => {}
        () = watch => {}
    }
    eprintln!(
        "stopping: each agent takes its volumes down through its plugin and tells the server it \
         stops, then the plugins and the server stop (Ctrl-C again to force)"
    );
    stop(&mut children, &dir, &mut shutdown).await;
    // The server stays up until every agent said it stopped: each node is then `stopped`,
    // not lost, however long dev mode stays away, and its claims come back at the next start.
    say_which_nodes_did_not_stop(&client).await;
    let _ = stop_server.send(());
    serving.await.context("server task failed")??;
    Ok(())
}

/// The plugins' mount mode: `--mount`, else real bind mounts where this machine allows
/// them and marker files where it does not.
fn mount_mode(args: &DevArgs, dir: &Path) -> String {
    match args.mount.as_deref() {
        Some(m) => m.to_owned(),
        None => match probe_mounts(dir) {
            Ok(()) => "bind".to_owned(),
            Err(e) => {
                eprintln!(
                    "note: this machine refused a bind mount ({e}); the plugins run with --mount none \
                     (marker files instead of mounts). Run as root for real mounts."
                );
                "none".to_owned()
            }
        },
    }
}

/// An agent left running on a node's data dir (one started by hand from the command dev
/// mode prints when a node dies) would keep that node for itself: says which, and stops.
fn refuse_stray_agents(dir: &Path, nodes: u32) -> anyhow::Result<()> {
    let strays: Vec<(String, Option<u32>)> = (1..=nodes)
        .filter_map(|i| {
            let node = format!("node-{i}");
            csivol_daemon::lock::running_agent(&dir.join(&node).join("agent")).map(|p| (node, p))
        })
        .collect();
    if strays.is_empty() {
        return Ok(());
    }
    let which: Vec<String> = strays
        .iter()
        .map(|(n, p)| match p {
            Some(p) => format!("{n} (pid {p})"),
            None => n.clone(),
        })
        .collect();
    let pids: Vec<String> = strays
        .iter()
        .filter_map(|(_, p)| p.map(|p| p.to_string()))
        .collect();
    let them = if strays.len() == 1 { "it" } else { "them" };
    let stop = if pids.is_empty() {
        format!("stop {them}")
    } else {
        format!("stop {them} with `kill {}`", pids.join(" "))
    };
    bail!(
        "a csivol-agent is already running on the data dir of {} (started by hand, or left \
         from an earlier dev mode); {stop}, then start dev mode again",
        which.join(", ")
    );
}

/// The dev cluster's server: the defaults of `serve`, under `DIR/server`, over the dev
/// CA's certificates unless `--no-tls`.
fn server_config(args: &DevArgs, dir: &Path, tls: Option<&crate::tls::Files>) -> ServerConfig {
    ServerConfig {
        data_dir: dir.join("server"),
        listen: args.listen,
        heartbeat_ttl: args.heartbeat_ttl,
        planned_stop_grace: crate::defaults::DEFAULT_PLANNED_STOP_GRACE,
        controller_concurrency: 8,
        controller_queue_warning: Duration::from_secs(60),
        request_memory: crate::defaults::DEFAULT_REQUEST_MEMORY,
        fence: Default::default(),
        secrets_key_file: None,
        header_timeout: crate::defaults::DEFAULT_HEADER_TIMEOUT,
        body_timeout: crate::defaults::DEFAULT_BODY_TIMEOUT,
        max_connections: None,
        max_long_polls: None,
        tls: tls.map(|f| crate::config::TlsFiles {
            cert: f.server_cert.clone(),
            key: f.server_key.clone(),
            client_ca: Some(f.ca.clone()),
        }),
        insecure_http: false,
        node_channel: true,
        etcd: None,
        limits: Default::default(),
        // The dev cluster's plugin has VOLUME_MOUNT_GROUP: it applies a claim's group
        // itself, and csivol changes no ownership.
        plugin_mounts: Default::default(),
        volume_filling_percent: crate::defaults::DEFAULT_VOLUME_FILLING_PERCENT,
    }
}

/// What every node of the dev cluster is started with.
struct Nodes<'a> {
    dir: &'a Path,
    url: &'a str,
    mount: &'a str,
    tls: Option<&'a crate::tls::Files>,
    tls_dir: &'a Path,
    agent_exe: &'a Path,
    plugin_exe: &'a Path,
}

impl Nodes<'_> {
    /// Starts node `i`: its token (made once), its plugin and its agent.
    async fn start(
        &self,
        i: u32,
        client: &DevClient,
        children: &mut Vec<Kid>,
    ) -> anyhow::Result<()> {
        let node = format!("node-{i}");
        let node_dir = self.dir.join(&node);
        csivol_daemon::modes::dir_logged(
            &node_dir,
            csivol_daemon::modes::PASSABLE,
            "dev node dir",
        )?;
        let node_token = node_dir.join("token");
        if !node_token.exists() {
            let t = client.create_node_token(&node).await?;
            write_private(&node_token, &t)?;
        }
        let socket = node_dir.join("plugin.sock");
        let endpoint = format!("unix://{}", socket.display());
        let mut plugin = Command::new(self.plugin_exe);
        plugin.args([
            format!("--endpoint={endpoint}"),
            format!("--node-id={node}"),
            format!("--state-dir={}", node_dir.join("plugin").display()),
            format!("--backend-dir={}", self.dir.join("backend").display()),
            format!("--mount={}", self.mount),
        ]);
        children.push(Kid::spawn(
            format!("{node} plugin"),
            plugin,
            &node_dir.join("plugin.log"),
            &node_dir.join("plugin.pid"),
        )?);
        let mut agent = Command::new(self.agent_exe);
        agent.arg("run").args([
            format!("--server={}", self.url),
            format!("--node={node}"),
            format!("--data-dir={}", node_dir.join("agent").display()),
            format!("--token-file={}", node_token.display()),
            format!("--plugin={DEV_PLUGIN}={endpoint}"),
            format!("--controller={DEV_PLUGIN}={endpoint}"),
        ]);
        if let Some(f) = self.tls {
            agent.arg(format!("--ca-cert={}", f.ca.display()));
            let (cert, key) = crate::tls::Files::node(self.tls_dir, &node);
            if cert.exists() {
                agent.args([
                    format!("--tls-cert={}", cert.display()),
                    format!("--tls-key={}", key.display()),
                ]);
            }
        }
        agent.args([
            // Ctrl-C takes each node down through its plugin, so that a resumed dev
            // cluster finds records and mounts that agree.
            "--take-down-on-stop".to_owned(),
        ]);
        if self.mount == "none" {
            agent.arg("--ready-check=exists");
        }
        children.push(Kid::spawn(
            format!("{node} agent"),
            agent,
            &node_dir.join("agent.log"),
            &node_dir.join("agent.pid"),
        )?);
        Ok(())
    }
}

/// Names the nodes whose agent did not say it stopped: the server finds them silent at
/// the next start.
async fn say_which_nodes_did_not_stop(client: &DevClient) {
    match client.0.nodes().await {
        Ok(nodes) => {
            for n in nodes.iter().filter(|n| n.status == api::NodeStatus::Ready) {
                eprintln!(
                    "{}'s agent did not say it stopped (it was killed, or started by hand): the server \
                     will find it silent at the next start",
                    n.name
                );
            }
        }
        Err(e) => eprintln!("could not ask the server whether every node stopped: {e}"),
    }
}

/// Checks that this process may bind-mount, with a throwaway mount under `dir`.
fn probe_mounts(dir: &Path) -> anyhow::Result<()> {
    let probe = dir.join(".mount-probe");
    let (src, dst) = (probe.join("src"), probe.join("dst"));
    std::fs::create_dir_all(&src)?;
    std::fs::create_dir_all(&dst)?;
    let result = rustix::mount::mount_bind(&src, &dst);
    if result.is_ok() {
        rustix::mount::unmount(&dst, rustix::mount::UnmountFlags::DETACH)?;
    }
    let _ = std::fs::remove_dir_all(&probe);
    result.map_err(Into::into)
}

/// A program dev mode runs, from the directory of this one: a build puts them together
/// (`cargo build --release` builds all four programs into `target/release/`), and so does
/// an installation.
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("failed to find the csivol-server program")?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "dev mode runs `{name}` from beside csivol-server, and {} is missing\n\
             hint: `cargo build --release` builds the four programs together into \
             target/release/ (`cargo run --bin csivol-server` builds csivol-server alone); \
             then run target/release/csivol-server dev",
            path.display()
        );
    }
    Ok(path)
}

/// The few API calls dev mode makes of its own server, with its operator token.
struct DevClient(csivol_client::Client);

/// What a failed call to the dev server says.
fn dev_error(e: csivol_client::Error) -> anyhow::Error {
    match e {
        csivol_client::Error::Refused { status, error, .. } => anyhow::anyhow!(
            "dev server refused ({}): {}",
            status.as_u16(),
            error.map_or_else(String::new, |b| b.message)
        ),
        e => anyhow::Error::new(e).context("dev server did not answer"),
    }
}

impl DevClient {
    async fn create_node_token(&self, node: &str) -> anyhow::Result<String> {
        let req = api::TokenRequest {
            role: api::Role::Node,
            node: Some(node.to_owned()),
            name: None,
            ttl_ms: None,
            controllers: vec![DEV_PLUGIN.to_owned()],
            capabilities: Vec::new(),
            volumes: Vec::new(),
            namespaces: Vec::new(),
        };
        Ok(self.0.create_token(&req).await.map_err(dev_error)?.token)
    }

    /// Waits until `n` nodes are ready; a child that exits meanwhile ends the wait with
    /// what it said.
    async fn wait_for_nodes(
        &self,
        n: u32,
        timeout: Duration,
        children: &mut [Kid],
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            for kid in children.iter_mut() {
                if let Ok(Some(status)) = kid.child.try_wait() {
                    bail!("{}", kid.exit_line(status));
                }
            }
            let nodes = self.0.nodes().await.map_err(dev_error)?;
            let ready = nodes
                .iter()
                .filter(|n| n.status == api::NodeStatus::Ready)
                .count();
            if ready as u32 >= n {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "only {ready} of {n} node agents registered within {timeout:?}; see the agent logs"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn create_volume(&self, name: &str, mode: &str) -> anyhow::Result<()> {
        let spec = api::CreateVolumeSpec {
            plugin: DEV_PLUGIN.to_owned(),
            access_mode: mode.parse().map_err(anyhow::Error::msg)?,
            attachment: api::Attachment::FileSystem,
            capacity_bytes: 64 << 20,
            fs_type: String::new(),
            mount_flags: Vec::new(),
            parameters: Default::default(),
            secrets: Default::default(),
            topology_request: None,
            source: None,
            mutable_parameters: Default::default(),
            claim_mount_flags: Vec::new(),
            selinux_context: None,
            ownership: None,
            labels: Default::default(),
        };
        let path = format!("/v1/volumes/{name}");
        let exists = (self.0)
            .send::<()>(Method::GET, &path, Body::None, None)
            .await
            .map_err(dev_error)?
            .status
            .is_success();
        if !exists {
            let _: api::Volume = (self.0)
                .request(Method::POST, &format!("{path}/create"), Some(&spec), None)
                .await
                .map_err(dev_error)?
                .body;
        }
        Ok(())
    }
}
