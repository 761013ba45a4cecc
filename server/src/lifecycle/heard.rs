//! Who has been heard from since the state went back in time, as `meta` records it while
//! the state settles (`settle`): `settle.generation` (the generation settling began in),
//! `settle.after` (until when the window for nodes the state does not know is open; 0 once
//! it closed), and `settle.heard.<generation>.<node>` for each node heard from (or said
//! gone) since; the nodes the state knows without one are waited for. And
//! `settle.pending`, left by `csivol-server restore` in the state it restores. Admission
//! reads it to hold volumes back, a node's desired state to ask it to register again.

use std::collections::BTreeSet;

use crate::error::ApiResult;
use crate::store::{Snapshot, Txn};

/// Left by `csivol-server restore` in the state it restores: begin at start.
pub const PENDING: &str = "settle.pending";
pub(super) const GENERATION: &str = "settle.generation";
pub(super) const AFTER: &str = "settle.after";
pub(super) const HEARD: &str = "settle.heard.";
/// When (unix ms, the server's clock) the state was last found gone back in time; kept
/// after settling ends, so that a claim request sent before it is refused
/// (`retries::refuse_if_released`).
pub(super) const RESTORED_AT: &str = "restored.at";

/// The value of the `meta` key `key`, exactly.
pub(super) fn meta(conn: &(impl Snapshot + ?Sized), key: &str) -> ApiResult<Option<i64>> {
    Ok(conn
        .meta(key)?
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v))
}

/// Where settling stands, as recorded.
#[derive(Debug, Default)]
pub(super) struct Recorded {
    /// The generation it began in; `None`: not settling.
    pub(super) generation: Option<i64>,
    /// Until when (unix ms) the window is open; 0 once closed.
    pub(super) after: i64,
    pub(super) pending: bool,
}

impl Recorded {
    pub(super) fn load(conn: &(impl Snapshot + ?Sized)) -> ApiResult<Self> {
        Ok(Self {
            generation: meta(conn, GENERATION)?,
            after: meta(conn, AFTER)?.unwrap_or(0),
            pending: meta(conn, PENDING)?.is_some(),
        })
    }

    pub(super) fn settling(&self) -> bool {
        self.generation.is_some()
    }

    /// The prefix of the markers of the nodes heard from in this settling.
    fn heard_prefix(&self) -> Option<String> {
        self.generation
            .map(|g| format!("{HEARD}{:016x}.", g as u64))
    }

    /// The nodes heard from (or said gone) in this settling.
    pub(super) fn heard(&self, conn: &(impl Snapshot + ?Sized)) -> ApiResult<BTreeSet<String>> {
        let Some(prefix) = self.heard_prefix() else {
            return Ok(BTreeSet::new());
        };
        Ok(conn
            .meta(&prefix)?
            .into_iter()
            .map(|(k, _)| k[prefix.len()..].to_owned())
            .collect())
    }
}

/// Whether `node` is still to say what it holds: its desired state says to register
/// again (and `lost`, which an older agent reads the same way), and it acts on nothing
/// until it has.
pub(super) fn unreported(conn: &(impl Snapshot + ?Sized), node: &str) -> ApiResult<bool> {
    let r = Recorded::load(conn)?;
    let Some(prefix) = r.heard_prefix() else {
        return Ok(false);
    };
    Ok(meta(conn, &format!("{prefix}{node}"))?.is_none())
}

/// Marks `node` heard from in this settling.
pub(super) fn hear(ctx: &mut impl Txn, r: &Recorded, node: &str) -> ApiResult<()> {
    match r.heard_prefix() {
        Some(prefix) => ctx.put_meta(&format!("{prefix}{node}"), Some(1)),
        None => Ok(()),
    }
}
