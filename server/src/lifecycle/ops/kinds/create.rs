//! CreateVolume: a volume made by its plugin, `creating` until then. Its owner is the
//! volume. A creation cancelled while its call is out at a controller host is decided by
//! the call's answer: made after all, the volume is deleted through the plugin; failed,
//! it is forgotten (the CSI spec makes the CO "responsible for cleaning up volumes it
//! provisioned that it no longer needs", CreateVolume's `name`).

use std::collections::BTreeMap;

use csivol_api::{ClaimState, ControllerOpKind, Report, Topology};

use super::super::queue::{Judged, Kind, OpError, Retrying, by_class};
use super::{stray, volume};
use crate::error::ApiResult;
use crate::lifecycle::events::{event, show_segment};
use crate::model::{Lifecycle, OpRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};

pub(super) struct Create;

impl Kind for Create {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        volume::waiting(ctx, o, why)
    }

    /// The failed call of a cancelled creation made nothing: the cancel ends.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        actor: &str,
    ) -> ApiResult<Judged> {
        if cancelled(ctx, o)? {
            let what = format!("{} failed after the cancel ({})", o.plugin, e.message);
            forget_cancelled(ctx, &o.volume, Some(o), actor, &what)?;
            return Ok(Judged::Ended);
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        volume::retrying(ctx, o, r)
    }

    /// A failed creation leaves a failed volume.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        ctx.set_volume_lifecycle(&o.volume, Lifecycle::Failed, Some(e.message))?;
        ctx.touch(Key::Volume(o.volume.clone()));
        creation_failed(ctx, &o.volume, e.message)
    }

    /// CreateVolume succeeded: the volume is ready, with the plugin's id for it and where
    /// it is accessible from.
    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::Created {
            external_id,
            capacity_bytes,
            context,
            accessible_topology,
            ..
        } = report
        else {
            return Ok(false);
        };
        if cancelled(ctx, o)? {
            created_after_cancel(ctx, o, external_id, actor)?;
            return Ok(true);
        }
        created(
            ctx,
            o,
            external_id,
            *capacity_bytes,
            context,
            accessible_topology,
            actor,
        )?;
        Ok(true)
    }

    /// A CreateVolume answer of an earlier attempt or from another host, of the state's
    /// own history (`stray::of_this_state`), for this creation: the plugin made the
    /// volume, and the current attempt, asked with the same name, gets the same one (spec.md,
    /// CreateVolume: "This operation MUST be idempotent. If a volume corresponding to the
    /// specified volume `name` already exists [...] the Plugin MUST reply `0 OK` with the
    /// corresponding `CreateVolumeResponse`"). Taken as the answer: dropped, the volume
    /// would belong to no one if the current attempt failed.
    fn takes_late(
        &self,
        conn: &dyn Snapshot,
        host: &str,
        o: &OpRow,
        report: &Report,
        generation: Option<&str>,
    ) -> ApiResult<bool> {
        let Report::Created {
            made_for: Some(made),
            ..
        } = report
        else {
            return Ok(false);
        };
        Ok(made.plugin == o.plugin
            && made.volume == o.volume
            && stray::of_this_state(conn, host, made, generation)?)
    }

    /// A created per-job volume's claim, queued for the creation, is granted.
    fn moves_volume(&self) -> bool {
        true
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
        Ok(Some(ControllerOpKind::Create {
            volume: v.name.clone(),
            capability: v.capability(),
            capacity_bytes: payload["capacity_bytes"].as_u64().unwrap_or(0),
            parameters: v.parameters.clone(),
            secrets: v.secrets.clone(),
            topology_request: v.topology_request.clone(),
            source: serde_json::from_value(payload["source"].clone()).ok(),
            mutable_parameters: v.mutable_parameters.clone(),
            csi_name: payload["csi_name"].as_str().map(str::to_owned),
        }))
    }
}

