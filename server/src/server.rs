//! A server's assembly: its start (transport, port, data dir, state, tokens, in the order
//! that leaves nothing half-made when a step fails or a stop comes), its parts put
//! together, and its serving until a stop.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, bail};
use csivol_daemon::modes::{self, Durability};
use tokio::net::TcpListener;

use crate::app::{App, AppState};
use crate::clock::Clock;
use crate::config::ServerConfig;
use crate::error::ApiError;
use crate::lifecycle::{self, Limits};
use crate::store::replicated;
use crate::store::sqlite::db::{self, Db};
use crate::{auth, background, calls, fence, http, identity, liveness, metrics, secrets, usage};

/// File in the data dir holding the address the server listens on (useful with port 0).
pub const ADDR_FILE: &str = "server.addr";

/// What the first part of a start opened ([`Server::open`]).
struct Opened {
    tls: Option<tokio_rustls::TlsAcceptor>,
    listener: TcpListener,
    lock: rustix::fd::OwnedFd,
    clock: Clock,
    db: Db,
    cluster: Option<replicated::Cluster>,
    cluster_id: String,
    tokens: Arc<auth::Tokens>,
}

/// A started server: state opened, port bound, ready to serve.
pub struct Server {
    pub addr: SocketAddr,
    listener: TcpListener,
    app: App,
    bounds: http::listen::Bounds,
    /// The etcd cluster, with the etcd store.
    cluster: Option<replicated::Cluster>,
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
        identity::create_private_dir(&cfg.data_dir)?;
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
        // The server's one clock, which every part that reads the time is given.
        let clock = Clock::wall();
        let (db, cluster) = match &cfg.etcd {
            Some(e) => {
                let mirror = cfg.data_dir.join(replicated::MIRROR_DB);
                let (db, c) = replicated::start(&mirror, e, check, clock.clone()).await?;
                (db, Some(c))
            }
            None => {
                let db_path = cfg.data_dir.join(identity::STATE_DB);
                modes::create_file(&db_path)
                    .with_context(|| format!("failed to create {}", db_path.display()))?;
                (Db::start(&db_path, clock.clone())?, None)
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
            let window_end = clock.now_ms() + cfg.heartbeat_ttl.as_millis() as i64;
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
            clock,
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
            clock,
            db,
            cluster,
            cluster_id,
            tokens,
        } = opened;
        if tokens.is_empty() {
            let token_path = cfg.data_dir.join(identity::OPERATOR_TOKEN_FILE);
            let t = db
                .write(|ctx| lifecycle::first_operator_token(ctx))
                .await
                .map_err(|e| anyhow::anyhow!("failed to create the operator token: {e}"))?;
            auth::write_token_file(&token_path, &t.token)
                .with_context(|| format!("failed to write {}", token_path.display()))?;
            tokens.remember(&t.token, auth::Caller::of_role(&t.id, t.role), None);
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
        let usage = Arc::new(usage::NodeSamples::new(cfg.volume_filling_percent));
        let mut metrics = metrics::Metrics::default();
        let calls = Arc::new(calls::NodeCallCounts::default());
        metrics.collect(Box::new(Arc::clone(&usage)));
        metrics.collect(Box::new(Arc::clone(&calls)));
        let metrics = Arc::new(metrics);
        let limits = Limits {
            controller_concurrency: cfg.controller_concurrency,
            controller_queue_warning: cfg.controller_queue_warning,
            served_last: Default::default(),
            metrics: Arc::clone(&metrics),
            request_memory: cfg.request_memory,
            text: cfg.limits.text,
            claims_per_claimer: cfg.limits.claims_per_claimer,
            pool_hold_after: cfg.limits.pool_hold_after,
            events: (cfg.limits.events).in_txn_ops(cfg.etcd.as_ref().map(|e| e.max_txn_ops)),
            mounts: cfg.plugin_mounts.clone(),
        };
        let addr = listener.local_addr()?;
        let addr_file = cfg.data_dir.join(ADDR_FILE);
        modes::replace_private(
            &addr_file,
            format!("{scheme}://{addr}\n").as_bytes(),
            Durability::Replaced,
        )
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
        let app = App::new(AppState {
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
            clock,
            capacity: Arc::default(),
            inventory: Arc::default(),
            usage,
            calls,
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
            replicated::presence::withdraw(c).await;
        }
        if let Err(e) = app.tokens.persist_last_used(&app.db).await {
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

#[cfg(test)]
mod tests {
    use super::*;

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
