//! ListSnapshots of one snapshot being adopted, by its id. Its owner is the snapshot,
//! `creating` until the plugin listed it: found, it takes the plugin's id, size, time and
//! readiness (and its source volume, where csivol records one with that id); a snapshot
//! not ready to use yet is listed again until it is. Not found, it is `failed` and holds
//! no id, so nothing of it is ever sent to DeleteSnapshot.

use csivol_api::{ControllerOpKind, ListedSnapshot, Report, SnapshotState};

use super::super::queue::{Failure, Judged, Kind, OpError, Retrying, by_class};
use super::snapshot::{snapshot_of, touch};
use crate::error::ApiResult;
use crate::lifecycle::backoff::backoff;
use crate::lifecycle::events::event;
use crate::model::OpRow;
use crate::store::{Snapshot as Store, Txn};
use csivol_rules::kinds::EventKind;
use csivol_rules::snapshots as rules;

pub(super) struct FindSnapshot;

/// Longest wait between two listings while the snapshot is not ready to use.
const MAX_POLL_STEP: u32 = 3;

/// The snapshot id the operation looks for.
fn wanted(o: &OpRow) -> String {
    serde_json::from_str::<serde_json::Value>(&o.payload)
        .ok()
        .and_then(|p| p["snapshot_id"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn set_error(ctx: &mut dyn Txn, o: &OpRow, error: Option<String>, failed: bool) -> ApiResult<()> {
    let Some(mut s) = snapshot_of(ctx, o)? else {
        return Ok(());
    };
    if failed {
        s.state = SnapshotState::Failed;
    }
    s.error = error;
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    Ok(())
}

impl Kind for FindSnapshot {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        set_error(ctx, o, Some(why.to_owned()), false)
    }

    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        _actor: &str,
    ) -> ApiResult<Judged> {
        if snapshot_of(ctx, o)?.is_none() {
            return Ok(Judged::Gone);
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        set_error(ctx, o, Some(r.said()), false)
    }

    fn failure(&self, conn: &dyn Store, o: &OpRow, e: &OpError<'_>) -> ApiResult<Failure> {
        let name = snapshot_of(conn, o)?.map(|s| s.name).unwrap_or_default();
        Ok(Failure {
            volume: None,
            node: None,
            message: format!("snapshot `{name}` not adopted: {}", e.message),
        })
    }

    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        set_error(ctx, o, Some(e.message.to_owned()), true)
    }

    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::SnapshotFound { snapshot, .. } = report else {
            return Ok(false);
        };
        let Some(s) = snapshot_of(ctx, o)? else {
            ctx.delete_op(o.id)?;
            return Ok(true);
        };
        let said = match snapshot {
            None => Some(format!(
                "plugin {} has no snapshot {} (ListSnapshots with its id listed none)",
                o.plugin,
                wanted(o)
            )),
            Some(found) if of_another_namespace(ctx, o, &s.name, found)? => Some(format!(
                "plugin {} lists snapshot {} as cut from a volume of another namespace, whose \
                 data is not this namespace's to restore",
                o.plugin,
                wanted(o)
            )),
            Some(_) => None,
        };
        if let Some(said) = said {
            ctx.delete_op(o.id)?;
            set_error(ctx, o, Some(said.clone()), true)?;
            return event(
                ctx,
                EventKind::OperationFailed,
                None,
                None,
                None,
                actor,
                format!("snapshot `{}` not adopted: {said}", s.name),
            )
            .map(|()| true);
        }
        if let Some(found) = snapshot {
            found_it(ctx, o, s, found, actor)?;
        }
        Ok(true)
    }

    fn shown(&self, conn: &dyn Store, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(s) = snapshot_of(conn, o)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::FindSnapshot {
            snapshot: s.name,
            snapshot_id: wanted(o),
        }))
    }
}

/// Whether the plugin lists the snapshot as cut from a csivol volume of a namespace other
/// than the one it is being adopted into: its data is that namespace's, and one team must
/// not reach another's data through the storage (a snapshot of a volume csivol does not
/// know, or of one of its own namespace, is adopted).
fn of_another_namespace(
    ctx: &mut dyn Txn,
    o: &OpRow,
    name: &str,
    found: &ListedSnapshot,
) -> ApiResult<bool> {
    if found.source_volume_id.is_empty() {
        return Ok(false);
    }
    let namespace = csivol_api::namespace_of(name);
    Ok(ctx
        .volumes_with_external_id(&o.plugin, &found.source_volume_id)?
        .iter()
        .any(|v| csivol_api::namespace_of(v) != namespace))
}

/// The plugin listed it: recorded with what it said; listed again while it is not ready.
fn found_it(
    ctx: &mut dyn Txn,
    o: &OpRow,
    mut s: crate::model::SnapshotRow,
    found: &ListedSnapshot,
    actor: &str,
) -> ApiResult<()> {
    let state = rules::state_after_create(found.ready_to_use);
    let first = s.snapshot_id.is_empty() || s.state != state;
    s.snapshot_id = found.snapshot_id.clone();
    s.size_bytes = found.size_bytes;
    s.ready_to_use = found.ready_to_use;
    s.creation_time = found.creation_time_ms.map(|t| t as i64);
    // The source volume is linked in the snapshot's own namespace only (a snapshot of
    // another namespace's volume was refused before it got here).
    let namespace = csivol_api::namespace_of(&s.name).to_owned();
    if s.volume.is_empty()
        && !found.source_volume_id.is_empty()
        && let Some(v) = ctx
            .volumes_with_external_id(&o.plugin, &found.source_volume_id)?
            .into_iter()
            .find(|v| csivol_api::namespace_of(v) == namespace)
    {
        s.volume = v;
    }
    s.state = state;
    s.error = None;
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    if found.ready_to_use {
        ctx.delete_op(o.id)?;
    } else {
        let next = ctx.now() + backoff(o.attempt.min(MAX_POLL_STEP)).as_millis() as i64;
        ctx.retry_op(o.id, next, "not ready to use yet")?;
    }
    if !first {
        return Ok(());
    }
    let (kind, what) = if found.ready_to_use {
        (EventKind::SnapshotReady, "ready to use")
    } else {
        (
            EventKind::SnapshotPending,
            "not ready to use yet; ListSnapshots is repeated until it is",
        )
    };
    event(
        ctx,
        kind,
        Some(&s.volume)
            .filter(|v| !v.is_empty())
            .map(String::as_str),
        None,
        None,
        actor,
        format!(
            "snapshot `{}` ({}) adopted from plugin {} (source volume {}), {what}",
            s.name, s.snapshot_id, o.plugin, found.source_volume_id
        ),
    )
}
