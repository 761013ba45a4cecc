//! What the schema of a connection's database has: a table, or a column of a table. The
//! features of one schema version are gated on them (with the etcd store a server may run
//! on the schema before until `upgrade finalize` migrates its mirror in place), and they
//! are asked on every claim's path.
//!
//! Asking SQLite itself (`pragma_table_info`, `sqlite_master`) prepares and walks a virtual
//! table at every call: a tenth of the server's CPU in a claim cycle. So an answer is kept
//! per thread for the database file and its schema cookie (`PRAGMA schema_version`, which
//! SQLite changes with every change of the schema, a migration in place included): two
//! steps of prepared statements then answer. A database without a file (in memory) is
//! asked every time.
//!
//! Those two steps still ran at every gate, a dozen times per claim cycle (5% of the
//! server's CPU in server mode). Inside one transaction that changes no schema (every
//! read and every write group: migrations run in transactions of their own) the cookie
//! cannot move: the transaction reads one snapshot of the database, its schema included,
//! and a change another connection commits meanwhile is not in it. So a thread in such a
//! transaction ([`in_transaction`]) reads the cookie at its first gate and answers the
//! others from it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use rusqlite::Connection;

use crate::error::ApiResult;

/// One question about the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Part {
    Table(&'static str),
    Column(&'static str, &'static str),
}

/// Answers of one database file at one schema cookie and version.
struct Known {
    cookie: (i64, i64),
    answers: HashMap<Part, bool>,
}

/// Databases a thread asked about, by file; a handful in a server (its state and, with
/// the etcd store, its mirror), more in a test process, so the map is emptied past a bound.
const FILES: usize = 64;

thread_local! {
    static KNOWN: RefCell<HashMap<String, Known>> = RefCell::new(HashMap::new());
    /// Whether the thread is in a transaction that changes no schema (see the module's
    /// text); the nesting of [`in_transaction`] scopes.
    static SCOPES: Cell<u32> = const { Cell::new(0) };
    /// The cookie read in the current scope, with the file it was read of.
    static SCOPED: RefCell<Option<(String, (i64, i64))>> = const { RefCell::new(None) };
}

/// Marks the thread as inside one transaction that changes no schema until the guard
/// drops: the schema cookie is read at the first gate asked in it and stands for the
/// rest. Take it after the transaction began and drop it before it ends.
pub(crate) fn in_transaction() -> Transaction {
    SCOPES.with(|s| s.set(s.get() + 1));
    Transaction(())
}

/// The guard of [`in_transaction`].
pub(crate) struct Transaction(());

impl Drop for Transaction {
    fn drop(&mut self) {
        let left = SCOPES.with(|s| {
            s.set(s.get().saturating_sub(1));
            s.get()
        });
        if left == 0 {
            SCOPED.with(|c| c.borrow_mut().take());
        }
    }
}

/// The schema cookie and version of `conn`'s database `file`: read once per
/// [`in_transaction`] scope, or at every call outside one.
fn cookie(conn: &Connection, file: &str) -> ApiResult<(i64, i64)> {
    let scoped = SCOPES.with(Cell::get) > 0;
    if scoped {
        let kept = SCOPED.with(|c| {
            c.borrow()
                .as_ref()
                .filter(|(f, _)| f == file)
                .map(|(_, cookie)| *cookie)
        });
        if let Some(cookie) = kept {
            return Ok(cookie);
        }
    }
    // The version (`user_version`) beside the cookie: two files of one name with one
    // cookie would need as many schema changes behind them, and at one version too.
    let cookie: (i64, i64) = (
        conn.prepare_cached("PRAGMA schema_version")?
            .query_row([], |r| r.get(0))?,
        conn.prepare_cached("PRAGMA user_version")?
            .query_row([], |r| r.get(0))?,
    );
    if scoped {
        SCOPED.with(|c| *c.borrow_mut() = Some((file.to_owned(), cookie)));
    }
    Ok(cookie)
}

/// Whether the schema has table `table`.
pub fn has_table(conn: &Connection, table: &'static str) -> ApiResult<bool> {
    has(conn, Part::Table(table))
}

/// Whether table `table` of the schema has column `column`.
pub fn has_column(conn: &Connection, table: &'static str, column: &'static str) -> ApiResult<bool> {
    has(conn, Part::Column(table, column))
}

