//! ControllerPublishVolume: a volume attached to a node for the claims there. Its owner is
//! the attachment (and the claims that wait for it).

use csivol_api::{ClaimState, ControllerOpKind, Report};

use super::super::queue::{Judged, Kind, OpError, Retrying, by_class};
use crate::error::ApiResult;
use crate::lifecycle::changes::{delete_attachment, set_claim_state, touch_volume};
use crate::lifecycle::events::event;
use crate::model::OpRow;
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

pub(super) struct Attach;

impl Kind for Attach {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        attachment_waiting(ctx, o, why)
    }

    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        _actor: &str,
    ) -> ApiResult<Judged> {
        if e.error.code == "RESOURCE_EXHAUSTED"
            && let Some(n) = &o.node
        {
            // The node holds fewer volumes than its limit said (ControllerPublishVolume's
            // error table: "8 RESOURCE_EXHAUSTED | Indicates that the maximum supported
            // number of volumes that can be attached to the specified node are already
            // attached"): its agent reads it again, and the next claim decision counts what
            // it reads. The publish keeps its retries ("Caller MUST ensure that the number
            // of volumes already attached to the node is less then the maximum supported
            // number of volumes before retrying with exponential backoff").
            ctx.ask_node_limits(n)?;
            ctx.touch(Key::NodeOps(n.clone()));
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        attachment_retrying(ctx, o, r)
    }

    /// The attachment goes, and the claims on the node that waited for it fail with the
    /// plugin's error, each with its `claim-failed` event: the claim is then taken down
    /// like a released one, and its events must say why it went.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        let n = o.node.clone().unwrap_or_default();
        delete_attachment(ctx, &o.volume, &n)?;
        let actor = o
            .host
            .as_deref()
            .map_or_else(|| "server".to_owned(), |h| format!("node:{h}"));
        for c in ctx.claims_of_volume(&o.volume)? {
            if c.node == n && matches!(c.state, ClaimState::Attaching | ClaimState::Pending) {
                ctx.set_claim_error(&c.volume, &c.alloc, e.message, None)?;
                set_claim_state(ctx, &c, ClaimState::Failed)?;
                event(
                    ctx,
                    EventKind::ClaimFailed,
                    Some(&c.volume),
                    Some(&n),
                    Some(&c.alloc),
                    &actor,
                    format!("failed: {}", e.message),
                )?;
            }
        }
        Ok(())
    }

    /// ControllerPublishVolume succeeded: the attachment is attached with its context.
    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::ControllerPublished {
            publish_context, ..
        } = report
        else {
            return Ok(false);
        };
        ctx.delete_op(o.id)?;
        if let Some(target) = &o.node
            && ctx.attachment_published(&o.volume, target, publish_context)?
        {
            ctx.touch(Key::node_volume(target, &o.volume));
            event(
                ctx,
                EventKind::VolumeAttached,
                Some(&o.volume),
                Some(target),
                None,
                actor,
                "ControllerPublishVolume succeeded",
            )?;
        }
        Ok(true)
    }

    fn moves_volume(&self) -> bool {
        true
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::Publish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(conn, o)?,
            capability: v.capability(),
            readonly: v.access_mode.max_writers() == Some(0),
            context: v.context.clone(),
            secrets: v.secrets.clone(),
        }))
    }
}

/// The plugin's id for the operation's node (NodeGetInfo's), or the node's name when its
/// plugin registered none.
pub(super) fn csi_node_id(conn: &dyn Snapshot, o: &OpRow) -> ApiResult<String> {
    let n = o.node.as_deref().unwrap_or_default();
    Ok(conn
        .node_plugin(n, &o.plugin)?
        .and_then(|p| p.csi_node_id)
        .unwrap_or_else(|| n.to_owned()))
}

/// An attach or detach waits for a controller host: the attachment and the claims waiting
/// for it say why.
pub(super) fn attachment_waiting(ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
    if let Some(n) = &o.node {
        ctx.note_attach_waiting(&o.volume, n, why)?;
    }
    touch_volume(ctx, &o.volume)
}

/// An attach or detach failed and is retried: the attachment and the claims waiting for it
/// show the error and when.
pub(super) fn attachment_retrying(ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
    if let Some(n) = &o.node {
        ctx.set_attach_retry(&o.volume, n, r.message, r.at)?;
    }
    touch_volume(ctx, &o.volume)
}
