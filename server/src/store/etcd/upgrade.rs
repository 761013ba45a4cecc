//! `csivol-server upgrade status | finalize`: the cluster-wide schema gate of a rolling
//! upgrade over etcd.
//!
//! Servers are upgraded one at a time; a server of the new release runs on the cluster's
//! schema (the previous one) until `finalize` raises it, so a rollback before that is just
//! restarting the old release. `finalize` refuses while a live server does not know the new
//! schema. It then, in order: puts a head that says the rows are being rewritten (from then
//! on servers of the old release are refused, and the servers hold their commits); reads
//! every row as of that revision, migrates them the way a single server migrates
//! `state.db`, and writes the rows that changed, each batch compared against that head;
//! and puts the head with the new schema, at which every server migrates its own copy and
//! reloads it. Stopped half way, it is run again: the rows are read as of the same
//! revision (etcd keeps that history; the leader does not compact it while a migration is
//! under way) and written again.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use csivol_etcd_client::Client;
use rusqlite::Connection;

use super::mirror::{self, Head, KeyKind, Keys};
use super::schema::{Presence, servers_prefix};
use super::{EtcdArgs, EtcdConfig};
use crate::db;

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

/// Puts per etcd transaction: within etcd's default `--max-txn-ops` (128).
const BATCH: usize = 100;

/// How long finalize tries again when a server committed or announced itself between its
/// check and its mark (claims flowing make that common).
const MARK_FOR: std::time::Duration = std::time::Duration::from_secs(30);

pub async fn run(cmd: &UpgradeCommand) -> anyhow::Result<()> {
    let args = match cmd {
        UpgradeCommand::Status(a) | UpgradeCommand::Finalize(a) => a,
    };
    let Some(cfg) = args.etcd.config()? else {
        bail!("--etcd-endpoints is needed: the etcd cluster the servers run on");
    };
    let client = cfg.client()?;
    match cmd {
        UpgradeCommand::Status(_) => status(&client, &cfg).await,
        UpgradeCommand::Finalize(_) => finalize(&client, &cfg).await,
    }
}

/// The cluster's head and its revision.
async fn head(client: &Client, keys: &Keys, prefix: &str) -> anyhow::Result<(Head, i64)> {
    let (_, kv) = client
        .get(&keys.head())
        .await
        .context("failed to read etcd")?;
    let Some(kv) = kv else {
        bail!(
            "etcd holds no csivol cluster under {prefix}\nhint: pass the --etcd-prefix the servers run with"
        );
    };
    let h = Head::parse(&kv.value).map_err(anyhow::Error::msg)?;
    Ok((h, kv.mod_revision))
}

/// The live servers (id, what they say) and the revision they were read at.
async fn servers(client: &Client, prefix: &str) -> anyhow::Result<(i64, Vec<(String, Presence)>)> {
    let p = servers_prefix(prefix);
    let (rev, kvs) = client
        .range_prefix(p.as_bytes(), 0)
        .await
        .context("failed to read etcd")?;
    let mut out = Vec::new();
    for kv in kvs {
        let id = String::from_utf8_lossy(&kv.key[p.len()..]).into_owned();
        // A server of a release that says more of itself is read for what this one knows.
        let presence = serde_json::from_slice(&kv.value).unwrap_or(Presence {
            schema: 0,
            version: "?".into(),
            listen: String::new(),
            host: String::new(),
        });
        out.push((id, presence));
    }
    Ok((rev, out))
}

fn describe(id: &str, p: &Presence) -> String {
    let at = match (p.host.is_empty(), p.listen.is_empty()) {
        (false, false) => format!("{} on {}", p.listen, p.host),
        (true, false) => p.listen.clone(),
        (false, true) => p.host.clone(),
        (true, true) => format!("server {id}"),
    };
    format!(
        "{at} (csivol-server {}, schema version {})",
        p.version, p.schema
    )
}

async fn status(client: &Client, cfg: &EtcdConfig) -> anyhow::Result<()> {
    let keys = Keys::new(&cfg.prefix);
    let (h, _) = head(client, &keys, &cfg.prefix).await?;
    let (_, live) = servers(client, &cfg.prefix).await?;
    println!(
        "cluster under {}: schema version {}{}",
        cfg.prefix,
        h.schema,
        if h.migrating {
            " (its rows are being rewritten for it: run `csivol-server upgrade finalize` again if that stopped)"
        } else {
            ""
        }
    );
    for (id, p) in &live {
        println!("  {}", describe(id, p));
    }
    if live.is_empty() {
        println!("  no server is running");
    }
    let next = h.schema + 1;
    if !h.migrating && !live.is_empty() && live.iter().all(|(_, p)| p.schema >= next) {
        eprintln!(
            "hint: every live server knows schema version {next}: `csivol-server upgrade finalize` raises the cluster to it"
        );
    }
    Ok(())
}

