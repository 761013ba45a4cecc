//! Stagings kept after a release: a pool's `linger`. When the last claim of a pool member
//! on a node is released, the node takes the claim's target down (NodeUnpublishVolume) and
//! keeps the staging, so that its next claim of the member publishes from it and skips
//! NodeStageVolume. The attachment stays `attached` with no claim; no NodeUnstageVolume
//! and no ControllerUnpublishVolume run until the linger ends. The CSI spec allows it:
//! NodeStageVolume "SHOULD be called by the CO when a workload that wants to use the
//! specified volume is placed (scheduled) on the specified node for the first time or for
//! the first time since a `NodeUnstageVolume` call for the specified volume was called and
//! returned success on that node" (so not again while the staging stands), and
//! NodeUnstageVolume "MAY be called by the CO when ... all the workloads using the volume
//! on a node have finished", which it "MUST guarantee ... is called after all
//! `NodeUnpublishVolume` have been called and returned success", and "before calling
//! `ControllerUnpublishVolume` for the given node and the given volume": the node
//! unpublishes at the release, and unstages, then the controller unpublishes, when the
//! linger ends.
//!
//! Only a plugin with STAGE_UNSTAGE_VOLUME has a staging to keep. For the others nothing
//! lingers: their release ends in ControllerUnpublishVolume as before, since a volume
//! kept controller-published to a node with no staging and no publication saves no node
//! call, and holds a slot of the node's `max_volumes_per_node` for nothing.
//!
//! A staging kept still holds a slot of the node's `max_volumes_per_node`, and gives it up
//! to another volume's claim on the node that needs it (`slots`): nothing lingers while
//! such a claim waits, and a claim that finds the slots full of lingers ends the oldest.
//!
//! A linger ends (and the staging is taken down like any other release's) when its time
//! runs out, when a claim on another node wants a single-node volume (then at once: that
//! claim waits for the unstage and the detach as it would behind any release, which
//! `transitions::next` decides), when the node claims the volume again (the staging is in
//! use), when the volume leaves its pool, its pool stops lingering or is deleted, or the
//! volume is taken out of service. A node lost while lingering blocks the volume like a
//! claim it held: the attachment is `blocked`, the row stays to say why.
//!
//! Below the attachment lifecycle (`attachments` loads and settles through it); what
//! calls `advance_volume` to end a linger (pools, labels, eligibility, the leader's timer)
//! lives above it.

use std::time::Duration;

use csivol_api::{AttachmentState, ClaimState, Eligibility, NodeStatus};
use csivol_rules::kinds::EventKind;

use super::events::event;
use crate::error::ApiResult;
use crate::model::{AttachmentRow, ClaimRow, LingerRow, VolumeRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;

/// The pool `v` is a member of and how long it lingers (ms), or why nothing of `v` lingers.
pub(super) fn pool_linger(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
) -> ApiResult<Result<(String, u64), String>> {
    if let Some(a) = conn.volume_availability(&v.name)? {
        return Ok(Err(format!(
            "the volume is out of service ({})",
            a.eligibility.as_str()
        )));
    }
    if !conn.pools_kept()? {
        return Ok(Err("the schema keeps no pools".to_owned()));
    }
    let labels = conn.volume_labels(&v.name)?;
    let Some(pool) = conn
        .pools()?
        .into_iter()
        .find(|p| p.selects(&v.name, &labels))
    else {
        return Ok(Err("the volume is in no pool any more".to_owned()));
    };
    match pool.linger_ms.filter(|l| *l > 0) {
        Some(ms) => Ok(Ok((pool.name, ms))),
        None => Ok(Err(format!("pool {} does not linger", pool.name))),
    }
}

/// How long `node` keeps `v` staged once its claims there are released (ms): the linger of
/// its pool, when the node is ready and takes new claims, runs the plugin with STAGE_UNSTAGE_VOLUME, has the
/// volume attached, holds no claim of it but ones being released (a failed claim is
/// cleaned up, not kept), and no other node wants a single-node volume.
pub(super) fn linger_for(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    node: &str,
    claims: &[ClaimRow],
) -> ApiResult<Option<(String, u64)>> {
    let attached = conn
        .attachment(&v.name, node)?
        .is_some_and(|a| a.state == AttachmentState::Attached);
    let held = |c: &&ClaimRow| c.state != ClaimState::Queued;
    let only_releases = claims
        .iter()
        .filter(held)
        .filter(|c| c.node == node)
        .all(|c| c.state == ClaimState::Releasing);
    let elsewhere =
        v.access_mode.is_single_node() && claims.iter().filter(held).any(|c| c.node != node);
    if !attached || !only_releases || elsewhere {
        return Ok(None);
    }
    let ready = conn
        .node(node)?
        .is_some_and(|n| n.status == NodeStatus::Ready && n.eligibility == Eligibility::Eligible);
    let staging = conn
        .node_plugin(node, &v.plugin)?
        .is_some_and(|p| p.stage_unstage);
    if !ready || !staging {
        return Ok(None);
    }
    // A staging kept would hold the slot that another volume's claim on the node waits
    // for: a linger never costs a claim its place.
    if super::slots::someone_waits(conn, node, &v.plugin, &v.name)? {
        return Ok(None);
    }
    // After the state went back in time, what the nodes hold that it did not know is
    // taken down (`settle`), a claim found mounted among it: nothing starts lingering
    // until every node has said what it holds.
    if super::heard::Recorded::load(conn)?.settling() {
        return Ok(None);
    }
    Ok(pool_linger(conn, v)?.ok())
}

/// The node took `c`'s target down at its release: if the volume lingers, the node keeps
/// its staging, recorded with the alloc whose release left it.
pub(super) fn start(ctx: &mut impl Txn, v: &VolumeRow, c: &ClaimRow) -> ApiResult<()> {
    if c.state != ClaimState::Releasing || !ctx.lingers(Some(&v.name), Some(&c.node))?.is_empty() {
        return Ok(());
    }
    let claims = ctx.claims_of_volume(&v.name)?;
    let Some((pool, ms)) = linger_for(&*ctx, v, &c.node, &claims)? else {
        return Ok(());
    };
    let now = ctx.now();
    let row = LingerRow {
        volume: v.name.clone(),
        node: c.node.clone(),
        alloc: c.alloc.clone(),
        since: now,
        until: now.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)),
    };
    ctx.put_linger(&row)?;
    ctx.touch(Key::node_volume(&c.node, &v.name));
    event(
        ctx,
        EventKind::StagingLingering,
        Some(&v.name),
        Some(&c.node),
        Some(&c.alloc),
        "server",
        format!(
            "node {} keeps the volume staged after alloc {}'s release: pool {pool} lingers {}",
            c.node,
            c.alloc,
            humantime::format_duration(Duration::from_millis(ms))
        ),
    )
}

