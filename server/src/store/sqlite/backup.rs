//! Backups and restores of the state database. A copy of `state.db` alone misses every
//! change still in its write-ahead log (in a small database, all of them); a backup here is
//! SQLite's online backup: one consistent snapshot of the committed state, WAL included,
//! taken while the server runs, written as one self-contained file.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rusqlite::{Connection, OpenFlags};

use super::restore::{Holdings, Plan};
use crate::db;
use crate::identity::{self, CLUSTER_ID_FILE, Contents, STATE_DB, Signs};

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
    pub etcd: crate::etcd::EtcdArgs,
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
    pub etcd: crate::etcd::EtcdArgs,
}

/// What a backup holds.
#[derive(Debug, Clone)]
pub struct Summary {
    pub cluster_id: Option<String>,
    pub schema: i64,
    pub index: i64,
    pub volumes: i64,
    pub bytes: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cluster {}, change index {}, {} volumes, schema version {}, {} bytes",
            self.cluster_id
                .as_deref()
                .unwrap_or("(no id: made before cluster ids)"),
            self.index,
            self.volumes,
            self.schema,
            self.bytes
        )
    }
}

/// Opens the live database for reading without creating it.
fn open_source(db: &Path) -> anyhow::Result<Connection> {
    match identity::inspect(db)? {
        Contents::Schema(_) => {}
        other => bail!(
            "nothing to back up: {}\nhint: pass the data dir the server runs with (--data-dir)",
            match other {
                Contents::Missing => format!("{} does not exist", db.display()),
                _ => format!("{} holds no cluster state", db.display()),
            }
        ),
    }
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .with_context(|| format!("failed to open the state database {}", db.display()))?;
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    Ok(conn)
}

/// Writes a consistent snapshot of the database at `db` to `to` (temp file, fsync, rename).
pub fn backup(db: &Path, to: &Path) -> anyhow::Result<Summary> {
    let src = open_source(db)?;
    write_file(to, |dst| {
        // All pages in one step: one read transaction, so one snapshot of committed
        // state even while the server keeps writing.
        use rusqlite::backup::StepResult;
        let b = rusqlite::backup::Backup::new(&src, dst)?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match b
                .step(-1)
                .with_context(|| format!("failed to back up {}", db.display()))?
            {
                StepResult::Done => return Ok(()),
                // Another step after a change of the source starts over, consistently.
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => bail!(
                    "failed to back up {}: the database stayed locked for 30s",
                    db.display()
                ),
            }
        }
    })
}

/// Writes a backup file at `to`: a new SQLite database filled by `fill`, made one
/// self-contained file, checked, synced and renamed into place (a failed one is removed).
pub(crate) fn write_file(
    to: &Path,
    fill: impl FnOnce(&mut Connection) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    let tmp = tmp_path(to);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| -> anyhow::Result<Summary> {
        // 0600 before SQLite opens it: a backup holds sealed secrets and token hashes.
        csivol_daemon::modes::create_file(&tmp)
            .with_context(|| format!("failed to create {}", tmp.display()))?;
        let mut dst = Connection::open(&tmp)
            .with_context(|| format!("failed to create {}", tmp.display()))?;
        fill(&mut dst)?;
        // A backup is one file: no WAL beside it to lose.
        dst.pragma_update(None, "journal_mode", "DELETE")?;
        let summary = verify(&dst, &tmp)?;
        drop(dst);
        std::fs::File::open(&tmp)?.sync_all()?;
        Ok(summary)
    })();
    let summary = match written {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, to).with_context(|| format!("failed to write {}", to.display()))?;
    let dir = to.parent().filter(|p| !p.as_os_str().is_empty());
    identity::sync_dir(dir.unwrap_or(Path::new(".")))
        .with_context(|| format!("failed to sync the directory of {}", to.display()))?;
    Ok(Summary {
        bytes: std::fs::metadata(to).map_or(0, |m| m.len()),
        ..summary
    })
}

