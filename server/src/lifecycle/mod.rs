//! Everything that changes cluster state, each function running inside one write
//! transaction, one file per job: `volumes`, `claims`, `attachments` (the attachment
//! lifecycle), `ops` (the controller-operation queue), `after_release` (operations held
//! until their volume's release has finished), `nodes` (registration, loss, return,
//! eligibility, removal), `reports` (agents' reports), `operator` (unblock, detach),
//! `expand`, `snapshots`, `reconcile` (controller listings), `leases`, `tokens`, `hosting`
//! (controller hosts), `fence` (a fence's record) and `desired` (a node's desired state).
//! This file holds what they share: the event log and the row changes every job makes.
//! Decisions that need no state are `csivol_rules`'; reads and writes go through the
//! store's traits, never SQL.
//!
//! Handlers change the facts (a claim is recorded, a node reports a volume unstaged) and
//! then call [`advance_volume`], which moves the volume's claims and attachments as far
//! forward as those facts allow. Keeping that one function the only place that derives
//! the next step is what keeps the lifecycle consistent.

use csivol_api::{AttachmentState, ClaimState, PluginError};

use super::error::{ApiError, ApiResult};
use super::model::ClaimRow;
use super::store::{Event, Txn};
use super::watch::Key;
use csivol_rules::kinds::EventKind;

mod after_release;
mod attachments;
mod claims;
mod desired;
mod expand;
mod fence;
mod group_snapshots;
mod hosting;
mod labels;
mod leases;
mod modify;
mod nodes;
mod operator;
mod ops;
mod reconcile;
mod reports;
mod retries;
pub(crate) mod settle;
mod snapshots;
#[cfg(test)]
mod tests;
mod tokens;
mod volumes;

pub use after_release::resume_all_held;
pub use attachments::advance_volume;
pub use claims::{claim_dry_run, create_claim, no_claim, release_claim};
pub use desired::{desired_changes, desired_state};
pub use expand::expand_volume;
pub(crate) use fence::{Evidence, failure, fenced_node_returned, record_fence};
pub use group_snapshots::{
    create_group_snapshot, delete_group_snapshot, group_snapshot_view, list_group_snapshots,
};
pub use hosting::{change_controller_hosts, refused_hosting};
pub use labels::set_labels;
pub use leases::{expire_leases, renew_lease};
pub use modify::modify_volume;
pub use nodes::{
    Expiry, expire_node, mark_lost, node_id_refused, node_stopping, register_node, remove_node,
    set_eligibility,
};
pub use operator::{detach, require_reason, unblock_node, unblock_volume};
pub use ops::{plugins_with_due_ops, schedule_ops};
pub use reports::apply_reports;
pub use retries::{PRUNE_BATCH, prune_retries};
pub use snapshots::{create_snapshot, delete_snapshot, list_snapshots, snapshot_view};
pub use tokens::{NewToken, create_token, first_operator_token, persist_last_used, revoke_token};
pub use volumes::{
    create_volume, deregister_volume, duplicate_ids, register_volume, unknown_plugin, volume_view,
};

/// Server settings the lifecycle depends on, and where it records latencies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Controller operations in flight per plugin.
    pub controller_concurrency: u32,
    /// The oldest wait past which a plugin's controller queue is shown with a warning.
    pub controller_queue_warning: std::time::Duration,
    /// Per plugin, the class of controller operations its last slot went to, so that the
    /// next tie goes to another (`csivol_rules::schedule`). Kept in memory, a hint for ties
    /// only: after a restart (or on another leader) the first tie goes to the one waiting
    /// longest, and a write that rolls back may leave it a turn ahead.
    pub served_last: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, csivol_rules::schedule::OpClass>>,
    >,
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
    /// How long request keys and claim tombstones are kept (`request_memory`): a request
    /// sent longer ago is refused.
    pub request_memory: std::time::Duration,
    /// The limits of claim labels and operators' reasons (`[limits]` in the config file).
    pub text: csivol_api::limits::TextLimits,
    /// How large the event log may grow (`[limits]`).
    pub events: crate::limits::EventBounds,
}

/// The longest message an event keeps: what clients write is bounded before it gets here,
/// but a plugin's error (through its agent) is not, and the log is kept in bytes.
const EVENT_MESSAGE_BYTES: usize = 8 << 10;

/// `message`, cut to [`EVENT_MESSAGE_BYTES`] (on a character) with how much was left out.
fn bounded_message(mut message: String) -> String {
    if message.len() <= EVENT_MESSAGE_BYTES {
        return message;
    }
    let mut cut = EVENT_MESSAGE_BYTES;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let more = message.len() - cut;
    message.truncate(cut);
    message.push_str(&format!("... ({more} bytes more not kept)"));
    message
}

/// Appends an entry to the event log; logged once committed.
pub fn event(
    ctx: &mut impl Txn,
    kind: EventKind,
    volume: Option<&str>,
    node: Option<&str>,
    alloc: Option<&str>,
    actor: &str,
    message: impl Into<String>,
) -> ApiResult<()> {
    let message = bounded_message(message.into());
    ctx.append_event(Event {
        kind,
        volume,
        node,
        alloc,
        actor,
        message: &message,
    })?;
    ctx.touch(Key::Events);
    // Logged once committed: a change that was rolled back never happened.
    let (kind, volume, node, alloc, actor) = (
        kind.as_str(),
        volume.map(str::to_owned),
        node.map(str::to_owned),
        alloc.map(str::to_owned),
        actor.to_owned(),
    );
    ctx.after_commit(Box::new(move || {
        tracing::info!(kind, volume, node, alloc, actor, "{message}");
    }));
    Ok(())
}

