//! `csivol-server migrate --from sqlite:DIR --to etcd:URL,...`: copies a stopped
//! single server's state (every table: volumes, claims, attachments, nodes, tokens, events,
//! ...) into an empty etcd prefix in the etcd store's layout, then reads it back and checks
//! every row against the source.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use csivol_etcd_client::Client;

use super::mirror::{self, KeyKind, Keys};
use crate::{db, identity};

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
    pub tls: super::EtcdTlsArgs,
}

/// Puts per etcd transaction: within etcd's default `--max-txn-ops` (128).
const BATCH: usize = 100;

/// One transaction of the copy, refused if a server started on the prefix meanwhile.
async fn copy_step(
    client: &Client,
    keys: &Keys,
    ops: Vec<csivol_etcd_client::RequestOp>,
    prefix: &str,
) -> anyhow::Result<()> {
    if super::while_no_cluster(client, keys, ops)
        .await
        .context("failed to write to etcd")?
        .is_none()
    {
        bail!(
            "a server started on {prefix} during the copy; stop it, delete the prefix and copy again"
        );
    }
    Ok(())
}

pub async fn run(args: &MigrateArgs) -> anyhow::Result<()> {
    let Some(dir) = args.from.strip_prefix("sqlite:") else {
        bail!(
            "--from must be `sqlite:DIR` (the single server's data dir), not `{}`",
            args.from
        );
    };
    let Some(urls) = args.to.strip_prefix("etcd:") else {
        bail!(
            "--to must be `etcd:URL[,URL...]` (the etcd cluster's client URLs), not `{}`",
            args.to
        );
    };
    let dir = PathBuf::from(dir);
    let Some(_lock) = identity::try_lock(&dir)? else {
        bail!(
            "a csivol server is running on data dir {}: its state cannot be copied under it\n\
             hint: stop that server, then run the migration again",
            dir.display()
        );
    };
    let path = dir.join(identity::STATE_DB);
    if !path.exists() {
        bail!(
            "{} holds no state database ({} is missing)",
            dir.display(),
            path.display()
        );
    }
    let (conn, index) = db::open(&path)?;
    let tables = mirror::tables(&conn)?;
    let prefix = super::args::prefix(args.etcd_prefix.clone())?;
    let keys = Keys::new(&prefix);
    let rows = mirror::all_rows(&conn, &tables, &keys)?;
    drop(conn);

    let endpoints = csivol_client::addresses(urls);
    let cfg = super::EtcdArgs {
        etcd_endpoints: endpoints.clone(),
        etcd_prefix: Some(prefix.clone()),
        tls: args.tls.clone(),
    }
    .config()?
    .context("--to names no etcd endpoint")?;
    let client = cfg.client()?;
    let copied = copy_into(&client, &cfg.prefix, &rows, index).await?;
    eprintln!("copied and verified {copied}");
    eprintln!(
        "hint: start every server with --store etcd --etcd-endpoints {} --etcd-prefix {prefix} \
         and the same secrets key ({}, or the --secrets-key-file the old server used); the \
         old operator token still works",
        endpoints.join(","),
        dir.join(crate::secrets::KEY_FILE).display()
    );
    Ok(())
}

/// Copies `rows` (key, value, in the etcd store's layout) into the empty `prefix` with the
/// change index `index`: rows first, `head` last, so that a server finds the cluster only
/// once it is all there; then reads everything back and checks it row by row. Says what it
/// copied.
pub(super) async fn copy_into(
    client: &Client,
    prefix: &str,
    rows: &[(Vec<u8>, Vec<u8>)],
    index: u64,
) -> anyhow::Result<String> {
    let keys = Keys::new(prefix);
    let (_, existing) = client
        .range_prefix(keys.data.as_bytes(), 0)
        .await
        .context("failed to read etcd")?;
    if !existing.is_empty() {
        bail!(
            "etcd already holds a csivol cluster under {prefix} ({} keys): refusing to mix two clusters\n\
             hint: pick another --etcd-prefix, or delete that prefix if it is a failed copy",
            existing.len()
        );
    }
    for batch in rows.chunks(BATCH) {
        let ops = batch
            .iter()
            .map(|(k, v)| csivol_etcd_client::put(k.clone(), v.clone(), 0))
            .collect();
        copy_step(client, &keys, ops, prefix).await?;
    }
    let head = mirror::Head {
        index,
        schema: db::schema_version(),
        ..mirror::Head::default()
    };
    // A state copied in is of a generation of its own: an index a client holds from where
    // it came from (another cluster, or this one before a backup) means nothing in it.
    let mut events_from = 0;
    for (k, _) in rows {
        if let Some(KeyKind::Row("events", idx)) = keys.parse(k) {
            events_from = events_from.max(idx.max(0) as u64);
        }
    }
    let generation = mirror::GenerationValue::new(crate::watch::Generation::mint(), events_from);
    copy_step(
        client,
        &keys,
        vec![
            csivol_etcd_client::put(keys.generation(), generation.encode(), 0),
            csivol_etcd_client::put(keys.head(), head.encode(), 0),
        ],
        prefix,
    )
    .await?;

    // Verify: everything read back equals the source, row for row.
    let (_, copied) = client.range_prefix(keys.data.as_bytes(), 0).await?;
    let copied: BTreeMap<Vec<u8>, Vec<u8>> =
        copied.into_iter().map(|kv| (kv.key, kv.value)).collect();
    let mut per_table: BTreeMap<String, usize> = BTreeMap::new();
    for (k, v) in rows {
        match copied.get(k) {
            Some(c) if c == v => {}
            Some(_) => bail!(
                "verification failed: {} differs in etcd",
                String::from_utf8_lossy(k)
            ),
            None => bail!(
                "verification failed: {} is missing in etcd",
                String::from_utf8_lossy(k)
            ),
        }
        if let Some(KeyKind::Row(t, _)) = keys.parse(k) {
            *per_table.entry(t.to_owned()).or_default() += 1;
        }
    }
    // The rows, the generation and the head.
    if copied.len() != rows.len() + 2 {
        bail!(
            "verification failed: etcd holds {} keys under {prefix}, the copy wrote {}",
            copied.len(),
            rows.len() + 2
        );
    }
    let counts: Vec<String> = per_table.iter().map(|(t, n)| format!("{t} {n}")).collect();
    Ok(format!(
        "{} rows into etcd under {prefix} (change index {index}): {}",
        rows.len() - 1,
        counts.join(", ")
    ))
}
