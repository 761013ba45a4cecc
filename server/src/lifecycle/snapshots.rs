//! Snapshots: taken and deleted through the plugin's controller as controller operations
//! (queued, handed to controller hosts within the same limits, retried with the same
//! backoff as CreateVolume), `ready_to_use` tracked until true by repeating the operation:
//! CreateSnapshot (idempotent by name, as the spec allows), or GetSnapshot of the snapshot
//! cut where the plugin has GET_SNAPSHOT (the controller host chooses; the operation names
//! the snapshot id once known); and the content source of a volume created from a
//! snapshot or cloned from a volume.
//!
//! A snapshot's operations are queued under the key `snapshot/NAME` in the operation's
//! volume column: no volume can be named so (names have no `/`), so the queue's
//! one-operation-per-key rule holds per snapshot and nothing meant for a volume touches it.

use csivol_api::domain::ErrorClass;
use csivol_api::{
    self as api, ContentSource, ControllerOpKind, PluginError, SnapshotRequest, SnapshotState,
    WireContentSource, validate_name,
};

use super::after_release::{Use, why_held};
use super::ops::{backoff, schedule_ops};
use super::{Limits, event, format_error};
use crate::error::{ApiError, ApiResult};
use crate::model::{Lifecycle, OpRow, SnapshotRow, VolumeRow, time};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::after_release::hold_settled;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::snapshots::{self as rules, Refusal, SnapshotFacts, VolumeFacts};

const OP_PREFIX: &str = "snapshot/";

/// Longest wait between two CreateSnapshot calls while a snapshot is not ready to use.
const MAX_POLL_STEP: u32 = 3;

fn op_key(name: &str) -> String {
    format!("{OP_PREFIX}{name}")
}

/// The snapshot an operation is for, if it is a snapshot's operation.
pub(super) fn snapshot_of_op(o: &OpRow) -> Option<&str> {
    o.volume.strip_prefix(OP_PREFIX)
}

pub(super) fn refused(r: Refusal) -> ApiError {
    let e = if r.transient {
        ApiError::conflict(r.message)
    } else {
        ApiError::invalid(r.message)
    };
    e.with_hint(r.hint)
}

pub(super) fn facts(v: &VolumeRow) -> VolumeFacts<'_> {
    VolumeFacts {
        name: &v.name,
        plugin: &v.plugin,
        external_id: &v.external_id,
        ready: v.lifecycle == Lifecycle::Ready,
    }
}

fn require_snapshot(conn: &(impl Snapshot + ?Sized), name: &str) -> ApiResult<SnapshotRow> {
    conn.snapshot(name)?.ok_or_else(|| {
        ApiError::not_found(format!("snapshot `{name}` is not registered"))
            .with_hint("`csivol snapshot list` shows the snapshots")
    })
}

/// `GET /v1/snapshots/{name}`.
pub fn snapshot_view(conn: &(impl Snapshot + ?Sized), name: &str) -> ApiResult<api::Snapshot> {
    to_api(conn, &require_snapshot(conn, name)?)
}

/// A snapshot as the API shows it: one being created says whether its CreateSnapshot is
/// held until its volume's release has finished (its operation knows).
fn to_api(conn: &(impl Snapshot + ?Sized), s: &SnapshotRow) -> ApiResult<api::Snapshot> {
    let mut a = s.to_api();
    if s.state == SnapshotState::Creating {
        a.after_release = conn
            .key_op(OpKind::CreateSnapshot, &op_key(&s.name))?
            .is_some_and(|o| o.held());
    }
    Ok(a)
}

/// `GET /v1/snapshots[?volume=V][&group=G]`: a group's members, where `group` names one.
pub fn list_snapshots(
    conn: &(impl Snapshot + ?Sized),
    volume: Option<&str>,
    group: Option<&str>,
) -> ApiResult<Vec<api::Snapshot>> {
    let rows = match group {
        Some(g) => {
            if conn.group_snapshot(g)?.is_none() {
                return Err(
                    ApiError::not_found(format!("group snapshot `{g}` is not registered"))
                        .with_hint("`csivol snapshot list --groups` shows the group snapshots"),
                );
            }
            conn.group_members(g)?
                .into_iter()
                .filter(|s| volume.is_none_or(|v| s.volume == v))
                .collect()
        }
        None => conn.snapshots(volume)?,
    };
    rows.iter().map(|s| to_api(conn, s)).collect()
}

fn touch(ctx: &mut impl Txn, s: &SnapshotRow) {
    ctx.touch(Key::Snapshot(s.name.clone()));
    ctx.touch(Key::Volume(s.volume.clone()));
}

