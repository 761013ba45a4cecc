//! The node agent (`csivol-agent run`): makes this node's real state follow the server's
//! desired state through the node's CSI plugins, runs the controller operations the server
//! assigns to it, and reports what really happened.
//!
//! - `config`: flags, the TOML file and defaults.
//! - `plugin`: the gRPC edge to the CSI plugins (the only place building CSI messages).
//! - `store`: `agent.db`, what the agent may have staged and published, and its fences.
//! - `mounts`: pure over one snapshot of the mount table and `stat`: what a plugin made at
//!   a path, whether it is still there, and the checks of the agent's records (`Judge`).
//! - the decisions are pure, in `csivol_rules::agent`, imported by that path: `job` (one
//!   volume's desired and recorded state → the steps) and `verify` (the records against
//!   those checks → what recovery and every resync repair: stage or publish again, take
//!   down, record, report drift).
//! - `engine`: the node engine: recovery at start, the loop that makes the node follow
//!   its desired state, volume workers, controller operations.
//! - `check`: `csivol-agent check`, one safe round trip through a plugin before trusting
//!   it, judged against the spec and the agent's readiness rule.
//! - `client`, `session`, `channel`: the server side: register, heartbeat, desired state,
//!   reports, self-fencing; the node channel that carries heartbeats and desired-state
//!   pushes while the server offers it.
//!
//! The node agent reads no environment variable of its own (`RUST_LOG`, read by `main`,
//! filters its logs); everything is a flag or a `--config` setting.

mod channel;
pub mod check;
pub mod cli;
mod client;
pub mod config;
pub mod engine;
pub mod mounts;
pub mod plugin;
mod session;
mod stats;
pub mod store;

use anyhow::Context;

pub use self::config::{CoreConfig, NodeArgs, PluginSpec, ReadyCheck, ReadyCheckSetting};
pub use self::engine::{Core, FenceState, TARGETS_MODE};
pub use self::session::FenceClock;

/// The `--server` addresses by the rule every csivol client follows
/// (`csivol_client::address`): plain HTTP only to a loopback address, no `USER@`, a bare
/// `host:port` https when a CA is given; comma-separated again.
fn server_addresses(list: &str, ca_given: bool) -> anyhow::Result<String> {
    let urls = csivol_client::addresses(list)
        .iter()
        .map(|a| csivol_client::address::resolve(a, ca_given))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("{e}\nhint: {}", e.hint()))?;
    Ok(urls
        .iter()
        .map(csivol_client::address::base)
        .collect::<Vec<_>>()
        .join(","))
}

/// Runs the node agent until SIGTERM or SIGINT. The signals are listened for from the first
/// step: a stop while the agent starts (waiting for its plugins, recovering what was in
/// flight, registering) stops it in order, never by the signal's default action.
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let mut shutdown = csivol_daemon::Shutdown::listen();
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
    let server = server_addresses(&settings.server, settings.ca_cert.is_some())?;
    let tls = csivol_client::tls::client_config(
        settings.ca_cert.as_deref(),
        settings
            .tls_identity
            .as_ref()
            .map(|(cert, key)| (cert.as_path(), key.as_path())),
    )
    .map_err(anyhow::Error::msg)?;
    let client = client::ApiClient::new(&server, &settings.node, token, tls)?;
    tracing::info!(
        node = settings.node,
        server,
        data_dir = %settings.core.data_dir.display(),
        "starting the node agent"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let start = Core::start_until(settings.core.clone(), stop_rx);
    tokio::pin!(start);
    let started = tokio::select! {
        started = &mut start => started,
        () = shutdown.wait() => {
            tracing::info!("asked to stop while starting: stopping after the step under way");
            let _ = stop_tx.send(true);
            start.await
        }
    };
    let (core, reports) = match started {
        Err(engine::StartError::Stopped) => {
            tracing::info!(
                "node agent stopped while starting, before it registered: what it did is \
                 recorded in agent.db, and the next start reports it to the server"
            );
            return Ok(());
        }
        started => started.context("failed to start the node agent")?,
    };
    session::run(
        client,
        core,
        reports,
        settings.fence_after,
        args.take_down_on_stop,
        async move { shutdown.wait().await },
    )
    .await;
    Ok(())
}