/// The key of one volume's entries in a node's desired state: the node's agent is sent
/// that volume's entries anew.
pub(crate) fn node_volume(node: &str, volume: &str) -> Key {
    Key::NodeVolume {
        node: node.to_owned(),
        volume: volume.to_owned(),
    }
}

/// Stamps the volume changed and wakes its watchers.
fn touch_volume(ctx: &mut impl Txn, volume: &str) -> ApiResult<()> {
    ctx.stamp_volume(volume)?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}

/// Sets a claim's state. Its node's agent is woken only when that changes what the claim
/// puts in the node's desired state: `publishing` → `ready`, which the agent's own report
/// makes, leaves its entry as it was, and a wake-up would cost the agent and the server a
/// round trip and a read per claim for nothing. A release (whoever asked: its holder, an
/// expired lease, an operator, a fence) leaves the claim's tombstone.
fn set_claim_state(ctx: &mut impl Txn, c: &ClaimRow, state: ClaimState) -> ApiResult<()> {
    ctx.set_claim_state(&c.volume, &c.alloc, state)?;
    if state == ClaimState::Releasing && c.state != ClaimState::Releasing {
        ctx.put_tombstone(&c.volume, &c.alloc)?;
    }
    if desired::claim_entry(c.state) != desired::claim_entry(state) {
        ctx.touch(node_volume(&c.node, &c.volume));
    }
    touch_volume(ctx, &c.volume)
}

/// Starts releasing a claim through its node (for a lease that ran out).
pub fn begin_release(ctx: &mut impl Txn, c: &ClaimRow) -> ApiResult<()> {
    set_claim_state(ctx, c, ClaimState::Releasing)
}

/// Forgets a claim that holds nothing (a queued one).
pub fn remove_claim(ctx: &mut impl Txn, c: &ClaimRow) -> ApiResult<()> {
    delete_claim(ctx, c)
}

/// Removes a claim; its tombstone moves to now: a claim request sent while it was still
/// being released would have been refused then, and is refused after it too.
fn delete_claim(ctx: &mut impl Txn, c: &ClaimRow) -> ApiResult<()> {
    ctx.delete_claim(&c.volume, &c.alloc)?;
    ctx.put_tombstone(&c.volume, &c.alloc)?;
    ctx.touch(node_volume(&c.node, &c.volume));
    touch_volume(ctx, &c.volume)
}

fn set_attachment_state(
    ctx: &mut impl Txn,
    volume: &str,
    node: &str,
    state: AttachmentState,
) -> ApiResult<()> {
    ctx.set_attachment_state(volume, node, state)?;
    ctx.touch(node_volume(node, volume));
    touch_volume(ctx, volume)
}

fn delete_attachment(ctx: &mut impl Txn, volume: &str, node: &str) -> ApiResult<()> {
    ctx.delete_attachment(volume, node)?;
    expand::detached(ctx, volume, node)?;
    ctx.touch(node_volume(node, volume));
    touch_volume(ctx, volume)
}

/// The time `ms` after `now`, for a duration a client sent in `field` (a lease, a token's
/// validity): the duration in the range of one, the sum in that of a time, never wrapped.
pub(crate) fn time_after(now: i64, field: &str, ms: u64) -> ApiResult<i64> {
    use csivol_api::limits;
    let ms = limits::duration_ms(field, ms).map_err(ApiError::out_of_range)?;
    let end = now.checked_add(ms).ok_or_else(|| {
        ApiError::invalid(format!("`{field}` of {ms} ms from now is past any time"))
    })?;
    limits::time_ms(field, u64::try_from(end).unwrap_or(0)).map_err(ApiError::out_of_range)
}

/// `a, b, c`, or `empty` when there is nothing to list.
fn list_or<S: AsRef<str>>(items: &[S], empty: &str) -> String {
    if items.is_empty() {
        return empty.to_owned();
    }
    items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ")
}

fn format_error(e: &PluginError) -> String {
    format!("{}: {}", e.code, e.message)
}

/// Keeps the event log within its bounds in events and in bytes; how many went (at most
/// `bounds.batch`: the caller runs it again while it drops that many). Operators' actions
/// are dropped only by the count ([`EventKind::kept_by_count`]).
pub fn prune_events(ctx: &mut impl Txn, bounds: &crate::limits::EventBounds) -> ApiResult<usize> {
    static KEPT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let kept = KEPT.get_or_init(|| {
        let kinds: Vec<&str> = EventKind::ALL
            .iter()
            .filter(|k| k.kept_by_count())
            .map(|k| k.as_str())
            .collect();
        serde_json::to_string(&kinds).expect("strings serialise")
    });
    ctx.prune_events(&super::store::Pruning {
        keep: bounds.kept,
        bytes: bounds.bytes,
        kept_by_count: kept,
        batch: bounds.batch,
    })
}
