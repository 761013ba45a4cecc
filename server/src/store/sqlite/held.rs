//! Operations held until their volume's release has finished (`HELD_FOR_RELEASE` in their
//! `not_before`): the statements that queue, release and find them.

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::ops;
use super::statement::{exec, strings};
use crate::error::ApiResult;
use crate::model::{HELD_FOR_RELEASE, OpRow};
use csivol_rules::kinds::OpKind;

/// Queues `kind` on `volume` held, with why it waits, unless one of that kind is queued
/// for the volume already.
pub fn queue(
    tx: &Connection,
    now: i64,
    kind: OpKind,
    plugin: &str,
    volume: &str,
    payload: &str,
    why: &str,
) -> ApiResult<()> {
    let exists: Option<i64> = tx
        .prepare_cached("SELECT id FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS NULL")?
        .query_row(params![volume, kind.as_str()], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        exec(
            tx,
            "INSERT INTO ops (kind, plugin, volume, payload, created_at, not_before, error) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                kind.as_str(),
                plugin,
                volume,
                payload,
                now,
                HELD_FOR_RELEASE,
                why
            ],
        )?;
    }
    Ok(())
}

/// Makes a held operation due at `now`, its attempt unchanged.
pub fn release(tx: &Connection, now: i64, id: i64) -> ApiResult<()> {
    exec(
        tx,
        "UPDATE ops SET not_before = ?1, error = NULL WHERE id = ?2 AND not_before = ?3",
        params![now, id, HELD_FOR_RELEASE],
    )?;
    Ok(())
}

/// The held operations of `volume` and of its snapshots being created (keyed
/// `snapshot/NAME`, as `lifecycle::snapshots` queues them), by id.
pub fn of_volume(conn: &Connection, volume: &str) -> ApiResult<Vec<OpRow>> {
    ops(
        conn,
        "not_before = ?1 AND (volume = ?2 OR volume IN (SELECT 'snapshot/' || name FROM \
         snapshots WHERE volume = ?2 AND state = 'creating')) ORDER BY id",
        params![HELD_FOR_RELEASE, volume],
    )
}

/// The volumes with held operations, by name.
pub fn volumes(conn: &Connection) -> ApiResult<Vec<String>> {
    strings(
        conn,
        "SELECT DISTINCT COALESCE(s.volume, o.volume) FROM ops o LEFT JOIN snapshots s \
         ON s.name = substr(o.volume, 10) AND o.volume = 'snapshot/' || s.name \
         WHERE o.not_before = ?1 ORDER BY 1",
        [HELD_FOR_RELEASE],
    )
}
