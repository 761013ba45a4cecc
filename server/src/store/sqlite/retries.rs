//! Exact retries in SQLite: kept answers (`request_keys`), claim tombstones
//! (`claim_tombstones`), their pruning, and a request's nested savepoint
//! ([`WriteCtx::attempt`]), which lets a refusal be kept while the refused request's own
//! changes roll back.
//!
//! Both tables come with one schema migration. With the etcd store a server may run on the
//! schema before it until `upgrade finalize`: then every function here reads nothing and
//! writes nothing, which is how keys and tombstones are ignored during a rolling upgrade.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::ApiResult;
use crate::store::sqlite::db::optional;
use crate::store::sqlite::writer::WriteCtx;
use crate::store::{KeptAnswer, Tombstone};

/// Whether the schema has the tables (asked of the connection itself: a mirror migrated
/// in place by `upgrade finalize` has them from that moment on).
pub fn kept(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_table(conn, "claim_tombstones")
}

pub fn kept_answer(conn: &Connection, token: &str, key: &str) -> ApiResult<Option<KeptAnswer>> {
    if !kept(conn)? {
        return Ok(None);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT request, digest, status, answer, answer_index, at FROM request_keys \
         WHERE token = ?1 AND key = ?2",
    )?;
    optional(stmt.query_row(params![token, key], |r| {
        Ok(KeptAnswer {
            token: token.to_owned(),
            key: key.to_owned(),
            request: r.get(0)?,
            digest: r.get(1)?,
            status: r.get(2)?,
            answer: r.get(3)?,
            index: r.get::<_, Option<i64>>(4)?.map(|i| i as u64),
            at: r.get(5)?,
        })
    }))
}

