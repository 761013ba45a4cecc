//! The attachment lifecycle: a volume's recorded facts loaded for [`transitions`], its
//! decisions written back, and detaches begun.

use csivol_api::domain::AccessMode;
use csivol_api::{AttachmentState, NodeStatus};

use super::admission::{grant_queued, held_back};
use super::changes::{delete_attachment, set_attachment_state, set_claim_state, touch_volume};
use super::events::event;
use super::lingers::Lingers;
use super::ops::schedule_ops;
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::{AttachmentRow, ClaimRow, VolumeRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::transitions::{self, AttachmentChange, AttachmentFact, ClaimFact, Facts, Op};

/// What is recorded about a volume, as [`transitions`] reads it.
pub(super) struct Recorded {
    access_mode: AccessMode,
    controller_publish: bool,
    claims: Vec<ClaimRow>,
    attachments: Vec<AttachmentRow>,
    nodes: Vec<(String, NodeStatus)>,
    held: bool,
    lingers: Lingers,
}

impl Recorded {
    /// Loads the facts of `v`, with the status of every node its claims and attachments
    /// name, and of `also` (the node of a claim not recorded yet).
    /// `now` says whether the volume is still held back after a restore.
    pub(super) fn load(
        conn: &(impl Snapshot + ?Sized),
        v: &VolumeRow,
        also: Option<&str>,
        now: i64,
    ) -> ApiResult<Self> {
        Ok(Self {
            access_mode: v.access_mode,
            controller_publish: conn.needs_controller_publish(&v.plugin)?,
            claims: conn.claims_of_volume(&v.name)?,
            attachments: conn.attachments_of_volume(&v.name)?,
            nodes: conn.node_statuses(&v.name, also)?,
            held: held_back(conn, v, now)?,
            lingers: Lingers::load(conn, v, now)?,
        })
    }

    pub(super) fn facts(&self) -> Facts<'_> {
        Facts {
            access_mode: self.access_mode,
            controller_publish: self.controller_publish,
            claims: self
                .claims
                .iter()
                .map(|c| ClaimFact {
                    alloc: &c.alloc,
                    node: &c.node,
                    state: c.state,
                    release_pending: c.release_pending,
                })
                .collect(),
            attachments: self
                .attachments
                .iter()
                .map(|a| AttachmentFact {
                    node: &a.node,
                    state: a.state,
                    lingering: self.lingers.lingering(a),
                })
                .collect(),
            nodes: self.nodes.iter().map(|(n, s)| (n.as_str(), *s)).collect(),
            held: self.held,
        }
    }
}

/// Moves a volume's claims and attachments as far forward as the recorded facts allow:
/// grants what its queue may, then writes what [`transitions::next`] decides.
pub fn advance_volume(ctx: &mut impl Txn, volume: &str, limits: &Limits) -> ApiResult<()> {
    let Some(v) = ctx.volume(volume)? else {
        return Ok(());
    };
    // A free pool member goes first to a claim in its pool's line that came before its
    // own queued claims.
    super::pool_line::serve_member(ctx, volume, limits, advance_volume)?;
    grant_queued(ctx, &v)?;
    let recorded = Recorded::load(&*ctx, &v, None, ctx.now())?;
    let changes = transitions::next(&recorded.facts());
    for a in &changes.attachments {
        match *a {
            AttachmentChange::Set { node, state } => {
                set_attachment_state(ctx, volume, node, state)?;
            }
            AttachmentChange::Create { node, state } => {
                ctx.insert_attachment(volume, node, state)?;
                ctx.touch(Key::node_volume(node, volume));
            }
        }
    }
    for o in &changes.ops {
        match *o {
            Op::Publish { node } => {
                ctx.queue_op(OpKind::Publish, &v.plugin, volume, Some(node), "{}")?;
            }
        }
    }
    for &(alloc, state) in &changes.claims {
        let c = recorded
            .claims
            .iter()
            .find(|c| c.alloc == alloc)
            .expect("a claim of the facts");
        set_claim_state(ctx, c, state)?;
    }
    if !changes.ops.is_empty() {
        schedule_ops(ctx, &v.plugin, limits)?;
    }
    // A staging kept after a release that is no longer kept ends, saying why.
    let moved: Vec<(&str, AttachmentState)> = changes
        .attachments
        .iter()
        .filter_map(|a| match *a {
            AttachmentChange::Set { node, state } => Some((node, state)),
            AttachmentChange::Create { .. } => None,
        })
        .collect();
    recorded.lingers.settle(ctx, &v, &recorded.claims, &moved)?;
    // An operation held for the volume's release may run now, or no longer.
    super::after_release::resume_held(ctx, volume, limits)?;
    // A per-job volume nothing holds any more is deleted.
    super::job_cleanup::collect(ctx, volume, limits)
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
        ctx.touch(Key::node_volume(node, &v.name));
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
