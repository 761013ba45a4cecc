//! `csivol-server`: the control plane. It keeps the cluster state in SQLite, decides
//! what each node and each controller host must do, notices lost nodes and carries out
//! operators' decisions. It never dials a plugin.

mod auth;
mod background;
pub use store::sqlite::backup;
pub(crate) use store::sqlite::db;
pub mod dev;
mod error;
pub use store::etcd;
mod fence;
mod http;
pub mod identity;
mod lifecycle;
pub mod limits;
mod liveness;
mod metrics;
mod model;
mod secrets;
pub mod store;
pub mod tls;
mod views;
mod watch;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use tokio::net::TcpListener;

use self::db::Db;
use self::error::ApiError;
use self::lifecycle::Limits;

/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";
/// File in the data dir holding the first operator token.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// File in the data dir holding the address the server listens on (useful with port 0).
pub const ADDR_FILE: &str = "server.addr";
/// How long a node stays `stopped` after its agent's planned stop (`--planned-stop-grace`).
pub const DEFAULT_PLANNED_STOP_GRACE: Duration = Duration::from_secs(600);
/// How long a request's headers may take to arrive (`--header-timeout`); an idle
/// keep-alive connection closes after it too.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's body may take to arrive after its headers (`--body-timeout`): a
/// full 1 MiB body at 35 KiB/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long request keys and claim tombstones are kept (`--request-memory`).
pub const DEFAULT_REQUEST_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// `csivol-server serve` flags. Flags override the `--config` file.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerArgs {
    /// Directory for the state database (`state.db`) and the first operator token.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port (written to `<data-dir>/server.addr`).
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// A node that misses heartbeats this long is lost and its volumes blocked [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub heartbeat_ttl: Option<Duration>,
    /// How long a node whose agent stopped in order (`node-stopping`, on SIGTERM or
    /// SIGINT) stays `stopped` before it is treated as lost: its claims held, nothing
    /// moved, no auto-fence until then [default: 10m].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub planned_stop_grace: Option<Duration>,
    /// Controller operations in flight per plugin [default: 8].
    #[arg(long)]
    pub controller_concurrency: Option<u32>,
    /// How long the answer to a request that carried an Idempotency-Key, and the
    /// tombstone of a released claim, are kept: a repeat within it is answered the first
    /// answer, a claim request sent before its alloc's release is refused, and a request
    /// sent longer ago than this is refused [default: 24h].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub request_memory: Option<Duration>,
    /// A plugin whose oldest waiting controller operation has waited this long is shown
    /// with a warning (`csivol status`, `plugin show`) [default: 1m].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub controller_queue_warning: Option<Duration>,
    /// A request's headers must arrive within this; an idle keep-alive connection is
    /// closed after it too [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub header_timeout: Option<Duration>,
    /// A request's body must arrive within this after its headers, else it is answered 408
    /// and its connection closed; a request without a valid token is answered before its
    /// body is read [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub body_timeout: Option<Duration>,
    /// Open connections at most; past it, each new connection closes the one silent longest
    /// (connected, nothing sent), else the oldest that never showed a valid token or client
    /// certificate, and waits for one to close when every connection carries an
    /// authenticated caller [default: the open-file limit less 256].
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Long-polls (blocking queries: agents' desired state, `--wait`, `events --follow`)
    /// in flight at most; beyond it they are answered 503 and retried, so that the rest of
    /// the connections stay free for other calls [default: three quarters of
    /// --max-connections].
    #[arg(long)]
    pub max_long_polls: Option<usize>,
    /// Do not offer node agents the node channel (`GET /v1/nodes/{node}/channel`, one
    /// upgraded connection per node for heartbeats and desired-state pushes); they then
    /// heartbeat and long-poll over plain requests, as with an older server.
    #[arg(long)]
    pub no_node_channel: bool,
    /// The server's TLS certificate (PEM, its chain after it); with --tls-key the API is
    /// served over https:// (`csivol-server tls init` makes one).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The server certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A CA (PEM) whose client certificates agents may present (mutual TLS); a node
    /// agent's certificate must then name the node its token acts for.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Serve plain HTTP on a non-loopback address (tokens and secrets then cross the
    /// network in clear; a warning is logged at start), e.g. behind a proxy that speaks
    /// TLS to the clients: csivol's own clients send a token over plain HTTP only to a
    /// loopback address.
    #[arg(long)]
    pub insecure_http: bool,
    /// The key that seals volume secrets in the state database (64 hex digits, mode 0600)
    /// [default: `<data-dir>/secrets.key`, created at the first start]. Keep it beside
    /// backups: a backup's secrets open only with it.
    #[arg(long, value_name = "FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Where the cluster state lives: `sqlite` (one server, `<data-dir>/state.db`) or `etcd`
    /// (several servers over one etcd cluster, see --etcd-endpoints) [default: sqlite].
    #[arg(long, value_name = "STORE")]
    pub store: Option<StoreKind>,
    /// The etcd cluster's client URLs (`http://h1:2379,http://h2:2379,...`; repeatable) for
    /// `--store etcd`. Every server of the cluster names the same etcd and prefix.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// The key prefix the state lives under in etcd [default: /csivol].
    #[arg(long, value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    /// TTL of the leader's etcd lease: a dead leader's once-only work (loss detection,
    /// controller operations, lease expiry) moves to another server within it and about a
    /// second [default: 3s].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub etcd_lease_ttl: Option<Duration>,
    /// Most operations one etcd transaction may hold: the etcd cluster's `--max-txn-ops`.
    /// Requests committed together are split to fit; one request that changes more is
    /// refused [default: 128, etcd's default].
    #[arg(long, value_name = "N")]
    pub etcd_max_txn_ops: Option<usize>,
    #[command(flatten)]
    pub etcd_tls: etcd::EtcdTlsArgs,
    /// TOML file with the same settings (`data_dir`, `listen`, `heartbeat_ttl = "30s"`,
    /// `planned_stop_grace = "10m"`, `controller_concurrency`, `request_memory = "24h"`, `secrets_key_file`, TLS and connection bounds, `node_channel = false`), and fencing:
    /// `[[fence]]` methods (`name`, `command`, `timeout`, `nodes`, `labels`, `env`,
    /// `auto_fence_after`, `trust_agent_labels`) and `[node_labels.<node>]`; `[limits]`
    /// (`claim_labels`, `claim_label_bytes`, `reason_bytes`: lower than the defaults only;
    /// `events_kept`, `events_bytes`).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Run SQLite's `PRAGMA integrity_check` over the state database before serving, and
    /// refuse to start if it finds damage. It reads the whole database: off by default.
    #[arg(long)]
    pub check: bool,
}