/// A volume's lingers as `transitions` reads them: a row counts while its time runs, the
/// volume still lingers, and its attachment is `attached`.
pub(super) struct Lingers {
    rows: Vec<LingerRow>,
    /// Why nothing of the volume lingers now, if so.
    not: Option<String>,
    /// The nodes of `rows` that take no new claims, and so keep nothing for a next one.
    out_of_service: Vec<(String, &'static str)>,
    now: i64,
}

impl Lingers {
    pub(super) fn load(
        conn: &(impl Snapshot + ?Sized),
        v: &VolumeRow,
        now: i64,
    ) -> ApiResult<Self> {
        let rows = conn.lingers(Some(&v.name), None)?;
        let not = if rows.is_empty() {
            None
        } else if let Some(o) = conn.held_ops(&v.name)?.first() {
            Some(format!(
                "{} waits for the volume's release to finish",
                o.kind.call()
            ))
        } else {
            pool_linger(conn, v)?.err()
        };
        let mut out_of_service = Vec::new();
        for l in &rows {
            if let Some(n) = conn.node(&l.node)?
                && n.eligibility != Eligibility::Eligible
            {
                out_of_service.push((l.node.clone(), n.eligibility.as_str()));
            }
        }
        Ok(Self {
            rows,
            not,
            out_of_service,
            now,
        })
    }

    pub(super) fn lingering(&self, a: &AttachmentRow) -> bool {
        a.state == AttachmentState::Attached
            && self.not.is_none()
            && !self.out_of_service.iter().any(|(n, _)| *n == a.node)
            && self
                .rows
                .iter()
                .any(|l| l.node == a.node && l.until > self.now)
    }

    /// Ends the rows whose staging is no longer kept, now that the volume moved: each with
    /// an event that says why. `moved` is the state each node's attachment moved to.
    pub(super) fn settle(
        &self,
        ctx: &mut impl Txn,
        v: &VolumeRow,
        claims: &[ClaimRow],
        moved: &[(&str, AttachmentState)],
    ) -> ApiResult<()> {
        for l in &self.rows {
            let state = match moved.iter().find(|(n, _)| *n == l.node) {
                Some((_, s)) => Some(*s),
                None => ctx.attachment(&v.name, &l.node)?.map(|a| a.state),
            };
            let on_node: Vec<&str> = claims
                .iter()
                .filter(|c| c.node == l.node && c.state != ClaimState::Queued)
                .map(|c| c.alloc.as_str())
                .collect();
            let why = match state {
                // Lost while lingering: the row says why the volume is blocked.
                Some(AttachmentState::Blocked) => continue,
                Some(AttachmentState::Attached) if on_node.is_empty() => continue,
                Some(AttachmentState::Attached) => format!(
                    "claimed again on the node (alloc {}): published from the staging it kept",
                    on_node.join(", ")
                ),
                None => "its attachment is gone".to_owned(),
                Some(_) => self.why_ended(v, l, claims),
            };
            ctx.delete_linger(&v.name, &l.node)?;
            ctx.touch(Key::node_volume(&l.node, &v.name));
            event(
                ctx,
                EventKind::StagingLingerEnded,
                Some(&v.name),
                Some(&l.node),
                Some(&l.alloc),
                "server",
                format!(
                    "the staging kept after alloc {}'s release ends: {why}",
                    l.alloc
                ),
            )?;
        }
        Ok(())
    }

    /// Why a staging kept stops being kept and is taken down.
    fn why_ended(&self, v: &VolumeRow, l: &LingerRow, claims: &[ClaimRow]) -> String {
        if let Some(not) = &self.not {
            return not.clone();
        }
        if let Some((_, e)) = self.out_of_service.iter().find(|(n, _)| *n == l.node) {
            return format!("the node takes no new claims ({e})");
        }
        let wanting = claims.iter().find(|c| {
            c.node != l.node
                && matches!(
                    c.state,
                    ClaimState::Pending | ClaimState::Attaching | ClaimState::Publishing
                )
        });
        match wanting {
            Some(c) if v.access_mode.is_single_node() => format!(
                "alloc {} on node {} needs the volume, which is {}",
                c.alloc, c.node, v.access_mode
            ),
            _ if l.until <= self.now => "its linger ran out".to_owned(),
            _ => "the node takes it down".to_owned(),
        }
    }
}
