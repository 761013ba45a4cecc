//! Exact retries in the lifecycle: every release leaves a tombstone of its claim (volume,
//! alloc), moved forward when the claim is finally removed, and a new claim whose request
//! was sent before its alloc's last release is refused (`csivol_rules::retries`). Kept for
//! the server's `request_memory`, then pruned by the leader.

use csivol_rules::retries::{self, Released};

use super::super::error::{ApiError, ApiResult};
use super::super::store::{Snapshot, Txn};

/// Most rows of each kind one prune removes: one prune is one write, and with the etcd
/// store one etcd transaction (`--etcd-max-txn-ops`, 128 by default) holds them all.
pub const PRUNE_BATCH: usize = 50;

/// Refuses a new claim of `alloc` on `volume` whose request was sent (by the client's
/// clock, `sent_at`) before the alloc's last release, or before the state was last found
/// restored (`settle` records when: the restored state may not know the release). A
/// request that does not say when it was sent (an older client) is not judged.
pub(super) fn refuse_if_released(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    alloc: &str,
    sent_at: Option<i64>,
) -> ApiResult<()> {
    let Some(sent_at) = sent_at else {
        return Ok(());
    };
    let restored_at = super::heard::meta(conn, super::heard::RESTORED_AT)?;
    if let Some(r) =
        restored_at.and_then(|at| retries::claim_before_restore(volume, alloc, sent_at, at))
    {
        return Err(ApiError::conflict(r.message).with_hint(r.hint));
    }
    // A tombstone past the request memory is not judged by: a request sent before it is
    // older than the memory, and refused as such.
    let Some(t) = conn.tombstone(volume, alloc)? else {
        return Ok(());
    };
    let released = Released {
        at: t.released_at,
        index: t.index,
    };
    match retries::claim_after_release(volume, alloc, sent_at, released) {
        None => Ok(()),
        Some(r) => Err(ApiError::conflict(r.message).with_hint(r.hint)),
    }
}

/// Drops the kept answers and tombstones older than `memory`, [`PRUNE_BATCH`] of each at
/// most; how many went (the caller prunes again while a batch is full).
pub fn prune_retries(ctx: &mut impl Txn, memory: std::time::Duration) -> ApiResult<usize> {
    let memory_ms = i64::try_from(memory.as_millis()).unwrap_or(i64::MAX);
    ctx.prune_retries(ctx.now().saturating_sub(memory_ms), PRUNE_BATCH)
}
