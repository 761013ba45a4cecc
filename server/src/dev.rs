//! `csivol-server dev`: a whole csivol cluster on this machine, in the foreground: the server,
//! N node agents and one `csivol-hostpath` plugin per node (node and controller), with state
//! under one directory. Starting again on the same directory resumes the same state.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use csivol_api as api;
use csivol_client::{Body, Method};
use tokio::process::{Child, Command};

use crate::{Server, ServerConfig};

/// `csivol-server dev` flags.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Directory for all state: server database, agents' state, plugin state and volume data.
    #[arg(long, default_value = "csivol-dev")]
    pub dir: PathBuf,
    /// How many nodes (`node-1`, `node-2`, ...), each with its own agent and plugin.
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    /// Address the server listens on.
    #[arg(long, default_value = crate::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// How long a silent node stays ready before it is lost and its volumes blocked.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub heartbeat_ttl: Duration,
    /// Force plugin mount mode; by default real bind mounts, or marker files where the
    /// machine refuses mounts.
    #[arg(long, value_parser = ["bind", "none"])]
    pub mount: Option<String>,
    /// Do not create the demo volumes.
    #[arg(long)]
    pub no_demo_volumes: bool,
    /// Serve plain HTTP instead of TLS with the dev cluster's own CA (`DIR/tls`).
    #[arg(long)]
    pub no_tls: bool,
}

