//! `csivol-server`: the control plane. It keeps the cluster state in SQLite, decides
//! what each node and each controller host must do, notices lost nodes and carries out
//! operators' decisions. It never dials a plugin.
//!
//! The command line is `cli`, the settings it resolves to `config`, a server's assembly
//! `server`, the maintenance commands `commands`; [`run`] carries out one parsed command.

mod app;
mod auth;
mod background;
mod calls;
mod capacity;
pub mod cli;
pub mod clock;
mod commands;
pub mod config;
pub mod defaults;
pub mod dev;
mod error;
mod fence;
pub mod http;
pub mod identity;
mod inventory;
mod lifecycle;
pub mod limits;
mod liveness;
mod metrics;
mod model;
mod secrets;
pub mod server;
pub mod store;
pub mod tls;
mod usage;
mod views;
mod watch;

use self::cli::Command;
use self::config::ServerConfig;
use self::server::Server;

/// Carries out one command of `csivol-server`.
pub async fn run(command: Command) -> anyhow::Result<()> {
    let args = match command {
        Command::Serve(args) => args,
        Command::Backup(b) => return commands::backup(&b).await,
        Command::Restore(r) => return commands::restore(&r).await,
        Command::RotateSecretsKey(k) => return commands::rotate_secrets_key(k),
        Command::Migrate(m) => return commands::migrate(&m).await,
        Command::Upgrade(u) => return commands::upgrade(&u).await,
        Command::Tls(cmd) => return tls::run(cmd),
        Command::Dev(args) => return dev::run(args).await,
    };
    // Listening from the first step: a stop while the server starts (waiting for etcd,
    // checking its database) is taken in order, never by the signal's default action.
    let mut shutdown = csivol_daemon::Shutdown::listen();
    let check = args.check;
    let cfg = ServerConfig::resolve(args)?;
    let Some(server) = Server::start_until(cfg, check, &mut shutdown).await? else {
        return Ok(());
    };
    if shutdown.pending().await {
        tracing::info!("asked to stop while starting: stopping before serving anything");
        return Ok(());
    }
    server
        .serve(async move {
            shutdown.wait().await;
            tracing::info!("stopping");
        })
        .await
}
