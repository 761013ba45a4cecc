//! Group snapshots: several volumes of one plugin snapshotted together by its
//! GroupController (CreateVolumeGroupSnapshot), as controller operations queued, handed
//! out, retried and evented like a single snapshot's. `ready_to_use` is tracked until true
//! by repeating the operation: CreateVolumeGroupSnapshot (idempotent by name) until the
//! group is cut, then GetVolumeGroupSnapshot. Each member is recorded as an ordinary
//! snapshot named `GROUP.VOLUME`, which a volume is created from like any snapshot; a
//! member is deleted with its group (DeleteVolumeGroupSnapshot), never alone.
//!
//! A group's operations are queued under `group-snapshot/NAME` in the operation's volume
//! column, as a snapshot's are under `snapshot/NAME`. Groups and snapshots share one
//! namespace, so that `csivol snapshot show NAME` and `snapshot delete NAME` mean one thing.

use std::collections::BTreeSet;

use csivol_api::domain::ErrorClass;
use csivol_api::{
    self as api, ControllerOpKind, GroupMember, GroupSnapshotRequest, PluginError, SnapshotState,
    validate_name,
};

use super::ops::{backoff, schedule_ops};
use super::snapshots::{facts, refused};
use super::{Limits, event, format_error};
use crate::error::{ApiError, ApiResult};
use crate::model::{GroupSnapshotRow, OpRow, SnapshotRow, time};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::snapshots as rules;

const OP_PREFIX: &str = "group-snapshot/";

/// Longest wait between two polls while a group is not ready to use.
const MAX_POLL_STEP: u32 = 3;

fn op_key(name: &str) -> String {
    format!("{OP_PREFIX}{name}")
}

/// The group snapshot an operation is for, if it is a group snapshot's operation.
pub(super) fn group_of_op(o: &OpRow) -> Option<&str> {
    o.volume.strip_prefix(OP_PREFIX)
}

/// The name of the member of `group` cut from `volume`.
fn member_name(group: &str, volume: &str) -> String {
    format!("{group}.{volume}")
}

fn require_group(conn: &(impl Snapshot + ?Sized), name: &str) -> ApiResult<GroupSnapshotRow> {
    conn.group_snapshot(name)?.ok_or_else(|| {
        ApiError::not_found(format!("group snapshot `{name}` is not registered"))
            .with_hint("`csivol snapshot list --groups` shows the group snapshots")
    })
}

fn view(conn: &(impl Snapshot + ?Sized), g: &GroupSnapshotRow) -> ApiResult<api::GroupSnapshot> {
    Ok(g.to_api(&conn.group_members(&g.name)?))
}

/// `GET /v1/group-snapshots/{name}`.
pub fn group_snapshot_view(
    conn: &(impl Snapshot + ?Sized),
    name: &str,
) -> ApiResult<api::GroupSnapshot> {
    view(conn, &require_group(conn, name)?)
}

/// `GET /v1/group-snapshots`.
pub fn list_group_snapshots(conn: &(impl Snapshot + ?Sized)) -> ApiResult<Vec<api::GroupSnapshot>> {
    conn.group_snapshots()?
        .iter()
        .map(|g| view(conn, g))
        .collect()
}

/// Wakes the group's followers and those of its volumes and members.
fn touch(ctx: &mut impl Txn, g: &GroupSnapshotRow) -> ApiResult<()> {
    ctx.touch(Key::Snapshot(g.name.clone()));
    for v in &g.volumes {
        ctx.touch(Key::Volume(v.clone()));
    }
    for m in ctx.group_members(&g.name)? {
        ctx.touch(Key::Snapshot(m.name));
    }
    Ok(())
}

fn group_event(ctx: &mut impl Txn, kind: EventKind, actor: &str, message: String) -> ApiResult<()> {
    event(ctx, kind, None, None, None, actor, message)
}

