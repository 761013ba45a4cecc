//! After the state went back in time (a backup restored, an etcd snapshot restored): the
//! server holds back the volumes two nodes must not hold until every node that may hold
//! one has said what it holds (`csivol_rules::settle` decides which, and until when;
//! `admission::held_back` asks it), and
//! what the nodes hold that the restored state does not know is taken down through the
//! normal path: a claim found mounted is recorded `releasing` (its node unpublishes it),
//! an attachment found staged is recorded and goes `unstaging` (its node unstages it),
//! and each attachment is then detached with ControllerUnpublish where its plugin needs it.
//! An attachment the state has of which the node holds nothing is detached as well, and
//! made again when a claim needs it: the storage may have detached it since the backup.
//!
//! Where it stands is kept in `meta` (`heard`), so that every server of an etcd cluster
//! sees it and a server started again finds it. Each write is
//! small whatever the number of nodes and volumes (the etcd store commits a write in one
//! etcd transaction of bounded size): settling begins with a few keys, each node's
//! registration adds one, and what is no longer held moves on a few volumes at a time
//! ([`progress`], the leader's). `csivol-server restore` leaves `settle.pending` in the
//! restored state, and the server begins at its start.

use std::collections::BTreeSet;

use csivol_api::{AttachmentState, ClaimMode, ClaimRequest, ClaimState, RegisterRequest};
use csivol_rules::settle::{self, Settling};

use super::admission::held_back;
use super::attachments::{self, advance_volume, begin_detach};
use super::changes::{set_claim_state, touch_volume};
use super::events::event;
pub use super::heard::PENDING;
use super::heard::{AFTER, GENERATION, HEARD, RESTORED_AT, Recorded, hear, unreported};
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::VolumeRow;
use crate::store::{NewClaim, Snapshot, Txn};
use crate::watch::{Generation, Key};
use csivol_rules::kinds::EventKind;

/// Volumes moved on, or markers of an earlier settling forgotten, in one write.
const BATCH: usize = 8;

/// Whether [`at_start`] has anything to do: settling is to begin, or under way.
pub fn at_start_due(conn: &(impl Snapshot + ?Sized)) -> ApiResult<bool> {
    let r = Recorded::load(conn)?;
    Ok(r.pending || r.settling())
}

/// The restored state's first write at a server's start: begins settling if
/// `csivol-server restore` left word to; else, while settling, opens the window again for
/// one heartbeat TTL (`window_end`): the agents this state does not know contact this
/// server anew.
pub fn at_start(ctx: &mut impl Txn, generation: Generation, window_end: i64) -> ApiResult<()> {
    let r = Recorded::load(ctx)?;
    if r.pending {
        return begin(ctx, generation, window_end);
    }
    if r.settling() && r.after != 0 {
        ctx.put_meta(AFTER, Some(r.after.max(window_end)))?;
    }
    Ok(())
}

/// The state is of a new generation that went back in time (`generation`): every node it
/// knows is to report what it holds, and the window is open until `window_end`. Said again
/// in the same generation (by another server of an etcd cluster), it only keeps the window
/// open.
pub fn begin(ctx: &mut impl Txn, generation: Generation, window_end: i64) -> ApiResult<()> {
    let r = Recorded::load(ctx)?;
    let stamp = generation.0 as i64;
    if r.generation == Some(stamp) {
        if r.after != 0 {
            ctx.put_meta(AFTER, Some(r.after.max(window_end)))?;
        }
        return Ok(());
    }
    ctx.put_meta(PENDING, None)?;
    ctx.put_meta(GENERATION, Some(stamp))?;
    let now = ctx.now();
    ctx.put_meta(RESTORED_AT, Some(now))?;
    ctx.put_meta(AFTER, Some(window_end))?;
    let nodes: Vec<String> = ctx.nodes(None)?.into_iter().map(|n| n.name).collect();
    for node in &nodes {
        // Its agent learns at its next look that it is to register again.
        ctx.touch(Key::Node(node.clone()));
    }
    let waits = if nodes.is_empty() {
        "no node the state knows".to_owned()
    } else {
        format!("node(s) {}", nodes.join(", "))
    };
    event(
        ctx,
        EventKind::StateRestored,
        None,
        None,
        None,
        "server",
        format!(
            "the state went back in time (restored from a backup): volumes two nodes must not \
             hold go to no node until {waits} have registered again with what they hold (or \
             an operator says a node is gone: csivol unblock --node NODE --reason ...), and \
             for one heartbeat TTL at least; what nodes hold that the state does not have \
             is taken down"
        ),
    )
}

