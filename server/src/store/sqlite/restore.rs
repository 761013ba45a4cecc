//! What a restore brings back and takes down, said before it acts: the claims and
//! attachments of the state now against the backup's, and the nodes the server will wait
//! for. And the mark a restored state carries so that the server, at its start, holds back
//! the volumes two nodes must not hold until the nodes have said what they hold
//! (`lifecycle::settle`).

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

use anyhow::Context;
use rusqlite::{Connection, OpenFlags};

use crate::lifecycle::settle;

/// The claims and attachments of one state, as `(volume, alloc, node, state)` and
/// `(volume, node, state)`, and its nodes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holdings {
    pub claims: BTreeSet<(String, String, String, String)>,
    pub attachments: BTreeSet<(String, String, String)>,
    pub nodes: BTreeSet<String>,
}

impl Holdings {
    /// What the database at `path` holds (read only; any schema csivol wrote).
    pub fn of_file(path: &Path) -> anyhow::Result<Self> {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .with_context(|| format!("failed to open {}", path.display()))?;
        Self::read(&conn).with_context(|| format!("failed to read {}", path.display()))
    }

    pub fn read(conn: &Connection) -> rusqlite::Result<Self> {
        let mut h = Self::default();
        let mut stmt = conn.prepare("SELECT volume, alloc, node, state FROM claims")?;
        for row in stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))? {
            h.claims.insert(row?);
        }
        let mut stmt = conn.prepare("SELECT volume, node, state FROM attachments")?;
        for row in stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))? {
            h.attachments.insert(row?);
        }
        let mut stmt = conn.prepare("SELECT name FROM nodes")?;
        for row in stmt.query_map([], |r| r.get(0))? {
            h.nodes.insert(row?);
        }
        Ok(h)
    }
}

/// What a restore of `backup` over `now` changes: a claim or attachment is the same when
/// its volume, alloc (for a claim) and node are.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// In the backup, not in the state now: the nodes mount them again.
    pub bring_back: Vec<String>,
    /// In the state now, not in the backup: the nodes holding them take them down.
    pub take_down: Vec<String>,
    /// The nodes the restored state knows, which it waits for.
    pub waits_for: Vec<String>,
}

impl Plan {
    pub fn new(now: &Holdings, backup: &Holdings) -> Self {
        let claim = |(v, a, n, s): &(String, String, String, String)| {
            format!("claim of alloc {a} on volume {v}, node {n} ({s})")
        };
        let attachment = |(v, n, s): &(String, String, String)| {
            format!("attachment of volume {v} to node {n} ({s})")
        };
        let claim_key =
            |c: &(String, String, String, String)| (c.0.clone(), c.1.clone(), c.2.clone());
        let att_key = |a: &(String, String, String)| (a.0.clone(), a.1.clone());
        let keys = |h: &Holdings| {
            (
                h.claims.iter().map(claim_key).collect::<BTreeSet<_>>(),
                h.attachments.iter().map(att_key).collect::<BTreeSet<_>>(),
            )
        };
        let (now_claims, now_atts) = keys(now);
        let (backup_claims, backup_atts) = keys(backup);
        let mut plan = Self::default();
        for c in &backup.claims {
            if !now_claims.contains(&claim_key(c)) {
                plan.bring_back.push(claim(c));
            }
        }
        for a in &backup.attachments {
            if !now_atts.contains(&att_key(a)) {
                plan.bring_back.push(attachment(a));
            }
        }
        for c in &now.claims {
            if !backup_claims.contains(&claim_key(c)) {
                plan.take_down.push(claim(c));
            }
        }
        for a in &now.attachments {
            if !backup_atts.contains(&att_key(a)) {
                plan.take_down.push(attachment(a));
            }
        }
        plan.waits_for = backup.nodes.iter().cloned().collect();
        plan
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, what: &str, items: &[String]| {
            if items.is_empty() {
                return writeln!(f, "{what}: nothing");
            }
            writeln!(f, "{what}:")?;
            items.iter().try_for_each(|i| writeln!(f, "  {i}"))
        };
        list(
            f,
            "brings back (in the backup, not in the state now; their nodes mount them again)",
            &self.bring_back,
        )?;
        list(
            f,
            "takes down (in the state now, not in the backup; their nodes unmount them, then \
             they are detached)",
            &self.take_down,
        )?;
        let nodes = if self.waits_for.is_empty() {
            "no node the backup knows".to_owned()
        } else {
            self.waits_for.join(", ")
        };
        write!(
            f,
            "until {nodes} registered again with what they hold, and for one heartbeat TTL \
             after the server starts, no volume that two nodes must not hold goes to a node"
        )
    }
}

/// Marks the state at `path` restored: the server holds back at its start (see the
/// module). `meta` is in every schema csivol has written.
pub fn mark_restored(path: &Path) -> anyhow::Result<()> {
    let conn =
        Connection::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    mark(&conn).with_context(|| format!("failed to mark {} restored", path.display()))
}

/// [`mark_restored`] on an open database.
pub fn mark(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?1, 1) ON CONFLICT (key) DO UPDATE SET value = 1",
        [settle::PENDING],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holdings(claims: &[(&str, &str, &str, &str)], atts: &[(&str, &str, &str)]) -> Holdings {
        let s = |x: &str| x.to_owned();
        Holdings {
            claims: claims
                .iter()
                .map(|c| (s(c.0), s(c.1), s(c.2), s(c.3)))
                .collect(),
            attachments: atts.iter().map(|a| (s(a.0), s(a.1), s(a.2))).collect(),
            nodes: claims.iter().map(|c| s(c.2)).collect(),
        }
    }

    #[test]
    fn a_restore_says_what_it_brings_back_and_takes_down() {
        let now = holdings(
            &[("db", "a1", "n1", "ready"), ("cache", "a4", "n1", "ready")],
            &[("db", "n1", "attached"), ("cache", "n1", "attached")],
        );
        let backup = holdings(
            &[
                ("db", "a1", "n1", "publishing"),
                ("logs", "a3", "n2", "ready"),
            ],
            &[("db", "n1", "attaching"), ("logs", "n2", "attached")],
        );
        let plan = Plan::new(&now, &backup);
        assert_eq!(
            plan.bring_back,
            [
                "claim of alloc a3 on volume logs, node n2 (ready)",
                "attachment of volume logs to node n2 (attached)"
            ],
            "a claim in both, in another state, is neither"
        );
        assert_eq!(
            plan.take_down,
            [
                "claim of alloc a4 on volume cache, node n1 (ready)",
                "attachment of volume cache to node n1 (attached)"
            ]
        );
        assert_eq!(plan.waits_for, ["n1", "n2"]);
        let text = plan.to_string();
        assert!(text.contains("takes down (in the state now"), "{text}");
        assert!(text.contains("until n1, n2 registered again"), "{text}");
        let same = Plan::new(&now, &now);
        assert!(same.bring_back.is_empty() && same.take_down.is_empty());
        assert!(same.to_string().contains("brings back (in the backup, not in the state now; their nodes mount them again): nothing"));
    }
}
