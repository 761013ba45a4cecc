//! CreateVolumeGroupSnapshot and DeleteVolumeGroupSnapshot: several volumes of one plugin
//! snapshotted together by its GroupController. Its owner is the group snapshot, with its
//! members. `ready_to_use` is tracked until true by repeating the operation:
//! CreateVolumeGroupSnapshot (idempotent by name) until the group is cut, then
//! GetVolumeGroupSnapshot. Each member is recorded as an ordinary snapshot named
//! `GROUP.VOLUME`; a member is deleted with its group, never alone.
//!
//! A group's operations are queued under `group-snapshot/NAME` in the operation's volume
//! column, as a snapshot's are under `snapshot/NAME`.

use csivol_api::{ControllerOpKind, GroupMember, Report, SnapshotState};

use super::super::queue::{Failure, Judged, Kind, OpError, Retrying, by_class};
use crate::error::ApiResult;
use crate::lifecycle::backoff::backoff;
use crate::lifecycle::events::event;
use crate::model::{GroupSnapshotRow, OpRow, SnapshotRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::snapshots as rules;

pub(super) struct GroupSnapshot;

const OP_PREFIX: &str = "group-snapshot/";

/// Longest wait between two polls while a group is not ready to use.
const MAX_POLL_STEP: u32 = 3;

/// The queue's key of group snapshot `name`'s operations.
pub(in crate::lifecycle) fn op_key(name: &str) -> String {
    format!("{OP_PREFIX}{name}")
}

/// The name (key) of the member of `group` cut from `volume` (a key of the group's
/// namespace, or the plugin's id of a volume csivol does not know): `GROUP.VOLUME` in the
/// group's namespace.
pub(in crate::lifecycle) fn member_name(group: &str, volume: &str) -> String {
    let (namespace, group) = csivol_api::split_key(group);
    let prefix = format!("{namespace}{}", csivol_api::KEY_SEPARATOR);
    let volume = volume.strip_prefix(&prefix).unwrap_or(volume);
    csivol_api::volume_key(namespace, &format!("{group}.{volume}"))
}

/// The group snapshot an operation is for.
fn group_of(conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<GroupSnapshotRow>> {
    match o.volume.strip_prefix(OP_PREFIX) {
        Some(name) => conn.group_snapshot(name),
        None => Ok(None),
    }
}

/// Wakes the group's followers and those of its volumes and members.
pub(in crate::lifecycle) fn touch(
    ctx: &mut (impl Txn + ?Sized),
    g: &GroupSnapshotRow,
) -> ApiResult<()> {
    ctx.touch(Key::Snapshot(g.name.clone()));
    for v in &g.volumes {
        ctx.touch(Key::Volume(v.clone()));
    }
    for m in ctx.group_members(&g.name)? {
        ctx.touch(Key::Snapshot(m.name));
    }
    Ok(())
}

/// An event about a group: it names no one volume.
pub(in crate::lifecycle) fn group_event(
    ctx: &mut (impl Txn + ?Sized),
    kind: EventKind,
    actor: &str,
    message: String,
) -> ApiResult<()> {
    event(ctx, kind, None, None, None, actor, message)
}

/// Changes every member of `group` with `f`.
pub(in crate::lifecycle) fn set_members(
    ctx: &mut (impl Txn + ?Sized),
    group: &str,
    f: impl Fn(&mut SnapshotRow),
) -> ApiResult<()> {
    for mut m in ctx.group_members(group)? {
        f(&mut m);
        ctx.put_snapshot(&m)?;
    }
    Ok(())
}

/// The records of `g` and its members go, with a `snapshot-deleted` event saying why.
pub(in crate::lifecycle) fn forget(
    ctx: &mut (impl Txn + ?Sized),
    g: &GroupSnapshotRow,
    actor: &str,
    message: String,
) -> ApiResult<()> {
    touch(ctx, g)?;
    ctx.delete_group_snapshot(&g.name)?;
    group_event(ctx, EventKind::SnapshotDeleted, actor, message)
}

impl Kind for GroupSnapshot {
    /// The group says why.
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        let Some(mut g) = group_of(ctx, o)? else {
            return Ok(());
        };
        g.error = Some(why.to_owned());
        ctx.put_group_snapshot(&g)?;
        touch(ctx, &g)
    }

    /// DeleteVolumeGroupSnapshot: "If a group snapshot corresponding to the specified
    /// `group_snapshot_id` does not exist [...] the Plugin MUST reply `0 OK`"; a NOT_FOUND
    /// all the same means the same. A group whose record went meanwhile has nothing to
    /// show an error on.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        actor: &str,
    ) -> ApiResult<Judged> {
        if e.error.code == "NOT_FOUND" && o.kind == OpKind::DeleteGroupSnapshot {
            deleted(ctx, o, actor)?;
            return Ok(Judged::Ended);
        }
        if group_of(ctx, o)?.is_none() {
            return Ok(Judged::Gone);
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        let Some(mut g) = group_of(ctx, o)? else {
            return Ok(());
        };
        g.error = Some(r.said());
        ctx.put_group_snapshot(&g)?;
        touch(ctx, &g)
    }

    fn failure(&self, conn: &dyn Snapshot, o: &OpRow, e: &OpError<'_>) -> ApiResult<Failure> {
        let name = o.volume.strip_prefix(OP_PREFIX).unwrap_or(&o.volume);
        Ok(Failure {
            volume: None,
            node: None,
            message: match group_of(conn, o)? {
                Some(_) => format!("group snapshot `{name}`: {}", e.message),
                None => e.message.to_owned(),
            },
        })
    }

    /// A failed create leaves a failed group with failed members, a failed delete the
    /// group and its members as they were, each with the plugin's error.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        let Some(mut g) = group_of(ctx, o)? else {
            return Ok(());
        };
        let delete = o.kind == OpKind::DeleteGroupSnapshot;
        g.state = if delete {
            rules::state_after_create(g.ready_to_use)
        } else {
            SnapshotState::Failed
        };
        g.error = Some(e.message.to_owned());
        ctx.put_group_snapshot(&g)?;
        set_members(ctx, &g.name, |m| {
            m.state = if delete {
                rules::state_after_create(m.ready_to_use)
            } else {
                SnapshotState::Failed
            };
        })?;
        touch(ctx, &g)
    }

    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        match report {
            Report::GroupSnapshotCreated {
                group_snapshot_id,
                ready_to_use,
                creation_time_ms,
                snapshots,
                ..
            } if o.kind == OpKind::CreateGroupSnapshot => {
                let answer = GroupCut {
                    group_snapshot_id: group_snapshot_id.clone(),
                    ready_to_use: *ready_to_use,
                    creation_time_ms: *creation_time_ms,
                    snapshots,
                };
                created(ctx, o, actor, answer)?;
            }
            Report::GroupSnapshotDeleted { .. } if o.kind == OpKind::DeleteGroupSnapshot => {
                deleted(ctx, o, actor)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// What the controller host needs; `None` when the group is gone, or, for a create,
    /// one of its volumes.
    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(g) = group_of(conn, o)? else {
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
                    // Named as a snapshot is (the key, within the spec's 128 bytes).
                    group: super::snapshot::csi_snapshot_name(&g.name),
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
}

/// What CreateVolumeGroupSnapshot or GetVolumeGroupSnapshot answered.
struct GroupCut<'a> {
    group_snapshot_id: String,
    ready_to_use: bool,
    creation_time_ms: Option<u64>,
    snapshots: &'a [GroupMember],
}

/// The group was cut: its members are recorded, and it is ready or asked again.
fn created(ctx: &mut dyn Txn, o: &OpRow, actor: &str, answer: GroupCut<'_>) -> ApiResult<()> {
    let Some(mut g) = group_of(ctx, o)? else {
        return ctx.delete_op(o.id);
    };
    let name = g.name.clone();
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
    for m in answer.snapshots {
        let volume = by_id
            .get(&m.source_volume_id)
            .cloned()
            .unwrap_or_else(|| m.source_volume_id.clone());
        let member = member_name(&name, &volume);
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
            group: Some(name.clone()),
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
        .group_members(&name)?
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
fn deleted(ctx: &mut dyn Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let Some(g) = group_of(ctx, o)? else {
        return Ok(());
    };
    let message = format!(
        "DeleteVolumeGroupSnapshot succeeded: group snapshot `{}` deleted with its members",
        g.name
    );
    forget(ctx, &g, actor, message)
}