/// Where the cluster state lives (`--store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    Sqlite,
    Etcd,
}

/// csivol's server (control plane): the cluster state behind the HTTP API, its backups,
/// and dev mode.
///
/// `serve` runs the server; `dev` runs a whole cluster on this machine; `backup`,
/// `restore`, `rotate-secrets-key` and `migrate` look after a server's state; `tls init`
/// makes certificates for a small cluster.
// The program's `main` parses this, and `csivol-gen` writes its man pages from it.
#[derive(Debug, clap::Parser)]
#[command(name = "csivol-server", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `csivol-server`'s commands: the server, its maintenance commands, and dev mode.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run the server: the cluster state in SQLite (or etcd) behind the HTTP API.
    Serve(ServerArgs),
    /// Write a consistent backup of the state database, the server running or not (SQLite's
    /// online backup: the write-ahead log included, which a copy of `state.db` alone misses).
    Backup(backup::BackupArgs),
    /// Put a backup in place as a data dir's state database; the server must be stopped.
    Restore(backup::RestoreArgs),
    /// Seal every volume secret under a new secrets key, then replace the key file; the
    /// server must be stopped. Running it again finishes an interrupted rotation.
    RotateSecretsKey(KeyArgs),
    /// Copy a stopped single server's state (`sqlite:DIR`) into an empty etcd prefix for
    /// `--store etcd`, then check the copy row by row.
    Migrate(etcd::migrate::MigrateArgs),
    /// A rolling upgrade of servers over etcd: the cluster's schema version, and the
    /// command that raises it once every server runs the new release.
    #[command(subcommand)]
    Upgrade(etcd::upgrade::UpgradeCommand),
    /// Make TLS certificates for a small cluster.
    #[command(subcommand)]
    Tls(tls::TlsCommand),
    /// Run a whole cluster on this machine: the server, and the `csivol-agent` and
    /// `csivol-hostpath` programs beside this one for each node.
    Dev(dev::DevArgs),
}

