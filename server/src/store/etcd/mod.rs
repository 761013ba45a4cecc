//! The etcd state store (`--store etcd`): several servers over one etcd cluster. etcd is
//! the truth; each server keeps a SQLite mirror of it (`mirror.db` in its data dir, built
//! anew at every start by the same migrations), so every read and every lifecycle rule is
//! the SQLite code unchanged. Writes commit to etcd first, in one transaction compared
//! against the revision the mirror reflects (`writer`); the watch applies other servers'
//! commits to the mirror and wakes blocking queries. Once-only work runs on the leader,
//! elected with an etcd lease (`leader`).

pub(crate) mod args;
pub mod backup;
mod follow;
mod leader;
pub mod migrate;
pub mod mirror;
mod reads;
pub mod schema;
pub mod upgrade;
mod writer;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use csivol_etcd_client::{Client, EventType};
use tokio::sync::mpsc;

pub use args::{EtcdArgs, EtcdTlsArgs};
pub use leader::Leadership;
pub use reads::{READ_BOUND, Reads};

use self::mirror::{GenerationValue, Head, KeyKind, Keys};
use self::writer::{Remote, Writer};
use crate::db::{self, Db};
use crate::watch::Generation;

/// Default key prefix in etcd.
pub const DEFAULT_PREFIX: &str = "/csivol";
/// Default TTL of the leader's lease: the failover bound is this plus about a second.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(3);

/// Where the state lives in etcd.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub lease_ttl: Duration,
    /// Most operations in one etcd transaction: etcd's `--max-txn-ops` (128 by default).
    pub max_txn_ops: usize,
    /// TLS to etcd's `https://` endpoints: CA, and client certificate and key.
    pub ca_cert: Option<std::path::PathBuf>,
    pub cert_key: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl EtcdConfig {
    /// The client of this cluster, TLS files read.
    pub fn client(&self) -> anyhow::Result<Client> {
        let tls = match &self.ca_cert {
            None => None,
            Some(ca) => {
                let read = |p: &Path| {
                    std::fs::read(p).with_context(|| format!("failed to read {}", p.display()))
                };
                let identity_pem = match &self.cert_key {
                    Some((c, k)) => Some((read(c)?, read(k)?)),
                    None => None,
                };
                Some(csivol_etcd_client::Tls {
                    ca_pem: read(ca)?,
                    identity_pem,
                })
            }
        };
        Client::with_tls(&self.endpoints, tls.as_ref()).context("invalid --etcd-endpoints")
    }
}

/// etcd's own default `--max-txn-ops`.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;

/// The mirror's file in the data dir; removed and rebuilt at every start.
pub const MIRROR_DB: &str = "mirror.db";

/// This server's link to the etcd cluster beside its [`Db`].
#[derive(Debug, Clone)]
pub struct Cluster {
    pub client: Client,
    pub prefix: String,
    pub leadership: Leadership,
    /// Catches the mirror up with etcd before a read.
    pub reads: Reads,
    /// This server's name in etcd (its presence under `<prefix>/servers/`, its commits).
    pub id: String,
    pub lease_ttl: Duration,
    /// Most operations in one etcd transaction.
    pub max_txn_ops: usize,
}

