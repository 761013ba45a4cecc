//! Operations held until their volume's release has finished: the shell of
//! `csivol_rules::after_release`. A caller that waits (`--wait`, the `x-csivol-wait`
//! header) and finds only a release under way in the way of an offline expansion or a
//! deletion, or asks for a snapshot or a modification while its volume is being released,
//! gets its operation queued held (`model::HELD_FOR_RELEASE`): recorded like any other, so it
//! survives a restart, and never handed to a controller host until released here. Every
//! move of the volume asks the rule again ([`resume_held`], from `advance_volume`), and the
//! leader looks at every held operation every few seconds besides
//! ([`resume_all_held`]), for a volume moved by a path that does not advance it.

use super::events::event;
use super::ops::queue::Held;
use super::ops::{self, schedule_ops};
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::{AttachmentRow, ClaimRow, OpRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::after_release::{self as rule, Resume, Standing};
use csivol_rules::kinds::EventKind;

/// A volume's claims and attachments, as the rule reads them.
pub(super) struct Use {
    claims: Vec<ClaimRow>,
    attachments: Vec<AttachmentRow>,
}

impl Use {
    pub(super) fn load(conn: &(impl Snapshot + ?Sized), volume: &str) -> ApiResult<Self> {
        Ok(Self {
            claims: conn.claims_of_volume(volume)?,
            attachments: conn.attachments_of_volume(volume)?,
        })
    }

    pub(super) fn standing(&self) -> Standing<'_> {
        let claims: Vec<rule::Claim<'_>> = self
            .claims
            .iter()
            .map(|c| rule::Claim {
                alloc: &c.alloc,
                node: &c.node,
                state: c.state,
            })
            .collect();
        let attachments: Vec<rule::Attachment<'_>> = self
            .attachments
            .iter()
            .map(|a| rule::Attachment {
                node: &a.node,
                state: a.state,
            })
            .collect();
        rule::standing(&claims, &attachments)
    }
}

/// The note a held operation carries while it waits.
pub(super) fn why_held(volume: &str) -> String {
    format!("waits for the release of volume `{volume}` to finish")
}

/// Runs, keeps or drops the operations held for the release of `volume`, as the rule says
/// now that the volume moved.
pub(super) fn resume_held(ctx: &mut impl Txn, volume: &str, limits: &Limits) -> ApiResult<()> {
    let held = ctx.held_ops(volume)?;
    if held.is_empty() {
        return Ok(());
    }
    let Some(v) = ctx.volume(volume)? else {
        // Its volume is gone (deregistered meanwhile): nothing is left to run it on.
        for o in &held {
            ctx.delete_op(o.id)?;
        }
        return Ok(());
    };
    let used = Use::load(&*ctx, volume)?;
    let standing = used.standing();
    let mut released = false;
    for o in &held {
        let Some(h) = ops::held(o.kind) else {
            // Only a kind that may be held is ever queued held.
            continue;
        };
        match rule::resume(h.needs(), &standing) {
            Resume::Wait => {}
            Resume::Run => {
                ctx.release_held_op(o.id)?;
                started(ctx, h, o, volume)?;
                released = true;
            }
            Resume::Drop(why) => dropped(ctx, h, o, volume, &why)?,
        }
    }
    if released {
        schedule_ops(ctx, &v.plugin, limits)?;
    }
    Ok(())
}

/// [`resume_held`] for every volume with a held operation (the leader's safety net).
pub fn resume_all_held(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<()> {
    for v in ctx.volumes_with_held_ops()? {
        resume_held(ctx, &v, limits)?;
    }
    Ok(())
}

/// A held operation was released: what shows it as waiting now says it runs.
fn started(ctx: &mut impl Txn, h: &dyn Held, o: &OpRow, volume: &str) -> ApiResult<()> {
    let kind = h.started(ctx, o, volume)?;
    ctx.touch(Key::Volume(volume.to_owned()));
    event(
        ctx,
        kind,
        Some(volume),
        None,
        None,
        "server",
        format!(
            "the volume's release has finished: {} is sent now",
            o.kind.call()
        ),
    )
}

/// A held operation can no longer run as asked: it is dropped, and what waited for it
/// ends failed with `why`, so that its caller is told.
fn dropped(ctx: &mut impl Txn, h: &dyn Held, o: &OpRow, volume: &str, why: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let message = format!("{} was not sent: {why}", o.kind.call());
    h.dropped(ctx, o, volume, &message)?;
    ctx.touch(Key::Volume(volume.to_owned()));
    event(
        ctx,
        EventKind::OperationFailed,
        Some(volume),
        None,
        None,
        "server",
        message,
    )
}