/// `csivol-server rotate-secrets-key` flags: where the data dir and its key are.
#[derive(Debug, Clone, clap::Args)]
pub struct KeyArgs {
    /// The server's data dir [default: from --config].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The secrets key file [default: `<data-dir>/secrets.key`].
    #[arg(long, value_name = "FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// The server's TOML config, for `data_dir` and `secrets_key_file`.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    listen: Option<SocketAddr>,
    heartbeat_ttl: Option<String>,
    planned_stop_grace: Option<String>,
    controller_concurrency: Option<u32>,
    controller_queue_warning: Option<String>,
    request_memory: Option<String>,
    #[serde(default)]
    fence: Vec<csivol_rules::fence::FenceMethodConfig>,
    #[serde(default)]
    node_labels: BTreeMap<String, BTreeMap<String, String>>,
    secrets_key_file: Option<PathBuf>,
    header_timeout: Option<String>,
    body_timeout: Option<String>,
    max_connections: Option<usize>,
    max_long_polls: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    insecure_http: Option<bool>,
    node_channel: Option<bool>,
    store: Option<StoreKind>,
    #[serde(default)]
    etcd_endpoints: Vec<String>,
    etcd_prefix: Option<String>,
    etcd_lease_ttl: Option<String>,
    etcd_max_txn_ops: Option<usize>,
    etcd_ca_cert: Option<PathBuf>,
    etcd_cert: Option<PathBuf>,
    etcd_key: Option<PathBuf>,
    #[serde(default)]
    limits: limits::LimitsFile,
}

/// Resolved server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub heartbeat_ttl: Duration,
    /// How long a node stays `stopped` after a planned stop before it counts as lost.
    pub planned_stop_grace: Duration,
    pub controller_concurrency: u32,
    /// The oldest wait past which a plugin's controller queue is shown with a warning.
    pub controller_queue_warning: Duration,
    /// How long request keys and claim tombstones are kept.
    pub request_memory: Duration,
    pub fence: csivol_rules::fence::FenceConfig,
    /// `--secrets-key-file`; `None`: `<data-dir>/secrets.key`.
    pub secrets_key_file: Option<PathBuf>,
    pub header_timeout: Duration,
    /// A request's body must arrive within this after its headers.
    pub body_timeout: Duration,
    /// `None`: from the open-file limit at start.
    pub max_connections: Option<usize>,
    /// `None`: three quarters of the connections.
    pub max_long_polls: Option<usize>,
    /// Certificate, key and client CA files.
    pub tls: Option<TlsFiles>,
    pub insecure_http: bool,
    /// Offer agents the node channel (`--no-node-channel`: no).
    pub node_channel: bool,
    /// `Some`: the etcd store (`--store etcd`); `None`: SQLite.
    pub etcd: Option<etcd::EtcdConfig>,
    /// Claim labels, operators' reasons and the event log (`[limits]`).
    pub limits: limits::ServerLimits,
}

