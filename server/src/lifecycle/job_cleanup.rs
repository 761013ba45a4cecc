//! Per-job volumes deleted once nothing holds them: no claim (a blocked one holds them
//! like any), no attachment (one still detaching waits for ControllerUnpublish), no
//! operation held for their release, no inspection time left after a failed job. Asked
//! at every move of a volume and by the leader's sweep.

use csivol_rules::kinds::{EventKind, OpKind};

use super::events::event;
use super::ops::schedule_ops;
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::Lifecycle;
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
    if !ctx.claims_of_volume(volume)?.is_empty()
        || !ctx.attachments_of_volume(volume)?.is_empty()
        || !ctx.held_ops(volume)?.is_empty()
        || j.kept_until.is_some_and(|t| t > ctx.now())
    {
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

/// Whether the leader's sweep has a per-job volume to look at: one with nothing left
/// that holds it.
pub fn any_job_volume_due(conn: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<bool> {
    for j in conn.job_volumes()? {
        if j.kept_until.is_some_and(|t| t > now) {
            continue;
        }
        let Some(v) = conn.volume(&j.volume)? else {
            continue;
        };
        if matches!(v.lifecycle, Lifecycle::Ready | Lifecycle::Failed)
            && conn.claims_of_volume(&j.volume)?.is_empty()
            && conn.attachments_of_volume(&j.volume)?.is_empty()
        {
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