/// `PUT /v1/group-snapshots/{name}`: queues CreateVolumeGroupSnapshot; the group and
/// whether this call started it. Idempotent: the same request for a group that exists
/// returns it, and one for a failed group tries again.
pub fn create_group_snapshot(
    ctx: &mut impl Txn,
    name: &str,
    req: GroupSnapshotRequest,
    actor: &str,
    limits: &Limits,
) -> ApiResult<(api::GroupSnapshot, bool)> {
    validate_name("group snapshot", name).map_err(ApiError::invalid)?;
    for v in &req.volumes {
        validate_name("volume", v).map_err(ApiError::invalid)?;
    }
    csivol_api::FreeText::check_text(&req).map_err(ApiError::text)?;
    if let Some(s) = ctx.snapshot(name)? {
        return Err(ApiError::conflict(format!(
            "snapshot `{name}` already exists, of volume `{}`",
            s.volume
        ))
        .with_hint("group snapshots and snapshots share names: choose another name"));
    }
    if let Some(g) = ctx.group_snapshot(name)? {
        // The spec (CreateVolumeGroupSnapshot): "calls to this function MUST be idempotent
        // - the function may be called multiple times for the same name, with the same
        // `source_volume_ids` and `parameters`"; other volumes or parameters under the
        // name are another group.
        let same: BTreeSet<_> = g.volumes.iter().collect();
        let asked: BTreeSet<_> = req.volumes.iter().collect();
        if same != asked || g.parameters != req.parameters {
            return Err(ApiError::conflict(format!(
                "group snapshot `{name}` already exists, of volumes {}{}",
                g.volumes.join(", "),
                if g.parameters != req.parameters {
                    " with other parameters"
                } else {
                    ""
                }
            ))
            .with_hint("choose another name, or delete it with `csivol snapshot delete`"));
        }
        if g.state != SnapshotState::Failed {
            return Ok((view(ctx, &g)?, false));
        }
    }
    let mut volumes = Vec::with_capacity(req.volumes.len());
    for v in &req.volumes {
        volumes.push(ctx.require_volume(v)?);
    }
    let plugin = volumes
        .first()
        .map(|v| v.plugin.clone())
        .unwrap_or_default();
    let caps = match volumes.first() {
        Some(v) => ctx.controller_capabilities(&v.plugin)?,
        None => None,
    };
    let f: Vec<_> = volumes.iter().map(facts).collect();
    rules::may_group_snapshot(caps.as_ref(), &f).map_err(refused)?;
    for v in &volumes {
        let member = member_name(name, &v.name);
        validate_name("snapshot", &member).map_err(|e| {
            ApiError::invalid(format!(
                "the member of volume `{}` would be named `{member}`: {e}",
                v.name
            ))
            .with_hint("choose a shorter group name")
        })?;
        if let Some(s) = ctx.snapshot(&member)?
            && s.group.as_deref() != Some(name)
        {
            return Err(ApiError::conflict(format!(
                "snapshot `{member}` already exists: the member of volume `{}` would be named so",
                v.name
            ))
            .with_hint("choose another group name"));
        }
    }
    // A failed group tried again is cut anew: CreateVolumeGroupSnapshot by name, which is
    // idempotent, rather than GetVolumeGroupSnapshot of the id it failed with.
    ctx.delete_group_snapshot(name)?;
    let row = GroupSnapshotRow {
        name: name.to_owned(),
        plugin: plugin.clone(),
        volumes: req.volumes,
        group_snapshot_id: String::new(),
        state: SnapshotState::Creating,
        ready_to_use: false,
        creation_time: None,
        parameters: req.parameters,
        error: None,
        created_at: ctx.now(),
        updated_at: ctx.now(),
        modify_index: ctx.index(),
    };
    ctx.put_group_snapshot(&row)?;
    touch(ctx, &row)?;
    ctx.queue_op(
        OpKind::CreateGroupSnapshot,
        &plugin,
        &op_key(name),
        None,
        "{}",
    )?;
    group_event(
        ctx,
        EventKind::SnapshotCreating,
        actor,
        format!(
            "CreateVolumeGroupSnapshot `{name}` of volumes {} requested from plugin {plugin}",
            row.volumes.join(", ")
        ),
    )?;
    schedule_ops(ctx, &plugin, limits)?;
    Ok((group_snapshot_view(ctx, name)?, true))
}