/// The server's TLS files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl ServerConfig {
    pub fn resolve(args: ServerArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("failed to read config file {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let heartbeat_ttl = match (args.heartbeat_ttl, &file.heartbeat_ttl) {
            (Some(d), _) => d,
            (None, Some(s)) => humantime::parse_duration(s)
                .with_context(|| format!("invalid heartbeat_ttl `{s}` in the config file"))?,
            (None, None) => Duration::from_secs(30),
        };
        if heartbeat_ttl < Duration::from_millis(100) {
            bail!("--heartbeat-ttl must be at least 100ms");
        }
        let planned_stop_grace = match (args.planned_stop_grace, &file.planned_stop_grace) {
            (Some(d), _) => d,
            (None, Some(s)) => humantime::parse_duration(s)
                .with_context(|| format!("invalid planned_stop_grace `{s}` in the config file"))?,
            (None, None) => DEFAULT_PLANNED_STOP_GRACE,
        };
        let Some(data_dir) = args.data_dir.or(file.data_dir) else {
            bail!("--data-dir is required: the directory that holds the state database");
        };
        let controller_concurrency = args
            .controller_concurrency
            .or(file.controller_concurrency)
            .unwrap_or(8);
        if controller_concurrency == 0 {
            bail!("--controller-concurrency must be at least 1");
        }
        let controller_queue_warning = match (
            args.controller_queue_warning,
            &file.controller_queue_warning,
        ) {
            (Some(d), _) => d,
            (None, Some(s)) => humantime::parse_duration(s).with_context(|| {
                format!("invalid controller_queue_warning `{s}` in the config file")
            })?,
            (None, None) => Duration::from_secs(60),
        };
        let request_memory = match (args.request_memory, &file.request_memory) {
            (Some(d), _) => d,
            (None, Some(s)) => humantime::parse_duration(s)
                .with_context(|| format!("invalid request_memory `{s}` in the config file"))?,
            (None, None) => DEFAULT_REQUEST_MEMORY,
        };
        if request_memory < Duration::from_secs(1) {
            bail!(
                "--request-memory must be at least 1s: it bounds how late a repeated request may                  come and still be answered the same"
            );
        }
        let config_name = || {
            args.config
                .as_ref()
                .map_or_else(String::new, |p| format!(" in {}", p.display()))
        };
        let fence = csivol_rules::fence::FenceConfig::new(file.fence, file.node_labels)
            .map_err(|e| anyhow::anyhow!("{e}{}", config_name()))?;
        let limits = file
            .limits
            .resolve()
            .map_err(|e| anyhow::anyhow!("{e}{}", config_name()))?;
        let etcd = match args.store.or(file.store).unwrap_or(StoreKind::Sqlite) {
            StoreKind::Sqlite => None,
            StoreKind::Etcd => {
                let endpoints = if args.etcd_endpoints.is_empty() {
                    file.etcd_endpoints
                } else {
                    args.etcd_endpoints
                };
                if endpoints.is_empty() {
                    bail!("--store etcd needs --etcd-endpoints (the etcd cluster's client URLs)");
                }
                let lease_ttl = match (args.etcd_lease_ttl, &file.etcd_lease_ttl) {
                    (Some(d), _) => d,
                    (None, Some(s)) => humantime::parse_duration(s).with_context(|| {
                        format!("invalid etcd_lease_ttl `{s}` in the config file")
                    })?,
                    (None, None) => etcd::DEFAULT_LEASE_TTL,
                };
                if lease_ttl < Duration::from_secs(2) {
                    bail!("--etcd-lease-ttl must be at least 2s");
                }
                Some(etcd::EtcdConfig {
                    endpoints,
                    prefix: etcd::args::prefix(args.etcd_prefix.or(file.etcd_prefix))?,
                    lease_ttl,
                    max_txn_ops: args
                        .etcd_max_txn_ops
                        .or(file.etcd_max_txn_ops)
                        .unwrap_or(etcd::DEFAULT_MAX_TXN_OPS)
                        .max(8),
                    ca_cert: args.etcd_tls.etcd_ca_cert.or(file.etcd_ca_cert),
                    cert_key: etcd::EtcdTlsArgs::cert_key(
                        args.etcd_tls.etcd_cert.or(file.etcd_cert),
                        args.etcd_tls.etcd_key.or(file.etcd_key),
                    )?,
                })
            }
        };
        Ok(Self {
            etcd,
            limits,
            data_dir,
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid")),
            heartbeat_ttl,
            planned_stop_grace,
            controller_concurrency,
            controller_queue_warning,
            request_memory,
            fence,
            secrets_key_file: args.secrets_key_file.or(file.secrets_key_file),
            header_timeout: match (args.header_timeout, &file.header_timeout) {
                (Some(d), _) => d,
                (None, Some(s)) => humantime::parse_duration(s)
                    .with_context(|| format!("invalid header_timeout `{s}` in the config file"))?,
                (None, None) => DEFAULT_HEADER_TIMEOUT,
            },
            body_timeout: match (args.body_timeout, &file.body_timeout) {
                (Some(d), _) => d,
                (None, Some(s)) => humantime::parse_duration(s)
                    .with_context(|| format!("invalid body_timeout `{s}` in the config file"))?,
                (None, None) => DEFAULT_BODY_TIMEOUT,
            },
            max_connections: args.max_connections.or(file.max_connections),
            max_long_polls: args.max_long_polls.or(file.max_long_polls),
            tls: match (
                args.tls_cert.or(file.tls_cert),
                args.tls_key.or(file.tls_key),
            ) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert,
                    key,
                    client_ca: args.tls_client_ca.or(file.tls_client_ca),
                }),
                (None, None) => None,
                _ => bail!("--tls-cert and --tls-key go together"),
            },
            insecure_http: args.insecure_http || file.insecure_http.unwrap_or(false),
            node_channel: !args.no_node_channel && file.node_channel.unwrap_or(true),
        })
    }

    pub fn secrets_key_path(&self) -> PathBuf {
        self.secrets_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(secrets::KEY_FILE))
    }
}