fn remove_mirror(path: &Path) -> std::io::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let p = format!("{}{suffix}", path.display());
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Opens the store: loads etcd's state into a fresh mirror at `path` (or, on an empty
/// prefix, writes a new cluster's first state into etcd), starts the writer and the watch.
/// With `check`, the mirror is checked against what etcd holds before anything is served.
pub async fn start(path: &Path, cfg: &EtcdConfig, check: bool) -> anyhow::Result<(Db, Cluster)> {
    let client = cfg.client()?;
    let prefix = cfg.prefix.trim_end_matches('/').to_owned();
    let keys = Keys::new(&prefix);
    let (conn, tables, index, schema, head_rev, from, generation) = loop {
        remove_mirror(path).with_context(|| format!("failed to remove {}", path.display()))?;
        csivol_daemon::modes::create_file(path)
            .with_context(|| format!("failed to create {}", path.display()))?;
        let (rev, kvs) = read_state(&client, cfg, &keys).await?;
        let head = kvs
            .iter()
            .find(|kv| keys.parse(&kv.key) == Some(KeyKind::Head));
        let generation = kvs
            .iter()
            .find(|kv| keys.parse(&kv.key) == Some(KeyKind::Generation))
            .map(|kv| GenerationValue::parse(&kv.value))
            .transpose()
            .map_err(anyhow::Error::msg)?;
        match (head, generation) {
            (None, _) => {
                let (conn, index) = db::open(path)?;
                // etcd holds the truth: the mirror need not survive a crash (it is rebuilt).
                conn.pragma_update(None, "synchronous", "OFF")?;
                let tables = mirror::tables(&conn)?;
                let mut ops: Vec<_> = mirror::all_rows(&conn, &tables, &keys)?
                    .into_iter()
                    .map(|(k, v)| csivol_etcd_client::put(k, v, 0))
                    .collect();
                let generation = GenerationValue::new(Generation::mint(), 0);
                ops.push(csivol_etcd_client::put(
                    keys.generation(),
                    generation.encode(),
                    0,
                ));
                let head = Head {
                    index,
                    schema: db::schema_version(),
                    ..Head::default()
                };
                ops.push(csivol_etcd_client::put(keys.head(), head.encode(), 0));
                // Sent again if etcd did not answer: the compare lets one send land,
                // and a send that finds the state written loads it, its own or not.
                let Some(rev) = at_start(|| while_no_cluster(&client, &keys, ops.clone()))
                    .await
                    .context("failed to write a new cluster's state into etcd")?
                else {
                    continue; // another server wrote it first: load that one
                };
                tracing::info!(prefix, "wrote a new cluster's state into etcd");
                break (conn, tables, index, head.schema, rev, rev, generation);
            }
            (Some(_), None) => {
                // A cluster an older release made: the first server of this one to start
                // gives it its generation, which every later one reads.
                let mut events_from = 0;
                for kv in &kvs {
                    if let Some(KeyKind::Row("events", idx)) = keys.parse(&kv.key) {
                        events_from = events_from.max(idx.max(0) as u64);
                    }
                }
                let generation = GenerationValue::new(Generation::mint(), events_from);
                at_start(|| {
                    client.txn(
                        vec![csivol_etcd_client::create_revision_is(keys.generation(), 0)],
                        vec![csivol_etcd_client::put(
                            keys.generation(),
                            generation.encode(),
                            0,
                        )],
                        vec![],
                    )
                })
                .await
                .context("failed to write the state's generation into etcd")?;
                continue;
            }
            (Some(h), Some(generation)) => {
                let head = Head::parse(&h.value).map_err(anyhow::Error::msg)?;
                let schema = schema::accept(&head, &prefix)?;
                let (mut conn, _) = db::open_at(path, schema)?;
                conn.pragma_update(None, "synchronous", "OFF")?;
                let tables = mirror::tables(&conn)?;
                let head_rev = h.mod_revision;
                let rows: Vec<_> = kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
                mirror::load(&mut conn, &tables, &keys, &rows).map_err(anyhow::Error::msg)?;
                if check {
                    mirror::check(&conn, &tables, &keys, &rows).map_err(|e| {
                        anyhow::anyhow!(
                            "the state in etcd under {prefix} failed its check: {e}\n\
                             hint: restore the latest backup into an empty prefix \
                             (`csivol-server restore --from BACKUP --etcd-endpoints ... \
                             --etcd-prefix NEW`) and start the servers on it"
                        )
                    })?;
                    tracing::info!(
                        prefix,
                        rows = rows.len(),
                        "the state in etcd passed its check"
                    );
                }
                break (conn, tables, head.index, schema, head_rev, rev, generation);
            }
        }
    };
    mirror::install_triggers(&conn, &tables)?;
    let id = format!("{:016x}", rand::random::<u64>());
    let leadership = Leadership::start(client.clone(), &prefix, cfg.lease_ttl);
    let (mirror_rev, applied) = tokio::sync::watch::channel(head_rev);
    let halted = std::sync::Arc::new(std::sync::Mutex::new(None));
    let (remote_tx, remote) = mpsc::unbounded_channel();
    let reads = Reads::start(
        client.clone(),
        keys.head(),
        applied,
        std::sync::Arc::clone(&halted),
        remote_tx.clone(),
    );
    let (rewind, rewound) = tokio::sync::watch::channel(from + 1);
    tokio::spawn(watch(client.clone(), keys.clone(), rewound, remote_tx));
    let writer = Writer {
        conn,
        tables,
        keys,
        client: client.clone(),
        rt: tokio::runtime::Handle::current(),
        remote,
        index,
        head_rev,
        applied: from,
        max_ops: cfg.max_txn_ops,
        leadership: leadership.clone(),
        leader_key: leader::leader_key(&prefix),
        schema,
        schema_shown: Default::default(),
        migrating: None,
        halted,
        behind: None,
        mirror_rev,
        id: id.clone(),
        commits: 0,
        rewind,
    };
    let begun = (generation.generation(), generation.events_from);
    let db = Db::start_with(path, index, begun, schema, move |parts| writer.run(parts))?;
    Ok((
        db,
        Cluster {
            client,
            prefix,
            leadership,
            reads,
            id,
            lease_ttl: cfg.lease_ttl,
            max_txn_ops: cfg.max_txn_ops,
        },
    ))
}

