//! Volume modification: the request, checked by `csivol_rules::modify` and queued as
//! ControllerModifyVolume with the keys that change (its part of the queue, with what its
//! errors mean, is `ops::kinds::modify`). The volume records what it has
//! (`mutable_parameters`) and the change asked for (`modification`) until the plugin
//! applied it or refused it.

use csivol_api::{self as api, Modification, ModificationState};

use super::after_release::{Use, why_held};
use super::events::event;
use super::ops::kinds::modify::payload;
use super::ops::schedule_ops;
use super::settings::Limits;
use super::volumes::volume_view;
use crate::error::{ApiError, ApiResult};
use crate::model::{Lifecycle, time};
use crate::store::Txn;
use crate::watch::Key;
use csivol_rules::after_release::hold_settled;
use csivol_rules::kinds::{EventKind, OpKind};
use csivol_rules::modify::{Decision, Facts, decide};

fn describe(p: &std::collections::BTreeMap<String, String>) -> String {
    Modification::describe(p)
}

/// `POST /v1/volumes/{name}/modify`: checks the rule and queues ControllerModifyVolume with
/// the keys that change. Returns the volume and whether the request started something.
///
/// With `waits` (the caller follows the outcome), a modification asked for while the
/// volume is being released is held until the release has finished (`after_release`).
pub fn modify_volume(
    ctx: &mut impl Txn,
    name: &str,
    req: &api::ModifyRequest,
    actor: &str,
    limits: &Limits,
    waits: bool,
) -> ApiResult<(api::Volume, bool)> {
    api::FreeText::check_text(req).map_err(ApiError::text)?;
    let v = ctx.require_volume(name)?;
    let caps = ctx.controller_capabilities(&v.plugin)?;
    let facts = Facts {
        volume: name,
        plugin: &v.plugin,
        ready: v.lifecycle == Lifecycle::Ready,
        current: &v.mutable_parameters,
        requested: &req.parameters,
        under_way: v.modification.as_ref(),
        modify_volume: caps.map(|c| c.modify_volume),
    };
    let changes = match decide(&facts) {
        Ok(Decision::Nothing) => return Ok((volume_view(ctx, name)?, false)),
        Ok(Decision::Withdraw) => {
            let refused = v.modification.as_ref().map(|m| describe(&m.parameters));
            ctx.set_volume_modification(name, None, None)?;
            ctx.touch(Key::Volume(name.to_owned()));
            event(
                ctx,
                EventKind::VolumeModified,
                Some(name),
                None,
                None,
                actor,
                format!(
                    "the refused modification to {} is withdrawn: the volume keeps {}",
                    refused.unwrap_or_default(),
                    describe(&req.parameters)
                ),
            )?;
            return Ok((volume_view(ctx, name)?, false));
        }
        Ok(Decision::Start(changes)) => {
            // What the volume would have is a map like the one CreateVolume took, and is
            // kept: held to the same size, so that repeated changes cannot grow it.
            let mut has = v.mutable_parameters.clone();
            has.extend(changes.clone());
            let bytes = api::map_bytes(&has);
            if bytes > api::limits::CSI_MAP_BYTES {
                return Err(ApiError::invalid(format!(
                    "volume `{name}` would have {bytes} bytes of mutable parameters, more than the {} the CSI spec allows a map (its Size Limits)",
                    api::limits::CSI_MAP_BYTES
                ))
                .with_hint("change the values of the parameters it has, or shorten them"));
            }
            changes
        }
        Err(r) => {
            let e = if r.invalid {
                ApiError::invalid(r.message)
            } else {
                ApiError::conflict(r.message)
            };
            return Err(e.with_hint(r.hint));
        }
    };
    let held = hold_settled(&Use::load(&*ctx, name)?.standing(), waits);
    let m = Modification {
        parameters: changes.clone(),
        state: ModificationState::Pending,
        error: None,
        requested_at: time(ctx.now()),
        after_release: held,
    };
    ctx.set_volume_modification(name, None, Some(&m))?;
    ctx.touch(Key::Volume(name.to_owned()));
    let payload = payload(&changes);
    let mut said = format!(
        "ControllerModifyVolume with {} requested from plugin {}",
        describe(&changes),
        v.plugin
    );
    if held {
        ctx.queue_held_op(OpKind::Modify, &v.plugin, name, &payload, &why_held(name))?;
        // What waits for the release waits for no linger.
        super::pools::end_lingers_for(ctx, name, limits)?;
        said.push_str(", to be sent once the volume's release has finished");
    } else {
        ctx.queue_op(OpKind::Modify, &v.plugin, name, None, &payload)?;
    }
    event(
        ctx,
        EventKind::VolumeModifying,
        Some(name),
        None,
        None,
        actor,
        said,
    )?;
    schedule_ops(ctx, &v.plugin, limits)?;
    Ok((volume_view(ctx, name)?, true))
}
