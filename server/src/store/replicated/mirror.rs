//! The etcd store's local mirror: a SQLite database with the server's schema holding what
//! etcd holds, one etcd key per row. A row is keyed by its table and rowid
//! (`<prefix>/d/t/<table>/<rowid>`, the rowid zero-padded so keys sort as rows do) and
//! stored as a JSON array of its column values in schema order; `<prefix>/d/seq` holds
//! `sqlite_sequence` (so ids are never handed out twice), `<prefix>/d/head` the change
//! index, put by every commit, and `<prefix>/d/generation` the generation of the state
//! (`watch::Generation`), put only when the state goes back in time. Temporary triggers, on the mirror's writer connection only,
//! note every row a write changes; the writer turns those rows into etcd puts and deletes.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::watch::Key;

/// A replicated table: its name, its columns in order, and whether its rowid is a column
/// (`INTEGER PRIMARY KEY`).
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub columns: Vec<String>,
    pub rowid_alias: bool,
}

/// Every table of the schema (SQLite's own excepted).
pub fn tables(conn: &Connection) -> rusqlite::Result<Vec<Table>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name",
    )?;
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for name in names {
        let mut info = conn.prepare(&format!("PRAGMA table_info(\"{name}\")"))?;
        let cols: Vec<(String, String, i64)> = info
            .query_map([], |r| Ok((r.get(1)?, r.get(2)?, r.get(5)?)))?
            .collect::<Result<_, _>>()?;
        let pks: Vec<_> = cols.iter().filter(|c| c.2 > 0).collect();
        let rowid_alias = pks.len() == 1 && pks[0].1.eq_ignore_ascii_case("INTEGER");
        out.push(Table {
            name,
            columns: cols.into_iter().map(|c| c.0).collect(),
            rowid_alias,
        });
    }
    Ok(out)
}

/// Notes every changed row in `temp.changes` (REPLACE's deletes included).
pub fn install_triggers(conn: &Connection, tables: &[Table]) -> rusqlite::Result<()> {
    conn.pragma_update(None, "recursive_triggers", "ON")?;
    let mut sql = String::from("CREATE TEMP TABLE IF NOT EXISTS changes (tbl TEXT, rid INTEGER);");
    for t in tables {
        let n = &t.name;
        sql.push_str(&format!(
            "CREATE TEMP TRIGGER IF NOT EXISTS csivol_i_{n} AFTER INSERT ON main.\"{n}\" BEGIN \
               INSERT INTO changes VALUES ('{n}', NEW.rowid); END;
             CREATE TEMP TRIGGER IF NOT EXISTS csivol_u_{n} AFTER UPDATE ON main.\"{n}\" BEGIN \
               INSERT INTO changes VALUES ('{n}', OLD.rowid); \
               INSERT INTO changes VALUES ('{n}', NEW.rowid); END;
             CREATE TEMP TRIGGER IF NOT EXISTS csivol_d_{n} AFTER DELETE ON main.\"{n}\" BEGIN \
               INSERT INTO changes VALUES ('{n}', OLD.rowid); END;"
        ));
    }
    conn.execute_batch(&sql)
}

/// The rows changed since `temp.changes` was last cleared.
pub fn changes(conn: &Connection) -> rusqlite::Result<Vec<(String, i64)>> {
    let mut stmt = conn.prepare_cached("SELECT DISTINCT tbl, rid FROM changes")?;
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect()
}

pub fn clear_changes(conn: &Connection) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM changes")?.execute([])?;
    Ok(())
}

/// Key layout under the store's prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    /// `<prefix>/d/`: everything the watch follows.
    pub data: String,
}

