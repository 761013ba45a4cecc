//! A claim's mount (`claims.mount`, JSON `api::ClaimMount`): the group its workload writes
//! as and how it is applied.
//!
//! The column comes with one schema migration. With the etcd store a server may run on the
//! schema before it until `upgrade finalize`: a server of the previous release would drop
//! the group from every row it writes, so a claim asking for one is refused until then
//! (the lifecycle asks [`recorded`] first), and claims asking for nothing are recorded as
//! they always were.

use rusqlite::{Connection, params};

use super::statement::exec;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::writer::WriteCtx;
use csivol_api as api;

/// Whether the schema has the column (asked of the connection itself: a mirror migrated in
/// place by `upgrade finalize` has it from that moment on).
pub fn recorded(conn: &Connection) -> ApiResult<bool> {
    super::shape::has_column(conn, "claims", "mount")
}

/// Records the mount of a claim just inserted; an empty one is not written. A non-empty
/// one below the schema that records it is an error, never dropped.
pub fn record(
    ctx: &WriteCtx<'_>,
    volume: &str,
    alloc: &str,
    mount: &api::ClaimMount,
) -> ApiResult<()> {
    if mount.is_empty() {
        return Ok(());
    }
    if !recorded(ctx.tx)? {
        return Err(ApiError::internal(
            "a claim's group was to be recorded on a schema that does not keep it",
        ));
    }
    let json = serde_json::to_string(mount).map_err(|e| ApiError::internal(e.to_string()))?;
    exec(
        ctx.tx,
        "UPDATE claims SET mount = ?3 WHERE volume = ?1 AND alloc = ?2",
        params![volume, alloc, json],
    )?;
    Ok(())
}
