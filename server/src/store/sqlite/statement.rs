//! The statements every file of the SQLite store runs alike, a change and a list of
//! strings, each through the connection's statement cache.

use rusqlite::Connection;

use crate::error::ApiResult;

/// Runs a statement that changes rows; how many it changed.
pub(super) fn exec(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> ApiResult<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params)?)
}

/// The first column of every row a query returns, as strings.
pub(super) fn strings(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> ApiResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt
        .query_map(params, |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}
