//! A claim's drift in SQLite: the claims' `drift` column (JSON, `model::Drift`), and its
//! old form, the claim's error `drift: WHY`, where the schema has no such column.
//!
//! The column comes with one schema migration, which turns the old form of the claims it
//! finds into the column. With the etcd store a server may run on the schema before it
//! until `upgrade finalize`: then a drift is written in the old form, which a server of
//! the previous release reads as it always did, and read back from it.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::model::Drift;
use crate::store::sqlite::writer::WriteCtx;

/// A claim's columns on the schema before its drift had one ([`claim_columns`]
/// chooses).
pub const CLAIM_COLUMNS: &str = "volume, alloc, node, mode, state, target_path, error, next_retry_at, created_at, updated_at, modify_index, \
     waiting, waiting_since, waiting_timeout_ms, condition, ttl_ms, expires_at, labels, release_pending";
/// A claim's columns with its drift and its mount (one schema version brings both).
pub const CLAIM_COLUMNS_WITH_DRIFT: &str = "volume, alloc, node, mode, state, target_path, error, next_retry_at, created_at, updated_at, modify_index, \
     waiting, waiting_since, waiting_timeout_ms, condition, ttl_ms, expires_at, labels, release_pending, drift, mount";

/// Whether the schema has the column (asked of the connection itself: a mirror migrated in
/// place by `upgrade finalize` has it from that moment on).
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_column(conn, "claims", "drift")
}

/// The columns of a claim that `ClaimRow::from_row` reads, on this connection's schema.
pub fn claim_columns(conn: &Connection) -> ApiResult<&'static str> {
    Ok(if kept(conn)? {
        CLAIM_COLUMNS_WITH_DRIFT
    } else {
        CLAIM_COLUMNS
    })
}

/// Records `drift` on a claim: its error (and next retry) is cleared, the drift stands in
/// for it, as the old form did.
pub fn set(ctx: &WriteCtx<'_>, volume: &str, alloc: &str, drift: &Drift) -> ApiResult<()> {
    let column = kept(ctx.tx)?;
    if column {
        exec(
            ctx.tx,
            "UPDATE claims SET drift = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2, \
             modify_index = ?3 WHERE volume = ?4 AND alloc = ?5",
            params![
                serde_json::to_string(drift).map_err(|e| ApiError::internal(e.to_string()))?,
                ctx.now,
                ctx.index as i64,
                volume,
                alloc
            ],
        )
    } else {
        exec(
            ctx.tx,
            "UPDATE claims SET error = ?1, next_retry_at = NULL, updated_at = ?2, \
             modify_index = ?3 WHERE volume = ?4 AND alloc = ?5",
            params![drift.said(), ctx.now, ctx.index as i64, volume, alloc],
        )
    }?;
    Ok(())
}

/// What `set_claim_state` adds to its statement on this schema: a claim that leaves for
/// `ready` or `releasing` drifts no more (as its error, which the old form was, goes).
pub fn cleared_with_state(conn: &Connection) -> ApiResult<&'static str> {
    Ok(if kept(conn)? {
        ", drift = CASE WHEN ?1 IN ('ready', 'releasing') THEN NULL ELSE drift END"
    } else {
        ""
    })
}