/// What an etcd key under `<prefix>/d/` is.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyKind<'a> {
    Head,
    Seq,
    /// Servers of an older release read it as a key they do not know, and pass over it.
    Generation,
    Row(&'a str, i64),
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Self {
            data: format!("{}/d/", prefix.trim_end_matches('/')),
        }
    }

    pub fn head(&self) -> Vec<u8> {
        format!("{}head", self.data).into_bytes()
    }

    pub fn seq(&self) -> Vec<u8> {
        format!("{}seq", self.data).into_bytes()
    }

    pub fn generation(&self) -> Vec<u8> {
        format!("{}generation", self.data).into_bytes()
    }

    pub fn row(&self, table: &str, rid: i64) -> Vec<u8> {
        format!("{}t/{table}/{rid:020}", self.data).into_bytes()
    }

    pub fn parse<'a>(&self, key: &'a [u8]) -> Option<KeyKind<'a>> {
        let key = std::str::from_utf8(key).ok()?.strip_prefix(&self.data)?;
        match key {
            "head" => Some(KeyKind::Head),
            "seq" => Some(KeyKind::Seq),
            "generation" => Some(KeyKind::Generation),
            _ => {
                let (table, rid) = key.strip_prefix("t/")?.split_once('/')?;
                Some(KeyKind::Row(table, rid.parse().ok()?))
            }
        }
    }
}

/// `<prefix>/d/head`, put by every commit: a JSON object whose fields other than `index`
/// and `schema` are optional, so that servers of two adjacent versions read each other's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Head {
    /// The change index after the commit.
    pub index: u64,
    /// The cluster's schema version: the layout of every row under `d/t/`.
    pub schema: i64,
    /// Which commit wrote it (`<server>-<n>`, never reused): how a server that could not
    /// learn whether its commit went through tells its own from another server's.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// The blocking-query keys the commit touched, so that every server wakes (and
    /// journals per volume) exactly what the committing one did. Absent when a commit
    /// touched more than [`MAX_SHIPPED_KEYS`] or came from a server that does not send
    /// them: the keys are then derived from the rows (a whole node's, for a node's rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<Key>>,
    /// Set while `csivol-server upgrade finalize` rewrites the rows in the layout of
    /// `schema`: no server commits until a head without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub migrating: bool,
}

/// `<prefix>/d/generation`: the generation every server of the cluster serves, so that an
/// index one server gave is valid on another. It is a key of its own, not a field of the
/// head, because a server of the previous release puts the head without the fields it
/// does not know; it never writes this key. Put when the cluster is made, when a backup is
/// restored into etcd, and by the server that finds etcd's state gone back in time (an
/// etcd snapshot restored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationValue {
    /// The generation, as `watch::Generation::text` writes it.
    pub id: String,
    /// The event log's last entry when the generation began.
    #[serde(default)]
    pub events_from: u64,
}

impl GenerationValue {
    pub fn new(generation: crate::watch::Generation, events_from: u64) -> Self {
        Self {
            id: generation.text(),
            events_from,
        }
    }

    pub fn generation(&self) -> crate::watch::Generation {
        crate::watch::Generation::parse(&self.id)
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a generation serialises")
    }

    pub fn parse(value: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(value).map_err(|e| format!("invalid generation: {e}"))
    }
}

/// Most keys a head carries; a commit that touched more wakes by its rows.
pub const MAX_SHIPPED_KEYS: usize = 2048;

impl Head {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a head serialises")
    }

    /// A head value; its `keys` are dropped (not the head refused) when they do not parse,
    /// as when a newer server names a kind of key this one does not know.
    pub fn parse(value: &[u8]) -> Result<Self, String> {
        let mut v: serde_json::Value =
            serde_json::from_slice(value).map_err(|e| format!("invalid head: {e}"))?;
        let keys = v.as_object_mut().and_then(|o| o.remove("keys"));
        let mut head: Self = serde_json::from_value(v).map_err(|e| format!("invalid head: {e}"))?;
        head.keys = keys.and_then(|k| serde_json::from_value(k).ok());
        Ok(head)
    }

    /// The keys to ship for `touched`: each once, none past the bound.
    pub fn shipped(touched: &[Key]) -> Option<Vec<Key>> {
        let mut seen = std::collections::HashSet::new();
        let keys: Vec<Key> = touched
            .iter()
            .filter(|k| seen.insert(*k))
            .cloned()
            .collect();
        (keys.len() <= MAX_SHIPPED_KEYS).then_some(keys)
    }
}