/// The record of `s` goes, with its `snapshot-deleted` event saying why.
fn forget(ctx: &mut impl Txn, s: &SnapshotRow, actor: &str, message: String) -> ApiResult<()> {
    ctx.delete_snapshot(&s.name)?;
    touch(ctx, s);
    event(
        ctx,
        EventKind::SnapshotDeleted,
        Some(&s.volume),
        None,
        None,
        actor,
        message,
    )
}

/// `PUT /v1/snapshots/{name}`: queues CreateSnapshot; the snapshot and whether this call
/// started it. Idempotent: the same request for a snapshot that exists returns it, and one
/// for a failed snapshot tries again.
///
/// With `waits` (the caller follows the outcome), a snapshot asked for while its volume is
/// being released is cut once the release has finished (`after_release`): of what the node
/// left when it unstaged the volume.
pub fn create_snapshot(
    ctx: &mut impl Txn,
    name: &str,
    req: SnapshotRequest,
    actor: &str,
    limits: &Limits,
    waits: bool,
) -> ApiResult<(api::Snapshot, bool)> {
    validate_name("snapshot", name).map_err(ApiError::invalid)?;
    validate_name("volume", &req.volume).map_err(ApiError::invalid)?;
    csivol_api::FreeText::check_text(&req).map_err(ApiError::text)?;
    if ctx.group_snapshot(name)?.is_some() {
        return Err(
            ApiError::conflict(format!("group snapshot `{name}` already exists"))
                .with_hint("group snapshots and snapshots share names: choose another name"),
        );
    }
    if let Some(s) = ctx.snapshot(name)? {
        if let Some(g) = &s.group {
            return Err(ApiError::conflict(format!(
                "snapshot `{name}` already exists, as a member of group snapshot `{g}`"
            ))
            .with_hint("choose another name"));
        }
        if s.volume != req.volume {
            return Err(ApiError::conflict(format!(
                "snapshot `{name}` already exists, of volume `{}`",
                s.volume
            ))
            .with_hint("choose another name, or delete it with `csivol snapshot delete`"));
        }
        if s.state != SnapshotState::Failed {
            return Ok((to_api(ctx, &s)?, false));
        }
    }
    let v = ctx.require_volume(&req.volume)?;
    let caps = ctx.controller_capabilities(&v.plugin)?;
    rules::may_snapshot(caps.as_ref(), &facts(&v)).map_err(refused)?;
    let row = SnapshotRow {
        name: name.to_owned(),
        volume: v.name.clone(),
        plugin: v.plugin.clone(),
        snapshot_id: String::new(),
        state: SnapshotState::Creating,
        ready_to_use: false,
        size_bytes: 0,
        creation_time: None,
        parameters: req.parameters,
        error: None,
        group: None,
        created_at: ctx.now(),
        updated_at: ctx.now(),
        modify_index: ctx.index(),
    };
    ctx.put_snapshot(&row)?;
    touch(ctx, &row);
    let held = hold_settled(&Use::load(&*ctx, &v.name)?.standing(), waits);
    let mut said = format!("CreateSnapshot `{name}` requested from plugin {}", v.plugin);
    if held {
        let why = why_held(&v.name);
        ctx.queue_held_op(OpKind::CreateSnapshot, &v.plugin, &op_key(name), "{}", &why)?;
        said.push_str(", to be sent once the volume's release has finished");
    } else {
        ctx.queue_op(OpKind::CreateSnapshot, &v.plugin, &op_key(name), None, "{}")?;
    }
    event(
        ctx,
        EventKind::SnapshotCreating,
        Some(&v.name),
        None,
        None,
        actor,
        said,
    )?;
    schedule_ops(ctx, &v.plugin, limits)?;
    Ok((snapshot_view(ctx, name)?, true))
}

