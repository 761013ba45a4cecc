//! Snapshots: the requests to take and delete one through the plugin's controller (queued
//! as controller operations, whose part of the queue is `ops::kinds::snapshot`: their
//! retries, their answers, `ready_to_use` tracked until true), the snapshots as the API
//! shows them, and the content source of a volume created from a snapshot or cloned from
//! a volume.

use csivol_api::{self as api, ContentSource, SnapshotRequest, SnapshotState, WireContentSource};

use super::after_release::{Use, why_held};
use super::events::event;
use super::ops::kinds::snapshot::{forget, op_key, touch};
use super::ops::schedule_ops;
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{Lifecycle, SnapshotRow, VolumeRow};
use crate::store::{Snapshot, Txn};
use csivol_rules::after_release::hold_settled;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::snapshots::{self as rules, Refusal, SnapshotFacts, VolumeFacts};

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

/// Snapshots per page of `GET /v1/snapshots`.
pub const SNAPSHOT_PAGE: usize = 500;

/// `GET /v1/snapshots[?volume=V]`, a page: the snapshots after `after` by name, and the name
/// the next page starts after (`None`: this was the last).
pub fn snapshot_page(
    conn: &(impl Snapshot + ?Sized),
    volume: Option<&str>,
    after: &str,
) -> ApiResult<(Vec<api::Snapshot>, Option<String>)> {
    let rows = conn.snapshot_page(volume, after, SNAPSHOT_PAGE)?;
    let next = match rows.last() {
        Some(last) if rows.len() == SNAPSHOT_PAGE => Some(last.name.clone()),
        _ => None,
    };
    let page = rows
        .iter()
        .map(|s| to_api(conn, s))
        .collect::<ApiResult<_>>()?;
    Ok((page, next))
}

/// `GET /v1/snapshots?group=G[&volume=V]`: a group's members (as many as its volumes, which
/// a group bounds).
pub fn list_group_members(
    conn: &(impl Snapshot + ?Sized),
    group: &str,
    volume: Option<&str>,
) -> ApiResult<Vec<api::Snapshot>> {
    if conn.group_snapshot(group)?.is_none() {
        return Err(
            ApiError::not_found(format!("group snapshot `{group}` is not registered"))
                .with_hint("`csivol snapshot list --groups` shows the group snapshots"),
        );
    }
    conn.group_members(group)?
        .iter()
        .filter(|s| volume.is_none_or(|v| s.volume == v))
        .map(|s| to_api(conn, s))
        .collect()
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
    api::validate_key("snapshot", name).map_err(ApiError::invalid)?;
    api::validate_key("volume", &req.volume).map_err(ApiError::invalid)?;
    // A snapshot is of its namespace's volume (the API names both in one namespace).
    if api::namespace_of(name) != api::namespace_of(&req.volume) {
        return Err(ApiError::invalid(format!(
            "snapshot `{name}` and volume `{}` are of two namespaces",
            req.volume
        )));
    }
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
        // What waits for the release waits for no linger.
        super::pools::end_lingers_for(ctx, &v.name, limits)?;
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
                "`csivol snapshot show {name_cli}` shows where it stands",
                name_cli = csivol_api::cli_name(name)
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
    // A pending snapshot's polling (CreateSnapshot, or ListSnapshots for an adopted one)
    // stops: it is being deleted.
    ctx.delete_key_op(OpKind::CreateSnapshot, &op_key(name))?;
    ctx.delete_key_op(OpKind::FindSnapshot, &op_key(name))?;
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

/// The plugin's ids for a new volume's content source, if the plugin can create it so.
pub(super) fn content_source(
    ctx: &(impl Snapshot + ?Sized),
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