fn to_json(v: Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Integer(i) => json!(i),
        Value::Real(f) => json!(f),
        Value::Text(s) => json!(s),
        Value::Blob(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            json!({ "b": hex })
        }
    }
}

fn from_json(v: &serde_json::Value) -> Result<Value, String> {
    Ok(match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Integer(i64::from(*b)),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Integer(i),
            None => Value::Real(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Value::Text(s.clone()),
        serde_json::Value::Object(o) => {
            let hex = o.get("b").and_then(|h| h.as_str()).ok_or("bad blob")?;
            let bytes = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|e| e.to_string())?;
            Value::Blob(bytes)
        }
        serde_json::Value::Array(_) => return Err("nested array in a row".into()),
    })
}

/// A row's column values, if it exists.
pub fn read_row(conn: &Connection, t: &Table, rid: i64) -> rusqlite::Result<Option<Vec<Value>>> {
    let cols: Vec<String> = t.columns.iter().map(|c| format!("\"{c}\"")).collect();
    let sql = format!(
        "SELECT {} FROM \"{}\" WHERE rowid = ?1",
        cols.join(", "),
        t.name
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query([rid])?;
    match rows.next()? {
        Some(r) => {
            let mut v = Vec::with_capacity(t.columns.len());
            for i in 0..t.columns.len() {
                v.push(r.get::<_, Value>(i)?);
            }
            Ok(Some(v))
        }
        None => Ok(None),
    }
}

pub fn encode_row(values: Vec<Value>) -> Vec<u8> {
    serde_json::Value::Array(values.into_iter().map(to_json).collect())
        .to_string()
        .into_bytes()
}

pub fn decode_row(t: &Table, bytes: &[u8]) -> Result<Vec<Value>, String> {
    let v: Vec<serde_json::Value> = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if v.len() != t.columns.len() {
        return Err(format!(
            "a row of {} has {} values, the schema {} columns",
            t.name,
            v.len(),
            t.columns.len()
        ));
    }
    v.iter().map(from_json).collect()
}

/// Puts `values` as row `rid` of `t`, replacing whatever is there.
pub fn put_row(conn: &Connection, t: &Table, rid: i64, values: Vec<Value>) -> rusqlite::Result<()> {
    let mut cols: Vec<String> = t.columns.iter().map(|c| format!("\"{c}\"")).collect();
    let mut vals = values;
    if !t.rowid_alias {
        cols.insert(0, "rowid".into());
        vals.insert(0, Value::Integer(rid));
    }
    let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "INSERT OR REPLACE INTO \"{}\" ({}) VALUES ({})",
        t.name,
        cols.join(", "),
        marks.join(", ")
    );
    conn.prepare_cached(&sql)?.execute(params_from_iter(vals))?;
    Ok(())
}

pub fn delete_row(conn: &Connection, t: &Table, rid: i64) -> rusqlite::Result<()> {
    let sql = format!("DELETE FROM \"{}\" WHERE rowid = ?1", t.name);
    conn.prepare_cached(&sql)?.execute([rid])?;
    Ok(())
}

