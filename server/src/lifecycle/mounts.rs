//! A claim's mount, decided when the claim is recorded: whether the group it asks for can
//! be applied on its node and how (the plugin's VOLUME_MOUNT_GROUP, else the volume's
//! `ownership` or its plugin's), the flags it adds to its publication, and the SELinux
//! context the volume is mounted with there (`csivol_rules::mounts` and
//! `csivol_rules::mount_options` decide; this loads the facts).

use std::collections::BTreeMap;

use csivol_api::{self as api, ClaimRequest, ClaimState};
use csivol_rules::mount_options::{claim_flags, publish_flags_fit, selinux_context};
use csivol_rules::mounts::{GroupClaim, GroupRefused, PluginMounts, group_by};

use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, VolumeRow};
use crate::store::Snapshot;

const PREVIOUS_SCHEMA: &str =
    "this cluster runs on the previous schema, which does not record a claim's mount";
const FINALIZE: &str = "run `csivol-server upgrade finalize` once every server runs this release";

/// The mount to record with a new claim of `v`, or the refusal.
pub fn claim_mount(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    req: &ClaimRequest,
    plugins: &BTreeMap<String, PluginMounts>,
) -> ApiResult<api::ClaimMount> {
    let none = PluginMounts::default();
    let plugin = plugins.get(&v.plugin).unwrap_or(&none);
    let volume = conn.volume_mounts(&v.name)?;
    let asks = !req.mount.mount_flags.is_empty()
        || req.mount.selinux_context.is_some()
        || volume.selinux_context.is_some();
    if asks && !conn.mounts_recorded()? {
        return Err(ApiError::invalid(PREVIOUS_SCHEMA).with_hint(FINALIZE));
    }
    let others: Vec<ClaimRow> = conn
        .claims_of_volume(&v.name)?
        .into_iter()
        .filter(|c| c.alloc != req.alloc && c.state != ClaimState::Failed)
        .collect();
    let capability = v.capability();
    let refuse = |e: csivol_rules::mount_options::OptionRefused| {
        let conflict = matches!(
            e,
            csivol_rules::mount_options::OptionRefused::ContextDisagrees { .. }
        );
        let hint = e.hint(&v.plugin);
        let e = if conflict {
            ApiError::conflict(e.to_string())
        } else {
            ApiError::invalid(e.to_string())
        };
        e.with_hint(hint)
    };
    let mount_flags = claim_flags(
        &req.mount.mount_flags,
        &volume.claim_mount_flags,
        &capability.access_type,
    )
    .map_err(refuse)?;
    let on_node: Vec<Option<String>> = others
        .iter()
        .filter(|c| c.node == req.node)
        .map(|c| c.mount.selinux_context.clone())
        .collect();
    let selinux_context = selinux_context(
        req.mount.selinux_context.as_deref(),
        volume.selinux_context.as_deref(),
        plugin.selinux_mount,
        &capability.access_type,
        &on_node,
    )
    .map_err(refuse)?;
    let mut mount = api::ClaimMount {
        mount_flags,
        selinux_context,
        ..Default::default()
    };
    // One NodePublishVolume carries the volume's flags, the claim's and the context.
    publish_flags_fit(
        &capability.access_type,
        &mount.mount_flags,
        mount.context_flag().as_deref(),
    )
    .map_err(refuse)?;
    if req.mount.gid.is_some() {
        group(conn, v, req, plugin, volume.ownership, &others, &mut mount)?;
    }
    Ok(mount)
}

/// The claim's group into `mount`: how it is applied, or (a best-effort request, `csivol
/// run`'s own group) why it is not, or the refusal.
fn group(
    conn: &(impl Snapshot + ?Sized),
    v: &VolumeRow,
    req: &ClaimRequest,
    plugin: &PluginMounts,
    volume_ownership: Option<api::Ownership>,
    others: &[ClaimRow],
    mount: &mut api::ClaimMount,
) -> ApiResult<()> {
    let Some(gid) = req.mount.gid else {
        return Ok(());
    };
    let mut refused = |why: String, hint: String, conflict: bool| {
        if req.mount.best_effort {
            mount.not_applied = Some(why);
            return Ok(());
        }
        let e = if conflict {
            ApiError::conflict(format!("group {gid} cannot be applied: {why}"))
        } else {
            ApiError::invalid(format!("group {gid} cannot be applied: {why}"))
        };
        Err(e.with_hint(hint))
    };
    if !conn.mounts_recorded()? {
        return refused(PREVIOUS_SCHEMA.into(), FINALIZE.into(), false);
    }
    let groups: Vec<Option<u32>> = others.iter().map(|c| c.mount.gid).collect();
    let registered = conn.node_plugin(&req.node, &v.plugin)?;
    let capability = v.capability();
    let claim = GroupClaim {
        gid,
        mode: req.mode,
        access_mode: v.access_mode,
        access_type: &capability.access_type,
        volume_mount_group: registered.map(|p| p.volume_mount_group),
        others: &groups,
        volume_ownership,
    };
    match group_by(&claim, plugin) {
        Ok(by) => {
            mount.gid = Some(gid);
            mount.group_by = Some(by);
            Ok(())
        }
        Err(why) => {
            let conflict = matches!(why, GroupRefused::Disagrees { .. });
            refused(why.to_string(), why.hint(&v.plugin), conflict)
        }
    }
}
