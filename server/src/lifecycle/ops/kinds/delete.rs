//! DeleteVolume: a volume deleted by its plugin, `deleting` until then, and deregistered
//! once it is. Its owner is the volume. A deletion asked for with a wait while the
//! volume's release is under way is held until the volume is detached (`after_release`).

use csivol_api::{ControllerOpKind, Report};
use csivol_rules::after_release::Needs;

use super::super::queue::{Failure, Held, Judged, Kind, OpError, Retrying, by_class};
use super::{stray, volume};
use crate::error::ApiResult;
use crate::lifecycle::events::event;
use crate::model::{Lifecycle, OpRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

pub(super) struct Delete;

impl Kind for Delete {
    /// A stray volume's deletion has no owner to show it.
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        if stray::is_stray(o) {
            return Ok(());
        }
        volume::waiting(ctx, o, why)
    }

    /// NOT_FOUND means the plugin has no such volume: the deletion is done.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        actor: &str,
    ) -> ApiResult<Judged> {
        if e.error.code == "NOT_FOUND" {
            if stray::is_stray(o) {
                stray::finish(ctx, o, actor)?;
            } else {
                finish(ctx, o, actor)?;
            }
            return Ok(Judged::Ended);
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        if stray::is_stray(o) {
            return Ok(());
        }
        volume::retrying(ctx, o, r)
    }

    /// A stray volume's: on the volume whose creation made it, saying what is left.
    fn failure(&self, _conn: &dyn Snapshot, o: &OpRow, e: &OpError<'_>) -> ApiResult<Failure> {
        if stray::is_stray(o) {
            let (volume, message) = stray::failure_message(o, e.message)?;
            return Ok(Failure {
                volume: Some(volume),
                node: None,
                message,
            });
        }
        Ok(Failure {
            volume: Some(o.volume.clone()),
            node: o.node.clone(),
            message: e.message.to_owned(),
        })
    }

    /// A failed deletion leaves the volume as it was, with the plugin's error (a stray
    /// volume is left in the storage, as the failure's event says).
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        if stray::is_stray(o) {
            return Ok(());
        }
        ctx.set_volume_lifecycle(&o.volume, Lifecycle::Ready, Some(e.message))?;
        ctx.touch(Key::Volume(o.volume.clone()));
        Ok(())
    }

    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::Deleted { .. } = report else {
            return Ok(false);
        };
        if stray::is_stray(o) {
            stray::finish(ctx, o, actor)?;
        } else {
            finish(ctx, o, actor)?;
        }
        Ok(true)
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        if stray::is_stray(o) {
            return stray::shown(conn, o);
        }
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::Delete {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            secrets: v.secrets.clone(),
        }))
    }

    fn held(&self) -> Option<&dyn Held> {
        Some(self)
    }
}

impl Held for Delete {
    fn needs(&self) -> Needs {
        Needs::Detached
    }

    fn started(&self, _ctx: &mut dyn Txn, _o: &OpRow, _volume: &str) -> ApiResult<EventKind> {
        Ok(EventKind::VolumeDeleting)
    }

    /// The volume stays, ready, with why it was not deleted.
    fn dropped(&self, ctx: &mut dyn Txn, _o: &OpRow, volume: &str, message: &str) -> ApiResult<()> {
        ctx.set_volume_lifecycle(volume, Lifecycle::Ready, Some(message))
    }
}

/// DeleteVolume succeeded (or the plugin no longer has the volume): it is deregistered.
fn finish(ctx: &mut dyn Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    ctx.delete_deleting_volume(&o.volume)?;
    ctx.touch(Key::Volume(o.volume.clone()));
    event(
        ctx,
        EventKind::VolumeDeleted,
        Some(&o.volume),
        None,
        None,
        actor,
        "DeleteVolume succeeded; volume deregistered",
    )
}