/// How long a starting server waits for etcd to answer: started with its etcd cluster, or
/// on a machine busy enough that etcd answers slowly, it waits rather than exits.
const START_PATIENCE: Duration = Duration::from_secs(20);

/// Runs `call` until etcd answers it, for up to [`START_PATIENCE`]; a refusal is final.
async fn at_start<T, F, Fut>(call: F) -> Result<T, csivol_etcd_client::Error>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, csivol_etcd_client::Error>>,
{
    let deadline = tokio::time::Instant::now() + START_PATIENCE;
    loop {
        match call().await {
            Err(e @ csivol_etcd_client::Error::Unavailable(_))
                if tokio::time::Instant::now() < deadline =>
            {
                tracing::warn!(error = %e, "etcd did not answer; trying again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            other => return other,
        }
    }
}

/// Every key of the state as of one etcd revision, and that revision; waits for etcd as
/// [`at_start`] does.
pub(super) async fn read_state(
    client: &Client,
    cfg: &EtcdConfig,
    keys: &Keys,
) -> anyhow::Result<(i64, Vec<csivol_etcd_client::KeyValue>)> {
    at_start(|| client.range_prefix(keys.data.as_bytes(), 0))
        .await
        .with_context(|| {
            format!(
                "failed to read the state from etcd at {}",
                cfg.endpoints.join(",")
            )
        })
}

/// Commits `ops` only while there is no cluster under the prefix yet (no `head`): the
/// revision it committed at, or `None` when a cluster is there.
pub(super) async fn while_no_cluster(
    client: &Client,
    keys: &Keys,
    ops: Vec<csivol_etcd_client::RequestOp>,
) -> Result<Option<i64>, csivol_etcd_client::Error> {
    let resp = client
        .txn(
            vec![csivol_etcd_client::create_revision_is(keys.head(), 0)],
            ops,
            vec![],
        )
        .await?;
    Ok(resp
        .succeeded
        .then(|| resp.header.map_or(0, |h| h.revision)))
}

/// Follows `<prefix>/d/` from the revision `from` says on and hands each revision to the
/// writer; watches again after a failure, and reloads everything after a compaction. When
/// it watches again it first looks whether etcd's history went back in time under it (a
/// restored etcd snapshot answers a watch from a revision it has not reached by waiting,
/// silently): then the writer loads the state again and says where to follow from.
async fn watch(
    client: Client,
    keys: Keys,
    mut rewound: tokio::sync::watch::Receiver<i64>,
    tx: mpsc::UnboundedSender<Remote>,
) {
    let mut from = *rewound.borrow_and_update();
    let mut cluster_id = 0;
    loop {
        if let Ok(now) = client.history(&keys.head()).await {
            let went_back = if cluster_id != 0 && now.cluster_id != cluster_id {
                Some(writer::WentBack {
                    why: format!(
                        "the etcd cluster's id changed from {cluster_id:x} to {:x}",
                        now.cluster_id
                    ),
                    new_cluster: true,
                })
            } else if now.revision < from - 1 {
                Some(writer::WentBack {
                    why: format!(
                        "etcd's revision is {}, below the {} this server followed it to",
                        now.revision,
                        from - 1
                    ),
                    new_cluster: false,
                })
            } else {
                None
            };
            cluster_id = now.cluster_id;
            if let Some(went) = went_back {
                if tx.send(Remote::WentBack(went)).is_err() {
                    return;
                }
                // The writer loads the state again and says where to follow from.
                if rewound.changed().await.is_err() {
                    return;
                }
                from = *rewound.borrow_and_update();
            }
        }
        let mut stream = match client.watch_prefix(keys.data.as_bytes(), from).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "etcd watch failed; watching again");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            let resp = tokio::select! {
                message = stream.message() => match message {
                    Ok(Some(r)) => r,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(error = %e, "etcd watch ended; watching again");
                        break;
                    }
                },
                changed = rewound.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // The state went back in time: follow it from where the writer loaded it.
                    from = *rewound.borrow_and_update();
                    break;
                }
            };
            if resp.compact_revision > 0 {
                tracing::warn!(
                    from,
                    compacted = resp.compact_revision,
                    "the watch fell behind a compaction; reloading the state"
                );
                match client.range_prefix(keys.data.as_bytes(), 0).await {
                    Ok((rev, kvs)) => {
                        from = rev + 1;
                        if tx.send(Remote::Reload(rev, kvs)).is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "failed to reload the state"),
                }
                break;
            }
            let mut events = resp.events.into_iter().peekable();
            while let Some(first) = events.next() {
                let rev = first.kv.as_ref().map_or(0, |kv| kv.mod_revision);
                let mut batch = vec![first];
                while let Some(e) =
                    events.next_if(|e| e.kv.as_ref().map_or(0, |kv| kv.mod_revision) == rev)
                {
                    batch.push(e);
                }
                from = rev + 1;
                if tx.send(Remote::Revision(rev, batch)).is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Puts the nodes heard from here under `<prefix>/seen/` for the leader, as soon as a
/// heartbeat waits for it (its answer does, see `liveness::Relay`), at most every
/// sixteenth of the TTL so that heartbeats arriving together share a transaction, and
/// every quarter TTL for registrations; in transactions of at most `--etcd-max-txn-ops`
/// puts.
pub async fn forward_heard(cluster: Cluster, live: std::sync::Arc<crate::liveness::Liveness>) {
    let idle = (live.ttl() / 4).clamp(Duration::from_millis(50), Duration::from_secs(2));
    let spacing = (live.ttl() / 16).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = live.wanted() => {}
            () = tokio::time::sleep(idle) => {}
        }
        tokio::time::sleep_until(last + spacing).await;
        last = tokio::time::Instant::now();
        let (heard, upto) = live.take_heard();
        if heard.is_empty() {
            live.passed_on(upto);
            continue;
        }
        let mut failed = None;
        for chunk in heard.chunks(cluster.max_txn_ops.max(1)) {
            let ops = chunk
                .iter()
                .map(|(node, registered)| {
                    let key = format!("{}/seen/{node}", cluster.prefix).into_bytes();
                    let value = if *registered { "registered" } else { "beat" };
                    csivol_etcd_client::put(key, value.as_bytes().to_vec(), 0)
                })
                .collect();
            // Past its bound the forward failed: heartbeats are refused (their agents go
            // to another server) until one succeeds, and the next attempt carries the ones
            // that came since.
            let put = cluster.client.txn(vec![], ops, vec![]);
            match tokio::time::timeout(live.forward_within(), put).await {
                Ok(Ok(resp)) => {
                    let rev = resp.header.map_or(0, |h| h.revision);
                    for (node, _) in chunk {
                        live.seen_at(node, rev);
                    }
                }
                Ok(Err(e)) => failed = Some(e.to_string()),
                Err(_) => failed = Some("no answer in time".to_owned()),
            }
            if failed.is_some() {
                break;
            }
        }
        match failed {
            None => live.passed_on(upto),
            Some(e) => {
                tracing::debug!(error = %e, "failed to forward heartbeats to etcd; retrying");
                live.not_passed_on(heard);
            }
        }
    }
}

