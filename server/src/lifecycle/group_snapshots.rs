//! Group snapshots: several volumes of one plugin snapshotted together by its
//! GroupController, asked for and deleted as controller operations (their part of the
//! queue is `ops::kinds::group_snapshot`), and shown. Each member is recorded as an
//! ordinary snapshot named `GROUP.VOLUME`, which a volume is created from like any
//! snapshot; a member is deleted with its group, never alone. Groups and snapshots share
//! one namespace, so that `csivol snapshot show NAME` and `snapshot delete NAME` mean one
//! thing.

use std::collections::BTreeSet;

use csivol_api::{self as api, GroupSnapshotRequest, SnapshotState};

use super::ops::kinds::group_snapshot::{
    forget, group_event, member_name, op_key, set_members, touch,
};
use super::ops::schedule_ops;
use super::settings::Limits;
use super::snapshots::{facts, refused};
use crate::error::{ApiError, ApiResult};
use crate::model::GroupSnapshotRow;
use crate::store::{Snapshot, Txn};
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::snapshots as rules;

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
    csivol_api::validate_key("group snapshot", name).map_err(ApiError::invalid)?;
    for v in &req.volumes {
        csivol_api::validate_key("volume", v).map_err(ApiError::invalid)?;
        // A group is of its namespace's volumes (the API names them in one namespace).
        if csivol_api::namespace_of(v) != csivol_api::namespace_of(name) {
            return Err(ApiError::invalid(format!(
                "group snapshot `{name}` and volume `{v}` are of two namespaces"
            )));
        }
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
        csivol_api::validate_key("snapshot", &member).map_err(|e| {
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