/// `DELETE /v1/snapshots/{name}`: queues DeleteSnapshot and returns the snapshot in
/// `deleting`, or removes the record of a snapshot the plugin never made (`None`).
pub fn delete_snapshot(
    ctx: &mut impl Txn,
    name: &str,
    actor: &str,
    limits: &Limits,
) -> ApiResult<Option<api::Snapshot>> {
    let mut s = require_snapshot(ctx, name)?;
    rules::may_delete_alone(name, s.group.as_deref()).map_err(refused)?;
    match s.state {
        SnapshotState::Deleting => return Ok(Some(s.to_api())),
        SnapshotState::Creating => {
            return Err(ApiError::conflict(format!(
                "snapshot `{name}` is being created; wait for it to finish"
            ))
            .with_hint(format!(
                "`csivol snapshot show {name}` shows where it stands"
            )));
        }
        SnapshotState::Failed if s.snapshot_id.is_empty() => {
            forget(
                ctx,
                &s,
                actor,
                format!("snapshot `{name}` removed (the plugin never made it)"),
            )?;
            return Ok(None);
        }
        SnapshotState::Pending | SnapshotState::Ready | SnapshotState::Failed => {}
    }
    // A pending snapshot's CreateSnapshot polling stops: it is being deleted.
    ctx.delete_key_op(OpKind::CreateSnapshot, &op_key(name))?;
    s.state = SnapshotState::Deleting;
    s.error = None;
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    ctx.queue_op(OpKind::DeleteSnapshot, &s.plugin, &op_key(name), None, "{}")?;
    event(
        ctx,
        EventKind::SnapshotDeleting,
        Some(&s.volume),
        None,
        None,
        actor,
        format!("DeleteSnapshot `{name}` requested"),
    )?;
    schedule_ops(ctx, &s.plugin, limits)?;
    Ok(Some(snapshot_view(ctx, name)?))
}

/// Refuses to deregister or delete a volume while a snapshot of it is being cut: its
/// CreateSnapshot needs the volume (and is repeated until the snapshot is ready to use).
pub(super) fn no_snapshot_in_progress(ctx: &impl Txn, volume: &str) -> ApiResult<()> {
    let mut cutting: Vec<_> = ctx
        .snapshots(Some(volume))?
        .into_iter()
        .filter(|s| matches!(s.state, SnapshotState::Creating | SnapshotState::Pending))
        .filter(|s| s.group.is_none())
        .map(|s| s.name)
        .collect();
    cutting.extend(super::group_snapshots::groups_in_progress(ctx, volume)?);
    if cutting.is_empty() {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "volume `{volume}` has snapshots being created: {}",
        cutting.join(", ")
    ))
    .with_hint(format!(
        "wait until they are ready (`csivol snapshot list --volume {volume}`), or delete them"
    )))
}

/// The plugin's ids for a new volume's content source, if the plugin can create it so.
pub(super) fn content_source(
    ctx: &impl Txn,
    plugin: &str,
    source: &ContentSource,
) -> ApiResult<WireContentSource> {
    let caps = ctx.controller_capabilities(plugin)?;
    match source {
        ContentSource::Snapshot(name) => {
            let s = require_snapshot(ctx, name)?;
            let f = SnapshotFacts {
                name: &s.name,
                plugin: &s.plugin,
                state: s.state,
            };
            rules::may_create_from_snapshot(plugin, caps.as_ref(), &f).map_err(refused)?;
            Ok(WireContentSource::SnapshotId(s.snapshot_id))
        }
        ContentSource::Volume(name) => {
            let v = ctx.require_volume(name)?;
            rules::may_clone(plugin, caps.as_ref(), &facts(&v)).map_err(refused)?;
            Ok(WireContentSource::VolumeId(v.external_id))
        }
    }
}

/// CreateSnapshot answered: ready, or cut but not ready to use yet (then asked again).
pub(super) fn snapshot_created(
    ctx: &mut impl Txn,
    o: &OpRow,
    actor: &str,
    answer: Created,
) -> ApiResult<()> {
    let Some(name) = snapshot_of_op(o) else {
        return Ok(());
    };
    let Some(mut s) = ctx.snapshot(name)? else {
        return ctx.delete_op(o.id);
    };
    let state = rules::state_after_create(answer.ready_to_use);
    let first = s.snapshot_id.is_empty() || s.state != state;
    s.snapshot_id = answer.snapshot_id;
    s.size_bytes = answer.size_bytes;
    s.ready_to_use = answer.ready_to_use;
    s.creation_time = answer.creation_time_ms.map(|t| t as i64);
    s.state = state;
    s.error = None;
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    if answer.ready_to_use {
        ctx.delete_op(o.id)?;
    } else {
        let next = ctx.now() + backoff(o.attempt.min(MAX_POLL_STEP)).as_millis() as i64;
        ctx.retry_op(o.id, next, "not ready to use yet")?;
    }
    if !first {
        return Ok(());
    }
    let (kind, what) = if answer.ready_to_use {
        (EventKind::SnapshotReady, "ready to use")
    } else {
        (
            EventKind::SnapshotPending,
            "cut, not ready to use yet; CreateSnapshot is repeated until it is",
        )
    };
    event(
        ctx,
        kind,
        Some(&s.volume),
        None,
        None,
        actor,
        format!("snapshot `{}` ({}) {what}", s.name, s.snapshot_id),
    )
}

