//! Storage volumes that a late CreateVolume answer says were made and that nothing records,
//! deleted through their plugin. A controller host paused past its heartbeat TTL may run a
//! CreateVolume from the desired state it held before the pause, after the operation went
//! to another host (and maybe finished, its volume deleted since): the answer is not
//! current, and the volume it made belongs to no one. It is csivol's to delete: the CSI
//! spec makes the CO "responsible for cleaning up volumes it provisioned that it no longer
//! needs" (spec.md, CreateVolumeRequest `name`).
//!
//! Only what an operation of the current state's history made is deleted: the answer names
//! the generation of the state that handed the operation out (`CreatedFor`), and one of
//! another generation (a restore since, or a restart of a SQLite server) is left alone, as
//! a volume made within a restore's window is left for the operator. And never the volume
//! csivol records: CreateVolume "MUST be idempotent. If a volume corresponding to the
//! specified volume `name` already exists [...] the Plugin MUST reply `0 OK` with the
//! corresponding `CreateVolumeResponse`" (spec.md, CreateVolume), so a retried creation
//! answers with the external id csivol already holds. A creation still running takes a
//! late answer as its own (`create::Create::takes_late`): its current attempt, asked with
//! the same name, gets the same volume.
//!
//! The DeleteVolume is an operation of its own, keyed by the external id, so that a second
//! copy of the answer asks for no second deletion while the first is queued. DeleteVolume
//! of a volume that is gone already is a success: "If a volume corresponding to the
//! specified `volume_id` does not exist or the artifacts associated with the volume do not
//! exist anymore, the Plugin MUST reply `0 OK`" (spec.md, DeleteVolume).

use csivol_api::{ControllerOpKind, CreatedFor, Report};
use serde_json::json;

use crate::error::ApiResult;
use crate::lifecycle::events::event;
use crate::lifecycle::ops::queue::Kinds;
use crate::model::OpRow;
use crate::store::{Snapshot, Txn};
use csivol_rules::kinds::{EventKind, OpKind};

/// Where a stray volume's DeleteVolume is keyed: `stray-volume/EXTERNAL_ID`.
const OP_PREFIX: &str = "stray-volume/";

/// The operation key of the DeleteVolume of the stray volume `external_id`.
pub(in crate::lifecycle) fn op_key(external_id: &str) -> String {
    format!("{OP_PREFIX}{external_id}")
}

/// Whether `o` deletes a stray volume rather than a volume csivol records.
pub(super) fn is_stray(o: &OpRow) -> bool {
    o.volume.starts_with(OP_PREFIX)
}

/// Whether `made` names an operation that `host`, a host of its plugin's controller, was
/// handed in the state of `generation`.
pub(super) fn of_this_state(
    conn: &dyn Snapshot,
    host: &str,
    made: &CreatedFor,
    generation: Option<&str>,
) -> ApiResult<bool> {
    if generation.is_none() || made.generation.as_deref() != generation {
        return Ok(false);
    }
    Ok(conn
        .node_plugins(host)?
        .iter()
        .any(|p| p.plugin == made.plugin && p.controller))
}

/// A CreateVolume answer from `host` that is not current and that no creation still
/// running takes: the volume it made is deleted, unless csivol records it. Gives the
/// plugin whose operations are then to be handed out.
pub(in crate::lifecycle) fn late_created(
    ctx: &mut impl Txn,
    host: &str,
    report: &Report,
    generation: Option<&str>,
    kinds: Kinds,
) -> ApiResult<Option<String>> {
    let Report::Created {
        op,
        attempt,
        external_id,
        made_for: Some(made),
        ..
    } = report
    else {
        return Ok(None);
    };
    if let Some(o) = ctx.op(*op as i64)? {
        let current = o.attempt == *attempt && o.host.as_deref() == Some(host);
        if current || kinds(o.kind).takes_late(&*ctx, host, &o, report, generation)? {
            return Ok(None);
        }
    }
    if !of_this_state(&*ctx, host, made, generation)? {
        return Ok(None);
    }
    if !ctx
        .volumes_with_external_id(&made.plugin, external_id)?
        .is_empty()
    {
        return Ok(None);
    }
    let key = op_key(external_id);
    if ctx.key_op(OpKind::Delete, &key)?.is_some() {
        return Ok(None);
    }
    let payload = json!({ "external_id": external_id, "volume": made.volume }).to_string();
    ctx.queue_op(OpKind::Delete, &made.plugin, &key, None, &payload)?;
    event(
        ctx,
        EventKind::VolumeDeleting,
        Some(&made.volume),
        Some(host),
        None,
        &format!("node:{host}"),
        format!(
            "a late CreateVolume answer from node {host} made volume {external_id} that \
             nothing records; deleting it"
        ),
    )?;
    Ok(Some(made.plugin.clone()))
}

/// The stray volume's external id and the volume whose creation made it.
fn named(o: &OpRow) -> ApiResult<(String, String)> {
    let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
    let text = |k: &str| payload[k].as_str().unwrap_or_default().to_owned();
    Ok((text("external_id"), text("volume")))
}

/// What the host is sent: DeleteVolume of the external id, with the secrets of the volume
/// of that name if csivol still has one of the same plugin (the one the creation was for,
/// or one made since under its name), else none.
pub(super) fn shown(conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
    let (external_id, volume) = named(o)?;
    let secrets = conn
        .volume(&volume)?
        .filter(|v| v.plugin == o.plugin)
        .map(|v| v.secrets)
        .unwrap_or_default();
    Ok(Some(ControllerOpKind::Delete {
        volume,
        external_id,
        secrets,
    }))
}

/// DeleteVolume of the stray volume succeeded (or it was gone already): the operation ends.
pub(super) fn finish(ctx: &mut dyn Txn, o: &OpRow, actor: &str) -> ApiResult<()> {
    let (external_id, volume) = named(o)?;
    ctx.delete_op(o.id)?;
    event(
        ctx,
        EventKind::VolumeDeleted,
        Some(&volume),
        None,
        None,
        actor,
        format!(
            "DeleteVolume succeeded for volume {external_id}, which a late CreateVolume \
             answer made; nothing records it"
        ),
    )
}

/// What its final failure names: the volume whose creation made it, and why it is left.
pub(super) fn failure_message(o: &OpRow, message: &str) -> ApiResult<(String, String)> {
    let (external_id, volume) = named(o)?;
    Ok((
        volume,
        format!(
            "{message}; volume {external_id}, which a late CreateVolume answer made, is left \
             in the storage system: delete it there"
        ),
    ))
}