/// `sqlite_sequence` as a value for `<prefix>/d/seq`.
pub fn seq_value(conn: &Connection) -> rusqlite::Result<Vec<u8>> {
    let mut stmt = conn.prepare_cached("SELECT name, seq FROM sqlite_sequence ORDER BY name")?;
    let rows: Vec<(String, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(serde_json::to_vec(&rows).unwrap_or_default())
}

pub fn apply_seq(conn: &Connection, value: &[u8]) -> Result<(), String> {
    let rows: Vec<(String, i64)> = serde_json::from_slice(value).map_err(|e| e.to_string())?;
    conn.execute("DELETE FROM sqlite_sequence", [])
        .map_err(|e| e.to_string())?;
    for (name, seq) in rows {
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES (?1, ?2)",
            rusqlite::params![name, seq],
        )
        .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The blocking-query keys a row of `t` belongs to (so that a change made on another
/// server wakes the same waiters as one made here).
pub fn wake_keys(t: &Table, values: &[Value], out: &mut Vec<Key>) {
    if t.name == "events" {
        out.push(Key::Events);
        return;
    }
    for (col, v) in t.columns.iter().zip(values) {
        let Value::Text(s) = v else { continue };
        let key = match (t.name.as_str(), col.as_str()) {
            ("volumes", "name") | (_, "volume") => Key::Volume(s.clone()),
            ("nodes", "name") | (_, "node") | (_, "host") => Key::Node(s.clone()),
            ("snapshots", "name") | ("group_snapshots", "name") => Key::Snapshot(s.clone()),
            ("pool_waiters", "pool") => Key::Pool(s.clone()),
            _ => continue,
        };
        out.push(key);
    }
}

/// Replaces the mirror's content with etcd's `rows` (key, value) in one transaction.
pub fn load(
    conn: &mut Connection,
    tables: &[Table],
    keys: &Keys,
    rows: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), String> {
    let tx = conn.transaction().map_err(|e| e.to_string())?;
    for t in tables {
        tx.execute(&format!("DELETE FROM \"{}\"", t.name), [])
            .map_err(|e| e.to_string())?;
    }
    tx.execute("DELETE FROM sqlite_sequence", [])
        .map_err(|e| e.to_string())?;
    for (k, v) in rows {
        match keys.parse(k) {
            Some(KeyKind::Seq) => apply_seq(&tx, v)?,
            Some(KeyKind::Row(name, rid)) => {
                let t = tables
                    .iter()
                    .find(|t| t.name == name)
                    .ok_or_else(|| format!("etcd holds rows of an unknown table `{name}`"))?;
                put_row(&tx, t, rid, decode_row(t, v)?).map_err(|e| e.to_string())?;
            }
            Some(KeyKind::Head | KeyKind::Generation) | None => {}
        }
    }
    tx.commit().map_err(|e| e.to_string())
}

/// Checks a mirror just loaded from `rows`: every row etcd holds is in it (none took
/// another's place by breaking a unique index, which loading would not notice), and SQLite
/// finds the database whole (`integrity_check`) with no dangling reference
/// (`foreign_key_check`). Says what is wrong, table by table.
pub fn check(
    conn: &Connection,
    tables: &[Table],
    keys: &Keys,
    rows: &[(Vec<u8>, Vec<u8>)],
) -> Result<(), String> {
    let mut in_etcd: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for (k, _) in rows {
        if let Some(KeyKind::Row(t, _)) = keys.parse(k) {
            *in_etcd.entry(t).or_default() += 1;
        }
    }
    let mut wrong = Vec::new();
    for t in tables {
        let loaded: i64 = conn
            .query_row(&format!("SELECT COUNT(*) FROM \"{}\"", t.name), [], |r| {
                r.get(0)
            })
            .map_err(|e| e.to_string())?;
        let held = in_etcd.get(t.name.as_str()).copied().unwrap_or(0);
        if loaded != held {
            wrong.push(format!(
                "etcd holds {held} rows of `{}` but only {loaded} fit the schema's unique keys",
                t.name
            ));
        }
    }
    let pragma = |sql: &str| -> Result<Vec<String>, String> {
        let mut stmt = conn.prepare(sql).map_err(|e| e.to_string())?;
        let found: rusqlite::Result<Vec<String>> = stmt
            .query_map([], |r| {
                let n = r.as_ref().column_count();
                let cells: Vec<String> = (0..n)
                    .map(|i| match r.get::<_, Value>(i) {
                        Ok(Value::Text(s)) => s,
                        Ok(Value::Integer(i)) => i.to_string(),
                        _ => String::new(),
                    })
                    .collect();
                Ok(cells.join(" "))
            })
            .and_then(|rows| rows.collect());
        found.map_err(|e| e.to_string())
    };
    let integrity = pragma("PRAGMA integrity_check(20)")?;
    if integrity != ["ok"] {
        wrong.extend(integrity);
    }
    for dangling in pragma("PRAGMA foreign_key_check")? {
        wrong.push(format!("a dangling reference: {dangling}"));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// Every row of the mirror as (key, value), for a cluster's first write into etcd.
pub fn all_rows(
    conn: &Connection,
    tables: &[Table],
    keys: &Keys,
) -> rusqlite::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for t in tables {
        let mut stmt = conn.prepare(&format!("SELECT rowid FROM \"{}\"", t.name))?;
        let rids: Vec<i64> = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for rid in rids {
            if let Some(v) = read_row(conn, t, rid)? {
                out.push((keys.row(&t.name, rid), encode_row(v)));
            }
        }
    }
    out.push((keys.seq(), seq_value(conn)?));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_their_keys_and_values() {
        let keys = Keys::new("/csivol/");
        assert_eq!(
            keys.row("claims", 7),
            b"/csivol/d/t/claims/00000000000000000007"
        );
        assert_eq!(
            keys.parse(&keys.row("claims", 7)),
            Some(KeyKind::Row("claims", 7))
        );
        assert_eq!(keys.parse(&keys.head()), Some(KeyKind::Head));
        assert_eq!(keys.parse(b"/other/d/head"), None);
        let t = Table {
            name: "x".into(),
            columns: vec!["a".into(), "b".into(), "c".into(), "d".into()],
            rowid_alias: false,
        };
        let row = vec![
            Value::Null,
            Value::Integer(-3),
            Value::Text("hé".into()),
            Value::Blob(vec![0, 255]),
        ];
        assert_eq!(decode_row(&t, &encode_row(row.clone())).unwrap(), row);
    }

    #[test]
    fn the_check_finds_rows_that_do_not_fit_the_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        // A table with AUTOINCREMENT, as the schema has, makes `sqlite_sequence`.
        conn.execute_batch(
            "CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER);
             CREATE TABLE s (id INTEGER PRIMARY KEY AUTOINCREMENT);",
        )
        .unwrap();
        let tables = tables(&conn).unwrap();
        let keys = Keys::new("/csivol");
        let row = |rid: i64, k: &str| {
            (
                keys.row("t", rid),
                encode_row(vec![Value::Text(k.into()), Value::Integer(rid)]),
            )
        };
        let good = vec![row(1, "a"), row(2, "b")];
        load(&mut conn, &tables, &keys, &good).unwrap();
        check(&conn, &tables, &keys, &good).unwrap();
        // Two rows with the same primary key: loading keeps one of them.
        let twice = vec![row(1, "a"), row(2, "a")];
        load(&mut conn, &tables, &keys, &twice).unwrap();
        let e = check(&conn, &tables, &keys, &twice).unwrap_err();
        assert_eq!(
            e,
            "etcd holds 2 rows of `t` but only 1 fit the schema's unique keys"
        );
    }

    #[test]
    fn heads_of_older_and_newer_servers_are_read() {
        let older = br#"{"index":7,"schema":14}"#;
        assert_eq!(
            Head::parse(older).unwrap(),
            Head {
                index: 7,
                schema: 14,
                ..Head::default()
            }
        );
        let head = Head {
            index: 8,
            schema: 14,
            by: "a1-3".into(),
            keys: Head::shipped(&[Key::Events, Key::Volume("v".into()), Key::Events]),
            migrating: false,
        };
        assert_eq!(head.keys.as_ref().map(Vec::len), Some(2), "each key once");
        assert_eq!(Head::parse(&head.encode()).unwrap(), head);
        let newer = br#"{"index":9,"schema":15,"keys":[{"a_kind_to_come":"x"}],"more":1}"#;
        let read = Head::parse(newer).unwrap();
        assert_eq!((read.index, read.schema, read.keys), (9, 15, None));
        assert!(
            Head::parse(br#"{"schema":14}"#).is_err(),
            "an index is needed"
        );
    }
}