fn has(conn: &Connection, part: Part) -> ApiResult<bool> {
    let file = match conn.path() {
        Some(file) if !file.is_empty() => file,
        _ => return ask(conn, part),
    };
    let cookie = cookie(conn, file)?;
    let kept = KNOWN.with(|known| {
        let known = known.borrow();
        known
            .get(file)
            .filter(|k| k.cookie == cookie)
            .and_then(|k| k.answers.get(&part).copied())
    });
    if let Some(answer) = kept {
        return Ok(answer);
    }
    let answer = ask(conn, part)?;
    KNOWN.with(|known| {
        let mut known = known.borrow_mut();
        if known.len() >= FILES && !known.contains_key(file) {
            known.clear();
        }
        let entry = known.entry(file.to_owned()).or_insert_with(|| Known {
            cookie,
            answers: HashMap::new(),
        });
        if entry.cookie != cookie {
            entry.cookie = cookie;
            entry.answers.clear();
        }
        entry.answers.insert(part, answer);
    });
    Ok(answer)
}

/// Asks SQLite itself.
fn ask(conn: &Connection, part: Part) -> ApiResult<bool> {
    Ok(match part {
        Part::Table(table) => conn
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            )?
            .query_row([table], |r| r.get(0))?,
        Part::Column(table, column) => conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2)")?
            .query_row([table, column], |r| r.get(0))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_follows_the_schema_of_its_file_as_it_changes() {
        let dir = std::env::temp_dir().join(format!("csivol-shape-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let _ = std::fs::remove_file(&path);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE claims (volume TEXT)")
            .unwrap();
        assert!(has_table(&conn, "claims").unwrap());
        assert!(!has_table(&conn, "tombstones").unwrap());
        assert!(!has_column(&conn, "claims", "drift").unwrap());

        // A migration in place, on this connection and seen from another.
        conn.execute_batch(
            "ALTER TABLE claims ADD COLUMN drift TEXT; CREATE TABLE tombstones (v TEXT)",
        )
        .unwrap();
        assert!(has_column(&conn, "claims", "drift").unwrap());
        assert!(has_table(&conn, "tombstones").unwrap());
        let other = Connection::open(&path).unwrap();
        assert!(has_column(&other, "claims", "drift").unwrap());

        // And back: a file replaced by an older one (a restore) under the same name.
        drop((conn, other));
        std::fs::remove_file(&path).unwrap();
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE claims (volume TEXT)")
            .unwrap();
        assert!(!has_column(&conn, "claims", "drift").unwrap());
        assert!(!has_table(&conn, "tombstones").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_transaction_keeps_its_cookie_and_the_next_one_reads_it_again() {
        let dir = std::env::temp_dir().join(format!("csivol-shape-scope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let _ = std::fs::remove_file(&path);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE claims (volume TEXT)")
            .unwrap();
        let other = Connection::open(&path).unwrap();

        let tx = conn.unchecked_transaction().unwrap();
        let scope = in_transaction();
        assert!(!has_column(&tx, "claims", "drift").unwrap());
        // Another connection changes the schema while the transaction reads its snapshot.
        other
            .execute_batch("ALTER TABLE claims ADD COLUMN drift TEXT; CREATE TABLE t (v)")
            .unwrap();
        assert!(!has_column(&tx, "claims", "drift").unwrap());
        assert!(!has_table(&tx, "t").unwrap());
        drop(scope);
        drop(tx);

        // The next transaction sees the change, in a scope and out of one.
        let tx = conn.unchecked_transaction().unwrap();
        let scope = in_transaction();
        assert!(has_column(&tx, "claims", "drift").unwrap());
        assert!(has_table(&tx, "t").unwrap());
        drop(scope);
        drop(tx);
        other.execute_batch("DROP TABLE t").unwrap();
        assert!(!has_table(&conn, "t").unwrap());
        drop((conn, other));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_database_in_memory_is_asked_every_time() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE claims (volume TEXT)")
            .unwrap();
        assert!(!has_column(&conn, "claims", "mount").unwrap());
        conn.execute_batch("ALTER TABLE claims ADD COLUMN mount TEXT")
            .unwrap();
        assert!(has_column(&conn, "claims", "mount").unwrap());
    }
}