/// What CreateSnapshot answered.
pub(super) struct Created {
    pub snapshot_id: String,
    pub size_bytes: u64,
    pub ready_to_use: bool,
    pub creation_time_ms: Option<u64>,
}

/// DeleteSnapshot succeeded (or the plugin no longer has it): the record goes.
pub(super) fn snapshot_deleted(ctx: &mut impl Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let Some(name) = snapshot_of_op(o) else {
        return Ok(());
    };
    let Some(s) = ctx.snapshot(name)? else {
        return Ok(());
    };
    forget(
        ctx,
        &s,
        actor,
        format!("DeleteSnapshot succeeded: snapshot `{name}` deleted"),
    )
}

/// A snapshot's operation failed: retried with backoff where the error says a retry can
/// help; otherwise a failed create leaves a failed snapshot and a failed delete the
/// snapshot as it was, each with the plugin's error.
pub(super) fn snapshot_op_failed(
    ctx: &mut impl Txn,
    o: &OpRow,
    error: &PluginError,
    actor: &str,
) -> ApiResult<()> {
    if error.code == "NOT_FOUND" && o.kind == OpKind::DeleteSnapshot {
        return snapshot_deleted(ctx, o, actor);
    }
    let message = format!("{} failed: {}", o.kind.call(), format_error(error));
    let Some(mut s) = snapshot_of_op(o)
        .map(|n| ctx.snapshot(n))
        .transpose()?
        .flatten()
    else {
        return ctx.delete_op(o.id);
    };
    if ErrorClass::of_name(&error.code) == ErrorClass::Retry {
        let next = ctx.now() + backoff(o.attempt).as_millis() as i64;
        ctx.retry_op(o.id, next, &message)?;
        s.error = Some(format!("{message}; retrying at {}", time(next)));
        ctx.put_snapshot(&s)?;
        touch(ctx, &s);
        return Ok(());
    }
    ctx.delete_op(o.id)?;
    s.state = match o.kind {
        OpKind::DeleteSnapshot if s.ready_to_use => SnapshotState::Ready,
        OpKind::DeleteSnapshot if !s.snapshot_id.is_empty() => SnapshotState::Pending,
        _ => SnapshotState::Failed,
    };
    s.error = Some(message.clone());
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    event(
        ctx,
        EventKind::OperationFailed,
        Some(&s.volume),
        None,
        None,
        actor,
        format!("snapshot `{}`: {message}", s.name),
    )
}

/// A CreateSnapshot held for its volume's release can no longer be sent as asked: the
/// snapshot fails with `message` (its record is replaced by the next request).
pub(super) fn held_snapshot_dropped(ctx: &mut impl Txn, o: &OpRow, message: &str) -> ApiResult<()> {
    let Some(mut s) = snapshot_of_op(o)
        .map(|n| ctx.snapshot(n))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    s.state = SnapshotState::Failed;
    s.error = Some(message.to_owned());
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    Ok(())
}

/// No controller host for a snapshot's operation: say why on the snapshot.
pub(super) fn snapshot_op_waiting(ctx: &mut impl Txn, o: &OpRow, why: &str) -> ApiResult<()> {
    let Some(mut s) = snapshot_of_op(o)
        .map(|n| ctx.snapshot(n))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    s.error = Some(why.to_owned());
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    Ok(())
}

/// What the controller host needs to run a snapshot's operation; `None` when its snapshot
/// is gone.
pub(super) fn snapshot_op_kind(
    conn: &(impl Snapshot + ?Sized),
    o: &OpRow,
) -> ApiResult<Option<ControllerOpKind>> {
    let Some(s) = snapshot_of_op(o)
        .map(|n| conn.snapshot(n))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    // The source volume's secrets are the plugin's for its snapshots too; a snapshot
    // whose volume was deleted is deleted without them.
    let volume = conn.volume(&s.volume)?;
    let secrets = volume
        .as_ref()
        .map(|v| v.secrets.clone())
        .unwrap_or_default();
    Ok(match o.kind {
        OpKind::CreateSnapshot => {
            let Some(v) = volume else { return Ok(None) };
            Some(ControllerOpKind::CreateSnapshot {
                snapshot: s.name.clone(),
                source_volume_id: v.external_id.clone(),
                snapshot_id: s.snapshot_id.clone(),
                parameters: s.parameters.clone(),
                secrets,
            })
        }
        OpKind::DeleteSnapshot => Some(ControllerOpKind::DeleteSnapshot {
            snapshot: s.name.clone(),
            snapshot_id: s.snapshot_id.clone(),
            secrets,
        }),
        _ => None,
    })
}
