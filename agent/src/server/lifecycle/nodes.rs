//! Nodes and liveness: registration, a lost node's return, drift found at registration,
//! loss.

use std::collections::BTreeSet;

use csivol_proto::api::{
    AttachmentState, ClaimRef, ClaimState, NodeStatus, RegisterRequest, validate_name,
};
use rusqlite::{Connection, params};

use super::attachments::advance_volume;
use super::ops::schedule_ops;
use super::reports::DRIFT;
use super::{Limits, delete_claim, event, exec, list_or, set_attachment_state, set_claim_state};
use crate::server::db::WriteCtx;
use crate::server::error::{ApiError, ApiResult};
use crate::server::model::{ClaimRow, NodePluginRow, NodeRow, VolumeRow, to_json};
use crate::server::watch::Key;

/// `POST /v1/nodes/{node}/register`. Returns whether the node had been lost.
pub fn register_node(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    req: &RegisterRequest,
    limits: &Limits,
) -> ApiResult<bool> {
    validate_name("node", node).map_err(ApiError::invalid)?;
    let mut ids = BTreeSet::new();
    for p in &req.plugins {
        validate_name("plugin", &p.id).map_err(ApiError::invalid)?;
        if !ids.insert(&p.id) {
            return Err(ApiError::invalid(format!(
                "plugin `{}` is listed twice",
                p.id
            )));
        }
    }
    let existing = NodeRow::load(ctx.tx, node)?;
    let was_lost = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Lost);
    let was_fenced = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Fenced);
    exec(
        ctx.tx,
        "INSERT INTO nodes (name, status, registered_at, fence_after_ms, labels) VALUES (?1, 'ready', ?2, ?3, ?4) \
         ON CONFLICT (name) DO UPDATE SET status = 'ready', lost_at = NULL, fence_after_ms = ?3, labels = ?4, \
         fence_failures = 0, fence_error = NULL",
        params![
            node,
            ctx.now,
            req.fence_after_ms.map(|v| v as i64),
            to_json(&req.labels)
        ],
    )?;
    let old_plugins: BTreeSet<String> = NodePluginRow::of_node(ctx.tx, node)?
        .into_iter()
        .map(|p| p.plugin)
        .collect();
    ctx.tx
        .execute("DELETE FROM node_plugins WHERE node = ?1", [node])?;
    for p in &req.plugins {
        let node_part = p.node.as_ref();
        exec(
            ctx.tx,
            "INSERT INTO node_plugins (node, plugin, registration, csi_node_id, max_volumes, node_service, controller, \
             controller_service, controller_publish, stage_unstage) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                node,
                p.id,
                to_json(p),
                node_part.map(|n| n.info.node_id.clone()),
                node_part.map_or(0, |n| n.info.max_volumes_per_node),
                node_part.is_some(),
                p.controller.is_some(),
                p.capabilities.controller_service,
                p.controller.is_some_and(|c| c.publish_unpublish_volume),
                node_part.is_some_and(|n| n.capabilities.stage_unstage_volume),
            ],
        )?;
    }
    ctx.touch(Key::Node(node.to_owned()));
    if was_fenced {
        // Its claims were force-released by the fence's unblock: nothing is resumed.
        crate::server::fence::returned(ctx, node, req)?;
    } else if was_lost {
        return_from_loss(ctx, node, &req.published, limits)?;
        event(
            ctx,
            "node-returned",
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            "lost node registered again",
        )?;
    } else {
        not_mounted_any_more(ctx, node, &req.published, limits)?;
        let verb = if existing.is_some() {
            "re-registered"
        } else {
            "registered"
        };
        let names: Vec<_> = req.plugins.iter().map(|p| p.id.as_str()).collect();
        event(
            ctx,
            "node-registered",
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            format!("node {verb} with plugins {}", names.join(", ")),
        )?;
    }
    let plugins: BTreeSet<String> = req
        .plugins
        .iter()
        .map(|p| p.id.clone())
        .chain(old_plugins)
        .collect();
    for p in plugins {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(was_lost)
}

