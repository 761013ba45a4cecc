//! The server's command line: the clap tree of `csivol-server` and its subcommands. Its
//! doc comments are the help text; `csivol-gen` writes the man pages and completions
//! from it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::defaults::DEFAULT_LISTEN;
use crate::store::replicated::{EtcdConfig, args};
use crate::tls;

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
    pub etcd_tls: EtcdTlsArgs,
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
    Backup(BackupArgs),
    /// Put a backup in place as a data dir's state database; the server must be stopped.
    Restore(RestoreArgs),
    /// Seal every volume secret under a new secrets key, then replace the key file; the
    /// server must be stopped. Running it again finishes an interrupted rotation.
    RotateSecretsKey(KeyArgs),
    /// Copy a stopped single server's state (`sqlite:DIR`) into an empty etcd prefix for
    /// `--store etcd`, then check the copy row by row.
    Migrate(MigrateArgs),
    /// A rolling upgrade of servers over etcd: the cluster's schema version, and the
    /// command that raises it once every server runs the new release.
    #[command(subcommand)]
    Upgrade(UpgradeCommand),
    /// Make TLS certificates for a small cluster.
    #[command(subcommand)]
    Tls(tls::TlsCommand),
    /// Run a whole cluster on this machine: the server, and the `csivol-agent` and
    /// `csivol-hostpath` programs beside this one for each node.
    Dev(DevArgs),
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

/// `csivol-server backup` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct BackupArgs {
    /// The server's data dir (the one holding `state.db`); the server may be running
    /// [default: the `data_dir` of --config].
    #[arg(long, conflicts_with = "etcd_endpoints")]
    pub data_dir: Option<PathBuf>,
    /// The server's TOML config: its `data_dir`, or with `store = "etcd"` its etcd
    /// settings.
    #[arg(long, conflicts_with_all = ["data_dir", "etcd_endpoints"])]
    pub config: Option<PathBuf>,
    /// With the etcd store: the cluster's state in etcd, read at one revision while the
    /// servers run.
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Where to write the backup (one SQLite file; replaced atomically if it exists).
    #[arg(long, value_name = "FILE")]
    pub to: PathBuf,
}

/// `csivol-server restore` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct RestoreArgs {
    /// A backup written by `csivol-server backup` or `GET /v1/backup` (of either store).
    #[arg(long, value_name = "FILE")]
    pub from: PathBuf,
    /// The data dir to restore into; its server must be stopped [default: the `data_dir` of
    /// --config].
    #[arg(
        long,
        required_unless_present_any = ["etcd_endpoints", "config"],
        conflicts_with = "etcd_endpoints"
    )]
    pub data_dir: Option<PathBuf>,
    /// The server's TOML config: its `data_dir`, or with `store = "etcd"` its etcd
    /// settings; the command printed to start the server again names it.
    #[arg(long, conflicts_with_all = ["data_dir", "etcd_endpoints"])]
    pub config: Option<PathBuf>,
    /// Replace the cluster the data dir already holds (its database is kept aside as
    /// `state.db.before-restore-<time>`).
    #[arg(long, conflicts_with = "etcd_endpoints")]
    pub force: bool,
    /// Or restore into etcd, under a prefix that must be empty (no server running on it),
    /// for servers with `--store etcd`.
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// `csivol-server migrate` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// The single server's state: `sqlite:DIR`, its data dir (the server must be stopped).
    #[arg(long, value_name = "sqlite:DIR")]
    pub from: String,
    /// The etcd cluster: `etcd:URL[,URL...]`, its client URLs. The prefix must be empty and
    /// no server may run on it during the copy.
    #[arg(long, value_name = "etcd:URLS")]
    pub to: String,
    /// The key prefix in etcd [default: /csivol].
    #[arg(long, value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    #[command(flatten)]
    pub tls: EtcdTlsArgs,
}

#[derive(Debug, clap::Subcommand)]
pub enum UpgradeCommand {
    /// Show the cluster's schema version and the newest each live server knows.
    Status(UpgradeArgs),
    /// Raise the cluster's schema version to the next one, once every live server knows
    /// it, and migrate the state in etcd; the servers then migrate their copies. Run it
    /// with the new release, after every server runs it. It cannot be undone except by
    /// restoring a backup.
    Finalize(UpgradeArgs),
}

/// Where the cluster is.
#[derive(Debug, Clone, clap::Args)]
pub struct UpgradeArgs {
    #[command(flatten)]
    pub etcd: EtcdArgs,
}

/// Where a maintenance command finds the cluster's state in etcd.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdArgs {
    /// The etcd cluster's client URLs (`http://h1:2379,...`), as the servers have them in
    /// `--etcd-endpoints`.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// The key prefix the state lives under in etcd [default: /csivol].
    #[arg(long, value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    #[command(flatten)]
    pub tls: EtcdTlsArgs,
}

impl EtcdArgs {
    /// The cluster these flags name; `None` when they name none (no endpoints).
    pub fn config(&self) -> anyhow::Result<Option<EtcdConfig>> {
        if self.etcd_endpoints.is_empty() {
            return Ok(None);
        }
        let prefix = args::prefix(self.etcd_prefix.clone())?;
        let cert_key = args::cert_key(self.tls.etcd_cert.clone(), self.tls.etcd_key.clone())?;
        Ok(args::maintenance(
            self.etcd_endpoints.clone(),
            &prefix,
            self.tls.etcd_ca_cert.clone(),
            cert_key,
        ))
    }
}

/// TLS to etcd's `https://` endpoints.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdTlsArgs {
    /// The CA (PEM) that signed the etcd members' certificates, for `https://` endpoints.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) for etcd's `--client-cert-auth`; with --etcd-key.
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
}

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
    #[arg(long, default_value = DEFAULT_LISTEN)]
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
