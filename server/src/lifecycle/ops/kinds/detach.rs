//! ControllerUnpublishVolume: a volume detached from a node once nothing of it is left
//! there (or an operator or a fence said the node is gone). Its owner is the attachment.
//! An attachment is never dropped on an error: the unpublish is retried until it
//! succeeds, so the volume is never reported free while it may still be attached.

use csivol_api::{ControllerOpKind, Report};

use super::super::queue::{Judged, Kind, OpError, Retrying};
use super::attach::{attachment_retrying, attachment_waiting, csi_node_id};
use crate::error::ApiResult;
use crate::lifecycle::changes::delete_attachment;
use crate::lifecycle::events::event;
use crate::model::OpRow;
use crate::store::{Snapshot, Txn};
use csivol_rules::kinds::EventKind;

pub(super) struct Detach;

impl Kind for Detach {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        attachment_waiting(ctx, o, why)
    }

    /// NOT_FOUND means the volume is not published there: the detach is done. Every other
    /// error is retried.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        actor: &str,
    ) -> ApiResult<Judged> {
        if e.error.code == "NOT_FOUND" {
            finish(ctx, o, actor)?;
            return Ok(Judged::Ended);
        }
        Ok(Judged::Retry)
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        attachment_retrying(ctx, o, r)
    }

    /// Never final (see [`Detach::judge`]).
    fn failed(&self, _ctx: &mut dyn Txn, _o: &OpRow, _e: &OpError<'_>) -> ApiResult<()> {
        Ok(())
    }

    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::ControllerUnpublished { .. } = report else {
            return Ok(false);
        };
        finish(ctx, o, actor)?;
        Ok(true)
    }

    fn moves_volume(&self) -> bool {
        true
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::Unpublish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(conn, o)?,
            secrets: v.secrets.clone(),
        }))
    }
}

/// The volume is detached from the node: the operation and the attachment go.
fn finish(ctx: &mut dyn Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let node = o.node.clone().unwrap_or_default();
    let forced = ctx
        .attachments_of_volume(&o.volume)?
        .into_iter()
        .any(|a| a.node == node && a.forced);
    delete_attachment(ctx, &o.volume, &node)?;
    let how = if forced {
        "force-detached (ControllerUnpublishVolume without the node)"
    } else {
        "ControllerUnpublishVolume succeeded: detached"
    };
    event(
        ctx,
        EventKind::VolumeDetached,
        Some(&o.volume),
        Some(&node),
        None,
        actor,
        how,
    )
}
