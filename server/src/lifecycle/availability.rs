//! Whether a volume takes new claims, an operator's choice in the node commands' words:
//! out of service (`ineligible`), or drained (`draining`: no new claims, and the operator
//! waits for its holders to release it, never forcing one); back in service, its queued
//! claims, which waited meanwhile, are granted in their order. Admission refuses new
//! claims (`admission::evaluate_claim`) and the queue grants nothing (`grant_queued`)
//! while it is out of service.

use csivol_api::Eligibility;
use csivol_rules::kinds::EventKind;

use super::attachments::advance_volume;
use super::changes::touch_volume;
use super::events::event;
use super::settings::Limits;
use crate::error::ApiResult;
use crate::model::VolumeAvailabilityRow;
use crate::store::Txn;

/// `POST /v1/volumes/{name}/eligibility`: sets whether `volume` takes new claims, with the
/// operator's `reason`. Asking for what is already so changes nothing.
pub fn set_volume_eligibility(
    ctx: &mut impl Txn,
    volume: &str,
    eligibility: Eligibility,
    reason: Option<&str>,
    actor: &str,
    limits: &Limits,
) -> ApiResult<()> {
    ctx.require_volume(volume)?;
    let now = ctx.volume_availability(volume)?;
    let current = now
        .as_ref()
        .map_or(Eligibility::Eligible, |a| a.eligibility);
    let same_reason = now.as_ref().and_then(|a| a.reason.as_deref()) == reason;
    if current == eligibility && (eligibility == Eligibility::Eligible || same_reason) {
        return Ok(());
    }
    let row = (eligibility != Eligibility::Eligible).then(|| VolumeAvailabilityRow {
        eligibility,
        reason: reason.map(str::to_owned),
        actor: actor.to_owned(),
        at: ctx.now(),
    });
    ctx.set_volume_availability(volume, row.as_ref())?;
    touch_volume(ctx, volume)?;
    let (kind, what) = match eligibility {
        Eligibility::Eligible => (EventKind::VolumeEligible, "volume takes new claims again"),
        Eligibility::Ineligible => (EventKind::VolumeIneligible, "volume takes no new claims"),
        Eligibility::Draining => (
            EventKind::VolumeDraining,
            "volume is being drained: no new claims; its claims are left to their owners to release",
        ),
    };
    let message = match reason {
        Some(r) => format!("{what}: {r}"),
        None => what.to_owned(),
    };
    event(ctx, kind, Some(volume), None, None, actor, message)?;
    if eligibility == Eligibility::Eligible || !ctx.lingers(Some(volume), None)?.is_empty() {
        // Its queued claims waited: the queue grants them now, in their order. Out of
        // service, a staging kept after a release ends at once (a drain waits for no
        // linger).
        advance_volume(ctx, volume, limits)?;
    }
    Ok(())
}
