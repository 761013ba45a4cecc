//! Everything that changes cluster state, each function running inside one write
//! transaction, one file per job: `volumes`, `claims`, `attachments` (the attachment
//! lifecycle), `ops` (the controller-operation queue), `nodes` (registration, loss and
//! return), `reports` (agents' reports), `operator` (unblock, detach) and `desired` (a
//! node's desired state). This file holds what they share: the event log and the row
//! changes every job makes.
//!
//! Handlers change the facts (a claim is recorded, a node reports a volume unstaged) and
//! then call [`advance_volume`], which moves the volume's claims and attachments as far
//! forward as those facts allow. Keeping that one function the only place that derives
//! the next step is what keeps the lifecycle consistent.

use csivol_proto::api::{AttachmentState, ClaimState, PluginError};
use rusqlite::{Connection, params};

use super::db::WriteCtx;
use super::error::ApiResult;
use super::model::ClaimRow;
use super::watch::Key;

mod attachments;
mod claims;
mod desired;
mod nodes;
mod operator;
mod ops;
mod reports;
mod volumes;

pub use attachments::advance_volume;
pub use claims::{ClaimDecision, create_claim, evaluate_claim, initial_state, release_claim};
pub use desired::desired_state;
pub use nodes::{claims_of_node, mark_lost, register_node};
pub use operator::{detach, unblock_node, unblock_volume};
pub use ops::{plugins_with_due_ops, schedule_ops};
pub use reports::apply_reports;
pub use volumes::{create_volume, deregister_volume, register_volume, volume_view};

/// Server settings the lifecycle depends on, and where it records latencies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Controller operations in flight per plugin.
    pub controller_concurrency: u32,
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
}

pub fn event(
    ctx: &mut WriteCtx<'_>,
    kind: &str,
    volume: Option<&str>,
    node: Option<&str>,
    alloc: Option<&str>,
    actor: &str,
    message: impl Into<String>,
) -> ApiResult<()> {
    let message = message.into();
    ctx.tx.prepare_cached(
        "INSERT INTO events (at, kind, volume, node, alloc, actor, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![ctx.now, kind, volume, node, alloc, actor, message])?;
    ctx.touch(Key::Events);
    // Logged once committed: a change that was rolled back never happened.
    let (kind, volume, node, alloc, actor) = (
        kind.to_owned(),
        volume.map(str::to_owned),
        node.map(str::to_owned),
        alloc.map(str::to_owned),
        actor.to_owned(),
    );
    ctx.after_commit(move || {
        tracing::info!(kind, volume, node, alloc, actor, "{message}");
    });
    Ok(())
}

/// Runs one statement through the connection's statement cache: the same few statements
/// run for every claim, and preparing them each time would cost more than running them.
fn exec(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> ApiResult<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params)?)
}

fn touch_volume(ctx: &mut WriteCtx<'_>, volume: &str) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("UPDATE volumes SET modify_index = ?1, updated_at = ?2 WHERE name = ?3")?
        .execute(params![ctx.index as i64, ctx.now, volume])?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}

fn set_claim_state(
    ctx: &mut WriteCtx<'_>,
    c: &ClaimRow,
    state: ClaimState,
) -> ApiResult<()> {
    ctx.tx
        .prepare_cached(
            "UPDATE claims SET state = ?1, updated_at = ?2, modify_index = ?3, \
             error = CASE WHEN ?1 IN ('ready', 'releasing') THEN NULL ELSE error END, \
             next_retry_at = CASE WHEN ?1 IN ('ready', 'releasing', 'failed', 'blocked') THEN NULL ELSE next_retry_at END, \
             waiting = CASE WHEN ?1 = 'publishing' THEN waiting END, \
             waiting_since = CASE WHEN ?1 = 'publishing' THEN waiting_since END, \
             waiting_timeout_ms = CASE WHEN ?1 = 'publishing' THEN waiting_timeout_ms END, \
             condition = CASE WHEN ?1 IN ('ready', 'publishing', 'blocked') THEN condition END \
             WHERE volume = ?4 AND alloc = ?5",
        )?
        .execute(params![state.as_str(), ctx.now, ctx.index as i64, c.volume, c.alloc])?;
    ctx.touch(Key::Node(c.node.clone()));
    touch_volume(ctx, &c.volume)
}

/// Starts releasing a claim through its node (for a lease that ran out).
pub fn begin_release(ctx: &mut WriteCtx<'_>, c: &ClaimRow) -> ApiResult<()> {
    set_claim_state(ctx, c, ClaimState::Releasing)
}

/// Forgets a claim that holds nothing (a queued one).
pub fn remove_claim(ctx: &mut WriteCtx<'_>, c: &ClaimRow) -> ApiResult<()> {
    delete_claim(ctx, c)
}

fn delete_claim(ctx: &mut WriteCtx<'_>, c: &ClaimRow) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("DELETE FROM claims WHERE volume = ?1 AND alloc = ?2")?
        .execute(params![c.volume, c.alloc])?;
    ctx.touch(Key::Node(c.node.clone()));
    touch_volume(ctx, &c.volume)
}

fn set_attachment_state(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    node: &str,
    state: AttachmentState,
) -> ApiResult<()> {
    ctx.tx
        .prepare_cached(
            "UPDATE attachments SET state = ?1, updated_at = ?2, error = NULL, next_retry_at = NULL \
             WHERE volume = ?3 AND node = ?4",
        )?
        .execute(params![state.as_str(), ctx.now, volume, node])?;
    ctx.touch(Key::Node(node.to_owned()));
    touch_volume(ctx, volume)
}

fn delete_attachment(ctx: &mut WriteCtx<'_>, volume: &str, node: &str) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("DELETE FROM attachments WHERE volume = ?1 AND node = ?2")?
        .execute(params![volume, node])?;
    ctx.touch(Key::Node(node.to_owned()));
    touch_volume(ctx, volume)
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
