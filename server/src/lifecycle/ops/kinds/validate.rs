//! ValidateVolumeCapabilities: a volume being adopted, checked by its plugin with the
//! capability, context and parameters it will be registered with. Its owner is the volume,
//! `creating` until then: confirmed, it is ready; not confirmed, or not there at all
//! (NOT_FOUND), it is `failed` with what the plugin said, and no claim is ever taken on it.

use csivol_api::{ControllerOpKind, Report};

use super::super::queue::{Judged, Kind, OpError, Retrying, by_class};
use super::volume;
use crate::error::ApiResult;
use crate::lifecycle::events::event;
use crate::model::{Lifecycle, OpRow, VolumeRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::{EventKind, OpKind};

pub(super) struct Validate;

impl Kind for Validate {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        volume::waiting(ctx, o, why)
    }

    /// NOT_FOUND: "Indicates that a volume corresponding to the specified `volume_id` does
    /// not exist" (spec.md, ValidateVolumeCapabilities errors): the adoption ends there,
    /// as retrying would only ask about a volume the operator named wrongly.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        _actor: &str,
    ) -> ApiResult<Judged> {
        if ctx.volume(&o.volume)?.is_none() {
            return Ok(Judged::Gone);
        }
        if e.error.code == "NOT_FOUND" {
            return Ok(Judged::Final);
        }
        Ok(by_class(e.error))
    }

    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        volume::retrying(ctx, o, r)
    }

    /// The volume is not adopted: `failed`, with the plugin's error.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        let said = if e.error.code == "NOT_FOUND" {
            let id = ctx
                .volume(&o.volume)?
                .map(|v| v.external_id)
                .unwrap_or_default();
            format!("plugin {} has no volume {id}: {}", o.plugin, e.message)
        } else {
            e.message.to_owned()
        };
        ctx.set_volume_lifecycle(&o.volume, Lifecycle::Failed, Some(&said))?;
        ctx.touch(Key::Volume(o.volume.clone()));
        Ok(())
    }

    /// The plugin answered: everything confirmed, the volume is registered; anything not
    /// confirmed, it is `failed` naming what and with the plugin's message.
    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::Validated {
            not_confirmed,
            message,
            ..
        } = report
        else {
            return Ok(false);
        };
        ctx.delete_op(o.id)?;
        let Some(v) = ctx.volume(&o.volume)? else {
            return Ok(true);
        };
        ctx.touch(Key::Volume(v.name.clone()));
        if not_confirmed.is_empty() {
            ctx.set_volume_lifecycle(&v.name, Lifecycle::Ready, None)?;
            return event(
                ctx,
                EventKind::VolumeRegistered,
                Some(&v.name),
                None,
                None,
                actor,
                format!(
                    "volume registered (plugin {}, {}): adopted {}, ValidateVolumeCapabilities \
                     confirmed it",
                    v.plugin, v.access_mode, v.external_id
                ),
            )
            .map(|()| true);
        }
        let mut said = format!(
            "plugin {} did not confirm {} for volume {} (ValidateVolumeCapabilities)",
            v.plugin,
            not_confirmed.join(", "),
            v.external_id
        );
        if !message.is_empty() {
            said.push_str(&format!(": {message}"));
        }
        ctx.set_volume_lifecycle(&v.name, Lifecycle::Failed, Some(&said))?;
        event(
            ctx,
            EventKind::OperationFailed,
            Some(&v.name),
            None,
            None,
            actor,
            said,
        )?;
        Ok(true)
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::ValidateVolume {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            capability: v.capability(),
            context: v.context.clone(),
            parameters: v.parameters.clone(),
            secrets: v.secrets.clone(),
        }))
    }
}

/// Cancels the adoption of `v` while its check is queued or running (`volume
/// deregister`): the operation and the record go; nothing in the storage changes, and a
/// late answer finds no operation. Whether `v` was being adopted.
pub(in crate::lifecycle) fn cancel(
    ctx: &mut (impl Txn + ?Sized),
    v: &VolumeRow,
    actor: &str,
) -> ApiResult<bool> {
    let Some(op) = ctx.volume_op(OpKind::ValidateVolume, &v.name)? else {
        return Ok(false);
    };
    ctx.delete_op(op.id)?;
    ctx.delete_volume(&v.name)?;
    ctx.touch(Key::Volume(v.name.clone()));
    event(
        ctx,
        EventKind::VolumeDeregistered,
        Some(&v.name),
        None,
        None,
        actor,
        format!(
            "adoption of volume {} cancelled; nothing changed in the storage system",
            v.external_id
        ),
    )?;
    Ok(true)
}