/// A claim row's drift and error as `ClaimRow` holds them: the column's drift, with the
/// error it shows where no other error replaced it; on the schema before, the drift the
/// error's old form says.
pub fn decode(
    column: Option<Option<String>>,
    error: Option<String>,
    updated_at: i64,
) -> (Option<Drift>, Option<String>) {
    match column {
        Some(stored) => {
            let drift: Option<Drift> = stored.and_then(|s| serde_json::from_str(&s).ok());
            let error = error.or_else(|| drift.as_ref().map(Drift::said));
            (drift, error)
        }
        None => (
            error
                .as_deref()
                .and_then(|e| Drift::from_said(e, updated_at)),
            error,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::model::ClaimRow;
    use crate::store::sqlite::db;
    use crate::store::sqlite::migrations::{schema_version, version_of};
    use crate::store::{Snapshot, Txn};
    use csivol_api::{ClaimState, DriftFound};

    /// The schema version that brings the column.
    fn theirs() -> i64 {
        version_of("ADD COLUMN drift").expect("the migration")
    }

    fn temp_db(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "csivol-drift-{name}-{}-{}",
            std::process::id(),
            Clock::wall().now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        (dir.join("state.db"), dir)
    }

    fn claim(conn: &Connection, alloc: &str) -> ClaimRow {
        conn.claim("v", alloc).unwrap().expect("the claim")
    }

    /// A database whose claims an older csivol recorded drifted, in their error, migrates
    /// to the column: the same words shown, what found each drift told apart, every row
    /// kept with its id.
    #[test]
    fn claims_recorded_drifted_in_their_error_migrate_to_the_field() {
        let (path, dir) = temp_db("migrate");
        let before = theirs() - 1;
        {
            let (conn, _) = db::open_at(&path, before).unwrap();
            conn.execute_batch(
                "INSERT INTO claims (volume, alloc, node, mode, state, error, created_at, updated_at, modify_index) VALUES
                   ('v', 'a', 'n1', 'write', 'publishing', 'drift: target /t/v/a is not a mount point', 1, 10, 5),
                   ('v', 'b', 'n1', 'read', 'publishing', 'drift: node n1 registered without it mounted', 2, 20, 6),
                   ('v', 'c', 'n1', 'read', 'blocked', 'drift: node n1 came back without it mounted', 3, 30, 7),
                   ('v', 'd', 'n1', 'read', 'publishing', 'UNAVAILABLE: the plugin is busy', 4, 40, 8),
                   ('v', 'e', 'n1', 'read', 'ready', NULL, 5, 50, 9);",
            )
            .unwrap();
            assert!(!kept(&conn).unwrap(), "not before its migration");
        }
        let ids = |conn: &Connection| -> Vec<(String, i64)> {
            let mut s = conn
                .prepare("SELECT alloc, rowid FROM claims ORDER BY alloc")
                .unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let (conn, _) = db::open_at(&path, before).unwrap();
        let was = ids(&conn);
        let shown: Vec<Option<String>> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|a| claim(&conn, a).error)
            .collect();
        drop(conn);

        let (conn, _) = db::open(&path).unwrap();
        assert!(kept(&conn).unwrap());
        assert_eq!(ids(&conn), was, "every row kept with its id");
        let stored: Vec<(Option<String>, Option<String>)> = {
            let mut s = conn
                .prepare("SELECT error, drift FROM claims ORDER BY alloc")
                .unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        assert_eq!(
            stored[0].0, None,
            "the drift is no longer kept in the error"
        );
        assert_eq!(
            stored[3],
            (Some("UNAVAILABLE: the plugin is busy".into()), None),
            "another error stays one"
        );
        let drift = |alloc: &str| claim(&conn, alloc).drift;
        assert_eq!(
            drift("a"),
            Some(Drift {
                found: DriftFound::Check,
                at: 10,
                reason: "target /t/v/a is not a mount point".into()
            })
        );
        assert_eq!(drift("b").map(|d| d.found), Some(DriftFound::Registration));
        assert_eq!(
            drift("c").map(|d| (d.found, d.at)),
            Some((DriftFound::Return, 30))
        );
        assert_eq!(drift("d"), None);
        assert_eq!(drift("e"), None);
        let now: Vec<Option<String>> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|a| claim(&conn, a).error)
            .collect();
        assert_eq!(now, shown, "each claim's error shows what it showed");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// With the etcd store a server runs on the schema before the column until `upgrade
    /// finalize`: a drift is then written in the old form, which a server of the previous
    /// release reads, and read back typed; once migrated in place, in the column. Either
    /// way the claim shows the same error, and leaving for `ready` ends the drift.
    #[test]
    fn below_its_schema_a_drift_is_kept_in_the_old_form() {
        let (path, dir) = temp_db("gate");
        for (schema, column) in [(theirs() - 1, false), (schema_version(), true)] {
            let (mut conn, index) = db::open_at(&path, schema).unwrap();
            conn.execute(
                "INSERT OR REPLACE INTO claims (volume, alloc, node, mode, state, created_at, updated_at, modify_index) \
                 VALUES ('v', 'a', 'n1', 'write', 'publishing', 1, 1, 1)",
                [],
            )
            .unwrap();
            let tx = conn.transaction().unwrap();
            let mut ctx = WriteCtx::new(&tx, index + 1, Clock::wall().now_ms());
            assert_eq!(kept(ctx.tx).unwrap(), column);
            let d = Drift {
                found: DriftFound::Registration,
                at: ctx.now,
                reason: "node n1 registered without it mounted".into(),
            };
            ctx.set_claim_drift("v", "a", &d).unwrap();
            let (error, stored): (Option<String>, Option<String>) = ctx
                .tx
                .query_row(
                    &format!(
                        "SELECT error, {} FROM claims WHERE alloc = 'a'",
                        if column { "drift" } else { "NULL" }
                    ),
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            if column {
                assert_eq!(error, None);
                assert!(stored.is_some_and(|s| s.contains("registration")));
            } else {
                assert_eq!(
                    error.as_deref(),
                    Some("drift: node n1 registered without it mounted"),
                    "the previous release's form"
                );
            }
            let c = ctx.claim("v", "a").unwrap().unwrap();
            assert_eq!(c.drift.as_ref(), Some(&d));
            assert_eq!(
                c.error.as_deref(),
                Some("drift: node n1 registered without it mounted")
            );
            ctx.set_claim_state("v", "a", ClaimState::Ready).unwrap();
            let c = ctx.claim("v", "a").unwrap().unwrap();
            assert_eq!((c.drift, c.error), (None, None));
            drop(ctx);
            drop(tx);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
