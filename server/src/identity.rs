//! The cluster's identity on disk, and the checks that keep a data dir from silently becoming
//! a new, empty cluster. The id lives in the database (`cluster` table) and beside it
//! (`cluster.id`); a data dir that has the file or an operator token but whose database is
//! missing or empty lost its state, and the server refuses to start there instead of
//! creating a fresh cluster that every existing token would find empty.

use std::path::{Path, PathBuf};

use super::store::sqlite::maintenance;
use anyhow::{Context, bail};
use csivol_daemon::modes::{self, Durability};
use rustix::fd::OwnedFd;

/// The state database in the data dir.
pub const STATE_DB: &str = "state.db";
/// File in the data dir holding the first operator token.
pub const OPERATOR_TOKEN_FILE: &str = "operator.token";
/// The cluster id, beside the database.
pub const CLUSTER_ID_FILE: &str = "cluster.id";
/// Held (flock) by the server running on the data dir, so that a restore or a second
/// server cannot change the database under it.
pub const LOCK_FILE: &str = "server.lock";

/// What a data dir holds, besides its database, that says a cluster lived there.
#[derive(Debug, Default)]
pub struct Signs {
    pub cluster_id: Option<String>,
    pub operator_token: bool,
}

impl Signs {
    pub fn find(dir: &Path) -> anyhow::Result<Self> {
        let id_path = dir.join(CLUSTER_ID_FILE);
        let cluster_id = match std::fs::read_to_string(&id_path) {
            Ok(s) => Some(s.trim().to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(e).with_context(|| format!("failed to read {}", id_path.display()));
            }
        };
        Ok(Self {
            cluster_id,
            operator_token: dir.join(OPERATOR_TOKEN_FILE).exists(),
        })
    }

    pub fn any(&self) -> bool {
        self.cluster_id.is_some() || self.operator_token
    }

    fn describe(&self, dir: &Path) -> String {
        let mut found = Vec::new();
        if let Some(id) = &self.cluster_id {
            found.push(format!(
                "{} (cluster {id})",
                dir.join(CLUSTER_ID_FILE).display()
            ));
        }
        if self.operator_token {
            found.push(dir.join(OPERATOR_TOKEN_FILE).display().to_string());
        }
        found.join(" and ")
    }
}

/// What a state database file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    Missing,
    ZeroBytes,
    /// A file without csivol's schema: in a small database every change sits in the WAL
    /// until a checkpoint, so a main file whose `-wal` was lost looks like this.
    NoSchema,
    /// A csivol database at this schema version.
    Schema(i64),
}

impl Contents {
    pub fn has_state(&self) -> bool {
        matches!(self, Self::Schema(_))
    }

    fn describe(&self, db: &Path) -> String {
        match self {
            Self::Missing => format!("the state database {} is missing", db.display()),
            Self::ZeroBytes => format!("the state database {} is empty (0 bytes)", db.display()),
            Self::NoSchema => format!(
                "the state database {} holds no cluster state (no schema: its write-ahead log \
                 {}-wal was lost or never checkpointed into it)",
                db.display(),
                db.display()
            ),
            Self::Schema(v) => format!(
                "the state database {} holds a cluster (schema version {v})",
                db.display()
            ),
        }
    }
}

/// Looks at a state database without creating or migrating it.
pub fn inspect(db: &Path) -> anyhow::Result<Contents> {
    let meta = match std::fs::metadata(db) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Contents::Missing),
        Err(e) => return Err(e).with_context(|| format!("failed to stat {}", db.display())),
    };
    if meta.len() == 0 {
        return Ok(Contents::ZeroBytes);
    }
    let version = maintenance::schema_version(db)?;
    Ok(if version == 0 {
        Contents::NoSchema
    } else {
        Contents::Schema(version)
    })
}

