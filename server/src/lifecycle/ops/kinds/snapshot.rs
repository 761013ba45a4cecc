//! CreateSnapshot and DeleteSnapshot: a volume's snapshot cut and deleted by its plugin.
//! Its owner is the snapshot. `ready_to_use` is tracked until true by repeating the
//! operation: CreateSnapshot (idempotent by name, as the spec allows), or GetSnapshot of
//! the snapshot cut where the plugin has GET_SNAPSHOT (the controller host chooses; the
//! operation names the snapshot id once known). A CreateSnapshot asked for with a wait
//! while its volume's release is under way is held until the release has finished
//! (`after_release`).
//!
//! A snapshot's operations are queued under the key `snapshot/NAME` in the operation's
//! volume column: no volume can be named so (names have no `/`), so the queue's
//! one-operation-per-key rule holds per snapshot and nothing meant for a volume touches it.

use csivol_api::{ControllerOpKind, Report, SnapshotState};
use csivol_rules::after_release::Needs;

use super::super::queue::{Failure, Held, Judged, Kind, OpError, Retrying, by_class};
use crate::error::ApiResult;
use crate::lifecycle::backoff::backoff;
use crate::lifecycle::events::event;
use crate::model::{OpRow, SnapshotRow};
use crate::store::{Snapshot as Store, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::snapshots as rules;

pub(super) struct Snapshot;

const OP_PREFIX: &str = "snapshot/";

/// Longest wait between two CreateSnapshot calls while a snapshot is not ready to use.
const MAX_POLL_STEP: u32 = 3;

/// The name CreateSnapshot is asked with: the snapshot's key (`api::volume_key`), the bare
/// name in `default` as before namespaces, so that a snapshot cut before is asked for by the
/// name it was cut with. csi.proto, CreateSnapshotRequest `name`: "The suggested name for
/// the snapshot. This field is REQUIRED for idempotency." A key is unique across
/// namespaces (no name holds `~`), and the spec's Size Limits hold a string field to 128
/// bytes: a longer key (a long name in a long namespace) is cut, and a digest of the whole
/// key keeps two such names apart, the same at every call.
pub(in crate::lifecycle) fn csi_snapshot_name(key: &str) -> String {
    const LIMIT: usize = 128;
    if key.len() <= LIMIT {
        return key.to_owned();
    }
    use sha2::Digest;
    let digest: String = sha2::Sha256::digest(key.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // Keys are ASCII (`validate_key`), so any cut is on a character boundary.
    format!("{}-{digest}", &key[..LIMIT - 1 - digest.len()])
}

/// The queue's key of snapshot `name`'s operations.
pub(in crate::lifecycle) fn op_key(name: &str) -> String {
    format!("{OP_PREFIX}{name}")
}

/// The snapshot an operation is for.
pub(super) fn snapshot_of(conn: &dyn Store, o: &OpRow) -> ApiResult<Option<SnapshotRow>> {
    match o.volume.strip_prefix(OP_PREFIX) {
        Some(name) => conn.snapshot(name),
        None => Ok(None),
    }
}

/// Wakes the followers of `s` and of its volume.
pub(in crate::lifecycle) fn touch(ctx: &mut (impl Txn + ?Sized), s: &SnapshotRow) {
    ctx.touch(Key::Snapshot(s.name.clone()));
    ctx.touch(Key::Volume(s.volume.clone()));
}

/// The record of `s` goes, with its `snapshot-deleted` event saying why.
pub(in crate::lifecycle) fn forget(
    ctx: &mut (impl Txn + ?Sized),
    s: &SnapshotRow,
    actor: &str,
    message: String,
) -> ApiResult<()> {
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

/// Changes the operation's snapshot with `f`, where it still has one.
fn change(ctx: &mut dyn Txn, o: &OpRow, f: impl FnOnce(&mut SnapshotRow)) -> ApiResult<()> {
    let Some(mut s) = snapshot_of(ctx, o)? else {
        return Ok(());
    };
    f(&mut s);
    ctx.put_snapshot(&s)?;
    touch(ctx, &s);
    Ok(())
}

impl Kind for Snapshot {
    /// The snapshot says why.
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        change(ctx, o, |s| s.error = Some(why.to_owned()))
    }

    /// NOT_FOUND from DeleteSnapshot means the plugin no longer has it: deleted. A snapshot
    /// whose record went meanwhile has nothing to show an error on.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        actor: &str,
    ) -> ApiResult<Judged> {
        if e.error.code == "NOT_FOUND" && o.kind == OpKind::DeleteSnapshot {
            deleted(ctx, o, actor)?;
            return Ok(Judged::Ended);
        }
        if snapshot_of(ctx, o)?.is_none() {
            return Ok(Judged::Gone);
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        change(ctx, o, |s| s.error = Some(r.said()))
    }

    fn failure(&self, conn: &dyn Store, o: &OpRow, e: &OpError<'_>) -> ApiResult<Failure> {
        let s = snapshot_of(conn, o)?;
        Ok(Failure {
            volume: s.as_ref().map(|s| s.volume.clone()),
            node: None,
            message: match &s {
                Some(s) => format!("snapshot `{}`: {}", s.name, e.message),
                None => e.message.to_owned(),
            },
        })
    }

    /// A failed create leaves a failed snapshot, a failed delete the snapshot as it was,
    /// each with the plugin's error.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        change(ctx, o, |s| {
            s.state = match o.kind {
                OpKind::DeleteSnapshot if s.ready_to_use => SnapshotState::Ready,
                OpKind::DeleteSnapshot if !s.snapshot_id.is_empty() => SnapshotState::Pending,
                _ => SnapshotState::Failed,
            };
            s.error = Some(e.message.to_owned());
        })
    }

    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        match report {
            Report::SnapshotCreated {
                snapshot_id,
                size_bytes,
                ready_to_use,
                creation_time_ms,
                ..
            } if o.kind == OpKind::CreateSnapshot => {
                let answer = Created {
                    snapshot_id: snapshot_id.clone(),
                    size_bytes: *size_bytes,
                    ready_to_use: *ready_to_use,
                    creation_time_ms: *creation_time_ms,
                };
                created(ctx, o, actor, answer)?;
            }
            Report::SnapshotDeleted { .. } if o.kind == OpKind::DeleteSnapshot => {
                deleted(ctx, o, actor)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// What the controller host needs; `None` when the snapshot is gone.
    fn shown(&self, conn: &dyn Store, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(s) = snapshot_of(conn, o)? else {
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
                    snapshot: csi_snapshot_name(&s.name),
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

    fn held(&self) -> Option<&dyn Held> {
        Some(self)
    }
}

impl Held for Snapshot {
    fn needs(&self) -> Needs {
        Needs::Settled
    }

    fn started(&self, ctx: &mut dyn Txn, o: &OpRow, _volume: &str) -> ApiResult<EventKind> {
        if let Some(name) = o.volume.strip_prefix(OP_PREFIX) {
            ctx.touch(Key::Snapshot(name.to_owned()));
        }
        Ok(EventKind::SnapshotCreating)
    }

    /// The snapshot fails with why (its record is replaced by the next request).
    fn dropped(&self, ctx: &mut dyn Txn, o: &OpRow, _volume: &str, message: &str) -> ApiResult<()> {
        change(ctx, o, |s| {
            s.state = SnapshotState::Failed;
            s.error = Some(message.to_owned());
        })
    }
}

/// What CreateSnapshot answered.
struct Created {
    snapshot_id: String,
    size_bytes: u64,
    ready_to_use: bool,
    creation_time_ms: Option<u64>,
}

/// CreateSnapshot answered: ready, or cut but not ready to use yet (then asked again).
fn created(ctx: &mut dyn Txn, o: &OpRow, actor: &str, answer: Created) -> ApiResult<()> {
    let Some(mut s) = snapshot_of(ctx, o)? else {
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

/// DeleteSnapshot succeeded (or the plugin no longer has it): the record goes.
fn deleted(ctx: &mut dyn Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let Some(s) = snapshot_of(ctx, o)? else {
        return Ok(());
    };
    let message = format!("DeleteSnapshot succeeded: snapshot `{}` deleted", s.name);
    forget(ctx, &s, actor, message)
}