/// The csivol plugin id dev mode gives the reference plugin.
pub const DEV_PLUGIN: &str = "hostpath";

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
    let mount = match args.mount.as_deref() {
        Some(m) => m.to_owned(),
        None => match probe_mounts(&dir) {
            Ok(()) => "bind".to_owned(),
            Err(e) => {
                eprintln!(
                    "note: this machine refused a bind mount ({e}); the plugins run with --mount none \
                     (marker files instead of mounts). Run as root for real mounts."
                );
                "none".to_owned()
            }
        },
    };

    // An agent left running on a node's data dir (one started by hand from the command dev
    // mode prints when a node dies) would keep that node for itself: say which, and stop.
    let strays: Vec<(String, Option<u32>)> = (1..=args.nodes)
        .filter_map(|i| {
            let node = format!("node-{i}");
            csivol_daemon::lock::running_agent(&dir.join(&node).join("agent")).map(|p| (node, p))
        })
        .collect();
    if !strays.is_empty() {
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
    let server = Server::start(ServerConfig {
        data_dir: dir.join("server"),
        listen: args.listen,
        heartbeat_ttl: args.heartbeat_ttl,
        planned_stop_grace: crate::DEFAULT_PLANNED_STOP_GRACE,
        controller_concurrency: 8,
        controller_queue_warning: Duration::from_secs(60),
        request_memory: crate::DEFAULT_REQUEST_MEMORY,
        fence: Default::default(),
        secrets_key_file: None,
        header_timeout: crate::DEFAULT_HEADER_TIMEOUT,
        body_timeout: crate::DEFAULT_BODY_TIMEOUT,
        max_connections: None,
        max_long_polls: None,
        tls: tls.as_ref().map(|f| crate::TlsFiles {
            cert: f.server_cert.clone(),
            key: f.server_key.clone(),
            client_ca: Some(f.ca.clone()),
        }),
        insecure_http: false,
        node_channel: true,
        etcd: None,
        limits: Default::default(),
    })
    .await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", server.addr);
    let (stop_server, server_stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(async {
        let _ = server_stopped.await;
    }));
    let token_path = dir.join("server").join(crate::OPERATOR_TOKEN_FILE);
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
    let started: anyhow::Result<()> = async {
        for i in 1..=args.nodes {
            let node = format!("node-{i}");
            let node_dir = dir.join(&node);
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
            let mut plugin = Command::new(&plugin_exe);
            plugin.args([
                format!("--endpoint={endpoint}"),
                format!("--node-id={node}"),
                format!("--state-dir={}", node_dir.join("plugin").display()),
                format!("--backend-dir={}", dir.join("backend").display()),
                format!("--mount={mount}"),
            ]);
            children.push(Kid::spawn(
                format!("{node} plugin"),
                plugin,
                &node_dir.join("plugin.log"),
                &node_dir.join("plugin.pid"),
            )?);
            let mut agent = Command::new(&agent_exe);
            agent.arg("run").args([
                format!("--server={url}"),
                format!("--node={node}"),
                format!("--data-dir={}", node_dir.join("agent").display()),
                format!("--token-file={}", node_token.display()),
                format!("--plugin={DEV_PLUGIN}={endpoint}"),
                format!("--controller={DEV_PLUGIN}={endpoint}"),
            ]);
            if let Some(f) = &tls {
                agent.arg(format!("--ca-cert={}", f.ca.display()));
                let (cert, key) = crate::tls::Files::node(&tls_dir, &node);
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
            if mount == "none" {
                agent.arg("--ready-check=exists");
            }
            children.push(Kid::spawn(
                format!("{node} agent"),
                agent,
                &node_dir.join("agent.log"),
                &node_dir.join("agent.pid"),
            )?);
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
    let _ = stop_server.send(());
    serving.await.context("server task failed")??;
    Ok(())
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

/// A process dev mode started: a node's agent or plugin.
struct Kid {
    /// `node-1 agent`, `node-1 plugin`.
    name: String,
    child: Child,
    log: PathBuf,
    /// Where this run's output starts in `log` (the file is appended to across runs).
    log_from: u64,
    /// The shell command that starts it again by hand (printed if it dies).
    again: String,
}

impl Kid {
    /// Starts a child with its output appended to `log` and its pid written to `pid_file`
    /// (so a failure can be simulated with `kill -9 $(cat DIR/node-2/agent.pid)`). It dies
    /// with dev mode, even when dev mode is killed outright ([`csivol_csi::supervised`]).
    fn spawn(name: String, mut cmd: Command, log: &Path, pid_file: &Path) -> anyhow::Result<Self> {
        let again = shell_line(&cmd, log, pid_file);
        let out = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)?;
        let log_from = out.metadata()?.len();
        let err = out.try_clone()?;
        // A process group of its own: a Ctrl-C in the terminal reaches dev mode only, which
        // stops the children in order (a plugin must outlive its agent's take-down).
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env(
                csivol_csi::supervised::PARENT_PID,
                std::process::id().to_string(),
            )
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start a child process (log: {})", log.display()))?;
        if let Some(pid) = child.id() {
            std::fs::write(pid_file, format!("{pid}\n"))?;
        }
        Ok(Self {
            name,
            child,
            log: log.to_owned(),
            log_from,
            again,
        })
    }

    /// What it said last before it exited: its last `error:` line in this run's output.
    fn last_error(&self) -> Option<String> {
        use std::io::{Read, Seek};
        let mut f = std::fs::File::open(&self.log).ok()?;
        f.seek(std::io::SeekFrom::Start(self.log_from)).ok()?;
        let mut text = String::new();
        f.read_to_string(&mut text).ok()?;
        text.lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .map(str::to_owned)
    }

    /// "node-2 agent exited (exit status: 1): another csivol-agent ...": why, when it said.
    fn exit_line(&self, status: std::process::ExitStatus) -> String {
        match self.last_error() {
            Some(e) => format!("{} exited ({status}): {e}", self.name),
            None => format!(
                "{} exited ({status}); its log: {}",
                self.name,
                self.log.display()
            ),
        }
    }
}

/// The shell command that starts `cmd` again as dev mode did: output appended to `log`,
/// pid written to `pid_file`. Run by hand, it is not stopped by dev mode's Ctrl-C.
fn shell_line(cmd: &Command, log: &Path, pid_file: &Path) -> String {
    let std = cmd.as_std();
    let mut words = vec![csivol_daemon::shell_word(
        &std.get_program().to_string_lossy(),
    )];
    words.extend(
        std.get_args()
            .map(|a| csivol_daemon::shell_word(&a.to_string_lossy())),
    );
    format!(
        "{} >> {} 2>&1 & echo $! > {}",
        words.join(" "),
        csivol_daemon::shell_word(&log.display().to_string()),
        csivol_daemon::shell_word(&pid_file.display().to_string())
    )
}

/// Reports children as they exit, with why and the command that brings each back; returns
/// once none is left.
async fn watch_children(children: &mut [Kid]) {
    let mut alive = children.len();
    let mut reported = vec![false; children.len()];
    while alive > 0 {
        for (i, kid) in children.iter_mut().enumerate() {
            if reported[i] {
                continue;
            }
            if let Ok(Some(status)) = kid.child.try_wait() {
                reported[i] = true;
                alive -= 1;
                eprintln!(
                    "{}; the rest of the cluster keeps running; to bring it back (its node comes \
                     back and cleans up as a returning node does), run:\n  {}\n(or Ctrl-C and \
                     run dev mode again)",
                    kid.exit_line(status),
                    kid.again
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long an agent may take to take its node down (its own bound is 60s).
const AGENT_STOP_TIME: Duration = Duration::from_secs(75);

/// Stops agents first, each taking its node down through its plugin (they must not see
/// their plugin vanish mid-call), then plugins. A second Ctrl-C (or an agent past its
/// time) forces: the rest are killed. Whatever is still mounted below `dir` afterwards was
/// left behind by a forced stop: it is unmounted, and said, so dev mode leaves nothing
/// mounted behind.
async fn stop(children: &mut Vec<Kid>, dir: &Path, shutdown: &mut csivol_daemon::Shutdown) {
    let mut forced = false;
    for pass in ["agent", "plugin"] {
        for Kid { child, .. } in children.iter_mut().filter(|k| k.name.ends_with(pass)) {
            if let Some(pid) = child.id()
                && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for Kid { name, child, .. } in children.iter_mut().filter(|k| k.name.ends_with(pass)) {
            if !forced {
                tokio::select! {
                    r = tokio::time::timeout(AGENT_STOP_TIME, child.wait()) => {
                        if r.is_err() {
                            eprintln!("{name} did not stop within {}s; killing it", AGENT_STOP_TIME.as_secs());
                        }
                    }
                    () = shutdown.wait() => {
                        eprintln!("forced: killing what is left");
                        forced = true;
                    }
                }
            }
            let _ = child.kill().await;
        }
    }
    children.clear();
    let mut mounts: Vec<PathBuf> = csivol_csi::mountinfo::MountTable::read()
        .map(|t| {
            t.points()
                .filter(|m| m.starts_with(dir))
                .map(Path::to_path_buf)
                .collect()
        })
        .unwrap_or_default();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in mounts {
        eprintln!(
            "{} was left mounted (a forced stop); unmounting it: the agent will find it gone and stage or publish it again",
            m.display()
        );
        if let Err(e) = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH) {
            eprintln!("failed to unmount {}: {e}", m.display());
        }
    }
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("failed to write {}", path.display()))?;
    writeln!(f, "{content}")?;
    Ok(())
}

/// Where the CLI looks for a token when none is given (see the CLI's documentation).
pub fn cli_token_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("csivol").join("token"))
}

/// Beside the CLI's token file, when dev mode wrote that token: the token's SHA-256 and
/// the dev dir it came from. A token with a matching record may be replaced by a later dev
/// cluster; any other token there is the user's and is never overwritten.
pub const DEV_TOKEN_RECORD: &str = "token.from-dev";

/// The same for the CA dev mode puts beside it (`ca.pem`).
pub const DEV_CA_RECORD: &str = "ca.from-dev";

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.trim().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes the operator token where the CLI looks by default, unless a token that dev mode
/// did not write is already there (never overwrite someone's token): a token an earlier
/// dev cluster wrote is replaced, so that `csivol` with no flags reaches this one. Returns
/// the path when it holds ours.
fn offer_cli_token(token: &str, dir: &Path) -> Option<PathBuf> {
    offer_cli_file(cli_token_path()?, token, DEV_TOKEN_RECORD, dir)
}

/// Puts `content` where the CLI looks by default. What the user put there is never
/// replaced; what an earlier dev cluster wrote (its hash in `record` beside it) is, so that
/// the CLI follows the latest dev cluster wherever it runs. Returns the path when it holds
/// `content`.
fn offer_cli_file(path: PathBuf, content: &str, record: &str, dir: &Path) -> Option<PathBuf> {
    let record = path.with_file_name(record);
    let ours = match std::fs::read_to_string(&path) {
        Ok(existing) if existing.trim() == content.trim() => true,
        Ok(existing) => {
            let from_dev = std::fs::read_to_string(&record)
                .ok()
                .and_then(|r| r.lines().next().map(str::to_owned))
                .is_some_and(|hash| hash == sha256_hex(&existing));
            if !from_dev {
                // The user's: left alone, and a record about an older file of ours goes, so
                // that nothing claims this one came from dev mode.
                let _ = std::fs::remove_file(&record);
                return None;
            }
            false
        }
        Err(_) => false,
    };
    if !ours {
        write_private(&path, content.trim_end()).ok()?;
    }
    let written = std::fs::read_to_string(&path).ok()?;
    write_private(
        &record,
        &format!("{}\n{}", sha256_hex(&written), dir.display()),
    )
    .ok()?;
    Some(path)
}

/// Where the CLI looks for a CA when none is given.
pub fn cli_ca_path() -> Option<PathBuf> {
    Some(cli_token_path()?.with_file_name("ca.pem"))
}

/// Copies the dev CA where the CLI looks by default, as [`offer_cli_file`] does.
fn offer_cli_ca(ca: &Path, dir: &Path) -> Option<PathBuf> {
    let ours = std::fs::read_to_string(ca).ok()?;
    offer_cli_file(cli_ca_path()?, &ours, DEV_CA_RECORD, dir)
}

/// `DIR/env`: what `source DIR/env` sets for the CLI to reach this cluster, wherever the
/// user's defaults point: the address, the token, the CA, and the CLI on `PATH`.
fn env_file_text(url: &str, token: &Path, ca: Option<&Path>, cli: Option<&Path>) -> String {
    let mut text = format!(
        "export CSIVOL_ADDR={url}\nexport CSIVOL_TOKEN_FILE={}\n",
        csivol_daemon::shell_word(&token.display().to_string())
    );
    if let Some(ca) = ca {
        text.push_str(&format!(
            "export CSIVOL_CACERT={}\n",
            csivol_daemon::shell_word(&ca.display().to_string())
        ));
    }
    if let Some(dir) = cli.and_then(Path::parent) {
        text.push_str(&format!(
            "export PATH={}:\"$PATH\"\n",
            csivol_daemon::shell_word(&dir.display().to_string())
        ));
    }
    text
}

/// What the banner says once the cluster is up.
struct Banner<'a> {
    url: &'a str,
    token: &'a Path,
    env: &'a Path,
    /// The CLI beside this binary, when it was built.
    cli: Option<&'a Path>,
    /// Whether the token and CA are where the CLI looks by default.
    defaults: bool,
    nodes: u32,
    mount: &'a str,
    dir: &'a Path,
}

fn print_banner(b: &Banner<'_>) {
    let Banner {
        url,
        token,
        env,
        cli,
        defaults,
        nodes,
        mount,
        dir,
    } = b;
    let cli = match cli {
        Some(p) => format!("the CLI: {}", p.display()),
        None => "the CLI is not built beside this binary: `cargo build --release --bin csivol` \
                 builds it (then `source` the env file below again)"
            .to_owned(),
    };
    let defaults = if *defaults {
        "\n(its token and CA are also where `csivol` looks by default)"
    } else {
        ""
    };
    println!(
        "csivol dev cluster is up: server {url}, {nodes} node(s), plugin `{DEV_PLUGIN}` (mounts: {mount})\n\
         operator token: {}{defaults}\n\
         {cli}\n\n\
         Try, in another terminal (the env file sets PATH, the address, the token and the CA):\n  \
         source {}\n  \
         csivol status\n  \
         csivol claim demo-data --node node-1 --alloc job-1 --wait\n  \
         csivol volume show demo-data\n  \
         csivol release demo-data --alloc job-1 --wait\n  \
         csivol events\n\n\
         To see a node fail: kill -9 $(cat {}/node-{nodes}/agent.pid)\n\n\
         Ctrl-C takes every node's volumes down through its plugin and stops; run again to resume.",
        token.display(),
        csivol_daemon::shell_word(&env.display().to_string()),
        csivol_daemon::shell_word(&dir.display().to_string())
    );
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
