//! How long the migration to the newest schema takes for a large inventory: 100,000
//! volumes at the schema before, a claim on every tenth (every hundredth with its drift in
//! its error, which the migration moves into a field), migrated on a file as a server
//! start migrates it. Ignored by default; run it with
//! `cargo test -p csivol-server --lib migrating_100k_volumes -- --ignored --nocapture`.

use std::time::Instant;

use rusqlite::params;

use super::{MIGRATIONS, migrate};
use crate::store::sqlite::db::open_at;

const VOLUMES: usize = 100_000;

#[test]
#[ignore = "a measurement: run it with --ignored --nocapture"]
fn migrating_100k_volumes_to_the_newest_schema() {
    let newest = MIGRATIONS.len() as i64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let (mut conn, _) = open_at(&path, newest - 1).unwrap();
    let tx = conn.transaction().unwrap();
    {
        let mut volume = tx
            .prepare(
                "INSERT INTO volumes (name, plugin, external_id, access_mode, attachment, fs_type, \
                 mount_flags, context, parameters, secrets, lifecycle, created_at, updated_at, \
                 modify_index) VALUES (?1, 'hp', ?2, 'single-node-writer', 'file-system', '', \
                 '[]', '{}', '{}', '{}', 'ready', 1, 1, 1)",
            )
            .unwrap();
        let mut claim = tx
            .prepare(
                "INSERT INTO claims (volume, alloc, node, mode, state, error, created_at, \
                 updated_at, modify_index) VALUES (?1, 'a', 'n1', 'write', 'ready', ?2, 1, 1, 1)",
            )
            .unwrap();
        for i in 0..VOLUMES {
            let name = format!("vol-{i:06}");
            volume.execute(params![name, format!("ext-{i}")]).unwrap();
            if i % 10 == 0 {
                let error = (i % 100 == 0).then_some("drift: not mounted");
                claim.execute(params![name, error]).unwrap();
            }
        }
    }
    tx.commit().unwrap();
    let started = Instant::now();
    migrate(&mut conn, newest - 1, newest).unwrap();
    let took = started.elapsed();
    let kept: i64 = conn
        .query_row("SELECT count(*) FROM volumes", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kept, VOLUMES as i64);
    let started = Instant::now();
    conn.execute_batch("DROP TABLE namespaces; CREATE TABLE namespaces (name TEXT PRIMARY KEY, created_at INTEGER NOT NULL);")
        .unwrap();
    let namespaces = started.elapsed();
    println!(
        "migrating {VOLUMES} volumes ({} claims) from schema {} to {newest}: {took:?} \
         (of which the namespaces' table, made again alone: {namespaces:?})",
        VOLUMES / 10,
        newest - 1
    );
}