/// Refuses to start on a data dir that a cluster lived in but whose database is missing or
/// empty. A data dir with no such signs is new and initialises as a new cluster.
pub fn check_before_open(dir: &Path) -> anyhow::Result<()> {
    let signs = Signs::find(dir)?;
    if !signs.any() {
        return Ok(());
    }
    let db = dir.join(STATE_DB);
    let contents = inspect(&db)?;
    if contents.has_state() {
        return Ok(());
    }
    bail!(
        "refusing to start: {}, but {} shows that a cluster lived in data dir {}; starting would \
         silently create a new, empty cluster in which every existing token is unknown\n\
         hint: restore the latest backup with `csivol-server restore --from BACKUP \
         --data-dir {}`; to start a new cluster instead, move {} away",
        contents.describe(&db),
        signs.describe(dir),
        dir.display(),
        dir.display(),
        dir.display(),
    )
}

/// `PRAGMA integrity_check` over the data dir's database (if it has one yet): refuses a
/// damaged database, naming what SQLite found.
pub fn integrity_check(dir: &Path) -> anyhow::Result<()> {
    let db = dir.join(STATE_DB);
    if !inspect(&db)?.has_state() {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let hint = format!(
        "hint: restore the latest backup with `csivol-server restore --from BACKUP \
         --data-dir {} --force` (the damaged database is kept aside)",
        dir.display()
    );
    match maintenance::integrity_check(&db) {
        Ok(rows) if rows == ["ok"] => {
            tracing::info!(
                path = %db.display(),
                took = ?started.elapsed(),
                "the state database passed its integrity check"
            );
            Ok(())
        }
        Ok(rows) => bail!(
            "the state database {} failed its integrity check: {}\n{hint}",
            db.display(),
            rows.join("; ")
        ),
        Err(e) => bail!(
            "the state database {} failed its integrity check: {e}\n{hint}",
            db.display()
        ),
    }
}

/// After the database is open: writes its cluster id beside it, or refuses a database that
/// belongs to another cluster than the data dir.
pub fn check_after_open(dir: &Path, id: &str) -> anyhow::Result<()> {
    let path = dir.join(CLUSTER_ID_FILE);
    match Signs::find(dir)?.cluster_id {
        Some(found) if found == id => Ok(()),
        Some(found) => bail!(
            "refusing to start: the state database {} belongs to cluster {id}, but data dir {} \
             belongs to cluster {found} ({})\n\
             hint: if this database is the one to keep, restore it with `csivol-server \
             restore --from {} --data-dir {} --force`; otherwise put back the database of cluster {found}",
            dir.join(STATE_DB).display(),
            dir.display(),
            path.display(),
            dir.join(STATE_DB).display(),
            dir.display(),
        ),
        None => write_id(dir, id),
    }
}

/// Writes `cluster.id` durably (temp file, fsync, rename).
pub fn write_id(dir: &Path, id: &str) -> anyhow::Result<()> {
    let path = dir.join(CLUSTER_ID_FILE);
    modes::replace_private(&path, format!("{id}\n").as_bytes(), Durability::Synced)
        .with_context(|| format!("failed to write {}", path.display()))
}

pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Takes the data dir's lock, held for as long as the returned fd lives.
pub fn lock(dir: &Path) -> anyhow::Result<OwnedFd> {
    match try_lock(dir)? {
        Some(fd) => Ok(fd),
        None => bail!(
            "another csivol server is running on data dir {} (it holds {})\n\
             hint: stop that server first, or give this one another --data-dir",
            dir.display(),
            dir.join(LOCK_FILE).display()
        ),
    }
}

/// The data dir's lock, or `None` when a running server holds it.
pub fn try_lock(dir: &Path) -> anyhow::Result<Option<OwnedFd>> {
    use rustix::fs::{FlockOperation, Mode, OFlags, flock, open};
    let path: PathBuf = dir.join(LOCK_FILE);
    let fd = open(
        &path,
        OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .with_context(|| format!("failed to open {}", path.display()))?;
    match flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(fd)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("failed to lock {}", path.display())),
    }
}

/// The data dir is its owner's only (0700), and so is every file in it (0600): it holds
/// the secrets key, the operator token and the state database.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    modes::dir_logged(dir, 0o700, "server data dir")
        .with_context(|| format!("failed to create data dir {}", dir.display()))?;
    modes::files_in(dir)
        .with_context(|| format!("failed to tighten the files in {}", dir.display()))
}