async fn finalize(client: &Client, cfg: &EtcdConfig) -> anyhow::Result<()> {
    let prefix = &cfg.prefix;
    let keys = Keys::new(prefix);
    let ours = db::schema_version();
    let deadline = std::time::Instant::now() + MARK_FOR;
    let (mark, mark_rev) = loop {
        let (h, rev) = head(client, &keys, prefix).await?;
        if h.migrating {
            if h.schema > ours {
                bail!(
                    "the cluster under {prefix} is being migrated to schema version {}, which \
                     this csivol-server does not know ({ours})\nhint: finish it with the \
                     release the servers run",
                    h.schema
                );
            }
            eprintln!(
                "finishing the migration to schema version {} begun before",
                h.schema
            );
            break (h, rev);
        }
        if h.schema >= ours {
            println!(
                "the cluster under {prefix} runs schema version {}: nothing to finalize",
                h.schema
            );
            return Ok(());
        }
        let target = h.schema + 1;
        let (seen_at, live) = servers(client, prefix).await?;
        let behind: Vec<String> = live
            .iter()
            .filter(|(_, p)| p.schema < target)
            .map(|(id, p)| describe(id, p))
            .collect();
        if !behind.is_empty() {
            bail!(
                "{} of {} live server(s) do not know schema version {target}: {}\n\
                 hint: upgrade them to this release (one at a time; the API keeps serving), \
                 then finalize",
                behind.len(),
                live.len(),
                behind.join("; ")
            );
        }
        let mark = Head {
            index: h.index + 1,
            schema: target,
            by: format!("finalize-{:016x}", rand::random::<u64>()),
            keys: Some(Vec::new()),
            migrating: true,
        };
        // Holds only if nothing was committed and no server announced itself since the
        // check: a server of the old release starting now is refused by the mark.
        let servers_key = servers_prefix(prefix).into_bytes();
        let resp = client
            .txn(
                vec![
                    csivol_etcd_client::mod_revision_is(keys.head(), rev),
                    csivol_etcd_client::mod_revision_below_in_range(
                        servers_key.clone(),
                        csivol_etcd_client::prefix_end(&servers_key),
                        seen_at + 1,
                    ),
                ],
                vec![csivol_etcd_client::put(keys.head(), mark.encode(), 0)],
                vec![],
            )
            .await
            .context("failed to mark the migration in etcd")?;
        if resp.succeeded {
            let at = resp.header.map_or(0, |h| h.revision);
            eprintln!(
                "every live server ({}) knows schema version {target}: the servers hold their writes while the rows are rewritten",
                live.len()
            );
            break (mark, at);
        }
        if std::time::Instant::now() >= deadline {
            bail!(
                "the servers kept committing between the check and the mark for {}\nhint: run it again",
                humantime::format_duration(MARK_FOR)
            );
        }
    };
    let rewritten = rewrite(client, &keys, &mark, mark_rev).await?;
    let done = Head {
        migrating: false,
        by: mark.by.clone(),
        keys: None,
        ..mark.clone()
    };
    let resp = client
        .txn(
            vec![csivol_etcd_client::mod_revision_is(keys.head(), mark_rev)],
            vec![csivol_etcd_client::put(keys.head(), done.encode(), 0)],
            vec![],
        )
        .await
        .context("failed to finish the migration in etcd")?;
    if !resp.succeeded {
        bail!(
            "the cluster's head changed during the migration: something wrote to it\nhint: run it again"
        );
    }
    println!(
        "the cluster under {prefix} runs schema version {} now ({rewritten} rows rewritten); \
         every server migrates its copy and goes on",
        done.schema
    );
    Ok(())
}

/// Writes the rows as the migration to `mark.schema` makes them from the rows as of
/// `mark_rev` (the mark's revision); the number of rows written or deleted.
async fn rewrite(
    client: &Client,
    keys: &Keys,
    mark: &Head,
    mark_rev: i64,
) -> anyhow::Result<usize> {
    let (_, kvs) = client
        .range_prefix(keys.data.as_bytes(), mark_rev)
        .await
        .context(
            "failed to read the rows as they were when the migration began (etcd's history may \
             have been compacted past it: restore the backup taken before the upgrade)",
        )?;
    let old: BTreeMap<Vec<u8>, Vec<u8>> = kvs
        .into_iter()
        // The rows and the sequence: the head and the generation are not rewritten.
        .filter(|kv| {
            keys.parse(&kv.key)
                .is_some_and(|k| matches!(k, KeyKind::Seq | KeyKind::Row(..)))
        })
        .map(|kv| (kv.key, kv.value))
        .collect();
    let (from, to, index) = (mark.schema - 1, mark.schema, mark.index);
    let keys2 = keys.clone();
    let rows: Vec<(Vec<u8>, Vec<u8>)> = old.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let new = tokio::task::spawn_blocking(move || -> anyhow::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        let mut conn = Connection::open_in_memory()?;
        db::migrate(&mut conn, 0, from)?;
        let tables = mirror::tables(&conn)?;
        mirror::load(&mut conn, &tables, &keys2, &rows).map_err(anyhow::Error::msg)?;
        db::migrate(&mut conn, from, to)?;
        conn.execute(
            "UPDATE meta SET value = ?1 WHERE key = 'index'",
            [index as i64],
        )?;
        let tables = mirror::tables(&conn)?;
        Ok(mirror::all_rows(&conn, &tables, &keys2)?
            .into_iter()
            .collect())
    })
    .await
    .context("the migration task failed")??;
    let mut ops: Vec<_> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .map(|(k, v)| csivol_etcd_client::put(k.clone(), v.clone(), 0))
        .collect();
    ops.extend(
        old.keys()
            .filter(|k| !new.contains_key(*k))
            .map(|k| csivol_etcd_client::delete(k.clone())),
    );
    let n = ops.len();
    for batch in ops.chunks(BATCH) {
        let resp = client
            .txn(
                vec![csivol_etcd_client::mod_revision_is(keys.head(), mark_rev)],
                batch.to_vec(),
                vec![],
            )
            .await
            .context("failed to write the migrated rows")?;
        if !resp.succeeded {
            bail!(
                "the cluster's head changed during the migration: something wrote to it\nhint: run it again"
            );
        }
    }
    Ok(n)
}
