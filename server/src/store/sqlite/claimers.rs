//! Who made each claim (`claims.claimer`: the token that asked), so that a claimer's
//! claims can be counted against `[limits] claims_per_claimer`, and so that a claimer
//! token may release and renew only the claims it made.
//!
//! The column comes with one schema migration. With the etcd store a server may run on
//! the schema before it until `upgrade finalize`: then no claim records its claimer and
//! none is counted, which is how the bound is skipped during a rolling upgrade. Claims
//! recorded before the migration have no claimer and count for nobody.

use rusqlite::{Connection, OptionalExtension, params};

use super::statement::exec;
use crate::error::ApiResult;
use crate::store::Claimer;
use crate::store::sqlite::writer::WriteCtx;

/// Whether the schema has the column (asked of the connection itself: a mirror migrated in
/// place by `upgrade finalize` has it from that moment on).
pub fn recorded(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_column(conn, "claims", "claimer")
}

/// How many claims `token` holds, queued ones and those waiting in a pool's line included
/// (a claim in line is granted a member without being counted again); `None` where
/// claimers are not recorded.
pub fn held_by(conn: &Connection, token: &str) -> ApiResult<Option<usize>> {
    if !recorded(conn)? {
        return Ok(None);
    }
    let mut stmt = conn.prepare_cached("SELECT count(*) FROM claims WHERE claimer = ?1")?;
    let mut n: i64 = stmt.query_row([token], |r| r.get(0))?;
    if super::shape::has_table(conn, "pool_waiters")? {
        let mut stmt =
            conn.prepare_cached("SELECT count(*) FROM pool_waiters WHERE claimer = ?1")?;
        n += stmt.query_row([token], |r| r.get::<_, i64>(0))?;
    }
    Ok(Some(n.max(0) as usize))
}

/// Which token made the claim of `alloc` on `volume`.
pub fn of(conn: &Connection, volume: &str, alloc: &str) -> ApiResult<Claimer> {
    if !recorded(conn)? {
        return Ok(Claimer::NotRecorded);
    }
    let mut stmt =
        conn.prepare_cached("SELECT claimer FROM claims WHERE volume = ?1 AND alloc = ?2")?;
    let token: Option<Option<String>> = stmt.query_row([volume, alloc], |r| r.get(0)).optional()?;
    Ok(match token.flatten() {
        Some(t) => Claimer::Token(t),
        None => Claimer::Nobody,
    })
}

/// Records `token` as the claimer of a claim just inserted, where claimers are recorded.
pub fn record(ctx: &WriteCtx<'_>, volume: &str, alloc: &str, token: &str) -> ApiResult<()> {
    if !recorded(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "UPDATE claims SET claimer = ?3 WHERE volume = ?1 AND alloc = ?2",
        params![volume, alloc, token],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::store::sqlite::db;
    use crate::store::sqlite::migrations::version_of;
    use crate::store::{NewClaim, Snapshot, Txn};
    use csivol_api::{self as api, ClaimState};

    /// With the etcd store a server runs on the schema before the column until `upgrade
    /// finalize`: no claim then records its claimer and none is counted; once migrated in
    /// place, they are, and the claims recorded before count for nobody.
    #[test]
    fn below_its_schema_no_claimer_is_recorded_counted_or_told_apart_and_after_it_each_is() {
        let dir = std::env::temp_dir().join(format!(
            "csivol-claimers-{}-{}",
            std::process::id(),
            Clock::wall().now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        let theirs = version_of("ADD COLUMN claimer").expect("the migration");
        for (schema, alloc, counted) in [(theirs - 1, "a", None), (theirs, "b", Some(1))] {
            let (mut conn, index) = db::open_at(&path, schema).unwrap();
            let tx = conn.transaction().unwrap();
            let mut ctx = WriteCtx::new(&tx, index + 1, Clock::wall().now_ms());
            let request = api::ClaimRequest::new(alloc, "n1", api::ClaimMode::Write);
            ctx.insert_claim(NewClaim {
                volume: "v",
                request: &request,
                state: ClaimState::Pending,
                expires_at: None,
                claimer: Some("t1"),
                mount: &Default::default(),
            })
            .unwrap();
            assert_eq!(ctx.claims_held_by("t1").unwrap(), counted);
            // Below the schema the claim is nobody's in particular: any claimer token may
            // release it, as before; from it on, it is the token's that made it.
            let whose = if counted.is_some() {
                Claimer::Token("t1".into())
            } else {
                Claimer::NotRecorded
            };
            assert_eq!(ctx.claimer_of("v", alloc).unwrap(), whose);
            drop(ctx);
            tx.commit().unwrap();
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
