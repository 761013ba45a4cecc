//! The attachment lifecycle: a volume's claims and attachments moved forward from the
//! recorded facts, and detaches begun.

use std::collections::BTreeMap;

use csivol_proto::api::{AttachmentState, ClaimState};

use super::claims::grant_queued;
use super::ops::schedule_ops;
use super::{
    Limits, delete_attachment, event, set_attachment_state, set_claim_state, touch_volume,
};
use crate::server::error::ApiResult;
use crate::server::kinds::{EventKind, OpKind};
use crate::server::model::{AttachmentRow, VolumeRow};
use crate::server::store::Txn;
use crate::server::watch::Key;

/// Moves a volume's claims and attachments as far forward as the recorded facts allow.
pub fn advance_volume(ctx: &mut impl Txn, volume: &str, limits: &Limits) -> ApiResult<()> {
    let Some(v) = ctx.volume(volume)? else {
        return Ok(());
    };
    grant_queued(ctx, &v)?;
    let claims = ctx.claims_of_volume(volume)?;
    let mut atts: BTreeMap<String, AttachmentRow> = ctx
        .attachments_of_volume(volume)?
        .into_iter()
        .map(|a| (a.node.clone(), a))
        .collect();
    let needs_cp = ctx.needs_controller_publish(&v.plugin)?;
    let mut ops_added = false;

    // An attachment with no claim left waits for the node to unstage; one that gains a
    // claim again is simply attached.
    for a in atts.values_mut() {
        let has_claims = claims
            .iter()
            .any(|c| c.node == a.node && c.state != ClaimState::Queued);
        let next = match a.state {
            AttachmentState::Attached if !has_claims => AttachmentState::Unstaging,
            AttachmentState::Unstaging if has_claims => AttachmentState::Attached,
            _ => continue,
        };
        set_attachment_state(ctx, volume, &a.node.clone(), next)?;
        a.state = next;
    }

    for c in &claims {
        if !matches!(
            c.state,
            ClaimState::Pending | ClaimState::Attaching | ClaimState::Publishing
        ) {
            continue;
        }
        let next = match atts.get(&c.node).map(|a| a.state) {
            Some(AttachmentState::Attached) => ClaimState::Publishing,
            Some(AttachmentState::Attaching) => ClaimState::Attaching,
            Some(AttachmentState::Detaching | AttachmentState::Unstaging) => ClaimState::Pending,
            Some(AttachmentState::Blocked) => ClaimState::Blocked,
            None => {
                let elsewhere = atts.keys().any(|n| *n != c.node);
                if v.access_mode.is_single_node() && elsewhere {
                    // The volume must be detached from its other node first.
                    ClaimState::Pending
                } else {
                    let state = if needs_cp {
                        AttachmentState::Attaching
                    } else {
                        AttachmentState::Attached
                    };
                    ctx.insert_attachment(volume, &c.node, state)?;
                    ctx.touch(Key::Node(c.node.clone()));
                    if needs_cp {
                        ctx.queue_op(OpKind::Publish, &v.plugin, volume, Some(&c.node), "{}")?;
                        ops_added = true;
                    }
                    atts.insert(
                        c.node.clone(),
                        AttachmentRow {
                            volume: volume.to_owned(),
                            node: c.node.clone(),
                            state,
                            publish_context: BTreeMap::new(),
                            forced: false,
                            error: None,
                            next_retry_at: None,
                            updated_at: ctx.now(),
                        },
                    );
                    if needs_cp {
                        ClaimState::Attaching
                    } else {
                        ClaimState::Publishing
                    }
                }
            }
        };
        if next != c.state {
            set_claim_state(ctx, c, next)?;
        }
    }
    if ops_added {
        schedule_ops(ctx, &v.plugin, limits)?;
    }
    Ok(())
}

/// Starts taking an attachment down: ControllerUnpublish where the plugin needs it, else the
/// attachment is simply gone.
pub(super) fn begin_detach(
    ctx: &mut impl Txn,
    v: &VolumeRow,
    node: &str,
    forced: bool,
    limits: &Limits,
) -> ApiResult<()> {
    if ctx.needs_controller_publish(&v.plugin)? {
        ctx.set_attachment_detaching(&v.name, node, forced)?;
        ctx.delete_op_for(OpKind::Publish, &v.name, node)?;
        ctx.queue_op(OpKind::Unpublish, &v.plugin, &v.name, Some(node), "{}")?;
        ctx.touch(Key::Node(node.to_owned()));
        touch_volume(ctx, &v.name)?;
        schedule_ops(ctx, &v.plugin, limits)?;
    } else {
        delete_attachment(ctx, &v.name, node)?;
        event(
            ctx,
            EventKind::VolumeDetached,
            Some(&v.name),
            Some(node),
            None,
            "server",
            "detached from node",
        )?;
    }
    Ok(())
}
