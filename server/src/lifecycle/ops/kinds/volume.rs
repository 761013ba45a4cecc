//! What the kinds whose owner is a volume (create, delete, expand, modify) share: how the
//! volume says that its operation waits for a controller host or is retried.

use super::super::queue::Retrying;
use crate::error::ApiResult;
use crate::lifecycle::changes::touch_volume;
use crate::model::OpRow;
use crate::store::Txn;

/// The volume says why its operation waits (without counting as a change of the volume).
pub(super) fn waiting(ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
    ctx.set_volume_error(&o.volume, why, false)?;
    touch_volume(ctx, &o.volume)
}

/// The volume shows its operation's error and when it is tried again.
pub(super) fn retrying(ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
    ctx.set_volume_error(&o.volume, &r.said(), true)?;
    touch_volume(ctx, &o.volume)
}