fn created(
    ctx: &mut dyn Txn,
    o: &OpRow,
    external_id: &str,
    capacity_bytes: u64,
    context: &BTreeMap<String, String>,
    accessible_topology: &[Topology],
    actor: &str,
) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    ctx.volume_created(
        &o.volume,
        external_id,
        capacity_bytes,
        context,
        accessible_topology,
    )?;
    ctx.touch(Key::Volume(o.volume.clone()));
    event(
        ctx,
        EventKind::VolumeCreated,
        Some(&o.volume),
        None,
        None,
        actor,
        if accessible_topology.is_empty() {
            format!("created as {external_id}")
        } else {
            let segments: Vec<_> = accessible_topology.iter().map(show_segment).collect();
            format!(
                "created as {external_id}, accessible from {}",
                segments.join(" or ")
            )
        },
    )
}

/// Whether `o` is the CreateVolume of a volume whose creation was cancelled while it ran.
fn cancelled(ctx: &dyn Txn, o: &OpRow) -> ApiResult<bool> {
    Ok(o.kind == OpKind::Create
        && ctx
            .volume(&o.volume)?
            .is_some_and(|v| v.lifecycle == Lifecycle::Deleting))
}

/// Ends a cancelled creation that made nothing: the operation and the record go.
pub(in crate::lifecycle) fn forget_cancelled(
    ctx: &mut (impl Txn + ?Sized),
    name: &str,
    op: Option<&OpRow>,
    actor: &str,
    what: &str,
) -> ApiResult<()> {
    if let Some(o) = op {
        ctx.delete_op(o.id)?;
    }
    ctx.delete_volume(name)?;
    ctx.touch(Key::Volume(name.to_owned()));
    event(
        ctx,
        EventKind::VolumeCreateCancelled,
        Some(name),
        None,
        None,
        actor,
        format!(
            "creation cancelled: CreateVolume through plugin {what}; nothing was deleted in the \
             storage system"
        ),
    )
}

/// The CreateVolume of a cancelled creation made the volume after all: csivol records the
/// plugin's id for it and deletes it through the plugin, as the operator asked (the queue
/// hands the DeleteVolume out with the answer).
fn created_after_cancel(
    ctx: &mut dyn Txn,
    o: &OpRow,
    external_id: &str,
    actor: &str,
) -> ApiResult<()> {
    ctx.delete_op(o.id)?;
    let mut v = ctx.require_volume(&o.volume)?;
    v.external_id = external_id.to_owned();
    v.error = None;
    v.updated_at = ctx.now();
    v.modify_index = ctx.index();
    ctx.put_volume(&v)?;
    ctx.touch(Key::Volume(v.name.clone()));
    ctx.queue_op(OpKind::Delete, &v.plugin, &v.name, None, "{}")?;
    event(
        ctx,
        EventKind::VolumeDeleting,
        Some(&v.name),
        None,
        None,
        actor,
        format!(
            "CreateVolume answered after the creation was cancelled: created as {external_id}; \
             DeleteVolume requested"
        ),
    )
}

/// CreateVolume of a per-job volume failed for good: its job's queued claim leaves the
/// queue with why, so the job is told; the failed volume, which holds no storage, is
/// forgotten by [`collect`].
fn creation_failed(ctx: &mut dyn Txn, volume: &str, message: &str) -> ApiResult<()> {
    let Some(j) = ctx.job_volume(volume)? else {
        return Ok(());
    };
    let Some(c) = ctx.claim(volume, &j.alloc)? else {
        return Ok(());
    };
    if c.state != ClaimState::Queued {
        return Ok(());
    }
    crate::lifecycle::changes::delete_claim(ctx, &c)?;
    event(
        ctx,
        EventKind::ClaimDequeued,
        Some(volume),
        Some(&c.node),
        Some(&c.alloc),
        "server",
        format!(
            "left the queue: CreateVolume of per-job volume `{}` failed: {message}",
            j.name
        ),
    )
}
