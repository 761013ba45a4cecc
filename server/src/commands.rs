//! The maintenance commands of `csivol-server` (`backup`, `restore`, `migrate`,
//! `upgrade`, `rotate-secrets-key`): each reads its flags and the config they name, then
//! has the store do the work with plain values, and says what to do next.

use anyhow::bail;

use crate::cli::{BackupArgs, KeyArgs, MigrateArgs, RestoreArgs, ServerArgs, UpgradeCommand};
use crate::config::ServerConfig;
use crate::identity::{self, STATE_DB};
use crate::secrets;
use crate::store::replicated::{self, EtcdConfig};
use crate::store::sqlite;

/// `csivol-server backup`: of a data dir's `state.db`, or of the state in etcd.
pub async fn backup(args: &BackupArgs) -> anyhow::Result<()> {
    let etcd = match args.etcd.config()? {
        Some(e) => Ok(e),
        None => match &args.data_dir {
            Some(d) => Err(d.clone()),
            None => {
                let cfg = ServerConfig::resolve(ServerArgs {
                    config: args.config.clone(),
                    ..ServerArgs::default()
                })?;
                cfg.etcd.ok_or(cfg.data_dir)
            }
        },
    };
    let summary = match etcd {
        Ok(e) => replicated::backup::backup(&e, &args.to).await?,
        Err(dir) => sqlite::backup::backup(&dir.join(STATE_DB), &args.to)?,
    };
    println!("backed up {} to {}", summary, args.to.display());
    Ok(())
}

/// `csivol-server restore`: into a stopped server's data dir, or into an empty etcd prefix.
pub async fn restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let configured = match &args.config {
        Some(path) => Some(ServerConfig::resolve(ServerArgs {
            config: Some(path.clone()),
            ..ServerArgs::default()
        })?),
        None => None,
    };
    let etcd = match args.etcd.config()? {
        Some(e) => Some(e),
        None => configured.as_ref().and_then(|c| c.etcd.clone()),
    };
    if let Some(e) = etcd {
        return restore_into_etcd(args, &e).await;
    }
    let Some(dir) = &args.data_dir.clone().or(configured.map(|c| c.data_dir)) else {
        bail!("--data-dir, --config or --etcd-endpoints is needed: where to restore to");
    };
    sqlite::backup::restore_into_data_dir(&args.from, dir, args.force)?;
    eprintln!(
        "start the server on it: {}; the tokens of the backup are valid again",
        serve_command(
            args,
            format!(
                "--data-dir {}",
                csivol_daemon::shell_word(&dir.display().to_string())
            )
        )
    );
    Ok(())
}

/// How to start the server on what was restored: as it runs, with its config when it has
/// one (the data dir alone would start it on the default address, without TLS).
fn serve_command(args: &RestoreArgs, what: String) -> String {
    match &args.config {
        Some(path) => format!(
            "csivol-server serve --config {}",
            csivol_daemon::shell_word(&path.display().to_string())
        ),
        None => {
            format!("csivol-server serve {what} with the other flags (or --config) it runs with")
        }
    }
}

/// The restore into an empty etcd prefix.
async fn restore_into_etcd(args: &RestoreArgs, e: &EtcdConfig) -> anyhow::Result<()> {
    let prepared = replicated::backup::prepare(e, &args.from).await?;
    // Said before anything is written: the prefix holds nothing now, so this is all
    // the backup has; what nodes hold beyond it is taken down when they register.
    println!(
        "restoring {} from {} into etcd under {}",
        prepared.summary,
        args.from.display(),
        e.prefix
    );
    println!("{}", prepared.plan);
    let copied = replicated::backup::restore(e, &args.from, &prepared).await?;
    println!(
        "restored {} from {} into etcd: {copied}",
        prepared.summary,
        args.from.display()
    );
    eprintln!(
        "start the servers on it: {}, with the secrets key the backup's cluster had; the \
         tokens of the backup are valid again",
        serve_command(
            args,
            format!(
                "--store etcd --etcd-endpoints {} --etcd-prefix {}",
                e.endpoints.join(","),
                e.prefix
            )
        )
    );
    Ok(())
}

/// `csivol-server migrate`: a stopped single server's state copied into etcd.
pub async fn migrate(m: &MigrateArgs) -> anyhow::Result<()> {
    let cert_key = replicated::args::cert_key(m.tls.etcd_cert.clone(), m.tls.etcd_key.clone())?;
    replicated::migrate::run(
        &m.from,
        &m.to,
        m.etcd_prefix.clone(),
        m.tls.etcd_ca_cert.clone(),
        cert_key,
    )
    .await
}

/// `csivol-server upgrade status|finalize`.
pub async fn upgrade(cmd: &UpgradeCommand) -> anyhow::Result<()> {
    let args = match cmd {
        UpgradeCommand::Status(a) | UpgradeCommand::Finalize(a) => a,
    };
    let Some(cfg) = args.etcd.config()? else {
        bail!("--etcd-endpoints is needed: the etcd cluster the servers run on");
    };
    match cmd {
        UpgradeCommand::Status(_) => replicated::upgrade::show(&cfg).await,
        UpgradeCommand::Finalize(_) => replicated::upgrade::raise(&cfg).await,
    }
}

/// `csivol-server rotate-secrets-key`: with the server stopped, every volume secret sealed
/// again under a new key.
pub fn rotate_secrets_key(k: KeyArgs) -> anyhow::Result<()> {
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
    let n = secrets::rotate(&cfg.data_dir.join(STATE_DB), &key)?;
    eprintln!(
        "sealed the secrets of {n} volume(s) under a new key in {}",
        key.display()
    );
    Ok(())
}
