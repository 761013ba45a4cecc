//! What the server does to its database file outside the writer: look at it before opening
//! it, check its integrity, and seal every secret again under a new key while stopped.

use std::path::Path;

use anyhow::Context;
use rusqlite::{Connection, OpenFlags, params};

/// The schema version (`user_version`) of the database at `db`, opened without creating
/// or migrating it.
pub fn schema_version(db: &Path) -> anyhow::Result<i64> {
    // Read-write without create: a WAL database needs its `-shm` to be read.
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .with_context(|| format!("failed to open the state database {}", db.display()))?;
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .with_context(|| format!("failed to read the state database {}", db.display()))
}

/// What `PRAGMA integrity_check` finds (`["ok"]` when nothing), at most 20 problems.
pub fn integrity_check(db: &Path) -> Result<Vec<String>, String> {
    let found: rusqlite::Result<Vec<String>> = (|| {
        let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        let mut stmt = conn.prepare("PRAGMA integrity_check(20)")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.collect()
    })();
    found.map_err(|e| e.to_string())
}

/// With the server stopped: every volume's stored secrets replaced by what `reseal` makes
/// of them, and the key check value by `check`, in one transaction; then the WAL folded
/// into the database file. Returns how many volumes have secrets.
pub fn reseal_secrets(
    db: &Path,
    reseal: impl Fn(&str, &str) -> anyhow::Result<String>,
    check: &str,
) -> anyhow::Result<usize> {
    let (mut conn, _) = crate::store::sqlite::db::open(db)?;
    let rows: Vec<(String, String)> = {
        let mut stmt = conn.prepare("SELECT name, secrets FROM volumes WHERE secrets != '{}'")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?
    };
    let tx = conn.transaction()?;
    for (name, stored) in &rows {
        tx.execute(
            "UPDATE volumes SET secrets = ?2 WHERE name = ?1",
            params![name, reseal(name, stored)?],
        )?;
    }
    tx.execute("UPDATE secrets_check SET sealed = ?1 WHERE id = 1", [check])?;
    tx.commit()?;
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
    Ok(rows.len())
}
