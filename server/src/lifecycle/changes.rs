//! The row changes every job makes, each with the keys it wakes: a claim's state (and
//! what that changes in its node's desired state), a claim removed, an attachment's state
//! or its removal; and the time a client's duration ends.

use csivol_api::{AttachmentState, ClaimState};

use crate::error::{ApiError, ApiResult};
use crate::model::ClaimRow;
use crate::store::Txn;
use crate::watch::Key;

/// Stamps the volume changed and wakes its watchers.
pub(super) fn touch_volume(ctx: &mut (impl Txn + ?Sized), volume: &str) -> ApiResult<()> {
    ctx.stamp_volume(volume)?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}

/// What a claim puts in its node's desired state, by its state alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClaimEntry {
    /// Publish it (once its attachment is attached).
    Publish,
    /// Take it down and report it unpublished.
    Unpublish,
    None,
}

pub(super) fn claim_entry(state: ClaimState) -> ClaimEntry {
    match state {
        ClaimState::Publishing | ClaimState::Ready => ClaimEntry::Publish,
        ClaimState::Releasing | ClaimState::Failed => ClaimEntry::Unpublish,
        _ => ClaimEntry::None,
    }
}

/// Sets a claim's state. Its node's agent is woken only when that changes what the claim
/// puts in the node's desired state: `publishing` → `ready`, which the agent's own report
/// makes, leaves its entry as it was, and a wake-up would cost the agent and the server a
/// round trip and a read per claim for nothing. A release (whoever asked: its holder, an
/// expired lease, an operator, a fence) leaves the claim's tombstone.
pub(super) fn set_claim_state(
    ctx: &mut (impl Txn + ?Sized),
    c: &ClaimRow,
    state: ClaimState,
) -> ApiResult<()> {
    ctx.set_claim_state(&c.volume, &c.alloc, state)?;
    if state == ClaimState::Releasing && c.state != ClaimState::Releasing {
        ctx.put_tombstone(&c.volume, &c.alloc)?;
    }
    if claim_entry(c.state) != claim_entry(state) {
        ctx.touch(Key::node_volume(&c.node, &c.volume));
    }
    touch_volume(ctx, &c.volume)
}

/// Starts releasing a claim through its node (for a lease that ran out).
pub fn begin_release(ctx: &mut impl Txn, c: &ClaimRow) -> ApiResult<()> {
    set_claim_state(ctx, c, ClaimState::Releasing)
}

/// Forgets a claim that holds nothing (a queued one).
pub fn remove_claim(ctx: &mut impl Txn, c: &ClaimRow) -> ApiResult<()> {
    delete_claim(ctx, c)
}

/// Removes a claim; its tombstone moves to now: a claim request sent while it was still
/// being released would have been refused then, and is refused after it too.
pub(super) fn delete_claim(ctx: &mut (impl Txn + ?Sized), c: &ClaimRow) -> ApiResult<()> {
    ctx.delete_claim(&c.volume, &c.alloc)?;
    ctx.put_tombstone(&c.volume, &c.alloc)?;
    ctx.touch(Key::node_volume(&c.node, &c.volume));
    touch_volume(ctx, &c.volume)
}

pub(super) fn set_attachment_state(
    ctx: &mut (impl Txn + ?Sized),
    volume: &str,
    node: &str,
    state: AttachmentState,
) -> ApiResult<()> {
    ctx.set_attachment_state(volume, node, state)?;
    ctx.touch(Key::node_volume(node, volume));
    touch_volume(ctx, volume)
}

/// Removes an attachment; an expansion the volume was to run on that node has nothing
/// left to grow there.
pub(super) fn delete_attachment(
    ctx: &mut (impl Txn + ?Sized),
    volume: &str,
    node: &str,
) -> ApiResult<()> {
    ctx.delete_attachment(volume, node)?;
    super::node_expansion::detached(ctx, volume, node)?;
    ctx.touch(Key::node_volume(node, volume));
    touch_volume(ctx, volume)
}

/// The time `ms` after `now`, for a duration a client sent in `field` (a lease, a token's
/// validity): the duration in the range of one, the sum in that of a time, never wrapped.
pub(crate) fn time_after(now: i64, field: &str, ms: u64) -> ApiResult<i64> {
    use csivol_api::limits;
    let ms = limits::duration_ms(field, ms).map_err(ApiError::out_of_range)?;
    let end = now.checked_add(ms).ok_or_else(|| {
        ApiError::invalid(format!("`{field}` of {ms} ms from now is past any time"))
    })?;
    limits::time_ms(field, u64::try_from(end).unwrap_or(0)).map_err(ApiError::out_of_range)
}