/// Copies `from`'s bytes into the existing file `to`, keeping `to`'s mode.
fn copy_into(from: &Path, to: &Path) -> std::io::Result<u64> {
    let mut src = std::fs::File::open(from)?;
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(to)?;
    std::io::copy(&mut src, &mut dst)
}

fn tmp_path(to: &Path) -> PathBuf {
    let mut name = to.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    to.with_file_name(name)
}

/// Checks a backup: whole, csivol's, not newer than this build; what it holds.
pub(crate) fn verify(conn: &Connection, path: &Path) -> anyhow::Result<Summary> {
    let check: String = conn
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .with_context(|| format!("{} is not a readable SQLite database", path.display()))?;
    if check != "ok" {
        bail!("{} is damaged: {check}", path.display());
    }
    let schema: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if schema == 0 {
        bail!("{} holds no csivol state (no schema)", path.display());
    }
    if schema > db::schema_version() {
        bail!(
            "{} has schema version {schema}, newer than this csivol-server understands \
             ({})\nhint: restore it with the csivol-server that made it, or a newer one",
            path.display(),
            db::schema_version()
        );
    }
    // Asked of the schema itself, not of its version: a backup made before cluster ids
    // has none, and gets one when the server migrates it.
    let has_id: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cluster')",
        [],
        |r| r.get(0),
    )?;
    let cluster_id = if has_id {
        Some(db::cluster_id(conn)?)
    } else {
        None
    };
    let index = conn.query_row("SELECT value FROM meta WHERE key = 'index'", [], |r| {
        r.get(0)
    })?;
    let volumes = conn.query_row("SELECT COUNT(*) FROM volumes", [], |r| r.get(0))?;
    Ok(Summary {
        cluster_id,
        schema,
        index,
        volumes,
        bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
    })
}

/// `csivol-server backup`: of a data dir's `state.db`, or of the state in etcd.
pub async fn run_backup(args: &BackupArgs) -> anyhow::Result<()> {
    let etcd = match args.etcd.config()? {
        Some(e) => Ok(e),
        None => match &args.data_dir {
            Some(d) => Err(d.clone()),
            None => {
                let cfg = crate::ServerConfig::resolve(crate::ServerArgs {
                    config: args.config.clone(),
                    ..crate::ServerArgs::default()
                })?;
                cfg.etcd.ok_or(cfg.data_dir)
            }
        },
    };
    let summary = match etcd {
        Ok(e) => crate::etcd::backup::backup(&e, &args.to).await?,
        Err(dir) => backup(&dir.join(STATE_DB), &args.to)?,
    };
    println!("backed up {} to {}", summary, args.to.display());
    Ok(())
}

