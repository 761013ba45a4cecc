//! The cluster's schema version in etcd, and the servers that run on it.
//!
//! The head names the schema the rows are written in: the cluster's. A server runs on the
//! schema it was built for, or on the one before it (a rolling upgrade: servers are
//! upgraded one at a time, and the new ones read and write the rows as the old ones do),
//! and refuses any other. Each server announces itself under `<prefix>/servers/<id>`, with
//! a lease, saying the newest schema it knows (`presence`): `csivol-server upgrade
//! finalize` raises the cluster's schema only when every live server knows it, and then
//! rewrites the rows for it (`upgrade`).

use anyhow::bail;
use serde::{Deserialize, Serialize};

use super::mirror::Head;
use crate::store::sqlite::migrations;

/// What a server says of itself under `<prefix>/servers/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    /// The newest schema version it knows (it also runs on the one before).
    pub schema: i64,
    /// Its csivol-server version.
    pub version: String,
    /// Where it serves the API, and on which host.
    #[serde(default)]
    pub listen: String,
    #[serde(default)]
    pub host: String,
}

/// The prefix servers announce themselves under.
pub fn servers_prefix(prefix: &str) -> String {
    format!("{prefix}/servers/")
}

/// The schema this server runs on for a cluster whose head is `head`: the cluster's, when
/// it is this build's or the one before it; anything else is refused, saying what to run.
pub fn accept(head: &Head, prefix: &str) -> anyhow::Result<i64> {
    let ours = migrations::schema_version();
    let theirs = head.schema;
    if head.migrating {
        bail!(
            "the cluster under {prefix} is being migrated to schema version {theirs} \
             (`csivol-server upgrade finalize`); a server starts once that is done\n\
             hint: wait for it to finish, or run `csivol-server upgrade finalize` again if it \
             stopped"
        );
    }
    if theirs == ours {
        return Ok(ours);
    }
    if theirs == ours - 1 {
        tracing::info!(
            cluster = theirs,
            this_server = ours,
            "the cluster runs the previous schema version: this server works on it until \
             `csivol-server upgrade finalize` raises it"
        );
        return Ok(theirs);
    }
    if theirs > ours {
        bail!(
            "the cluster under {prefix} has schema version {theirs}, newer than this \
             csivol-server knows ({ours}): it was upgraded and finalized\n\
             hint: run the csivol-server the other servers run; going back to this version \
             needs the backup taken before the upgrade, restored into an empty prefix"
        );
    }
    bail!(
        "the cluster under {prefix} has schema version {theirs}, more than one version older \
         than this csivol-server ({ours})\n\
         hint: upgrade one release at a time: run the release that knows schema version {}, \
         finalize it, then this one",
        theirs + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(schema: i64, migrating: bool) -> Head {
        Head {
            index: 1,
            schema,
            migrating,
            ..Head::default()
        }
    }

    #[test]
    fn a_server_runs_on_its_own_schema_or_the_one_before() {
        let ours = migrations::schema_version();
        let check = |schema, migrating| accept(&head(schema, migrating), "/csivol");
        assert_eq!(check(ours, false).unwrap(), ours);
        assert_eq!(
            check(ours - 1, false).unwrap(),
            ours - 1,
            "a rolling upgrade"
        );
        let newer = check(ours + 1, false).unwrap_err().to_string();
        assert!(
            newer.contains("newer than this csivol-server knows"),
            "{newer}"
        );
        assert!(newer.contains("restored into an empty prefix"), "{newer}");
        let older = check(ours - 2, false).unwrap_err().to_string();
        assert!(older.contains("more than one version older"), "{older}");
        assert!(
            older.contains(&format!("schema version {}", ours - 1)),
            "{older}"
        );
        let migrating = check(ours, true).unwrap_err().to_string();
        assert!(migrating.contains("being migrated"), "{migrating}");
        assert!(migrating.contains("upgrade finalize"), "{migrating}");
    }
}
