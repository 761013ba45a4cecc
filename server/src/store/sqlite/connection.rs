//! What every connection to the state database is set to, the writer's (`db`) and the
//! read connections (`read_pool`) alike.

use rusqlite::Connection;

/// Distinct statements the server runs; all of them stay prepared.
pub(super) const STATEMENT_CACHE: usize = 256;

/// One plan per statement whatever its parameters (SQLite's query planner stability
/// guarantee): without it SQLite prepares a cached statement again each time a parameter
/// it planned with (a bound `LIMIT ?`) is bound anew, which a listing does for every chunk
/// it reads.
pub(super) fn plan_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}
