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

use std::cell::RefCell;
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
    // The version (`user_version`) beside the cookie: two files of one name with one
    // cookie would need as many schema changes behind them, and at one version too.
    let cookie: (i64, i64) = (
        conn.prepare_cached("PRAGMA schema_version")?
            .query_row([], |r| r.get(0))?,
        conn.prepare_cached("PRAGMA user_version")?
            .query_row([], |r| r.get(0))?,
    );
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
