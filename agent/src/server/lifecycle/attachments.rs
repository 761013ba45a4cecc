//! The attachment lifecycle: a volume's claims and attachments moved forward from the
//! recorded facts, and detaches begun.

use std::collections::BTreeMap;

use csivol_proto::api::{AttachmentState, ClaimState};
use rusqlite::params;

use super::claims::grant_queued;
use super::ops::{insert_op, schedule_ops};
use super::{
    Limits, delete_attachment, event, exec, set_attachment_state, set_claim_state, touch_volume,
};
use crate::server::db::WriteCtx;
use crate::server::error::ApiResult;
use crate::server::model::{AttachmentRow, ClaimRow, VolumeRow, needs_controller_publish};
use crate::server::watch::Key;

/// Moves a volume's claims and attachments as far forward as the recorded facts allow.
pub fn advance_volume(ctx: &mut WriteCtx<'_>, volume: &str, limits: &Limits) -> ApiResult<()> {
    let Some(v) = VolumeRow::load(ctx.tx, volume)? else {
        return Ok(());
    };
    grant_queued(ctx, &v)?;
    let claims = ClaimRow::of_volume(ctx.tx, volume)?;
    let mut atts: BTreeMap<String, AttachmentRow> = AttachmentRow::of_volume(ctx.tx, volume)?
        .into_iter()
        .map(|a| (a.node.clone(), a))
        .collect();
    let needs_cp = needs_controller_publish(ctx.tx, &v.plugin)?;
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
                    ctx.tx
                        .prepare_cached(
                            "INSERT INTO attachments (volume, node, state, publish_context, updated_at) \
                             VALUES (?1, ?2, ?3, '{}', ?4)",
                        )?
                        .execute(params![volume, c.node, state.as_str(), ctx.now])?;
                    ctx.touch(Key::Node(c.node.clone()));
                    if needs_cp {
                        insert_op(ctx, "publish", &v.plugin, volume, Some(&c.node), "{}")?;
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
                            updated_at: ctx.now,
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
    ctx: &mut WriteCtx<'_>,
    v: &VolumeRow,
    node: &str,
    forced: bool,
    limits: &Limits,
) -> ApiResult<()> {
    if needs_controller_publish(ctx.tx, &v.plugin)? {
        exec(
            ctx.tx,
            "UPDATE attachments SET state = 'detaching', forced = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
             WHERE volume = ?3 AND node = ?4",
            params![forced, ctx.now, v.name, node],
        )?;
        exec(
            ctx.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = 'publish' AND node = ?2",
            params![v.name, node],
        )?;
        insert_op(ctx, "unpublish", &v.plugin, &v.name, Some(node), "{}")?;
        ctx.touch(Key::Node(node.to_owned()));
        touch_volume(ctx, &v.name)?;
        schedule_ops(ctx, &v.plugin, limits)?;
    } else {
        delete_attachment(ctx, &v.name, node)?;
        event(
            ctx,
            "volume-detached",
            Some(&v.name),
            Some(node),
            None,
            "server",
            "detached from node",
        )?;
    }
    Ok(())
}
