//! The state database's schema: one migration per schema version, each in a file of its
//! own (`NNNN_name.sql`, NNNN the version it makes), applied in order. A database's
//! `user_version` is how many were applied.
//!
//! A migration that shipped never changes: the etcd store keys its rows by table and row
//! id, and during a rolling upgrade a server at the previous version reads the rows the
//! cluster wrote (`server/tests/fixtures/sqlite-schemas.txt` holds what each version
//! stores, and the tests below compare). A schema change is a new file and a new line
//! at the end of [`MIGRATIONS`].

use rusqlite::Connection;

/// The migrations, in order: entry N-1 makes schema version N.
pub(super) const MIGRATIONS: &[&str] = &[
    include_str!("0001_initial.sql"),
    include_str!("0002_plugin_capability_indexes.sql"),
    include_str!("0003_claim_waits_and_conditions.sql"),
    include_str!("0004_leases_labels_and_queues.sql"),
    include_str!("0005_cluster_identity.sql"),
    include_str!("0006_fencing.sql"),
    include_str!("0007_node_eligibility.sql"),
    include_str!("0008_token_names.sql"),
    include_str!("0009_token_expiry_and_controller_hosts.sql"),
    include_str!("0010_volume_expansion.sql"),
    include_str!("0011_controller_findings.sql"),
    include_str!("0012_topology.sql"),
    include_str!("0013_snapshots.sql"),
    include_str!("0014_secrets_check.sql"),
    include_str!("0015_operator_node_labels.sql"),
    include_str!("0016_planned_stops_and_observations.sql"),
    include_str!("0017_mutable_parameters.sql"),
    include_str!("0018_live_attach_limits.sql"),
    include_str!("0019_group_snapshots.sql"),
    include_str!("0020_exact_retries_claim_drift_claimers_and_mounts.sql"),
];

/// A migration compiled only into test builds (feature `schema-next`) and applied only
/// when [`SCHEMA_NEXT_ENV`] is set: the same binary then plays the next version of
/// csivol-server in rolling-upgrade tests. It adds a column and fills it, so that a test
/// sees the rows rewritten.
#[cfg(feature = "schema-next")]
const NEXT_MIGRATION: &str = r#"
ALTER TABLE volumes ADD COLUMN upgrade_probe TEXT;
UPDATE volumes SET upgrade_probe = 'migrated';
"#;

/// Set (to anything) in a test build's environment: this csivol-server knows one schema
/// version more, [`NEXT_MIGRATION`].
#[cfg(feature = "schema-next")]
pub const SCHEMA_NEXT_ENV: &str = "CSIVOL_TEST_SCHEMA_NEXT";

/// The migrations this build knows, in order.
fn migrations() -> &'static [&'static str] {
    #[cfg(feature = "schema-next")]
    {
        static ALL: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        if std::env::var_os(SCHEMA_NEXT_ENV).is_some() {
            return ALL.get_or_init(|| {
                let mut all = MIGRATIONS.to_vec();
                all.push(NEXT_MIGRATION);
                all
            });
        }
    }
    MIGRATIONS
}

/// The schema version whose migration holds `sql` (for tests of one migration).
#[cfg(test)]
pub(super) fn version_of(sql: &str) -> Option<i64> {
    MIGRATIONS
        .iter()
        .position(|m| m.contains(sql))
        .map(|i| i as i64 + 1)
}

/// How many schema migrations this build knows: a database at this `user_version` is current.
pub fn schema_version() -> i64 {
    migrations().len() as i64
}

/// Applies the migrations from schema version `from` to `to`, in one transaction.
pub fn migrate(conn: &mut Connection, from: i64, to: i64) -> anyhow::Result<()> {
    use anyhow::Context;
    let tx = conn.transaction()?;
    for (i, sql) in migrations()
        .iter()
        .enumerate()
        .take(to as usize)
        .skip(from as usize)
    {
        tx.execute_batch(sql)
            .with_context(|| format!("failed to migrate to schema version {}", i + 1))?;
    }
    tx.pragma_update(None, "user_version", to)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod timing;

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::MIGRATIONS;
    use crate::store::sqlite::db::open_at;

    /// Each file of this folder is one entry of [`MIGRATIONS`], in the order of its number,
    /// and numbered for the version it makes: a file left out of the list, or listed out of
    /// order, would make a database another build does not read.
    #[test]
    fn every_migration_file_is_listed_in_the_order_of_its_number() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store/sqlite/migrations");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "sql"))
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len(), "{files:?}");
        for (i, (file, listed)) in files.iter().zip(MIGRATIONS).enumerate() {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with(&format!("{:04}_", i + 1)),
                "{name} is entry {} of MIGRATIONS: its number must be {:04}",
                i + 1,
                i + 1
            );
            assert_eq!(
                &std::fs::read_to_string(file).unwrap(),
                listed,
                "entry {} of MIGRATIONS is not {name}",
                i + 1
            );
        }
    }

    /// `sqlite_master` as the fixture writes it: one line per table, index and trigger,
    /// sorted by type and name, each statement's whitespace collapsed.
    fn stored_schema(conn: &Connection) -> String {
        let mut s = conn
            .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
            .unwrap();
        let rows = s
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .unwrap();
        let mut out = String::new();
        for row in rows {
            let (kind, name, table, sql) = row.unwrap();
            let sql = sql.map_or_else(
                || "-".to_owned(),
                |s| s.split_whitespace().collect::<Vec<_>>().join(" "),
            );
            out.push_str(&format!("{kind} {name} on {table}: {sql}\n"));
        }
        out
    }

    /// Every schema version a fresh database is migrated to stores the schema that version
    /// stored when it shipped (`server/tests/fixtures/sqlite-schemas.txt` says how that file
    /// was made): the etcd store keys rows by table and row id, and a mirror at the previous
    /// version reads the rows the cluster wrote.
    #[test]
    fn every_schema_version_stores_the_schema_it_shipped_with() {
        let fixture = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/sqlite-schemas.txt"),
        )
        .unwrap();
        let mut shipped = std::collections::BTreeMap::new();
        let mut version = 0;
        for line in fixture.lines().filter(|l| !l.starts_with('#')) {
            match line.strip_prefix("-- schema version ") {
                Some(v) => version = v.parse::<i64>().unwrap(),
                None => shipped
                    .entry(version)
                    .or_insert_with(String::new)
                    .push_str(&format!("{line}\n")),
            }
        }
        let known = MIGRATIONS.len() as i64;
        let dir = tempfile::tempdir().unwrap();
        for version in 1..=known {
            let path = dir.path().join(format!("state-{version}.db"));
            let (conn, _) = open_at(&path, version).unwrap();
            let stored = stored_schema(&conn);
            match shipped.get(&version) {
                Some(expected) => assert_eq!(
                    &stored, expected,
                    "schema version {version} no longer stores the schema it shipped with"
                ),
                None => panic!(
                    "schema version {version} is not in tests/fixtures/sqlite-schemas.txt; \
                     append:\n-- schema version {version}\n{stored}"
                ),
            }
        }
        assert_eq!(
            shipped.keys().last().copied(),
            Some(known),
            "the fixture names a schema version this build does not know"
        );
    }
}
