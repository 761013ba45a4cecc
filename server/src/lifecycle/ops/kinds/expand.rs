//! ControllerExpandVolume: a volume grown in its storage, then on its nodes where the
//! plugin says so (`node_expansion`). Its owner is the volume's expansion. An offline
//! expansion asked for with a wait while the volume's release is under way is held until
//! the volume is detached (`after_release`).

use csivol_api::{ControllerOpKind, Expansion, ExpansionPhase, Report, format_size};
use csivol_rules::after_release::Needs;

use super::super::queue::{Held, Kind, OpError, Retrying};
use super::volume;
use crate::error::ApiResult;
use crate::lifecycle::changes::touch_volume;
use crate::lifecycle::events::event;
use crate::lifecycle::node_expansion::{attached_that_grow, node_phase};
use crate::model::OpRow;
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::kinds::EventKind;

pub(super) struct Expand;

impl Kind for Expand {
    fn waiting(&self, ctx: &mut dyn Txn, o: &OpRow, why: &str) -> ApiResult<()> {
        volume::waiting(ctx, o, why)
    }

    /// The expansion shows the last error while the call is retried.
    fn retrying(&self, ctx: &mut dyn Txn, o: &OpRow, r: &Retrying<'_>) -> ApiResult<()> {
        change(ctx, &o.volume, |e| e.error = Some(r.said()))?;
        touch_volume(ctx, &o.volume)
    }

    /// The expansion ends failed; the capacity stays as it was.
    fn failed(&self, ctx: &mut dyn Txn, o: &OpRow, e: &OpError<'_>) -> ApiResult<()> {
        change(ctx, &o.volume, |x| {
            x.error = Some(e.message.to_owned());
            x.phase = ExpansionPhase::Failed;
        })
    }

    /// ControllerExpandVolume succeeded: the volume has the capacity in its storage; the
    /// nodes where it is attached grow it too when the plugin says so and can.
    fn done(&self, ctx: &mut dyn Txn, o: &OpRow, report: &Report, actor: &str) -> ApiResult<bool> {
        let Report::Expanded {
            capacity_bytes,
            node_expansion_required,
            ..
        } = report
        else {
            return Ok(false);
        };
        ctx.delete_op(o.id)?;
        let Some(v) = ctx.volume(&o.volume)? else {
            return Ok(true);
        };
        let Some(e) = v.expansion.clone() else {
            return Ok(true);
        };
        // The spec: 0 means the plugin did not say; take what was asked for.
        let capacity = if *capacity_bytes == 0 {
            e.capacity_bytes
        } else {
            *capacity_bytes
        };
        let (nodes, any_can_grow) = if *node_expansion_required {
            attached_that_grow(ctx, &v)?
        } else {
            (Vec::new(), false)
        };
        if nodes.is_empty() && !any_can_grow {
            ctx.set_volume_expansion(&o.volume, Some(capacity), None)?;
            ctx.touch(Key::Volume(o.volume.clone()));
            event(
                ctx,
                EventKind::VolumeExpanded,
                Some(&o.volume),
                None,
                None,
                actor,
                format!("expanded to {}", format_size(capacity)),
            )?;
            return Ok(true);
        }
        // Where it is staged nowhere now (an offline expansion), the next node to stage it
        // grows it.
        let grew = format_size(capacity);
        node_phase(ctx, &o.volume, Some(capacity), e, &nodes, actor, |on| {
            format!("ControllerExpandVolume grew it to {grew}; NodeExpandVolume on {on}")
        })?;
        Ok(true)
    }

    fn shown(&self, conn: &dyn Snapshot, o: &OpRow) -> ApiResult<Option<ControllerOpKind>> {
        let Some(v) = conn.volume(&o.volume)? else {
            return Ok(None);
        };
        Ok(Some(ControllerOpKind::Expand {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            capacity_bytes: capacity_of(o)?,
            capability: v.capability(),
            secrets: v.secrets.clone(),
        }))
    }

    fn held(&self) -> Option<&dyn Held> {
        Some(self)
    }
}

impl Held for Expand {
    fn needs(&self) -> Needs {
        Needs::Detached
    }

    fn started(&self, ctx: &mut dyn Txn, _o: &OpRow, volume: &str) -> ApiResult<EventKind> {
        change(ctx, volume, |e| e.after_release = false)?;
        Ok(EventKind::VolumeExpanding)
    }

    fn dropped(&self, ctx: &mut dyn Txn, _o: &OpRow, volume: &str, message: &str) -> ApiResult<()> {
        change(ctx, volume, |e| {
            e.after_release = false;
            e.phase = ExpansionPhase::Failed;
            e.error = Some(message.to_owned());
        })
    }
}

/// What an expansion's operation carries: the capacity to reach.
pub(in crate::lifecycle) fn payload(capacity_bytes: u64) -> String {
    serde_json::json!({ "capacity_bytes": capacity_bytes }).to_string()
}

fn capacity_of(o: &OpRow) -> ApiResult<u64> {
    let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
    Ok(payload["capacity_bytes"].as_u64().unwrap_or(0))
}

/// Changes the volume's expansion with `f`, where it has one.
fn change(ctx: &mut dyn Txn, volume: &str, f: impl FnOnce(&mut Expansion)) -> ApiResult<()> {
    let Some(mut e) = ctx.volume(volume)?.and_then(|v| v.expansion) else {
        return Ok(());
    };
    f(&mut e);
    ctx.set_volume_expansion(volume, None, Some(&e))?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}