/// `csivol-server restore`: into a stopped server's data dir, or into an empty etcd prefix.
pub async fn run_restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let configured = match &args.config {
        Some(path) => Some(crate::ServerConfig::resolve(crate::ServerArgs {
            config: Some(path.clone()),
            ..crate::ServerArgs::default()
        })?),
        None => None,
    };
    // How to start the server on what was restored: as it runs, with its config when it
    // has one (the data dir alone would start it on the default address, without TLS).
    let serve = |what: String| match &args.config {
        Some(path) => format!(
            "csivol-server serve --config {}",
            csivol_daemon::shell_word(&path.display().to_string())
        ),
        None => {
            format!("csivol-server serve {what} with the other flags (or --config) it runs with")
        }
    };
    let etcd = match args.etcd.config()? {
        Some(e) => Some(e),
        None => configured.as_ref().and_then(|c| c.etcd.clone()),
    };
    if let Some(e) = etcd {
        let prepared = crate::etcd::backup::prepare(&e, &args.from).await?;
        // Said before anything is written: the prefix holds nothing now, so this is all
        // the backup has; what nodes hold beyond it is taken down when they register.
        println!(
            "restoring {} from {} into etcd under {}",
            prepared.summary,
            args.from.display(),
            e.prefix
        );
        println!("{}", prepared.plan);
        let copied = crate::etcd::backup::restore(&e, &args.from, &prepared).await?;
        println!(
            "restored {} from {} into etcd: {copied}",
            prepared.summary,
            args.from.display()
        );
        eprintln!(
            "start the servers on it: {}, with the secrets key the backup's cluster had; the \
             tokens of the backup are valid again",
            serve(format!(
                "--store etcd --etcd-endpoints {} --etcd-prefix {}",
                e.endpoints.join(","),
                e.prefix
            ))
        );
        return Ok(());
    }
    let Some(dir) = &args.data_dir.clone().or(configured.map(|c| c.data_dir)) else {
        bail!("--data-dir, --config or --etcd-endpoints is needed: where to restore to");
    };
    let summary = {
        let conn = Connection::open_with_flags(&args.from, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("failed to open the backup {}", args.from.display()))?;
        verify(&conn, &args.from)?
    };
    crate::create_private_dir(dir)?;
    let Some(_lock) = identity::try_lock(dir)? else {
        bail!(
            "a csivol server is running on data dir {}: a restore cannot replace its database \
             under it\nhint: stop that server, then run the restore again",
            dir.display()
        );
    };
    let db = dir.join(STATE_DB);
    let current = identity::inspect(&db)?;
    let signs = Signs::find(dir)?;
    let stamp = db::now_ms();
    // What the restore changes, said before it acts (and before a refusal: the same
    // command with --force does this).
    let now = if current.has_state() {
        Holdings::of_file(&db)?
    } else {
        Holdings::default()
    };
    let plan = Plan::new(&now, &Holdings::of_file(&args.from)?);
    println!(
        "restoring {} from {} into {}",
        summary,
        args.from.display(),
        db.display()
    );
    println!("{plan}");
    if current.has_state() || signs.any() {
        if !args.force {
            bail!(
                "data dir {} already holds a cluster{}: restoring would replace it\n\
                 hint: to replace it, run the restore again with --force (its database is kept \
                 as {}.before-restore-<time>)",
                dir.display(),
                signs
                    .cluster_id
                    .as_deref()
                    .map_or(String::new(), |id| format!(" ({id})")),
                db.display()
            );
        }
        for suffix in ["", "-wal"] {
            let from = dir.join(format!("{STATE_DB}{suffix}"));
            let to = dir.join(format!("{STATE_DB}.before-restore-{stamp}{suffix}"));
            if from.exists() {
                std::fs::rename(&from, &to).with_context(|| {
                    format!(
                        "failed to move {} aside to {}",
                        from.display(),
                        to.display()
                    )
                })?;
            }
        }
    }
    // A WAL or shared-memory file of another database must not be applied to this one.
    for suffix in ["-wal", "-shm"] {
        let stale = dir.join(format!("{STATE_DB}{suffix}"));
        match std::fs::remove_file(&stale) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(e).with_context(|| format!("failed to remove {}", stale.display()));
            }
        }
    }
    let tmp = dir.join(format!("{STATE_DB}.restore.tmp"));
    let _ = std::fs::remove_file(&tmp);
    // 0600 before the copy fills it (a copy would take the backup's mode).
    csivol_daemon::modes::create_file(&tmp)
        .with_context(|| format!("failed to create {}", tmp.display()))?;
    copy_into(&args.from, &tmp).with_context(|| {
        format!(
            "failed to copy {} to {}",
            args.from.display(),
            tmp.display()
        )
    })?;
    // The server starts the restored state holding back what two nodes must not hold,
    // until the nodes have said what they hold.
    super::restore::mark_restored(&tmp)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &db).with_context(|| format!("failed to write {}", db.display()))?;
    match &summary.cluster_id {
        Some(id) => identity::write_id(dir, id)?,
        // An older backup gets its id when the server migrates it.
        None => {
            let _ = std::fs::remove_file(dir.join(CLUSTER_ID_FILE));
        }
    }
    identity::sync_dir(dir)?;
    println!(
        "restored {} from {} into {}",
        summary,
        args.from.display(),
        db.display()
    );
    eprintln!(
        "start the server on it: {}; the tokens of the backup are valid again",
        serve(format!(
            "--data-dir {}",
            csivol_daemon::shell_word(&dir.display().to_string())
        ))
    );
    Ok(())
}
