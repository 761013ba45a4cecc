//! The attachment lifecycle: a volume's recorded facts loaded for [`transitions`], its
//! decisions written back, and detaches begun.

use csivol_proto::api::NodeStatus;
use csivol_proto::domain::AccessMode;
use rusqlite::{Connection, params};

use super::claims::grant_queued;
use super::ops::{insert_op, schedule_ops};
use super::{
    Limits, delete_attachment, event, exec, set_attachment_state, set_claim_state, touch_volume,
};
use crate::server::db::WriteCtx;
use crate::server::error::{ApiError, ApiResult};
use crate::server::model::{AttachmentRow, ClaimRow, VolumeRow, needs_controller_publish};
use crate::server::transitions::{self, AttachmentChange, AttachmentFact, ClaimFact, Facts, Op};
use crate::server::watch::Key;

/// What is recorded about a volume, as [`transitions`] reads it.
pub(super) struct Recorded {
    access_mode: AccessMode,
    controller_publish: bool,
    claims: Vec<ClaimRow>,
    attachments: Vec<AttachmentRow>,
    nodes: Vec<(String, NodeStatus)>,
}

impl Recorded {
    /// Loads the facts of `v`, with the status of every node its claims and attachments
    /// name, and of `also` (the node of a claim not recorded yet).
    pub(super) fn load(conn: &Connection, v: &VolumeRow, also: Option<&str>) -> ApiResult<Self> {
        let nodes = conn
            .prepare_cached(
                "SELECT name, status FROM nodes WHERE name = ?2 OR name IN \
                 (SELECT node FROM claims WHERE volume = ?1 UNION SELECT node FROM attachments WHERE volume = ?1)",
            )?
            .query_map(params![v.name, also], |r| Ok((r.get(0)?, r.get::<_, String>(1)?)))?
            .map(|r| {
                let (name, status) = r?;
                Ok((name, status.parse().map_err(ApiError::internal)?))
            })
            .collect::<ApiResult<_>>()?;
        Ok(Self {
            access_mode: v.access_mode,
            controller_publish: needs_controller_publish(conn, &v.plugin)?,
            claims: ClaimRow::of_volume(conn, &v.name)?,
            attachments: AttachmentRow::of_volume(conn, &v.name)?,
            nodes,
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
                })
                .collect(),
            nodes: self.nodes.iter().map(|(n, s)| (n.as_str(), *s)).collect(),
        }
    }
}

/// Moves a volume's claims and attachments as far forward as the recorded facts allow:
/// grants what its queue may, then writes what [`transitions::next`] decides.
pub fn advance_volume(ctx: &mut WriteCtx<'_>, volume: &str, limits: &Limits) -> ApiResult<()> {
    let Some(v) = VolumeRow::load(ctx.tx, volume)? else {
        return Ok(());
    };
    grant_queued(ctx, &v)?;
    let recorded = Recorded::load(ctx.tx, &v, None)?;
    let changes = transitions::next(&recorded.facts());
    for a in &changes.attachments {
        match *a {
            AttachmentChange::Set { node, state } => {
                set_attachment_state(ctx, volume, node, state)?;
            }
            AttachmentChange::Create { node, state } => {
                ctx.tx
                    .prepare_cached(
                        "INSERT INTO attachments (volume, node, state, publish_context, updated_at) \
                         VALUES (?1, ?2, ?3, '{}', ?4)",
                    )?
                    .execute(params![volume, node, state.as_str(), ctx.now])?;
                ctx.touch(Key::Node(node.to_owned()));
            }
        }
    }
    for o in &changes.ops {
        match *o {
            Op::Publish { node } => {
                insert_op(ctx, "publish", &v.plugin, volume, Some(node), "{}")?;
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
