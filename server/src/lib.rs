//! `csivol-server`: the control plane. It keeps the cluster state in SQLite, decides
//! what each node and each controller host must do, notices lost nodes and carries out
//! operators' decisions. It never dials a plugin.
//!
//! The command line is `cli`, the settings it resolves to `config`, a server's assembly
//! `server`; [`run`] carries out one parsed command.

mod app;
mod auth;
mod background;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dev;
mod error;
mod fence;
mod http;
pub mod identity;
mod lifecycle;
pub mod limits;
mod liveness;
mod metrics;
mod model;
mod secrets;
pub mod server;
pub mod store;
pub mod tls;
mod views;
mod watch;

use anyhow::bail;

use self::cli::{Command, KeyArgs, ServerArgs};
use self::config::ServerConfig;
use self::server::Server;
use self::store::replicated;
use self::store::sqlite::backup;

/// Carries out one command of `csivol-server`.
pub async fn run(command: Command) -> anyhow::Result<()> {
    let args = match command {
        Command::Serve(args) => args,
        Command::Backup(b) => return backup::run_backup(&b).await,
        Command::Restore(r) => return backup::run_restore(&r).await,
        Command::RotateSecretsKey(k) => return rotate_secrets_key(k),
        Command::Migrate(m) => return replicated::migrate::run(&m).await,
        Command::Upgrade(u) => return replicated::upgrade::run(&u).await,
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

/// `csivol-server rotate-secrets-key`: with the server stopped, every volume secret sealed
/// again under a new key.
fn rotate_secrets_key(k: KeyArgs) -> anyhow::Result<()> {
    let cfg = ServerConfig::resolve(ServerArgs {
        data_dir: k.data_dir,
        secrets_key_file: k.secrets_key_file,
        config: k.config,
        ..ServerArgs::default()
    })?;
    let Some(_lock) = identity::try_lock(&cfg.data_dir)? else {
        bail!(
            "a csivol server is running on data dir {}: the secrets key cannot be \
             rotated under it\nhint: stop that server, then run the rotation again",
            cfg.data_dir.display()
        );
    };
    let key = cfg.secrets_key_path();
    let n = secrets::rotate(&cfg.data_dir.join(identity::STATE_DB), &key)?;
    eprintln!(
        "sealed the secrets of {n} volume(s) under a new key in {}",
        key.display()
    );
    Ok(())
}