/// `DELETE /v1/group-snapshots/{name}`: queues DeleteVolumeGroupSnapshot and returns the
/// group in `deleting`, or removes the record of a group the plugin never cut (`None`).
pub fn delete_group_snapshot(
    ctx: &mut impl Txn,
    name: &str,
    actor: &str,
    limits: &Limits,
) -> ApiResult<Option<api::GroupSnapshot>> {
    let mut g = require_group(ctx, name)?;
    match g.state {
        SnapshotState::Deleting => return Ok(Some(view(ctx, &g)?)),
        SnapshotState::Creating => {
            return Err(ApiError::conflict(format!(
                "group snapshot `{name}` is being created; wait for it to finish"
            ))
            .with_hint(format!(
                "`csivol snapshot show {name}` shows where it stands"
            )));
        }
        SnapshotState::Failed if g.group_snapshot_id.is_empty() => {
            forget(
                ctx,
                &g,
                actor,
                format!("group snapshot `{name}` removed (the plugin never cut it)"),
            )?;
            return Ok(None);
        }
        SnapshotState::Pending | SnapshotState::Ready | SnapshotState::Failed => {}
    }
    // A pending group's polling stops: it is being deleted.
    ctx.delete_key_op(OpKind::CreateGroupSnapshot, &op_key(name))?;
    g.state = SnapshotState::Deleting;
    g.error = None;
    ctx.put_group_snapshot(&g)?;
    set_members(ctx, name, |m| m.state = SnapshotState::Deleting)?;
    touch(ctx, &g)?;
    ctx.queue_op(
        OpKind::DeleteGroupSnapshot,
        &g.plugin,
        &op_key(name),
        None,
        "{}",
    )?;
    group_event(
        ctx,
        EventKind::SnapshotDeleting,
        actor,
        format!("DeleteVolumeGroupSnapshot `{name}` requested, with its members"),
    )?;
    schedule_ops(ctx, &g.plugin, limits)?;
    Ok(Some(group_snapshot_view(ctx, name)?))
}

/// Changes every member of `group` with `f`.
fn set_members(ctx: &mut impl Txn, group: &str, f: impl Fn(&mut SnapshotRow)) -> ApiResult<()> {
    for mut m in ctx.group_members(group)? {
        f(&mut m);
        ctx.put_snapshot(&m)?;
    }
    Ok(())
}

/// The records of `g` and its members go, with a `snapshot-deleted` event saying why.
fn forget(ctx: &mut impl Txn, g: &GroupSnapshotRow, actor: &str, message: String) -> ApiResult<()> {
    touch(ctx, g)?;
    ctx.delete_group_snapshot(&g.name)?;
    group_event(ctx, EventKind::SnapshotDeleted, actor, message)
}

/// The group snapshots being cut of `volume`, by name.
pub(super) fn groups_in_progress(ctx: &impl Txn, volume: &str) -> ApiResult<Vec<String>> {
    Ok(ctx
        .group_snapshots()?
        .into_iter()
        .filter(|g| matches!(g.state, SnapshotState::Creating | SnapshotState::Pending))
        .filter(|g| g.volumes.iter().any(|v| v == volume))
        .map(|g| g.name)
        .collect())
}

/// What CreateVolumeGroupSnapshot or GetVolumeGroupSnapshot answered.
pub(super) struct GroupCut {
    pub group_snapshot_id: String,
    pub ready_to_use: bool,
    pub creation_time_ms: Option<u64>,
    pub snapshots: Vec<GroupMember>,
}

