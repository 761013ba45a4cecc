//! The controller-operation queue: operations queued, handed to healthy controller hosts
//! within limits, answered, retried with backoff, or failed. Its engine (`queue`) knows no
//! kind of operation; each kind (attach, detach, create, delete, expand, modify, snapshot,
//! group snapshot) is a file of `kinds/` and a row of its table. This file binds the two
//! for the rest of the lifecycle.

use csivol_api::{self as api, Report};

use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::OpRow;
use crate::store::{Snapshot, Txn};
use csivol_rules::kinds::OpKind;

pub(super) mod kinds;
pub(super) mod queue;

pub use queue::plugins_with_due_ops;

/// Hands `plugin`'s due operations to its controller hosts ([`queue::schedule`]).
pub fn schedule_ops(ctx: &mut impl Txn, plugin: &str, limits: &Limits) -> ApiResult<()> {
    queue::schedule(ctx, plugin, limits, kinds::of)
}

/// A controller host's report about one of its operations ([`queue::answered`]): the
/// volume that may move on. A CreateVolume answer that is not current is not dropped: a
/// volume it made that nothing records is deleted ([`kinds::stray::late_created`]).
pub(super) fn answered(
    ctx: &mut impl Txn,
    host: &str,
    report: &Report,
    limits: &Limits,
    generation: Option<&str>,
) -> ApiResult<Option<String>> {
    if let Some(plugin) = kinds::stray::late_created(ctx, host, report, generation, kinds::of)? {
        schedule_ops(ctx, &plugin, limits)?;
    }
    queue::answered(ctx, host, report, limits, generation, kinds::of)
}

/// What an agent is sent to run an operation ([`queue::shown`]).
pub fn op_to_api(conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<api::ControllerOp>> {
    queue::shown(conn, o, kinds::of)
}

/// What operations of `kind` give the ones held for their volume's release, where they
/// may be held.
pub(super) fn held(kind: OpKind) -> Option<&'static dyn queue::Held> {
    kinds::of(kind).held()
}
