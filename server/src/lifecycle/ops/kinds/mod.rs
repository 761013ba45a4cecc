//! The kinds of controller operations, one file each, and the table that gives the queue's
//! engine each kind's part. A new kind is a file here and a row in [`of`] (besides its row
//! in `csivol_rules::kinds::OpKind`, its call in the API's `ControllerOpKind` and its
//! answer in `Report`).

use super::queue::Kind;
use csivol_rules::kinds::OpKind;

mod attach;
pub(in crate::lifecycle) mod create;
mod delete;
mod detach;
pub(in crate::lifecycle) mod expand;
mod find_snapshot;
pub(in crate::lifecycle) mod group_snapshot;
pub(in crate::lifecycle) mod modify;
pub(in crate::lifecycle) mod snapshot;
pub(in crate::lifecycle) mod stray;
pub(in crate::lifecycle) mod validate;
mod volume;

/// The part of each kind of operation: the table.
pub(super) fn of(kind: OpKind) -> &'static dyn Kind {
    match kind {
        OpKind::Publish => &attach::Attach,
        OpKind::Unpublish => &detach::Detach,
        OpKind::Create => &create::Create,
        OpKind::Delete => &delete::Delete,
        OpKind::Expand => &expand::Expand,
        OpKind::Modify => &modify::Modify,
        OpKind::CreateSnapshot | OpKind::DeleteSnapshot => &snapshot::Snapshot,
        OpKind::CreateGroupSnapshot | OpKind::DeleteGroupSnapshot => &group_snapshot::GroupSnapshot,
        OpKind::ValidateVolume => &validate::Validate,
        OpKind::FindSnapshot => &find_snapshot::FindSnapshot,
    }
}