/// The volumes named `prefix…` with a tombstone of `alloc`: a range of the table's key,
/// which starts with the volume's name.
pub fn tombstoned_under(conn: &Connection, prefix: &str, alloc: &str) -> ApiResult<Vec<String>> {
    if !kept(conn)? || prefix.is_empty() {
        return Ok(Vec::new());
    }
    // Every name that starts with `prefix` sorts from it up to (not including) `prefix` with
    // its last byte one higher; names are ASCII.
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().expect("not empty") += 1;
    let end =
        String::from_utf8(end).map_err(|e| crate::error::ApiError::internal(e.to_string()))?;
    let mut stmt = conn.prepare_cached(
        "SELECT volume FROM claim_tombstones WHERE volume >= ?1 AND volume < ?2 AND alloc = ?3",
    )?;
    let rows = stmt.query_map(params![prefix, end, alloc], |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub fn tombstone(conn: &Connection, volume: &str, alloc: &str) -> ApiResult<Option<Tombstone>> {
    if !kept(conn)? {
        return Ok(None);
    }
    let mut stmt = conn.prepare_cached(
        "SELECT released_at, released_index FROM claim_tombstones WHERE volume = ?1 AND alloc = ?2",
    )?;
    optional(stmt.query_row(params![volume, alloc], |r| {
        Ok(Tombstone {
            released_at: r.get(0)?,
            index: r.get::<_, i64>(1)? as u64,
        })
    }))
}

pub fn keep_answer(ctx: &WriteCtx<'_>, a: &KeptAnswer) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    exec(
        ctx.tx,
        "INSERT INTO request_keys (token, key, request, digest, status, answer, answer_index, at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (token, key) DO UPDATE SET \
         request = ?3, digest = ?4, status = ?5, answer = ?6, answer_index = ?7, at = ?8",
        params![
            a.token,
            a.key,
            a.request,
            a.digest,
            a.status,
            a.answer,
            a.index.map(|i| i as i64),
            ctx.now
        ],
    )?;
    Ok(())
}

pub fn put_tombstone(ctx: &WriteCtx<'_>, volume: &str, alloc: &str) -> ApiResult<()> {
    if !kept(ctx.tx)? {
        return Ok(());
    }
    // An upsert keeps the row's id (the etcd store keys rows by it) and moves it forward
    // only: a release recorded later is never replaced by an earlier one.
    exec(
        ctx.tx,
        "INSERT INTO claim_tombstones (volume, alloc, released_at, released_index) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (volume, alloc) DO UPDATE SET \
         released_at = MAX(released_at, ?3), released_index = MAX(released_index, ?4)",
        params![volume, alloc, ctx.now, ctx.index as i64],
    )?;
    Ok(())
}

pub fn prune_retries(ctx: &WriteCtx<'_>, before: i64, most: usize) -> ApiResult<usize> {
    if !kept(ctx.tx)? {
        return Ok(0);
    }
    let keys = exec(
        ctx.tx,
        "DELETE FROM request_keys WHERE rowid IN \
         (SELECT rowid FROM request_keys WHERE at < ?1 ORDER BY at LIMIT ?2)",
        params![before, most as i64],
    )?;
    let tombstones = exec(
        ctx.tx,
        "DELETE FROM claim_tombstones WHERE rowid IN \
         (SELECT rowid FROM claim_tombstones WHERE released_at < ?1 ORDER BY released_at LIMIT ?2)",
        params![before, most as i64],
    )?;
    Ok(keys + tombstones)
}

impl WriteCtx<'_> {
    /// Runs `f` in a savepoint of its own inside this request: when it fails, what it
    /// changed is rolled back (and what it touched, logged or remembered is forgotten),
    /// while the request goes on and may still write, e.g. keep the refusal as the answer
    /// to its `Idempotency-Key`.
    pub fn attempt<T>(&mut self, f: impl FnOnce(&mut Self) -> ApiResult<T>) -> ApiResult<T> {
        let run = |ctx: &Self, sql: &str| -> ApiResult<()> {
            ctx.tx.prepare_cached(sql)?.execute([])?;
            Ok(())
        };
        run(self, "SAVEPOINT attempt")?;
        let (touched, on_commit) = (self.touched.len(), self.on_commit.len());
        match f(self) {
            Ok(t) => {
                run(self, "RELEASE attempt")?;
                Ok(t)
            }
            Err(e) => {
                run(self, "ROLLBACK TO attempt")?;
                run(self, "RELEASE attempt")?;
                self.touched.truncate(touched);
                self.on_commit.truncate(on_commit);
                // What the request remembered of rows it may have written is stale now.
                self.memo = Default::default();
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::error::ApiError;
    use crate::store::sqlite::db;
    use crate::store::sqlite::migrations::{self, version_of};
    use crate::store::{Snapshot, Txn};
    use crate::watch::Key;

    /// The schema version that brings request keys and tombstones.
    fn theirs() -> i64 {
        version_of("CREATE TABLE claim_tombstones").expect("the migration")
    }

    fn temp_db(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "csivol-retries-{name}-{}-{}",
            std::process::id(),
            Clock::wall().now_ms()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        (dir.join("state.db"), dir)
    }

    fn answer(key: &str) -> KeptAnswer {
        KeptAnswer {
            token: "t".into(),
            key: key.into(),
            request: "POST /v1/volumes/v/claims".into(),
            digest: "d".into(),
            status: 201,
            answer: "{}".into(),
            index: Some(7),
            at: 0,
        }
    }

    #[test]
    fn an_existing_database_migrates_keeping_its_rows_and_their_ids() {
        let (path, dir) = temp_db("migrate");
        let before = theirs() - 1;
        {
            let (conn, _) = db::open_at(&path, before).unwrap();
            conn.execute_batch(
                "INSERT INTO claims (volume, alloc, node, mode, state, created_at, updated_at, modify_index) \
                   VALUES ('v', 'a', 'n1', 'write', 'ready', 1, 1, 5);
                 INSERT INTO claims (volume, alloc, node, mode, state, created_at, updated_at, modify_index) \
                   VALUES ('v', 'b', 'n1', 'read', 'ready', 2, 2, 6);
                 DELETE FROM claims WHERE alloc = 'a';
                 INSERT INTO events (at, kind, actor, message) VALUES (1, 'claim-created', 'ci', 'm');",
            )
            .unwrap();
            assert!(!kept(&conn).unwrap(), "not before its migration");
        }
        let ids = |conn: &Connection| -> Vec<(String, i64)> {
            let mut s = conn
                .prepare(
                    "SELECT alloc, rowid FROM claims UNION ALL SELECT message, idx FROM events",
                )
                .unwrap();
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let (conn, _) = db::open_at(&path, before).unwrap();
        let was = ids(&conn);
        drop(conn);
        let (conn, index) = db::open(&path).unwrap();
        assert_eq!(index, 1);
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, migrations::schema_version());
        assert!(kept(&conn).unwrap());
        assert_eq!(ids(&conn), was, "every row kept with its id");
        let empty: (i64, i64) = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM request_keys), (SELECT COUNT(*) FROM claim_tombstones)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(empty, (0, 0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// With the etcd store a server runs on the schema before it until `upgrade finalize`:
    /// its mirror has no such tables, and keys and tombstones are then neither read nor
    /// written; once migrated in place, they are.
    #[test]
    fn below_its_schema_nothing_is_kept_and_after_it_everything() {
        let (path, dir) = temp_db("gate");
        for (schema, keeps) in [(theirs() - 1, false), (migrations::schema_version(), true)] {
            let (mut conn, index) = db::open_at(&path, schema).unwrap();
            let tx = conn.transaction().unwrap();
            let mut ctx = WriteCtx::new(&tx, index + 1, Clock::wall().now_ms());
            assert_eq!(ctx.retries_kept().unwrap(), keeps);
            ctx.keep_answer(&answer("k")).unwrap();
            ctx.put_tombstone("v", "a").unwrap();
            assert_eq!(ctx.kept_answer("t", "k").unwrap().is_some(), keeps);
            assert_eq!(
                ctx.tombstone("v", "a").unwrap(),
                keeps.then_some(Tombstone {
                    released_at: ctx.now,
                    index: index + 1
                })
            );
            assert_eq!(
                ctx.prune_retries(ctx.now + 1, 10).unwrap(),
                if keeps { 2 } else { 0 }
            );
            drop(ctx);
            drop(tx);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_failed_attempt_leaves_nothing_and_the_request_goes_on() {
        let (path, dir) = temp_db("attempt");
        let (mut conn, index) = db::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        let mut ctx = WriteCtx::new(&tx, index + 1, Clock::wall().now_ms());
        let failed: ApiResult<()> = ctx.attempt(|ctx| {
            ctx.put_tombstone("v", "gone")?;
            ctx.touch(Key::Volume("v".into()));
            Err(ApiError::conflict("refused"))
        });
        assert_eq!(failed.unwrap_err().message, "refused");
        assert!(ctx.touched.is_empty(), "what it touched is forgotten");
        assert_eq!(ctx.tombstone("v", "gone").unwrap(), None);
        ctx.keep_answer(&answer("k")).unwrap();
        ctx.attempt(|ctx| ctx.put_tombstone("v", "kept")).unwrap();
        drop(ctx);
        tx.commit().unwrap();
        assert!(conn.kept_answer("t", "k").unwrap().is_some());
        assert!(conn.tombstone("v", "kept").unwrap().is_some());
        assert_eq!(conn.tombstone("v", "gone").unwrap(), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_tombstone_moves_forward_only() {
        let (path, dir) = temp_db("forward");
        let (mut conn, index) = db::open(&path).unwrap();
        let tx = conn.transaction().unwrap();
        let mut ctx = WriteCtx::new(&tx, index + 5, Clock::wall().now_ms());
        ctx.put_tombstone("v", "a").unwrap();
        let later = ctx.tombstone("v", "a").unwrap().unwrap();
        let mut earlier = WriteCtx::new(&tx, index + 1, Clock::wall().now_ms());
        earlier.now = later.released_at - 1000;
        earlier.put_tombstone("v", "a").unwrap();
        assert_eq!(earlier.tombstone("v", "a").unwrap(), Some(later));
        drop((ctx, earlier));
        drop(tx);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
