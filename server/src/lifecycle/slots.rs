//! A node's volume slots and the stagings kept there after a release (`lingers`). The CSI
//! spec's NodeGetInfo `max_volumes_per_node` is the "Maximum number of volumes that
//! controller can publish to the node"; a staging kept with no claim is still published
//! there and holds its slot. Keeping it is an optimisation for the member's next claim
//! on the node, which must never cost another volume's claim its place: a claim that
//! finds the node's slots full only of such stagings is admitted (`admission`), and once
//! it is recorded the oldest of them ends ([`make_room`]) and is taken down like any
//! released staging (NodeUnstageVolume, then ControllerUnpublishVolume). The claim's own
//! attachment waits until the detach has freed the slot ([`full`], read by
//! `csivol_rules::transitions`): the limit is never passed, not even for a moment. When
//! an attachment leaves a node, the claims waiting there move on ([`waiting_on`]).
//!
//! A staging is not kept (`lingers::linger_for`) while a claim of another volume waits
//! for a slot on the node ([`someone_waits`]): it would hold what that claim waits for.

use csivol_api::{AttachmentState, ClaimState};
use csivol_rules::kinds::EventKind;

use super::events::event;
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::{ClaimRow, LingerRow, VolumeRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;

/// How a volume is moved forward (`attachments::advance_volume`, given, not imported, so
/// that slots stay below a volume's advance).
pub(super) type Advance<T> = fn(&mut T, &str, &Limits) -> ApiResult<()>;

/// The stagings kept on `node` after a release of volumes of `plugin` other than
/// `except`, that a claim there may end for their slot: the attachment is `attached`
/// and no claim of the volume stands on the node. Oldest first.
pub(super) fn yieldable(
    conn: &(impl Snapshot + ?Sized),
    node: &str,
    plugin: &str,
    except: &str,
) -> ApiResult<Vec<LingerRow>> {
    let mut out = Vec::new();
    for l in conn.lingers(None, Some(node))? {
        if l.volume == except {
            continue;
        }
        let Some(v) = conn.volume(&l.volume)? else {
            continue;
        };
        let attached = conn
            .attachment(&l.volume, node)?
            .is_some_and(|a| a.state == AttachmentState::Attached);
        let claimed = conn
            .claims_of_volume(&l.volume)?
            .iter()
            .any(|c| c.node == node && c.state != ClaimState::Queued);
        if v.plugin == plugin && attached && !claimed {
            out.push(l);
        }
    }
    // The oldest release first: like a cache that drops its least recently used entry,
    // the staging whose volume went longest without a claim on the node is the least
    // likely to be claimed there again soon, and it had the longest use of its linger.
    out.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.volume.cmp(&b.volume)));
    Ok(out)
}

