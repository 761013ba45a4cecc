//! The agent's own memory, `DIR/agent.db` (SQLite): every staging and publication it may
//! have made, written before the plugin call and updated after it, and the self-fences it
//! has to report. Reads come from an in-memory mirror; every change goes to the file first.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, params};

use csivol_api::OwnershipChange;
use csivol_rules::agent::observed::Observation;

/// How long start-up waits for a previous agent process on the same data dir to let go.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// 1: stagings, publications, fences. 2: what the plugin made at each path (`observed`,
/// JSON) and whether a staging is of a block volume.
///
/// What an observation holds grows inside its JSON, not as columns: a field added later
/// (a block device's identity) has a default, so a record written before reads with it
/// empty and is completed at its next check, and an older agent reads a newer record,
/// skipping what it does not know. Such a change needs no new version.
const SCHEMA_VERSION: i32 = 4;
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// Writes between two checkpoints of agent.db's WAL: a few hundred KiB of WAL at most.
const CHECKPOINT_EVERY: u32 = 256;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("failed to open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("failed to create {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to lock {}", path.display())]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "another csivol-agent{} is using the data dir {}; stop it first{} or choose another --data-dir",
        holder.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        dir.display(),
        holder.map(|p| format!(" (`kill {p}`)")).unwrap_or_default()
    )]
    Busy { dir: PathBuf, holder: Option<u32> },
    #[error("agent.db was written by a newer csivol-agent (schema {0}); upgrade this agent")]
    Newer(i32),
    #[error("failed to write agent.db")]
    Sql(#[from] rusqlite::Error),
}

// The records are plain types of the agent's decisions (pure, `csivol_rules::agent`); this
// module stores them.
use csivol_rules::agent::records::{
    PublicationRecord, PublishState, StageState, StagedMount, StagingRecord,
};

/// A record's state from its column, or an error naming the text that is no state.
fn state<T>(s: &str, parse: fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    parse(s).ok_or_else(|| {
        rusqlite::Error::InvalidColumnType(
            0,
            format!("unknown state `{s}`"),
            rusqlite::types::Type::Text,
        )
    })
}

/// A self-fence: when it began, what it took down, and whether the server has heard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    pub id: i64,
    pub at_ms: u64,
    pub volumes: Vec<String>,
    pub completed_ms: Option<u64>,
    pub reported_ms: Option<u64>,
}

#[derive(Debug, Default)]
struct Mirror {
    stagings: BTreeMap<String, StagingRecord>,
    publications: BTreeMap<(String, String), PublicationRecord>,
}

#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
    /// A second connection that only checkpoints the WAL, on a blocking thread, so that
    /// the fsyncs of a checkpoint never hold up a write (see [`Store::call`]).
    checkpointer: Arc<Mutex<Connection>>,
    /// Writes since the last checkpoint was started.
    writes: AtomicU32,
    checkpointing: Arc<AtomicBool>,
    mirror: Mutex<Mirror>,
    // Held for the life of the store: one agent per data dir.
    _lock: OwnedFd,
}

