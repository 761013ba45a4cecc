//! Per-job volumes deleted once nothing holds them: no claim (a blocked one holds them
//! like any), no attachment (one still detaching waits for ControllerUnpublish), no
//! operation held for their release, no inspection time left after a failed job. Asked
//! at every move of a volume and by the leader's sweep.

use csivol_rules::kinds::{EventKind, OpKind};

use super::events::event;
use super::ops::schedule_ops;
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::{JobVolumeRow, Lifecycle, VolumeRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;

/// Deletes a per-job volume once nothing holds it: no claim (a blocked one holds it like
/// any), no attachment (one still detaching waits for ControllerUnpublish), no operation
/// held for its release, and no inspection time left. A creation that failed is
/// forgotten: it holds no storage. Asked at every move of the volume and by the leader's
/// sweep.
pub(super) fn collect(ctx: &mut impl Txn, volume: &str, limits: &Limits) -> ApiResult<()> {
    let Some(j) = ctx.job_volume(volume)? else {
        return Ok(());
    };
    let Some(v) = ctx.volume(volume)? else {
        return Ok(());
    };
    if !due(&*ctx, &j, &v, ctx.now())? {
        return Ok(());
    }
    let whose = format!("per-job volume `{}` of alloc {}", j.name, j.alloc);
    match v.lifecycle {
        Lifecycle::Ready => {
            ctx.set_volume_lifecycle(volume, Lifecycle::Deleting, None)?;
            ctx.touch(Key::Volume(volume.to_owned()));
            ctx.queue_op(OpKind::Delete, &v.plugin, volume, None, "{}")?;
            let why = if j.kept_until.is_some() {
                "its inspection time is over"
            } else {
                "its claim is gone"
            };
            event(
                ctx,
                EventKind::VolumeDeleting,
                Some(volume),
                Some(&j.node),
                Some(&j.alloc),
                "server",
                format!("{whose}: {why}; DeleteVolume requested"),
            )?;
            schedule_ops(ctx, &v.plugin, limits)
        }
        Lifecycle::Failed => {
            ctx.delete_volume(volume)?;
            ctx.touch(Key::Volume(volume.to_owned()));
            event(
                ctx,
                EventKind::VolumeDeregistered,
                Some(volume),
                Some(&j.node),
                Some(&j.alloc),
                "server",
                format!(
                    "{whose}: {}; nothing was made, the record is gone",
                    v.error.as_deref().unwrap_or("CreateVolume failed")
                ),
            )
        }
        // Created later: its claim is gone by then, and the creation's end asks again.
        Lifecycle::Creating | Lifecycle::Deleting => Ok(()),
    }
}

/// How long after a DeleteVolume that failed for good (the volume back to ready with the
/// plugin's error: a plugin that refuses to delete a volume with snapshots, say) the
/// server asks again, instead of at every sweep.
const DELETE_AGAIN_AFTER_MS: i64 = 10 * 60 * 1000;

/// Whether nothing holds per-job volume `v` any more and its deletion is due: no claim,
/// no attachment, no held operation, no inspection time left, and no failed deletion
/// asked again too soon.
fn due(
    conn: &(impl Snapshot + ?Sized),
    j: &JobVolumeRow,
    v: &VolumeRow,
    now: i64,
) -> ApiResult<bool> {
    if j.kept_until.is_some_and(|t| t > now)
        || (v.lifecycle == Lifecycle::Ready
            && v.error.is_some()
            && now.saturating_sub(v.updated_at) < DELETE_AGAIN_AFTER_MS)
    {
        return Ok(false);
    }
    Ok(matches!(v.lifecycle, Lifecycle::Ready | Lifecycle::Failed)
        && conn.claims_of_volume(&v.name)?.is_empty()
        && conn.attachments_of_volume(&v.name)?.is_empty()
        && conn.held_ops(&v.name)?.is_empty())
}

/// Whether the leader's sweep has a per-job volume to look at: one whose deletion is due.
pub fn any_job_volume_due(conn: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<bool> {
    for j in conn.job_volumes()? {
        let Some(v) = conn.volume(&j.volume)? else {
            continue;
        };
        if due(conn, &j, &v, now)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`collect`] for every per-job volume (the leader's sweep: a kept volume's time runs
/// out without any move of the volume).
pub fn collect_job_volumes(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<()> {
    for j in ctx.job_volumes()? {
        collect(ctx, &j.volume, limits)?;
    }
    Ok(())
}