pub async fn run(command: Command) -> anyhow::Result<()> {
    let args = match command {
        Command::Serve(args) => args,
        Command::Backup(b) => return backup::run_backup(&b).await,
        Command::Restore(r) => return backup::run_restore(&r).await,
        Command::RotateSecretsKey(k) => {
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
            return Ok(());
        }
        Command::Migrate(m) => return etcd::migrate::run(&m).await,
        Command::Upgrade(u) => return etcd::upgrade::run(&u).await,
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

/// What the first part of a start opened ([`Server::open`]).
struct Opened {
    tls: Option<tokio_rustls::TlsAcceptor>,
    listener: TcpListener,
    lock: rustix::fd::OwnedFd,
    db: Db,
    cluster: Option<etcd::Cluster>,
    cluster_id: String,
    tokens: Arc<auth::Tokens>,
}

/// A started server: state opened, port bound, ready to serve.
pub struct Server {
    pub addr: SocketAddr,
    listener: TcpListener,
    app: http::App,
    bounds: http::listen::Bounds,
    /// The etcd cluster, with the etcd store.
    cluster: Option<etcd::Cluster>,
    /// The data dir's lock, held while this server may write there.
    _lock: rustix::fd::OwnedFd,
}

impl Server {
    pub async fn start(cfg: ServerConfig) -> anyhow::Result<Self> {
        Self::start_checked(cfg, false).await
    }

    /// [`Server::start`], with `PRAGMA integrity_check` over the database first if `check`.
    pub async fn start_checked(cfg: ServerConfig, check: bool) -> anyhow::Result<Self> {
        let opened = Self::open(&cfg, check).await?;
        Self::assemble(cfg, opened).await
    }

    /// [`Server::start_checked`], stopped by `stop`: while the server opens its state
    /// (waiting for etcd, checking the database) at once, which leaves nothing half-made
    /// (what that step writes is complete when written, or rebuilt at every start: the etcd
    /// store's mirror); past that, once the start is complete. `None` when it stopped.
    pub async fn start_until(
        cfg: ServerConfig,
        check: bool,
        stop: &mut csivol_daemon::Shutdown,
    ) -> anyhow::Result<Option<Self>> {
        let opened = tokio::select! {
            biased;
            () = stop.wait() => {
                tracing::info!(
                    "asked to stop while starting: stopped before serving anything; the data \
                     dir holds no half-made state"
                );
                return Ok(None);
            }
            opened = Self::open(&cfg, check) => opened?,
        };
        // Creating a new cluster's first operator token (in the database, then its file)
        // is not broken off: a token recorded without its file would lock the operator out.
        Self::assemble(cfg, opened).await.map(Some)
    }

    /// The part of a start that a stop may break off: everything up to the state opened.
    async fn open(cfg: &ServerConfig, check: bool) -> anyhow::Result<Opened> {
        // The transport is settled first: a server that refuses to serve (plain HTTP off
        // loopback, unreadable certificates) must leave nothing behind, not a data dir with a
        // new cluster's key, operator token and database in it.
        let tls = match &cfg.tls {
            Some(t) => Some(http::listen::tls_acceptor(
                &t.cert,
                &t.key,
                t.client_ca.as_deref(),
            )?),
            None => {
                if plain_http(cfg.listen, cfg.insecure_http).map_err(anyhow::Error::msg)? {
                    tracing::warn!(
                        listen = %cfg.listen,
                        "serving plain HTTP on a non-loopback address (--insecure-http): tokens \
                         and volume secrets cross the network in clear"
                    );
                }
                None
            }
        };
        // Then the port: a server that cannot listen (the port in use) leaves nothing behind
        // either. Connections wait in the backlog until the server serves.
        let listener = TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("failed to listen on {}", cfg.listen))?;
        create_private_dir(&cfg.data_dir)?;
        let lock = identity::lock(&cfg.data_dir)?;
        if cfg.etcd.is_none() {
            identity::check_before_open(&cfg.data_dir)?;
        }
        if check && cfg.etcd.is_none() {
            let dir = cfg.data_dir.clone();
            tokio::task::spawn_blocking(move || identity::integrity_check(&dir))
                .await
                .context("the integrity check failed to run")??;
        }
        // Created 0600 before SQLite opens it: SQLite gives the -wal and -shm files the
        // database file's mode.
        let keys = secrets::Keys::load(&cfg.secrets_key_path(), true)?;
        let (db, cluster) = match &cfg.etcd {
            Some(e) => {
                let (db, c) = etcd::start(&cfg.data_dir.join(etcd::MIRROR_DB), e, check).await?;
                (db, Some(c))
            }
            None => {
                let db_path = cfg.data_dir.join(identity::STATE_DB);
                csivol_daemon::modes::create_file(&db_path)
                    .with_context(|| format!("failed to create {}", db_path.display()))?;
                (Db::start(&db_path)?, None)
            }
        };
        let check = keys.clone();
        let shared = cfg.etcd.is_some();
        let sealed = db
            .write(move |ctx| {
                check
                    .check_and_seal(ctx, shared)
                    .map_err(ApiError::internal)
            })
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        secrets::install(keys);
        if sealed > 0 {
            // The plain text was overwritten (secure_delete); this takes it out of the WAL.
            db.read(|c| Ok(c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            tracing::info!(
                volumes = sealed,
                "sealed volume secrets an older csivol stored in plain text"
            );
        }
        // A restored state, or one settling after a restore: where the window for the
        // nodes it does not know begins again.
        if db
            .read(lifecycle::settle::at_start_due)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
        {
            let generation = db.hub.generation();
            let window_end = db::now_ms() + cfg.heartbeat_ttl.as_millis() as i64;
            db.write(move |ctx| lifecycle::settle::at_start(ctx, generation, window_end))
                .await
                .map_err(|e| anyhow::anyhow!("failed to record the restore: {e}"))?;
            tracing::warn!(
                "the state was restored from a backup: volumes two nodes must not hold go to no \
                 node until every node has registered again with what it holds (see `csivol \
                 events`)"
            );
        }
        let cluster_id = db
            .read(|c| Ok(db::cluster_id(c)?))
            .await
            .map_err(|e| anyhow::anyhow!("failed to read the cluster id: {e}"))?;
        identity::check_after_open(&cfg.data_dir, &cluster_id)?;
        // Kept as recorded, and named at every start (`--check` or not) until resolved.
        for d in (db.read(lifecycle::duplicate_ids).await).map_err(anyhow::Error::msg)? {
            tracing::warn!("{d}");
        }
        let tokens = Arc::new(
            db.read(auth::Tokens::load)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        );
        Ok(Opened {
            tls,
            listener,
            lock,
            db,
            cluster,
            cluster_id,
            tokens,
        })
    }

    /// The rest of a start, taken whole: a new cluster's first operator token, and the
    /// server's parts put together.
    async fn assemble(cfg: ServerConfig, opened: Opened) -> anyhow::Result<Self> {
        let Opened {
            tls,
            listener,
            lock,
            db,
            cluster,
            cluster_id,
            tokens,
        } = opened;
        if tokens.is_empty() {
            let token_path = cfg.data_dir.join(OPERATOR_TOKEN_FILE);
            let t = db
                .write(|ctx| lifecycle::first_operator_token(ctx))
                .await
                .map_err(|e| anyhow::anyhow!("failed to create the operator token: {e}"))?;
            auth::write_token_file(&token_path, &t.token)
                .with_context(|| format!("failed to write {}", token_path.display()))?;
            tokens.remember(
                &t.token,
                auth::Caller {
                    token_id: t.id.clone(),
                    role: t.role,
                    node: None,
                    name: None,
                    controllers: vec![],
                },
                None,
            );
            tracing::info!(path = %token_path.display(), "created the first operator token");
        }
        let nodes: Vec<(String, bool)> = db
            .read(background::node_statuses)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let open_files = http::listen::raise_open_file_limit();
        // Each node holds a connection or two (heartbeats, long-poll); the database, the
        // log and the operators need the rest.
        let wanted = 2 * nodes.len() as u64 + 1024;
        if open_files < wanted {
            tracing::warn!(
                open_files,
                nodes = nodes.len(),
                "the open-file hard limit is low for this many nodes; raise it (LimitNOFILE= in \
                 the systemd unit, or ulimit -Hn) to at least {wanted}"
            );
        }
        let max_connections = cfg.max_connections.unwrap_or_else(|| {
            usize::try_from(open_files.saturating_sub(256))
                .unwrap_or(usize::MAX)
                .clamp(64, 1_000_000)
        });
        if max_connections == 0 {
            bail!("--max-connections must be at least 1");
        }
        if cfg.body_timeout.is_zero() {
            bail!("--body-timeout must be more than 0s: no request with a body could arrive");
        }
        let max_long_polls = cfg.max_long_polls.unwrap_or(max_connections * 3 / 4).max(1);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let bounds = http::listen::Bounds {
            header_timeout: cfg.header_timeout,
            max_connections,
            tls,
        };
        let live = liveness::Liveness::new(cfg.heartbeat_ttl, cfg.planned_stop_grace, nodes);
        let live = Arc::new(if cluster.is_some() {
            live.relayed()
        } else {
            live
        });
        let metrics = Arc::new(metrics::Metrics::default());
        let limits = Limits {
            controller_concurrency: cfg.controller_concurrency,
            controller_queue_warning: cfg.controller_queue_warning,
            served_last: Default::default(),
            metrics: Arc::clone(&metrics),
            request_memory: cfg.request_memory,
            text: cfg.limits.text,
            events: (cfg.limits.events).in_txn_ops(cfg.etcd.as_ref().map(|e| e.max_txn_ops)),
        };
        let addr = listener.local_addr()?;
        let addr_file = cfg.data_dir.join(ADDR_FILE);
        write_atomic(&addr_file, format!("{scheme}://{addr}\n").as_bytes())
            .with_context(|| format!("failed to write {}", addr_file.display()))?;
        tracing::info!(
            %addr,
            cluster = %cluster_id,
            data_dir = %cfg.data_dir.display(),
            heartbeat_ttl = %humantime::format_duration(cfg.heartbeat_ttl),
            header_timeout = %humantime::format_duration(cfg.header_timeout),
            body_timeout = %humantime::format_duration(cfg.body_timeout),
            max_connections,
            max_long_polls,
            open_files,
            tls = scheme == "https",
            "csivol server listening"
        );
        let app = http::App::new(http::AppState {
            db,
            tokens,
            live,
            limits,
            metrics,
            fence: Arc::new(cfg.fence),
            fencer: Arc::new(fence::Fencer::default()),
            long_polls: Arc::new(tokio::sync::Semaphore::new(max_long_polls)),
            node_channel: cfg.node_channel,
            body_timeout: cfg.body_timeout,
            reads: cluster.as_ref().map(|c| c.reads.clone()),
            leadership: cluster.as_ref().map(|c| c.leadership.clone()),
        });
        Ok(Self {
            addr,
            listener,
            app,
            bounds,
            cluster,
            _lock: lock,
        })
    }

    /// Serves until `shutdown` completes.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let scheme = if self.bounds.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let listen = format!("{scheme}://{}", self.addr);
        let tasks = background::spawn(&self.app, self.cluster.clone(), listen);
        let app = self.app.clone();
        let _lock = self._lock;
        let router = http::router(self.app);
        let served = http::listen::serve(self.listener, router, self.bounds, shutdown).await;
        for t in tasks {
            t.abort();
        }
        if let Some(c) = &self.cluster {
            etcd::schema::withdraw(c).await;
        }
        if let Err(e) = http::access::persist_last_used(&app).await {
            tracing::warn!(error = %e, "failed to record when tokens were last used");
        }
        served.context("HTTP server failed")
    }
}

/// Whether the server may serve plain HTTP on `listen`: on loopback, yes; elsewhere only
/// with `--insecure-http`, and then with a warning (`Ok(true)`).
fn plain_http(listen: SocketAddr, insecure_http: bool) -> Result<bool, String> {
    if listen.ip().is_loopback() {
        return Ok(false);
    }
    if insecure_http {
        return Ok(true);
    }
    Err(format!(
        "refusing to serve plain HTTP on {listen}: tokens and volume secrets would cross the \
         network in clear\nhint: pass --tls-cert and --tls-key (`csivol-server tls init` makes \
         them), listen on a loopback address, or accept the risk with --insecure-http"
    ))
}

/// The data dir is its owner's only (0700), and so is every file in it (0600): it holds
/// the secrets key, the operator token and the state database.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    csivol_daemon::modes::dir_logged(dir, 0o700, "server data dir")
        .with_context(|| format!("failed to create data dir {}", dir.display()))?;
    csivol_daemon::modes::files_in(dir)
        .with_context(|| format!("failed to tighten the files in {}", dir.display()))
}

/// Written 0600 from the start, as every file in the data dir is.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml: &str) -> anyhow::Result<ServerConfig> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "csivol-server-config-{}-{n}.toml",
            std::process::id()
        ));
        std::fs::write(&path, toml).unwrap();
        let cfg = ServerConfig::resolve(ServerArgs {
            data_dir: Some("/var/lib/csivol-server".into()),
            config: Some(path.clone()),
            ..ServerArgs::default()
        });
        std::fs::remove_file(&path).unwrap();
        cfg
    }

    #[test]
    fn fence_methods_and_node_labels_come_from_the_config_file() {
        let cfg = resolve(
            r#"
[[fence]]
name = "ipmi"
command = ["/usr/sbin/fence_ipmilan", "--ip", "{bmc}", "--action", "off"]
timeout = "30s"
labels = { kind = "metal" }
auto_fence_after = "2m"

[[fence]]
name = "virsh"
command = ["fence_virsh", "--plug", "{node}"]
nodes = ["vm-*"]

[node_labels.node-1]
bmc = "10.0.0.11"
kind = "metal"
"#,
        )
        .unwrap();
        let f = &cfg.fence;
        let names: Vec<_> = f.methods.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["ipmi", "virsh"], "in the file's order");
        assert_eq!(f.methods[0].timeout, Duration::from_secs(30));
        assert_eq!(f.methods[1].timeout, csivol_rules::fence::DEFAULT_TIMEOUT);
        let none = BTreeMap::new();
        let method = |node: &str, operator: &BTreeMap<String, String>| {
            let labels = csivol_rules::fence::Labels {
                operator,
                agent: &none,
            };
            f.choose(node, labels).method().map(|m| m.name.clone())
        };
        let node_1 = f.operator_labels("node-1", &none);
        assert_eq!(method("node-1", &node_1).as_deref(), Some("ipmi"));
        assert_eq!(method("vm-3", &none).as_deref(), Some("virsh"));
        assert_eq!(method("node-2", &none), None);
    }

    #[test]
    fn the_planned_stop_grace_comes_from_the_file_or_its_default() {
        assert_eq!(
            resolve("").unwrap().planned_stop_grace,
            DEFAULT_PLANNED_STOP_GRACE
        );
        let cfg = resolve("planned_stop_grace = \"90s\"\n").unwrap();
        assert_eq!(cfg.planned_stop_grace, Duration::from_secs(90));
        let err = format!(
            "{:#}",
            resolve("planned_stop_grace = \"soon\"\n").unwrap_err()
        );
        assert!(err.contains("invalid planned_stop_grace `soon`"), "{err}");
    }

    #[test]
    fn bad_fence_methods_are_refused_naming_the_file() {
        let twice = "[[fence]]\nname = \"a\"\ncommand = [\"x\"]\n[[fence]]\nname = \"a\"\ncommand = [\"y\"]\n";
        let err = format!("{:#}", resolve(twice).unwrap_err());
        assert!(
            err.starts_with("fence method `a` is defined twice in ") && err.contains(".toml"),
            "{err}"
        );
        let unknown = "[[fence]]\nname = \"a\"\ncommand = [\"x\"]\ntimout = \"1s\"\n";
        let err = format!("{:#}", resolve(unknown).unwrap_err());
        assert!(err.contains("unknown field `timout`"), "{err}");
    }

    #[test]
    fn the_shipped_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/server.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file: FileConfig = toml::from_str(&text).expect("dist/server.toml parses");
        assert_eq!(file.listen, Some("0.0.0.0:7420".parse().unwrap()));
        assert_eq!(file.heartbeat_ttl.as_deref(), Some("30s"));
        assert_eq!(file.planned_stop_grace.as_deref(), Some("10m"));
        // TLS by default, from the files `tls init --dir /etc/csivol/tls` writes.
        let tls = tls::Files::in_dir(Path::new("/etc/csivol/tls"));
        assert_eq!(file.tls_cert, Some(tls.server_cert));
        assert_eq!(file.tls_key, Some(tls.server_key));
        assert_eq!(file.tls_client_ca, Some(tls.ca));
        assert_eq!(file.insecure_http, None);
        // The commented fence example is a method that applies to its node.
        let fence_lines = [
            "[[fence]]",
            "name ",
            "command ",
            "timeout ",
            "nodes ",
            "env ",
        ];
        let uncommented: Vec<&str> = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(r)
                    if fence_lines.iter().any(|k| r.starts_with(k))
                        || r.starts_with("[node_labels")
                        || r.starts_with("bmc ") =>
                {
                    r
                }
                _ => l,
            })
            .collect();
        let resolved = resolve(&uncommented.join("\n")).unwrap();
        assert_eq!(resolved.fence.methods.len(), 1, "{:?}", resolved.fence);
    }

    #[test]
    fn the_example_configs_etcd_settings_resolve() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/server.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let etcd_keys = ["store", "etcd_", "secrets_key_file"];
        let uncommented: Vec<&str> = text
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| etcd_keys.iter().any(|k| r.starts_with(k)))
                    .unwrap_or(l)
            })
            .collect();
        let e = resolve(&uncommented.join("\n"))
            .unwrap()
            .etcd
            .expect("etcd store");
        assert_eq!(e.endpoints.len(), 3);
        assert_eq!(e.prefix, "/csivol");
        assert_eq!(e.lease_ttl, Duration::from_secs(3));
        assert_eq!(e.max_txn_ops, 128);
        assert!(e.ca_cert.is_some() && e.cert_key.is_some());
        assert!(
            resolve("store = \"etcd\"\n")
                .unwrap_err()
                .to_string()
                .contains("--etcd-endpoints")
        );
    }

    #[test]
    fn plain_http_only_on_loopback_or_when_insisted() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(plain_http(at("127.0.0.1:7420"), false), Ok(false));
        assert_eq!(plain_http(at("[::1]:7420"), false), Ok(false));
        let refused = plain_http(at("10.0.0.1:7420"), false).unwrap_err();
        assert!(
            refused.contains("refusing to serve plain HTTP on 10.0.0.1:7420"),
            "{refused}"
        );
        assert!(refused.contains("hint: pass --tls-cert"), "{refused}");
        assert_eq!(plain_http(at("10.0.0.1:7420"), true), Ok(true), "warned");
    }
}
