//! The attachment lifecycle: a volume's recorded facts loaded for [`transitions`], its
//! decisions written back, and detaches begun.

use csivol_api::domain::AccessMode;
use csivol_api::{AttachmentState, ClaimState, NodeStatus};

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
    /// The nodes of its claims where a new attachment would pass the plugin's limit.
    full: Vec<String>,
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
        let claims = conn.claims_of_volume(&v.name)?;
        let attachments = conn.attachments_of_volume(&v.name)?;
        // Only a claim that would make a new attachment asks how full its node is.
        let mut wanting: Vec<&str> = claims
            .iter()
            .filter(|c| c.state == ClaimState::Pending)
            .map(|c| c.node.as_str())
            .chain(also)
            .filter(|n| !attachments.iter().any(|a| a.node == *n))
            .collect();
        wanting.sort_unstable();
        wanting.dedup();
        let mut full = Vec::new();
        for node in wanting {
            if super::slots::full(conn, v, node)? {
                full.push(node.to_owned());
            }
        }
        Ok(Self {
            access_mode: v.access_mode,
            controller_publish: conn.needs_controller_publish(&v.plugin)?,
            nodes: conn.node_statuses(&v.name, also)?,
            held: held_back(conn, v, now)?,
            lingers: Lingers::load(conn, v, now)?,
            claims,
            attachments,
            full,
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
            full: self.full.iter().map(String::as_str).collect(),
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
    // A claim that needs a slot taken only by stagings kept after a release ends the
    // oldest of them; it waits, `pending`, for their detach (`full` below).
    let claims = ctx.claims_of_volume(volume)?;
    super::slots::make_room(ctx, &v, &claims, limits, advance_volume)?;
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
    note_slots(ctx, &v, &recorded, &changes.claims)?;
    // An operation held for the volume's release may run now, or no longer.
    super::after_release::resume_held(ctx, volume, limits)?;
    // A per-job volume nothing holds any more is deleted.
    super::job_cleanup::collect(ctx, volume, limits)
}

/// Why a claim waits, `pending`, on a node whose slots are full.
fn slot_note(node: &str, plugin: &str) -> String {
    format!(
        "waits for a free slot on node {node}: volumes of plugin `{plugin}` attached there take \
         every slot, and it is attached once one of them is detached"
    )
}

/// Says why the claims on a full node wait, and, once a claim that waited moves on, that
/// it no longer does (the note would otherwise stand until the claim is ready).
fn note_slots(
    ctx: &mut impl Txn,
    v: &VolumeRow,
    recorded: &Recorded,
    moved: &[(&str, ClaimState)],
) -> ApiResult<()> {
    for node in &recorded.full {
        let why = slot_note(node, &v.plugin);
        let noted = recorded.claims.iter().all(|c| {
            c.node != *node || c.state != ClaimState::Pending || c.error.as_deref() == Some(&why)
        });
        if !noted {
            ctx.note_attach_waiting(&v.name, node, &why)?;
            touch_volume(ctx, &v.name)?;
        }
    }
    for c in &recorded.claims {
        let waited = c.error.as_deref() == Some(&slot_note(&c.node, &v.plugin));
        if waited
            && moved
                .iter()
                .any(|(a, s)| *a == c.alloc && *s != ClaimState::Pending)
        {
            let now = format!(
                "a slot on node {} is free: the volume is attached there",
                c.node
            );
            ctx.set_claim_error(&v.name, &c.alloc, &now, None)?;
        }
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
        slot_freed(ctx, node, &v.name, limits)?;
    }
    Ok(())
}

/// An attachment of `volume` left `node`: the claims of other volumes that may wait for
/// that slot move on.
pub(super) fn slot_freed(
    ctx: &mut impl Txn,
    node: &str,
    volume: &str,
    limits: &Limits,
) -> ApiResult<()> {
    for w in super::slots::waiting_on(&*ctx, node)? {
        if w != volume {
            advance_volume(ctx, &w, limits)?;
        }
    }
    Ok(())
}