/// Which of `nodes` had a heartbeat reach etcd that this server had not accounted for
/// (accounted for from now on): asked (one linearizable read of `seen/`) before losses
/// are recorded, so that a leader whose view of `seen/` lags (its watch behind, or itself
/// cut off from etcd until just now) never records a loss on it while another server was
/// hearing from the node.
pub async fn heard_since(
    cluster: &Cluster,
    live: &crate::liveness::Liveness,
    nodes: &[&str],
) -> Result<Vec<String>, csivol_etcd_client::Error> {
    let prefix = format!("{}/seen/", cluster.prefix);
    let (_, kvs) = cluster.client.range_prefix(prefix.as_bytes(), 0).await?;
    let mut heard = Vec::new();
    for kv in kvs {
        let Some(node) = kv.key.strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let node = String::from_utf8_lossy(node);
        if nodes.contains(&&*node) && kv.mod_revision > live.seen_revision(&node) {
            live.seen_at(&node, kv.mod_revision);
            heard.push(node.into_owned());
        }
    }
    Ok(heard)
}

/// Applies the heartbeats and registrations other servers forwarded to this server's
/// liveness clocks.
pub async fn follow_heard(cluster: Cluster, live: std::sync::Arc<crate::liveness::Liveness>) {
    let prefix = format!("{}/seen/", cluster.prefix);
    let mut from = 0;
    loop {
        let mut stream = match cluster.client.watch_prefix(prefix.as_bytes(), from).await {
            Ok(s) => s,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        while let Ok(Some(resp)) = stream.message().await {
            if resp.compact_revision > 0 {
                from = 0;
                break;
            }
            for ev in resp.events {
                let Some(kv) = ev.kv else { continue };
                from = kv.mod_revision + 1;
                if ev.r#type == EventType::Delete as i32 {
                    continue;
                }
                let Some(node) = kv.key.strip_prefix(prefix.as_bytes()) else {
                    continue;
                };
                let node = String::from_utf8_lossy(node);
                live.heard_elsewhere(&node, kv.value == b"registered");
                live.seen_at(&node, kv.mod_revision);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