/// A lost node is back. csivol runs no workloads, so those of its claims may still be
/// running: a blocked claim that nobody released meanwhile and that the node reports still
/// published (checked against its mount table) is ready again; one it no longer has (it
/// fenced itself, or its mounts are gone) is released. A claim it still has that an
/// operator released meanwhile is not in its desired state any more, so the node takes it
/// down; that is recorded here. Blocked attachments resume their normal lifecycle.
pub(super) fn return_from_loss(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    published: &[ClaimRef],
    limits: &Limits,
) -> ApiResult<()> {
    let blocked = claims_of_node(ctx.tx, node, Some(ClaimState::Blocked))?;
    let still_published = |c: &ClaimRow| {
        published
            .iter()
            .any(|p| p.volume == c.volume && p.alloc == c.alloc)
    };
    let mut volumes = BTreeSet::new();
    for c in &blocked {
        if c.release_pending {
            set_claim_state(ctx, c, ClaimState::Releasing)?;
            event(
                ctx,
                "claim-releasing",
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                "node came back: releasing the claim whose release was under way when the node was lost",
            )?;
        } else if crate::server::leases::expires(ClaimState::Ready, c.expires_at, ctx.now) {
            // Its lease ran out while the node was away: released the normal way, through
            // the node (which takes down whatever it still has).
            crate::server::leases::release_expired(ctx, c)?;
        } else if still_published(c) {
            // A claim whose `published` report never reached the server before the loss
            // has no target path yet: it is publishing until the node's report (queued or
            // made again) says where, so that nobody sees it ready without its path.
            let (state, message) = if c.target_path.is_some() {
                (
                    ClaimState::Ready,
                    "node came back with the volume still mounted from it: the claim is ready again",
                )
            } else {
                (
                    ClaimState::Publishing,
                    "node came back with the volume mounted from it: the claim is ready again once the node reports where",
                )
            };
            set_claim_state(ctx, c, state)?;
            event(
                ctx,
                "claim-resumed",
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                message,
            )?;
        } else {
            delete_claim(ctx, c)?;
            event(
                ctx,
                "claim-released",
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                "node came back without it published: blocked claim released",
            )?;
        }
        volumes.insert(c.volume.clone());
    }
    for p in published {
        let kept = ClaimRow::load(ctx.tx, &p.volume, &p.alloc)?.is_some_and(|c| c.node == node);
        if !kept && VolumeRow::load(ctx.tx, &p.volume)?.is_some() {
            event(
                ctx,
                "claim-taken-down",
                Some(&p.volume),
                Some(node),
                Some(&p.alloc),
                &format!("node:{node}"),
                "node came back with a claim that was released while it was lost: the node takes it down",
            )?;
        }
    }
    let atts: Vec<String> = ctx
        .tx
        .prepare_cached("SELECT volume FROM attachments WHERE node = ?1 AND state = 'blocked'")?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for v in atts {
        set_attachment_state(ctx, &v, node, AttachmentState::Attached)?;
        volumes.insert(v);
    }
    for v in volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// A node registers with what is really mounted on it. A claim recorded ready there that
/// it does not report is not ready any more (its agent restarted without the mount, or the
/// node was taken down): it is publishing again, and its drift is recorded.
pub(super) fn not_mounted_any_more(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    published: &[ClaimRef],
    limits: &Limits,
) -> ApiResult<()> {
    for c in claims_of_node(ctx.tx, node, Some(ClaimState::Ready))? {
        if published
            .iter()
            .any(|p| p.volume == c.volume && p.alloc == c.alloc)
        {
            continue;
        }
        record_drift(
            ctx,
            &c,
            &format!("node {node} registered without it mounted"),
            limits,
        )?;
    }
    Ok(())
}

/// A ready claim is not mounted from its volume any more: it is publishing again, with
/// why as its error, and the drift is an event.
pub(super) fn record_drift(
    ctx: &mut WriteCtx<'_>,
    c: &ClaimRow,
    reason: &str,
    limits: &Limits,
) -> ApiResult<()> {
    limits.metrics.claim_drifts.inc();
    set_claim_state(ctx, c, ClaimState::Publishing)?;
    exec(
        ctx.tx,
        "UPDATE claims SET error = ?1 WHERE volume = ?2 AND alloc = ?3",
        params![format!("{DRIFT}{reason}"), c.volume, c.alloc],
    )?;
    event(
        ctx,
        "claim-drift",
        Some(&c.volume),
        Some(&c.node),
        Some(&c.alloc),
        &format!("node:{}", c.node),
        format!("{DRIFT}{reason}; the claim waits for its node to publish it again"),
    )
}

pub fn claims_of_node(
    conn: &Connection,
    node: &str,
    state: Option<ClaimState>,
) -> ApiResult<Vec<ClaimRow>> {
    let sql = format!(
        "SELECT {} FROM claims WHERE node = ?1 AND (?2 IS NULL OR state = ?2) ORDER BY volume, alloc",
        crate::server::model::CLAIM_COLUMNS
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params![node, state.map(|s| s.as_str())], ClaimRow::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The node missed its heartbeats: its claims and attachments are blocked, and controller
/// operations it hosted go to another host.
/// `why` opens the event (`no heartbeat for 30s`).
pub fn mark_lost(ctx: &mut WriteCtx<'_>, node: &str, why: &str, limits: &Limits) -> ApiResult<()> {
    let Some(n) = NodeRow::load(ctx.tx, node)? else {
        return Ok(());
    };
    // A fenced node is off already: its volumes were unblocked, nothing is left to block.
    if n.status != NodeStatus::Ready {
        return Ok(());
    }
    exec(
        ctx.tx,
        "UPDATE nodes SET status = 'lost', lost_at = ?1 WHERE name = ?2",
        params![ctx.now, node],
    )?;
    ctx.touch(Key::Node(node.to_owned()));
    let claims = claims_of_node(ctx.tx, node, None)?;
    // A queued claim holds nothing: it stays in the queue (its lease, if any, runs on). A
    // claim being released (or cleaned up) when its node was lost stays released: when the
    // node returns it is taken down, not resumed.
    for c in &claims {
        if matches!(c.state, ClaimState::Releasing | ClaimState::Failed) {
            exec(
                ctx.tx,
                "UPDATE claims SET release_pending = 1 WHERE volume = ?1 AND alloc = ?2",
                params![c.volume, c.alloc],
            )?;
        }
        if !matches!(c.state, ClaimState::Blocked | ClaimState::Queued) {
            set_claim_state(ctx, c, ClaimState::Blocked)?;
        }
    }
    let atts: Vec<String> = ctx
        .tx
        .prepare_cached("SELECT volume FROM attachments WHERE node = ?1 AND state IN ('attaching', 'attached', 'unstaging')")?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for v in &atts {
        set_attachment_state(ctx, v, node, AttachmentState::Blocked)?;
        // A publish to a lost node is pointless; an unblock will unpublish whatever it did.
        exec(
            ctx.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = 'publish' AND node = ?2",
            params![v, node],
        )?;
    }
    let hosted: Vec<String> = ctx
        .tx
        .prepare_cached("SELECT DISTINCT plugin FROM ops WHERE host = ?1")?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    exec(
        ctx.tx,
        "UPDATE ops SET host = NULL, assigned_at = NULL WHERE host = ?1",
        [node],
    )?;
    let volumes: BTreeSet<&str> = claims
        .iter()
        .map(|c| c.volume.as_str())
        .chain(atts.iter().map(String::as_str))
        .collect();
    event(
        ctx,
        "node-lost",
        None,
        Some(node),
        None,
        "server",
        format!(
            "{why}: node lost; {} claim(s) and {} attachment(s) blocked until it returns or is unblocked",
            claims.len(),
            atts.len()
        ),
    )?;
    for v in volumes {
        let allocs: Vec<_> = claims
            .iter()
            .filter(|c| c.volume == v)
            .map(|c| c.alloc.as_str())
            .collect();
        event(
            ctx,
            "volume-blocked",
            Some(v),
            Some(node),
            None,
            "server",
            format!(
                "blocked: node {node} lost (claims: {})",
                list_or(&allocs, "none")
            ),
        )?;
    }
    for p in hosted {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(())
}