/// The group was cut: its members are recorded, and it is ready or asked again.
pub(super) fn group_created(
    ctx: &mut impl Txn,
    o: &OpRow,
    actor: &str,
    answer: GroupCut,
) -> ApiResult<()> {
    let Some(name) = group_of_op(o) else {
        return Ok(());
    };
    let Some(mut g) = ctx.group_snapshot(name)? else {
        return ctx.delete_op(o.id);
    };
    // Each member is matched to its volume by the plugin's id of the volume
    // (Snapshot.source_volume_id, REQUIRED); one the plugin names that is none of the
    // group's volumes keeps that id as its volume.
    let mut by_id = std::collections::BTreeMap::new();
    for v in &g.volumes {
        if let Some(row) = ctx.volume(v)? {
            by_id.insert(row.external_id.clone(), row.name);
        }
    }
    let ready: Vec<bool> = answer.snapshots.iter().map(|m| m.ready_to_use).collect();
    let state = rules::group_state(answer.ready_to_use, &ready);
    let first = g.group_snapshot_id.is_empty() || g.state != state;
    for m in &answer.snapshots {
        let volume = by_id
            .get(&m.source_volume_id)
            .cloned()
            .unwrap_or_else(|| m.source_volume_id.clone());
        let member = member_name(name, &volume);
        let created_at = ctx.snapshot(&member)?.map_or(ctx.now(), |s| s.created_at);
        ctx.put_snapshot(&SnapshotRow {
            name: member,
            volume,
            plugin: g.plugin.clone(),
            snapshot_id: m.snapshot_id.clone(),
            state: rules::state_after_create(m.ready_to_use),
            ready_to_use: m.ready_to_use,
            size_bytes: m.size_bytes,
            creation_time: m.creation_time_ms.map(|t| t as i64),
            parameters: g.parameters.clone(),
            error: None,
            group: Some(name.to_owned()),
            created_at,
            updated_at: ctx.now(),
            modify_index: ctx.index(),
        })?;
    }
    g.group_snapshot_id = answer.group_snapshot_id;
    g.ready_to_use = state == SnapshotState::Ready;
    g.creation_time = answer.creation_time_ms.map(|t| t as i64);
    g.state = state;
    g.error = None;
    ctx.put_group_snapshot(&g)?;
    touch(ctx, &g)?;
    if g.ready_to_use {
        ctx.delete_op(o.id)?;
    } else {
        let next = ctx.now() + backoff(o.attempt.min(MAX_POLL_STEP)).as_millis() as i64;
        ctx.retry_op(o.id, next, "not ready to use yet")?;
    }
    if !first {
        return Ok(());
    }
    let members: Vec<_> = ctx
        .group_members(name)?
        .into_iter()
        .map(|m| m.name)
        .collect();
    let (kind, what) = if g.ready_to_use {
        (EventKind::SnapshotReady, "ready to use")
    } else {
        (
            EventKind::SnapshotPending,
            "cut, not ready to use yet; GetVolumeGroupSnapshot is repeated until it is",
        )
    };
    group_event(
        ctx,
        kind,
        actor,
        format!(
            "group snapshot `{name}` ({}) {what}; members {}",
            g.group_snapshot_id,
            members.join(", ")
        ),
    )
}

/// DeleteVolumeGroupSnapshot succeeded (or the plugin no longer has the group): the
/// records of the group and its members go.
pub(super) fn group_deleted(ctx: &mut impl Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let Some(g) = group_of_op(o)
        .map(|n| ctx.group_snapshot(n))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    let message = format!(
        "DeleteVolumeGroupSnapshot succeeded: group snapshot `{}` deleted with its members",
        g.name
    );
    forget(ctx, &g, actor, message)
}