/// How many of the slots of `plugin` in use on `node` are stagings kept after a release
/// that give way to a claim (for the node's view).
pub fn lingering_slots(
    conn: &(impl Snapshot + ?Sized),
    node: &str,
    plugin: &str,
) -> ApiResult<u32> {
    // No volume is named "" (names are validated): every staging of the node counts.
    let n = yieldable(conn, node, plugin, "")?.len();
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The plugin's slot limit on `node` (0: none, or the node does not run it).
fn limit(conn: &(impl Snapshot + ?Sized), node: &str, plugin: &str) -> ApiResult<u32> {
    Ok(conn
        .node_plugin(node, plugin)?
        .filter(|p| p.node_service)
        .map_or(0, |p| p.max_volumes))
}

/// Whether a new attachment of `v` to `node` would pass the plugin's limit there: the
/// other volumes of the plugin attached there (detaching ones included, as they are
/// published until ControllerUnpublishVolume returns) fill every slot. The claims there
/// do not count: only an attachment is published to the node.
pub(super) fn full(conn: &(impl Snapshot + ?Sized), v: &VolumeRow, node: &str) -> ApiResult<bool> {
    let max = limit(conn, node, &v.plugin)?;
    if max == 0 {
        return Ok(false);
    }
    let mut attached = 0u32;
    for a in conn.attachments_of_node(node)? {
        if a.volume != v.name
            && conn
                .volume(&a.volume)?
                .is_some_and(|o| o.plugin == v.plugin)
        {
            attached += 1;
        }
    }
    Ok(attached >= max)
}

/// Ends, for the claims of `v` waiting to be attached on a node whose slots are full, the
/// oldest stagings kept there after a release, as many as it takes to bring the slots in
/// use (claims counted) back to the limit. Each ends with an event that says why, and its
/// volume moves on (`advance`): the node unstages it and the controller unpublishes it.
pub(super) fn make_room<T: Txn>(
    ctx: &mut T,
    v: &VolumeRow,
    claims: &[ClaimRow],
    limits: &Limits,
    advance: Advance<T>,
) -> ApiResult<()> {
    let mut nodes: Vec<&ClaimRow> = claims
        .iter()
        .filter(|c| c.state == ClaimState::Pending)
        .collect();
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    nodes.dedup_by(|a, b| a.node == b.node);
    for c in nodes {
        let node = c.node.as_str();
        let max = limit(&*ctx, node, &v.plugin)?;
        if max == 0 || ctx.attachment(&v.name, node)?.is_some() {
            continue;
        }
        let used = ctx.slots_used(node, &v.plugin)?;
        let over = used.saturating_sub(max) as usize;
        if over == 0 {
            continue;
        }
        for l in yieldable(&*ctx, node, &v.plugin, &v.name)?
            .into_iter()
            .take(over)
        {
            ctx.delete_linger(&l.volume, node)?;
            ctx.touch(Key::node_volume(node, &l.volume));
            event(
                ctx,
                EventKind::StagingLingerEnded,
                Some(&l.volume),
                Some(node),
                Some(&l.alloc),
                "server",
                format!(
                    "the staging kept after alloc {}'s release ends: ended for volume {}'s claim \
                     on node {node} (alloc {}), the node's slots are full (plugin `{}` takes {max} \
                     volumes there)",
                    l.alloc, v.name, c.alloc, v.plugin
                ),
            )?;
            advance(ctx, &l.volume, limits)?;
        }
    }
    Ok(())
}

/// The volumes with a claim on `node` that may wait for a slot there: queued, or pending
/// (its attachment not made yet). Moved on when an attachment leaves the node.
pub(super) fn waiting_on(conn: &(impl Snapshot + ?Sized), node: &str) -> ApiResult<Vec<String>> {
    let mut out: Vec<String> = conn
        .claims_of_node(node, None)?
        .into_iter()
        .filter(|c| matches!(c.state, ClaimState::Queued | ClaimState::Pending))
        .map(|c| c.volume)
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Whether a claim of a volume of `plugin` other than `except` waits for a slot on
/// `node`: the plugin's slots there are all in use and such a claim is queued, or pending
/// with no attachment yet. A queued claim may wait for something else (a claim ahead of
/// it on its own volume); it is counted all the same, as a staging not kept costs a
/// NodeStageVolume at most, and a slot held from a claim that needs it costs the claim.
pub(super) fn someone_waits(
    conn: &(impl Snapshot + ?Sized),
    node: &str,
    plugin: &str,
    except: &str,
) -> ApiResult<bool> {
    let max = limit(conn, node, plugin)?;
    if max == 0 || conn.slots_used(node, plugin)? < max {
        return Ok(false);
    }
    for c in conn.claims_of_node(node, None)? {
        if c.volume == except || !matches!(c.state, ClaimState::Queued | ClaimState::Pending) {
            continue;
        }
        let same_plugin = conn.volume(&c.volume)?.is_some_and(|o| o.plugin == plugin);
        let unattached = conn.attachment(&c.volume, node)?.is_none();
        if same_plugin && (c.state == ClaimState::Queued || unattached) {
            return Ok(true);
        }
    }
    Ok(false)
}
