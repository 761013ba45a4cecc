//! A claim's mount, decided when the claim is recorded: whether the group it asks for can
//! be applied on its node, and how (`csivol_rules::mounts` decides; this loads the facts).

use std::collections::BTreeMap;

use csivol_api::{self as api, ClaimRequest, ClaimState};
use csivol_rules::mounts::{GroupClaim, GroupRefused, PluginMounts, group_by};

use crate::error::{ApiError, ApiResult};
use crate::model::VolumeRow;
use crate::store::Snapshot;

/// The mount to record with a new claim of `v`, or the refusal. A best-effort request
/// (`csivol run`'s own group) is recorded without its group where it cannot be applied,
/// with the reason.
pub fn claim_mount(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    req: &ClaimRequest,
    plugins: &BTreeMap<String, PluginMounts>,
) -> ApiResult<api::ClaimMount> {
    let Some(gid) = req.mount.gid else {
        return Ok(api::ClaimMount::default());
    };
    let refused = |why: String, hint: String, conflict: bool| {
        if req.mount.best_effort {
            return Ok(api::ClaimMount {
                not_applied: Some(why),
                ..Default::default()
            });
        }
        let e = if conflict {
            ApiError::conflict(format!("group {gid} cannot be applied: {why}"))
        } else {
            ApiError::invalid(format!("group {gid} cannot be applied: {why}"))
        };
        Err(e.with_hint(hint))
    };
    if !conn.mounts_recorded()? {
        return refused(
            "this cluster runs on the previous schema, which does not record a claim's group"
                .into(),
            "run `csivol-server upgrade finalize` once every server runs this release".into(),
            false,
        );
    }
    let others: Vec<Option<u32>> = conn
        .claims_of_volume(&v.name)?
        .into_iter()
        .filter(|c| c.alloc != req.alloc && c.state != ClaimState::Failed)
        .map(|c| c.mount.gid)
        .collect();
    let registered = conn.node_plugin(&req.node, &v.plugin)?;
    let capability = v.capability();
    let claim = GroupClaim {
        gid,
        mode: req.mode,
        access_mode: v.access_mode,
        access_type: &capability.access_type,
        volume_mount_group: registered.map(|p| p.volume_mount_group),
        others: &others,
    };
    let none = PluginMounts::default();
    match group_by(&claim, plugins.get(&v.plugin).unwrap_or(&none)) {
        Ok(by) => Ok(api::ClaimMount {
            gid: Some(gid),
            group_by: Some(by),
            not_applied: None,
        }),
        Err(why) => {
            let conflict = matches!(why, GroupRefused::Disagrees { .. });
            refused(why.to_string(), why.hint(&v.plugin), conflict)
        }
    }
}