/// A group's operation failed: retried with backoff where the error says a retry can
/// help; otherwise a failed create leaves a failed group and a failed delete the group as
/// it was, each with the plugin's error.
pub(super) fn group_op_failed(
    ctx: &mut impl Txn,
    o: &OpRow,
    error: &PluginError,
    actor: &str,
) -> ApiResult<()> {
    // DeleteVolumeGroupSnapshot: "If a group snapshot corresponding to the specified
    // `group_snapshot_id` does not exist [...] the Plugin MUST reply `0 OK`"; a NOT_FOUND
    // all the same means the same.
    if error.code == "NOT_FOUND" && o.kind == OpKind::DeleteGroupSnapshot {
        return group_deleted(ctx, o, actor);
    }
    let message = format!("{} failed: {}", o.kind.call(), format_error(error));
    let Some(mut g) = group_of_op(o)
        .map(|n| ctx.group_snapshot(n))
        .transpose()?
        .flatten()
    else {
        return ctx.delete_op(o.id);
    };
    if ErrorClass::of_name(&error.code) == ErrorClass::Retry {
        let next = ctx.now() + backoff(o.attempt).as_millis() as i64;
        ctx.retry_op(o.id, next, &message)?;
        g.error = Some(format!("{message}; retrying at {}", time(next)));
        ctx.put_group_snapshot(&g)?;
        return touch(ctx, &g);
    }
    ctx.delete_op(o.id)?;
    let delete = o.kind == OpKind::DeleteGroupSnapshot;
    g.state = match o.kind {
        OpKind::DeleteGroupSnapshot => rules::state_after_create(g.ready_to_use),
        _ => SnapshotState::Failed,
    };
    g.error = Some(message.clone());
    ctx.put_group_snapshot(&g)?;
    // A failed delete leaves the members as they were; a failed create, failed members.
    set_members(ctx, &g.name, |m| {
        m.state = if delete {
            rules::state_after_create(m.ready_to_use)
        } else {
            SnapshotState::Failed
        };
    })?;
    touch(ctx, &g)?;
    group_event(
        ctx,
        EventKind::OperationFailed,
        actor,
        format!("group snapshot `{}`: {message}", g.name),
    )
}

/// No controller host for a group's operation: say why on the group.
pub(super) fn group_op_waiting(ctx: &mut impl Txn, o: &OpRow, why: &str) -> ApiResult<()> {
    let Some(mut g) = group_of_op(o)
        .map(|n| ctx.group_snapshot(n))
        .transpose()?
        .flatten()
    else {
        return Ok(());
    };
    g.error = Some(why.to_owned());
    ctx.put_group_snapshot(&g)?;
    touch(ctx, &g)
}

/// What the controller host needs to run a group's operation; `None` when the group is
/// gone, or, for a create, one of its volumes.
pub(super) fn group_op_kind(
    conn: &(impl Snapshot + ?Sized),
    o: &OpRow,
) -> ApiResult<Option<ControllerOpKind>> {
    let Some(g) = group_of_op(o)
        .map(|n| conn.group_snapshot(n))
        .transpose()?
        .flatten()
    else {
        return Ok(None);
    };
    let mut source_volume_ids = Vec::with_capacity(g.volumes.len());
    let mut secrets = None;
    for v in &g.volumes {
        if let Some(row) = conn.volume(v)? {
            source_volume_ids.push(row.external_id);
            // The spec: "The secrets provided in this field SHOULD be the same for all
            // group snapshot operations on the same group snapshot": the first volume's.
            secrets.get_or_insert(row.secrets);
        }
    }
    let secrets = secrets.unwrap_or_default();
    let snapshot_ids: Vec<String> = conn
        .group_members(&g.name)?
        .into_iter()
        .map(|m| m.snapshot_id)
        .collect();
    Ok(match o.kind {
        OpKind::CreateGroupSnapshot => {
            if source_volume_ids.len() != g.volumes.len() {
                return Ok(None);
            }
            Some(ControllerOpKind::CreateGroupSnapshot {
                group: g.name.clone(),
                source_volume_ids,
                group_snapshot_id: g.group_snapshot_id.clone(),
                snapshot_ids,
                parameters: g.parameters.clone(),
                secrets,
            })
        }
        OpKind::DeleteGroupSnapshot => Some(ControllerOpKind::DeleteGroupSnapshot {
            group: g.name.clone(),
            group_snapshot_id: g.group_snapshot_id.clone(),
            snapshot_ids,
            secrets,
        }),
        _ => None,
    })
}