impl Store {
    /// Opens (creating if needed) `DIR/agent.db` under an exclusive lock on `DIR/agent.lock`.
    /// Also says whether the machine rebooted since the last run (every mount is gone then).
    pub async fn open(dir: &Path) -> Result<(Self, bool), StoreError> {
        let lock = lock(dir).await?;
        let path = dir.join("agent.db");
        let open_err = |source| StoreError::Open {
            path: path.clone(),
            source,
        };
        // 0600 before SQLite opens it: its -wal and -shm files get the same mode.
        csivol_daemon::modes::create_file(&path).map_err(|source| StoreError::Create {
            path: path.clone(),
            source,
        })?;
        let conn = Connection::open(&path).map_err(open_err)?;
        // WAL with NORMAL sync: a committed intent is in the WAL before the plugin call it
        // announces, so it survives the agent being killed at any point. What NORMAL gives
        // up is the last commits on a machine crash, and a machine crash takes the node's
        // mounts with it: after a reboot (a new boot id) every record is uncertain anyway
        // and is checked against the mount table. An fsync per record would cap a node at
        // a few hundred steps a second on ordinary disks.
        //
        // The WAL is not checkpointed by the commit that fills it (`wal_autocheckpoint = 0`)
        // but every CHECKPOINT_EVERY writes by `checkpointer`, on a blocking thread.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;
             PRAGMA wal_autocheckpoint = 0;",
        )
        .map_err(open_err)?;
        let version: i32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(open_err)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::Newer(version));
        }
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS stagings (
                 volume TEXT PRIMARY KEY,
                 plugin TEXT NOT NULL,
                 external_id TEXT NOT NULL,
                 path TEXT NOT NULL,
                 state TEXT NOT NULL,
                 error TEXT,
                 updated_ms INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS publications (
                 volume TEXT NOT NULL,
                 alloc TEXT NOT NULL,
                 plugin TEXT NOT NULL,
                 external_id TEXT NOT NULL,
                 target TEXT NOT NULL,
                 staging TEXT,
                 block INTEGER NOT NULL,
                 state TEXT NOT NULL,
                 error TEXT,
                 updated_ms INTEGER NOT NULL,
                 PRIMARY KEY (volume, alloc));
             CREATE TABLE IF NOT EXISTS fences (
                 id INTEGER PRIMARY KEY,
                 at_ms INTEGER NOT NULL,
                 volumes TEXT NOT NULL,
                 completed_ms INTEGER,
                 reported_ms INTEGER);",
        )
        .map_err(open_err)?;
        if version < 2 {
            // Records written before keep `observed` NULL: they are observed once, at the
            // first check (see `mounts`).
            conn.execute_batch(
                "ALTER TABLE stagings ADD COLUMN block INTEGER NOT NULL DEFAULT 0;
                 ALTER TABLE stagings ADD COLUMN observed TEXT;
                 ALTER TABLE publications ADD COLUMN observed TEXT;
                 PRAGMA user_version = 2;",
            )
            .map_err(open_err)?;
        }
        if version < 3 {
            // What the agent did to a publication's ownership to give it its claim's group:
            // kept so that a restart neither does it again (a recursive change may be
            // long) nor forgets it was done. And what a volume was staged with that holds
            // for its whole file system (the group the plugin applies, the SELinux
            // context), which every publication from that staging must agree with.
            conn.execute_batch(
                "CREATE TABLE IF NOT EXISTS ownership (
                     volume TEXT NOT NULL,
                     alloc TEXT NOT NULL,
                     gid INTEGER NOT NULL,
                     entries INTEGER NOT NULL,
                     at_ms INTEGER NOT NULL,
                     PRIMARY KEY (volume, alloc));
                 CREATE TABLE IF NOT EXISTS staging_mounts (
                     volume TEXT PRIMARY KEY,
                     mount TEXT NOT NULL);
                 PRAGMA user_version = 3;",
            )
            .map_err(open_err)?;
        }
        if version < 4 {
            // Whether the bound stopped a `recursive` ownership change, reported to the
            // server with the count. Records written before say it did not: the agent
            // logged it then, and a bounded change is not repeated to find out.
            conn.execute_batch(
                "ALTER TABLE ownership ADD COLUMN bounded INTEGER NOT NULL DEFAULT 0;
                 PRAGMA user_version = 4;",
            )
            .map_err(open_err)?;
        }
        let rebooted = check_boot(&conn).map_err(open_err)?;
        let mirror = load(&conn).map_err(open_err)?;
        let checkpointer = Connection::open(&path).map_err(open_err)?;
        checkpointer
            .execute_batch("PRAGMA synchronous = NORMAL; PRAGMA busy_timeout = 5000;")
            .map_err(open_err)?;
        Ok((
            Self {
                conn: Mutex::new(conn),
                checkpointer: Arc::new(Mutex::new(checkpointer)),
                writes: AtomicU32::new(0),
                checkpointing: Arc::new(AtomicBool::new(false)),
                mirror: Mutex::new(mirror),
                _lock: lock,
            },
            rebooted,
        ))
    }

    /// Runs `f` on the connection, on the caller's thread. A commit does not wait for the
    /// disk (WAL with `synchronous = NORMAL`, see [`Store::open`]): it is a write into the
    /// WAL, cheaper than handing the statement to a blocking thread and back, which the
    /// agent did before for every record. What does wait for the disk, the checkpoint's
    /// fsyncs, runs on a blocking thread every CHECKPOINT_EVERY writes (a write that comes
    /// meanwhile waits for it, see [`Store::checkpoint`]).
    async fn call<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T>,
    {
        let result = {
            let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            f(&conn).map_err(StoreError::Sql)
        };
        let writes = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if writes >= CHECKPOINT_EVERY {
            self.checkpoint(writes >= CHECKPOINT_EVERY * 2);
        }
        result
    }

    /// Starts a checkpoint on the second connection unless one is running: it copies the
    /// WAL into the database (fsyncing both) while the agent goes on. RESTART, not
    /// PASSIVE: a PASSIVE checkpoint overtaken by writes never lets the WAL start over,
    /// and under steady writes it would grow without end. RESTART makes a write that
    /// comes while it runs wait for it (`busy_timeout`), as the commit that ran SQLite's
    /// automatic checkpoint used to.
    ///
    /// A checkpoint handed to a blocking thread that a busy machine does not run for a
    /// while would let the WAL grow meanwhile: past twice CHECKPOINT_EVERY writes
    /// (`overdue`), the writer checkpoints on its own thread, so the bound holds however
    /// late the blocking thread comes.
    fn checkpoint(&self, overdue: bool) {
        if self.checkpointing.swap(true, Ordering::AcqRel) {
            if overdue {
                let conn = self.checkpointer.lock().unwrap_or_else(|e| e.into_inner());
                self.writes.store(0, Ordering::Relaxed);
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
                    tracing::warn!("failed to checkpoint agent.db: {e}");
                }
            }
            return;
        }
        self.writes.store(0, Ordering::Relaxed);
        let conn = Arc::clone(&self.checkpointer);
        let running = Arc::clone(&self.checkpointing);
        let run = move || {
            let conn = conn.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(())) {
                tracing::warn!("failed to checkpoint agent.db: {e}");
            }
            running.store(false, Ordering::Release);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(run)),
            Err(_) => run(),
        }
    }

    fn mirror(&self) -> std::sync::MutexGuard<'_, Mirror> {
        self.mirror.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub async fn put_staging(
        &self,
        rec: &StagingRecord,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let r = rec.clone();
        self.call(move |c| {
            c.prepare_cached(
                "INSERT INTO stagings
                     (volume, plugin, external_id, path, state, error, updated_ms, block, observed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (volume) DO UPDATE SET plugin = ?2, external_id = ?3, path = ?4,
                     state = ?5, error = ?6, updated_ms = ?7, block = ?8, observed = ?9",
            )?
            .execute(params![
                r.volume,
                r.plugin,
                r.external_id,
                r.path.to_string_lossy(),
                r.state.as_str(),
                error,
                now_ms() as i64,
                r.block,
                observed_json(r.observed.as_ref()),
            ])
        })
        .await?;
        self.mirror()
            .stagings
            .insert(rec.volume.clone(), rec.clone());
        Ok(())
    }

    pub async fn delete_staging(&self, volume: &str) -> Result<(), StoreError> {
        let v = volume.to_owned();
        self.call(move |c| {
            c.prepare_cached("DELETE FROM staging_mounts WHERE volume = ?1")?
                .execute([&v])?;
            c.prepare_cached("DELETE FROM stagings WHERE volume = ?1")?
                .execute([v])
        })
        .await?;
        self.mirror().stagings.remove(volume);
        Ok(())
    }

    /// What `volume` was staged with for its whole file system, if recorded.
    pub async fn staging_mount(&self, volume: &str) -> Result<Option<StagedMount>, StoreError> {
        let v = volume.to_owned();
        let text = self
            .call(move |c| {
                match c
                    .prepare_cached("SELECT mount FROM staging_mounts WHERE volume = ?1")?
                    .query_row([v], |r| r.get::<_, String>(0))
                {
                    Ok(t) => Ok(Some(t)),
                    Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .await?;
        Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// Records what `volume` is staged with for its whole file system, before the call.
    pub async fn put_staging_mount(&self, volume: &str, m: &StagedMount) -> Result<(), StoreError> {
        let (v, text) = (
            volume.to_owned(),
            serde_json::to_string(m).expect("a staged mount serialises"),
        );
        self.call(move |c| {
            c.prepare_cached(
                "INSERT INTO staging_mounts (volume, mount) VALUES (?1, ?2)
                 ON CONFLICT (volume) DO UPDATE SET mount = ?2",
            )?
            .execute([v, text])
        })
        .await?;
        Ok(())
    }

    pub async fn put_publication(
        &self,
        rec: &PublicationRecord,
        error: Option<String>,
    ) -> Result<(), StoreError> {
        let r = rec.clone();
        self.call(move |c| {
            c.prepare_cached(
                "INSERT INTO publications
                     (volume, alloc, plugin, external_id, target, staging, block, state, error,
                      updated_ms, observed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (volume, alloc) DO UPDATE SET plugin = ?3, external_id = ?4,
                     target = ?5, staging = ?6, block = ?7, state = ?8, error = ?9,
                     updated_ms = ?10, observed = ?11",
            )?
            .execute(params![
                r.volume,
                r.alloc,
                r.plugin,
                r.external_id,
                r.target.to_string_lossy(),
                r.staging.as_ref().map(|p| p.to_string_lossy().into_owned()),
                r.block,
                r.state.as_str(),
                error,
                now_ms() as i64,
                observed_json(r.observed.as_ref()),
            ])
        })
        .await?;
        self.mirror()
            .publications
            .insert((rec.volume.clone(), rec.alloc.clone()), rec.clone());
        Ok(())
    }

    pub async fn delete_publication(&self, volume: &str, alloc: &str) -> Result<(), StoreError> {
        let (v, a) = (volume.to_owned(), alloc.to_owned());
        self.call(move |c| {
            c.prepare_cached("DELETE FROM ownership WHERE volume = ?1 AND alloc = ?2")?
                .execute([&v, &a])?;
            c.prepare_cached("DELETE FROM publications WHERE volume = ?1 AND alloc = ?2")?
                .execute([v, a])
        })
        .await?;
        self.mirror()
            .publications
            .remove(&(volume.to_owned(), alloc.to_owned()));
        Ok(())
    }

    /// The group the agent gave a publication's target (`ownership`) and what the change
    /// did, if it gave one.
    pub async fn ownership(
        &self,
        volume: &str,
        alloc: &str,
    ) -> Result<Option<(u32, OwnershipChange)>, StoreError> {
        let (v, a) = (volume.to_owned(), alloc.to_owned());
        self.call(move |c| {
            match c
                .prepare_cached(
                    "SELECT gid, entries, bounded FROM ownership WHERE volume = ?1 AND alloc = ?2",
                )?
                .query_row([v, a], |r| {
                    Ok((
                        r.get::<_, u32>(0)?,
                        OwnershipChange {
                            entries: r.get::<_, i64>(1)?.max(0) as u64,
                            bounded: r.get(2)?,
                        },
                    ))
                }) {
                Ok(found) => Ok(Some(found)),
                Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Records that the agent gave a publication's target group `gid`, and what the change
    /// did.
    pub async fn record_ownership(
        &self,
        volume: &str,
        alloc: &str,
        gid: u32,
        change: OwnershipChange,
    ) -> Result<(), StoreError> {
        let (v, a) = (volume.to_owned(), alloc.to_owned());
        self.call(move |c| {
            c.prepare_cached(
                "INSERT INTO ownership (volume, alloc, gid, entries, bounded, at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (volume, alloc) DO UPDATE
                     SET gid = ?3, entries = ?4, bounded = ?5, at_ms = ?6",
            )?
            .execute(params![
                v,
                a,
                gid,
                change.entries.min(i64::MAX as u64) as i64,
                change.bounded,
                now_ms() as i64
            ])
        })
        .await?;
        Ok(())
    }

    pub fn staging(&self, volume: &str) -> Option<StagingRecord> {
        self.mirror().stagings.get(volume).cloned()
    }

    pub fn publications_of(&self, volume: &str) -> Vec<PublicationRecord> {
        self.mirror()
            .publications
            .range((volume.to_owned(), String::new())..)
            .take_while(|((v, _), _)| v == volume)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Whether any publication was made from `staging`: then it must not be unstaged.
    pub fn staging_in_use(&self, staging: &Path) -> bool {
        self.mirror()
            .publications
            .values()
            .any(|p| p.staging.as_deref() == Some(staging))
    }

    pub fn stagings(&self) -> Vec<StagingRecord> {
        self.mirror().stagings.values().cloned().collect()
    }

    pub fn publications(&self) -> Vec<PublicationRecord> {
        self.mirror().publications.values().cloned().collect()
    }

    /// Every volume with something recorded on this node.
    pub fn volumes(&self) -> BTreeSet<String> {
        let m = self.mirror();
        m.stagings
            .keys()
            .cloned()
            .chain(m.publications.keys().map(|(v, _)| v.clone()))
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        let m = self.mirror();
        m.stagings.is_empty() && m.publications.is_empty()
    }

    /// Records that a self-fence began, and what it takes down.
    pub async fn record_fence(
        &self,
        at_ms: u64,
        volumes: Vec<String>,
    ) -> Result<Fence, StoreError> {
        let json = serde_json::to_string(&volumes).expect("strings serialise");
        let id = self
            .call(move |c| {
                c.execute(
                    "INSERT INTO fences (at_ms, volumes) VALUES (?1, ?2)",
                    params![at_ms as i64, json],
                )?;
                Ok(c.last_insert_rowid())
            })
            .await?;
        Ok(Fence {
            id,
            at_ms,
            volumes,
            completed_ms: None,
            reported_ms: None,
        })
    }

    pub async fn complete_fence(&self, id: i64) -> Result<(), StoreError> {
        let at = now_ms() as i64;
        self.call(move |c| {
            c.execute(
                "UPDATE fences SET completed_ms = ?1 WHERE id = ?2 AND completed_ms IS NULL",
                params![at, id],
            )
        })
        .await?;
        Ok(())
    }

    pub async fn fence_reported(&self, id: i64) -> Result<(), StoreError> {
        let at = now_ms() as i64;
        self.call(move |c| {
            c.execute(
                "UPDATE fences SET reported_ms = ?1 WHERE id = ?2",
                params![at, id],
            )
        })
        .await?;
        Ok(())
    }

    /// The latest fence the server has not heard of yet, if any.
    pub async fn open_fence(&self) -> Result<Option<Fence>, StoreError> {
        self.call(|c| {
            c.query_row(
                "SELECT id, at_ms, volumes, completed_ms, reported_ms FROM fences
                 WHERE reported_ms IS NULL ORDER BY id DESC LIMIT 1",
                [],
                fence_row,
            )
            .optional()
        })
        .await
    }

    /// Every fence, oldest first (for operators and tests).
    pub async fn fences(&self) -> Result<Vec<Fence>, StoreError> {
        self.call(|c| {
            let mut stmt = c.prepare(
                "SELECT id, at_ms, volumes, completed_ms, reported_ms FROM fences ORDER BY id",
            )?;
            stmt.query_map([], fence_row)?.collect()
        })
        .await
    }
}

fn fence_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Fence> {
    let volumes: String = r.get(2)?;
    Ok(Fence {
        id: r.get(0)?,
        at_ms: r.get::<_, i64>(1)? as u64,
        volumes: serde_json::from_str(&volumes).unwrap_or_default(),
        completed_ms: r.get::<_, Option<i64>>(3)?.map(|v| v as u64),
        reported_ms: r.get::<_, Option<i64>>(4)?.map(|v| v as u64),
    })
}

fn load(conn: &Connection) -> rusqlite::Result<Mirror> {
    let mut mirror = Mirror::default();
    let mut stmt = conn.prepare(
        "SELECT volume, plugin, external_id, path, state, block, observed FROM stagings",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(StagingRecord {
            volume: r.get(0)?,
            plugin: r.get(1)?,
            external_id: r.get(2)?,
            path: PathBuf::from(r.get::<_, String>(3)?),
            state: state(&r.get::<_, String>(4)?, StageState::parse)?,
            block: r.get(5)?,
            observed: parse_observed(r.get(6)?),
        })
    })?;
    for rec in rows {
        let rec = rec?;
        mirror.stagings.insert(rec.volume.clone(), rec);
    }
    let mut stmt = conn.prepare(
        "SELECT volume, alloc, plugin, external_id, target, staging, block, state, observed
         FROM publications",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(PublicationRecord {
            volume: r.get(0)?,
            alloc: r.get(1)?,
            plugin: r.get(2)?,
            external_id: r.get(3)?,
            target: PathBuf::from(r.get::<_, String>(4)?),
            staging: r.get::<_, Option<String>>(5)?.map(PathBuf::from),
            block: r.get(6)?,
            state: state(&r.get::<_, String>(7)?, PublishState::parse)?,
            observed: parse_observed(r.get(8)?),
        })
    })?;
    for rec in rows {
        let rec = rec?;
        mirror
            .publications
            .insert((rec.volume.clone(), rec.alloc.clone()), rec);
    }
    Ok(mirror)
}

fn observed_json(o: Option<&Observation>) -> Option<String> {
    o.map(|o| serde_json::to_string(o).expect("observations serialise"))
}

/// An observation that does not parse (written by a newer agent, say) is treated as none:
/// the record is observed again at its first check.
fn parse_observed(text: Option<String>) -> Option<Observation> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

/// Compares the kernel's boot id with the one of the last run, and stores the current one.
fn check_boot(conn: &Connection) -> rusqlite::Result<bool> {
    let Ok(current) = std::fs::read_to_string(BOOT_ID) else {
        return Ok(false);
    };
    let current = current.trim().to_owned();
    let previous: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'boot_id'", [], |r| {
            r.get(0)
        })
        .optional()?;
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('boot_id', ?1)
         ON CONFLICT (key) DO UPDATE SET value = ?1",
        [&current],
    )?;
    Ok(previous.is_some_and(|p| p != current))
}

/// Takes the data dir's lock, waiting a little for an agent that is just exiting.
async fn lock(dir: &Path) -> Result<OwnedFd, StoreError> {
    use rustix::fs::{FlockOperation, Mode, OFlags, flock, open};
    let path = dir.join(csivol_daemon::lock::FILE);
    let fd = open(
        &path,
        OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| StoreError::Lock {
        path: path.clone(),
        source: e.into(),
    })?;
    let started = Instant::now();
    let mut said = false;
    loop {
        match flock(&fd, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                // The holder's pid, for the error a second agent on this dir gives.
                csivol_daemon::lock::record_holder(&fd).map_err(|source| StoreError::Lock {
                    path: path.clone(),
                    source,
                })?;
                return Ok(fd);
            }
            Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < LOCK_WAIT => {
                // Said at once, not only when the wait is over: a second agent started on a
                // data dir in use by mistake hears so before anything else.
                if !said {
                    said = true;
                    let holder = csivol_daemon::lock::holder_pid(&path)
                        .map(|p| format!(" (pid {p})"))
                        .unwrap_or_default();
                    tracing::warn!(
                        "another csivol-agent{holder} is using the data dir {}; waiting up to {} \
                         for it to exit (a restart's previous agent), then giving up: stop it, or \
                         choose another --data-dir",
                        dir.display(),
                        humantime::format_duration(LOCK_WAIT)
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(StoreError::Busy {
                    dir: dir.to_owned(),
                    holder: csivol_daemon::lock::holder_pid(&path),
                });
            }
            Err(e) => {
                return Err(StoreError::Lock {
                    path,
                    source: e.into(),
                });
            }
        }
    }
}

/// Wall-clock milliseconds since the Unix epoch, as the API carries times.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests;
