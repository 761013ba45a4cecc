//! ControllerModifyVolume: a volume's mutable parameters changed by its plugin, with the
//! keys that change. Its owner is the volume's modification, kept until the plugin applied
//! it or refused it. A modification asked for with a wait while the volume's release is
//! under way is held until the release has finished (`after_release`).
//!
//! The spec's ControllerModifyVolume errors (v1.12): INVALID_ARGUMENT means the plugin
//! cannot apply the parameters to the volume and "no changes were made", so csivol marks
//! the request infeasible and does not retry it; the operator asks for other values.

use std::collections::BTreeMap;

use csivol_api::{ControllerOpKind, Modification, ModificationState, Report};
use csivol_rules::after_release::Needs;

use super::super::queue::{Failure, Held, Judged, Kind, OpError, Retrying, by_class};
use super::volume;
use crate::error::ApiResult;
use crate::lifecycle::events::event;
use crate::model::OpRow;
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

pub(super) struct Modify;

impl Kind for Modify {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        volume::waiting(ctx, o, why)
    }

    /// A volume with no modification left has nothing to show the error on.
    fn judge(
        &self,
        ctx: &mut dyn Txn,
        o: &OpRow,
        e: &OpError<'_>,
        _actor: &str,
    ) -> ApiResult<Judged> {
        if modification(ctx, &o.volume)?.is_none() {
            return Ok(Judged::Gone);
        }
        Ok(by_class(e.error))
    }

    /// The modification shows the last error while the call is retried.
    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        change(ctx, &o.volume, |m| m.error = Some(r.said()))
    }

    fn failure(&self, conn: &dyn Snapshot, o: &OpRow, e: &OpError<'_>) -> ApiResult<Failure> {
        let asked = modification(conn, &o.volume)?
            .map(|m| Modification::describe(&m.parameters))
            .unwrap_or_default();
        let message = if infeasible(e) {
            format!(
                "modification to {asked} is infeasible: {}; the plugin changed nothing",
                e.message
            )
        } else {
            format!("modification to {asked} failed: {}", e.message)
        };
        Ok(Failure {
            volume: Some(o.volume.clone()),
            node: None,
            message,
        })
    }

    /// INVALID_ARGUMENT leaves the modification infeasible (nothing changed); any other
    /// final error, failed.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        let state = if infeasible(e) {
            ModificationState::Infeasible
        } else {
            ModificationState::Failed
        };
        change(ctx, &o.volume, |m| {
            m.state = state;
            m.error = Some(e.message.to_owned());
        })
    }

    /// ControllerModifyVolume succeeded: the volume has the parameters it was sent.
    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::Modified { .. } = report else {
            return Ok(false);
        };
        ctx.delete_op(o.id)?;
        let Some(v) = ctx.volume(&o.volume)? else {
            return Ok(true);
        };
        let sent = parameters(o)?;
        let mut has = v.mutable_parameters.clone();
        has.extend(sent.clone());
        ctx.set_volume_modification(&o.volume, Some(&has), None)?;
        ctx.touch(Key::Volume(o.volume.clone()));
        event(
            ctx,
            EventKind::VolumeModified,
            Some(&o.volume),
            None,
            None,
            actor,
            format!(
                "ControllerModifyVolume succeeded: {}",
                Modification::describe(&sent)
            ),
        )?;
        Ok(true)
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::Modify {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            parameters: parameters(o)?,
            secrets: v.secrets.clone(),
        }))
    }

    fn held(&self) -> Option<&dyn Held> {
        Some(self)
    }
}

impl Held for Modify {
    fn needs(&self) -> Needs {
        Needs::Settled
    }

    fn started(&self, ctx: &mut dyn Txn, _o: &OpRow, volume: &str) -> ApiResult<EventKind> {
        change(ctx, volume, |m| m.after_release = false)?;
        Ok(EventKind::VolumeModifying)
    }

    fn dropped(&self, ctx: &mut dyn Txn, _o: &OpRow, volume: &str, message: &str) -> ApiResult<()> {
        change(ctx, volume, |m| {
            m.after_release = false;
            m.state = ModificationState::Failed;
            m.error = Some(message.to_owned());
        })
    }
}

/// INVALID_ARGUMENT: the plugin cannot apply the parameters and changed nothing.
fn infeasible(e: &OpError<'_>) -> bool {
    e.error.code == "INVALID_ARGUMENT"
}

/// What a modification's operation carries: the parameters that change.
pub(in crate::lifecycle) fn payload(parameters: &BTreeMap<String, String>) -> String {
    serde_json::json!({ "parameters": parameters }).to_string()
}

/// The parameters an operation sends.
fn parameters(o: &OpRow) -> ApiResult<BTreeMap<String, String>> {
    let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
    Ok(serde_json::from_value(payload["parameters"].clone()).unwrap_or_default())
}

fn modification(conn: &dyn Snapshot, volume: &str) -> ApiResult<Option<Modification>> {
    Ok(conn.volume(volume)?.and_then(|v| v.modification))
}

/// Changes the volume's modification with `f`, where it has one.
fn change(ctx: &mut dyn Txn, volume: &str, f: impl FnOnce(&mut Modification)) -> ApiResult<()> {
    let Some(mut m) = modification(ctx, volume)? else {
        return Ok(());
    };
    f(&mut m);
    ctx.set_volume_modification(volume, None, Some(&m))?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}
