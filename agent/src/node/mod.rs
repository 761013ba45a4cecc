//! The node agent (`csivol-agent node`): makes this node's real state follow the server's
//! desired state through the node's CSI plugins, runs the controller operations the server
//! assigns to it, and reports what really happened.
//!
//! - `config`: flags, the TOML file and defaults.
//! - `plugin`: the gRPC edge to the CSI plugins (the only place building CSI messages).
//! - `store`: `agent.db`, what the agent may have staged and published, and its fences.
//! - `plan`: pure: one volume's desired and recorded state → the steps to take.
//! - `core`: recovery at start, the reconcile loop, volume workers, controller operations.
//! - `client`, `session`: the server side: register, heartbeat, desired state, reports,
//!   self-fencing.
//!
//! The node agent reads no environment variable of its own (`RUST_LOG`, read by `main`,
//! filters its logs); everything is a flag or a `--config` setting.

mod client;
pub mod config;
pub mod core;
pub mod mounts;
pub mod plan;
pub mod plugin;
mod session;
pub mod store;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

pub use self::config::{CoreConfig, PluginSpec, ReadyCheck, ReadyCheckSetting};
pub use self::core::{Core, FenceState, TARGETS_MODE};
pub use self::session::FenceClock;

/// `csivol-agent node` flags. Each may also be set in the `--config` file; flags win.
#[derive(Debug, Default, clap::Args)]
pub struct NodeArgs {
    /// The server's URL, e.g. `https://10.0.0.1:7420` (plain `http://` only on loopback).
    #[arg(long, value_name = "URL")]
    pub server: Option<String>,
    /// The CA (PEM) that signed the server's certificate [default: the system's roots].
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// This node's client certificate (PEM) for mutual TLS; it must name this node.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// This node's name, as claims name it.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Where the agent keeps `agent.db`, the staging paths and the target paths.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// File holding this node's token (`csivol token create --role node --node NAME`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A node plugin: csivol's id for it and its endpoint, `unix:///path.sock` or
    /// `tcp://host:port`. Repeatable.
    #[arg(long = "plugin", value_name = "ID=ENDPOINT")]
    pub plugins: Vec<PluginSpec>,
    /// Host this plugin's controller: run its ControllerPublish/Unpublish and
    /// Create/DeleteVolume calls for the server. Repeatable.
    #[arg(long = "controller", value_name = "ID=ENDPOINT")]
    pub controllers: Vec<PluginSpec>,
    /// Self-fence: after this long without reaching the server, unpublish and unstage
    /// every volume on this node (e.g. `5m`). Off by default.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub fence_after: Option<Duration>,
    /// How a published volume is checked ready: `mount` (the target is mounted from the
    /// volume, per `/proc/self/mountinfo`) or `exists` (the target exists; for plugins that
    /// do not mount, such as `csivol-hostpath --mount none`). `ID=CHECK` sets it for one
    /// plugin. Repeatable.
    #[arg(long, value_name = "[ID=]CHECK")]
    pub ready_check: Vec<ReadyCheckSetting>,
    /// When asked to stop (SIGTERM, SIGINT), unpublish and unstage every volume through its
    /// plugin first, recording each step, instead of leaving the mounts in place. Dev mode
    /// uses it; on a real node workloads outlive the agent, so it is off by default.
    #[arg(long)]
    pub take_down_on_stop: bool,
    /// A label reported at registration, e.g. `bmc=10.0.0.11`, which the server's fence
    /// methods may use (the server's `[node_labels]` win over it). Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = config::parse_label)]
    pub labels: Vec<(String, String)>,
    /// TOML file with these settings and tuning (`node_concurrency`, `node_call_timeout`,
    /// `controller_call_timeout`, `volume_ready_timeout`, `resync_interval`, ...).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let settings = config::Settings::load(&args)?;
    let token = std::fs::read_to_string(&settings.token_file)
        .with_context(|| {
            format!(
                "failed to read the token file {}",
                settings.token_file.display()
            )
        })?
        .trim()
        .to_owned();
    if token.is_empty() {
        anyhow::bail!(
            "the token file {} is empty\nhint: create a node token with `csivol token create --role node --node {}`",
            settings.token_file.display(),
            settings.node
        );
    }
    if !settings.server.starts_with("https://")
        && !csivol_client::tls::is_loopback_url(&settings.server)
    {
        anyhow::bail!(
            "refusing to send this node's token to {} over plain HTTP\nhint: use an https:// \
             server address (the server needs --tls-cert and --tls-key)",
            settings.server
        );
    }
    let tls = csivol_client::tls::client_config(
        args.ca_cert.as_deref(),
        args.tls_cert.as_deref().zip(args.tls_key.as_deref()),
    )
    .map_err(anyhow::Error::msg)?;
    let client = client::ApiClient::new(&settings.server, &settings.node, token, tls)
        .context("failed to set up the HTTP client")?;
    tracing::info!(
        node = settings.node,
        server = settings.server,
        data_dir = %settings.core.data_dir.display(),
        "starting the node agent"
    );
    let (core, reports) = Core::start(settings.core.clone())
        .await
        .context("failed to start the node agent")?;
    session::run(
        client,
        core,
        reports,
        settings.fence_after,
        args.take_down_on_stop,
        crate::shutdown_signal(),
    )
    .await;
    Ok(())
}