/// `node` registered while the state settles, reporting what it holds: it is heard from.
/// What it holds that the state does not know is recorded, to be taken down through the
/// normal path; a claim the state has there that it does not hold waits while its volume
/// is held back (its node would mount a volume another node may still hold). Called at the
/// end of the registration of a node still to report, or of one the state did not know
/// (registered after the backup); does nothing once settling is over.
pub fn reported(
    ctx: &mut impl Txn,
    node: &str,
    req: &RegisterRequest,
    limits: &Limits,
) -> ApiResult<()> {
    let r = Recorded::load(ctx)?;
    if !r.settling() {
        return Ok(());
    }
    hear(ctx, &r, node)?;
    let actor = format!("node:{node}");
    let mut volumes = BTreeSet::new();
    for p in &req.published {
        if ctx.claim(&p.volume, &p.alloc)?.is_some() {
            // Known (on this node, or, for the same alloc, elsewhere: one alloc holds one
            // claim of a volume, and that one stands).
            continue;
        }
        let Some(v) = ctx.volume(&p.volume)? else {
            // A volume the state does not know: the node takes it down by itself (its
            // desired state does not have it); csivol knows nothing to detach.
            continue;
        };
        // Write: what it was mounted for is not known, and a writer holds the most.
        let request = ClaimRequest::new(p.alloc.clone(), node, ClaimMode::Write);
        ctx.insert_claim(NewClaim {
            volume: &v.name,
            request: &request,
            state: ClaimState::Releasing,
            expires_at: None,
            // Nobody asked for it here: no claimer's claims count it.
            claimer: None,
            mount: &Default::default(),
        })?;
        if ctx.attachment(&v.name, node)?.is_none() {
            ctx.insert_attachment(&v.name, node, AttachmentState::Attached)?;
        }
        ctx.touch(Key::node_volume(node, &v.name));
        touch_volume(ctx, &v.name)?;
        event(
            ctx,
            EventKind::ClaimFound,
            Some(&v.name),
            Some(node),
            Some(&p.alloc),
            &actor,
            "found mounted on the node, which the restored state does not have: the node \
             takes it down (unpublish, unstage, then ControllerUnpublish where the plugin \
             needs it)",
        )?;
        volumes.insert(v.name);
    }
    for volume in &req.staged {
        if ctx.attachment(volume, node)?.is_some() || ctx.volume(volume)?.is_none() {
            continue;
        }
        // Attached: the volume's claims on the node keep it, if the state has any; with
        // none, the attachment goes `unstaging` when the volume moves on, below.
        ctx.insert_attachment(volume, node, AttachmentState::Attached)?;
        ctx.touch(Key::node_volume(node, volume));
        touch_volume(ctx, volume)?;
        event(
            ctx,
            EventKind::AttachmentFound,
            Some(volume),
            Some(node),
            None,
            &actor,
            "found staged on the node, attached there unknown to the restored state: it is \
             unstaged, then detached, unless a claim of the state needs it",
        )?;
        volumes.insert(volume.clone());
    }
    // What the state has attached to the node of which the node holds nothing: the
    // storage may have detached it since the backup (or never attached it), so the
    // attachment is not to be trusted. The node said it holds none of it, which is what
    // a detach waits for: it is detached (ControllerUnpublishVolume, which succeeds on a
    // volume not published), and attached again when a claim needs it.
    let holds: BTreeSet<&str> = req
        .staged
        .iter()
        .map(String::as_str)
        .chain(req.published.iter().map(|p| p.volume.as_str()))
        .collect();
    for a in ctx.attachments_of_node(node)? {
        let trusted = !matches!(
            a.state,
            AttachmentState::Attached | AttachmentState::Attaching
        );
        if trusted || holds.contains(a.volume.as_str()) {
            continue;
        }
        let Some(v) = ctx.volume(&a.volume)? else {
            continue;
        };
        event(
            ctx,
            EventKind::VolumeDetach,
            Some(&v.name),
            Some(node),
            None,
            &actor,
            "the restored state has the volume attached to the node, which holds nothing of \
             it: detached first, attached again when a claim needs it",
        )?;
        begin_detach(ctx, &v, node, false, limits)?;
        volumes.insert(v.name);
    }
    let published: BTreeSet<(&str, &str)> = req
        .published
        .iter()
        .map(|p| (p.volume.as_str(), p.alloc.as_str()))
        .collect();
    let now = ctx.now();
    for c in ctx.claims_of_node(node, None)? {
        let mounted = published.contains(&(c.volume.as_str(), c.alloc.as_str()));
        let on_its_way = matches!(c.state, ClaimState::Publishing | ClaimState::Ready);
        if mounted || !on_its_way {
            continue;
        }
        let Some(v) = ctx.volume(&c.volume)? else {
            continue;
        };
        if !held_back(ctx, &v, now)? {
            continue;
        }
        set_claim_state(ctx, &c, ClaimState::Pending)?;
        event(
            ctx,
            EventKind::ClaimHeld,
            Some(&c.volume),
            Some(node),
            Some(&c.alloc),
            &actor,
            "the restored state has this claim, which the node does not hold: it waits until \
             every node that may hold the volume has said what it holds, then the node \
             mounts it again",
        )?;
    }
    for v in volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// An operator (`actor`) said `node` is gone, holding nothing (unblocked it, or a fence
/// confirmed it): it is no longer waited for.
pub fn accounted(ctx: &mut impl Txn, node: &str, actor: &str) -> ApiResult<()> {
    if !unreported(ctx, node)? {
        return Ok(());
    }
    let r = Recorded::load(ctx)?;
    hear(ctx, &r, node)?;
    event(
        ctx,
        EventKind::NodeUnblocked,
        None,
        Some(node),
        None,
        actor,
        "node said gone: the restored state no longer waits for it to say what it holds",
    )
}

/// What [`progress`] would do now: settling moves on (the window passed, a volume no
/// longer held has claims waiting, nothing is held any more), or markers of a settling
/// that ended are left to forget.
pub fn progress_due(conn: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<bool> {
    let r = Recorded::load(conn)?;
    if !r.settling() {
        return Ok(!conn.meta(HEARD)?.is_empty());
    }
    if r.after != 0 && now >= r.after {
        return Ok(true);
    }
    if r.after == 0 && settled(conn, &r, now)? {
        return Ok(true);
    }
    Ok(!released(conn, now, 1)?.is_empty())
}

/// The leader's steps while the state settles, each a small write: closes the window
/// once it passed, moves on the waiting claims of a few volumes no longer held, and ends
/// settling once nothing is held back; afterwards, forgets the markers a few at a time.
/// Whether there is more to do at once.
pub fn progress(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<bool> {
    let now = ctx.now();
    let r = Recorded::load(ctx)?;
    if !r.settling() {
        let left = ctx.meta(HEARD)?;
        for (key, _) in left.iter().take(BATCH) {
            ctx.put_meta(key, None)?;
        }
        return Ok(left.len() > BATCH);
    }
    if r.after != 0 && now >= r.after {
        ctx.put_meta(AFTER, Some(0))?;
    }
    let volumes = released(ctx, now, BATCH + 1)?;
    for volume in volumes.iter().take(BATCH) {
        advance_volume(ctx, volume, limits)?;
    }
    if volumes.len() > BATCH {
        return Ok(true);
    }
    let r = Recorded::load(ctx)?;
    if settled(ctx, &r, now)? {
        ctx.put_meta(GENERATION, None)?;
        ctx.put_meta(AFTER, None)?;
        event(
            ctx,
            EventKind::StateSettled,
            None,
            None,
            None,
            "server",
            "every node the restored state knows has said what it holds (or was said gone): \
             no volume is held back any more",
        )?;
        // Its markers are forgotten next.
        return Ok(true);
    }
    Ok(false)
}

/// Whether nothing is held back any more: the window closed and every node heard from.
fn settled(conn: &(impl Snapshot + ?Sized), r: &Recorded, now: i64) -> ApiResult<bool> {
    let heard = r.heard(conn)?;
    let waiting: Vec<String> = conn
        .nodes(None)?
        .into_iter()
        .map(|n| n.name)
        .filter(|n| !heard.contains(n))
        .collect();
    Ok(settle::settled(&Settling {
        window_open: now < r.after,
        unreported: waiting.iter().map(|n| (n.as_str(), vec![])).collect(),
    }))
}

/// Up to `most` volumes with claims waiting to move on (`pending`, `attaching`) that are
/// not held back any more.
fn released(conn: &(impl Snapshot + ?Sized), now: i64, most: usize) -> ApiResult<Vec<String>> {
    let waiting: BTreeSet<String> = conn
        .claims(None, None)?
        .into_iter()
        .filter(|c| matches!(c.state, ClaimState::Pending | ClaimState::Attaching))
        .map(|c| c.volume)
        .collect();
    let mut out = Vec::new();
    for volume in waiting {
        if out.len() == most {
            break;
        }
        let Some(v) = conn.volume(&volume)? else {
            continue;
        };
        if settle::restricted(v.access_mode) && !held_back(conn, &v, now)? && moves(conn, &v)? {
            out.push(volume);
        }
    }
    Ok(out)
}

/// Whether [`advance_volume`] would move anything of `v` now.
fn moves(conn: &(impl Snapshot + ?Sized), v: &VolumeRow) -> ApiResult<bool> {
    let now = i64::MAX; // past any window: `held_back` was asked already
    let recorded = attachments::Recorded::load(conn, v, None, now)?;
    let changes = csivol_rules::transitions::next(&recorded.facts());
    Ok(!changes.claims.is_empty() || !changes.attachments.is_empty() || !changes.ops.is_empty())
}
