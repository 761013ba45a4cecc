//! Volumes: registration, creation through the plugin, deregistration and deletion.

use std::collections::BTreeMap;

use csivol_api::{
    self as api, CreateVolumeSpec, FreeText, SnapshotState, VolumeSpec, validate_name,
};

use super::after_release::{Use, why_held};
use super::events::{event, show_segment};
use super::ops::kinds::create::forget_cancelled;
use super::ops::schedule_ops;
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{ClaimRow, Lifecycle, VolumeRow};
use crate::store::{Snapshot, Txn};
use crate::watch::Key;
use csivol_rules::after_release::{Ask, Standing, Verdict, admit_detached};
use csivol_rules::kinds::{EventKind, OpKind};

pub(super) fn check_spec_names(
    plugin: &str,
    attachment: api::Attachment,
    fs_type: &str,
    mount_flags: &[String],
) -> ApiResult<()> {
    validate_name("plugin", plugin).map_err(ApiError::invalid)?;
    if attachment == api::Attachment::BlockDevice
        && (!fs_type.is_empty() || !mount_flags.is_empty())
    {
        return Err(
            ApiError::invalid("a block-device volume takes no `fs_type` or `mount_flags`")
                .with_hint("remove them, or use `attachment = \"file-system\"`"),
        );
    }
    Ok(())
}

/// A plugin that no node registered: refused with the known plugins and the one closest
/// to what was asked, for a misspelt id.
pub fn unknown_plugin(plugin: &str, known: &[String]) -> ApiError {
    let err = ApiError::not_found(format!(
        "plugin `{plugin}` is not registered: no node runs it"
    ));
    if known.is_empty() {
        return err.with_hint(
            "no node has registered a plugin yet: start a node agent with `--plugin ID=ENDPOINT` \
             (and `--controller ID=ENDPOINT` where it hosts the plugin's controller)",
        );
    }
    let list = format!(
        "known plugins: {}; `csivol plugin list` shows them; a plugin is known once a node's \
         agent registers it",
        known.join(", ")
    );
    err.with_hint(match api::closest(plugin, known) {
        Some(g) => format!("did you mean plugin `{g}`? ({list})"),
        None => list,
    })
}

/// Topology segments are checked for what the CSI spec requires of them: keys and values
/// that are not empty, no segment twice; `what` names the field.
fn check_segments(what: &str, segments: &[api::Topology]) -> ApiResult<()> {
    for (i, s) in segments.iter().enumerate() {
        if let Some((k, v)) = s
            .iter()
            .find(|(k, v)| k.trim().is_empty() || v.trim().is_empty())
        {
            return Err(ApiError::invalid(format!(
                "`{what}` segment {} has an empty key or value (`{k}` = `{v}`)",
                i + 1
            ))
            .with_hint(
                "write segments as maps of non-empty keys and values, e.g. {\"zone\": \"a\"}",
            ));
        }
        if s.is_empty() {
            return Err(ApiError::invalid(format!(
                "`{what}` segment {} is empty: it would match every node",
                i + 1
            ))
            .with_hint(format!(
                "remove it, or leave `{what}` out to mean every node"
            )));
        }
        if segments[..i].contains(s) {
            return Err(ApiError::invalid(format!(
                "`{what}` lists segment {} twice",
                show_segment(s)
            ))
            .with_hint("list each segment once"));
        }
    }
    Ok(())
}

/// A `topology_request` as CreateVolume takes it: with required segments, every preferred
/// one is also required (the spec's rule for `requisite` and `preferred`).
fn check_topology_request(r: &api::TopologyRequest) -> ApiResult<()> {
    check_segments("topology_request.required", &r.required)?;
    check_segments("topology_request.preferred", &r.preferred)?;
    if !r.required.is_empty()
        && let Some(p) = r.preferred.iter().find(|p| !r.required.contains(p))
    {
        return Err(ApiError::invalid(format!(
            "preferred segment {} is not among the required ones",
            show_segment(p)
        ))
        .with_hint("add it to `topology_request.required`, or remove it from `preferred`"));
    }
    Ok(())
}

/// A spec's `claim_mount_flags`, `selinux_context` and `ownership`, checked: a block
/// volume is not mounted, a claim's mode is not a flag, a context goes into a quoted flag,
/// and the volume's own flags and its context fit in one `mount_flags`.
fn volume_mounts(
    attachment: api::Attachment,
    mount_flags: &[String],
    flags: &[String],
    context: Option<&str>,
    ownership: Option<api::Ownership>,
) -> ApiResult<api::VolumeMounts> {
    let m = api::VolumeMounts {
        claim_mount_flags: flags.to_vec(),
        selinux_context: context.map(str::to_owned),
        ownership,
    };
    if m.is_empty() {
        return Ok(m);
    }
    if attachment == api::Attachment::BlockDevice {
        return Err(ApiError::invalid(
            "`claim_mount_flags`, `selinux_context` and `ownership` apply to a file-system \
             volume, not a block one",
        ));
    }
    if let Some(f) = flags
        .iter()
        .find(|f| *f == "ro" || *f == "rw" || f.is_empty())
    {
        return Err(ApiError::invalid(format!(
            "`claim_mount_flags` lists `{f}`, which a claim cannot add: `ro` and `rw` are its \
             mode (`--read-only`)"
        )));
    }
    if let Some(c) = context {
        let fs = api::AccessType::FileSystem {
            fs_type: String::new(),
            mount_flags: mount_flags.to_vec(),
        };
        // The same check a claim's context meets; the plugin is judged at claim time.
        csivol_rules::mount_options::selinux_context(Some(c), None, true, &fs, &[])
            .and_then(|_| {
                csivol_rules::mount_options::publish_flags_fit(
                    &fs,
                    &[],
                    m.context_flag().as_deref(),
                )
            })
            .map_err(|e| ApiError::invalid(e.to_string()).with_hint(e.hint("")))?;
    }
    Ok(m)
}

fn insert_volume(ctx: &mut impl Txn, v: &VolumeRow) -> ApiResult<()> {
    ctx.put_volume(v)?;
    ctx.touch(Key::Volume(v.name.clone()));
    Ok(())
}

/// Full view of a volume inside a transaction.
pub fn volume_view(conn: &(impl Snapshot + ?Sized), name: &str) -> ApiResult<api::Volume> {
    let v = conn.require_volume(name)?;
    let claims = conn.claims_of_volume(name)?;
    let atts = conn.attachments_of_volume(name)?;
    let mounts = conn.volume_mounts(name)?;
    Ok(api::Volume {
        claim_mount_flags: mounts.claim_mount_flags,
        selinux_context: mounts.selinux_context,
        ownership: mounts.ownership,
        availability: conn.volume_availability(name)?.map(|a| a.to_api()),
        ..v.into_api(&claims, &atts)
    })
}

pub(super) fn claims_in_the_way(claims: &[ClaimRow]) -> String {
    let names: Vec<_> = claims
        .iter()
        .map(|c| format!("{} on {} ({})", c.alloc, c.node, c.state))
        .collect();
    names.join(", ")
}

/// One backend volume is one csivol volume: two names on one external id would take two
/// single-writer claims on it, and only a plugin with ControllerPublish would stop the
/// second writer. Checked in the registration's write transaction, so that two servers
/// registering one id at once (etcd store) cannot both pass: the second one's commit finds
/// the mirror moved, and its check runs again. Duplicates an older csivol recorded are
/// kept (`serve --check` and `csivol status` name them): a volume may be registered again
/// with the id it has.
fn one_name_per_backend_volume(
    conn: &(impl Snapshot + ?Sized),
    name: &str,
    plugin: &str,
    external_id: &str,
) -> ApiResult<()> {
    let others: Vec<String> = conn
        .volumes_with_external_id(plugin, external_id)?
        .into_iter()
        .filter(|n| n != name)
        .collect();
    let Some(first) = others.first() else {
        return Ok(());
    };
    Err(ApiError::conflict(format!(
        "external id `{external_id}` of plugin `{plugin}` is already registered as volume `{first}`: \
         one backend volume is one csivol volume, or two names could each take a single-writer claim on it"
    ))
    .with_hint(format!(
        "use volume `{first}`; to name it `{name}` instead, deregister it once nothing claims it \
         (`csivol volume deregister {first}`) and register this spec again"
    )))
}

/// The external ids registered under several names (an older csivol let that happen), each
/// as a warning in words with what to do; empty when there are none.
pub fn duplicate_ids(conn: &(impl Snapshot + ?Sized)) -> ApiResult<Vec<String>> {
    Ok(conn
        .duplicate_external_ids()?
        .into_iter()
        .map(|d| {
            format!(
                "external id `{}` of plugin `{}` is registered as {} volumes: {}; each can take \
                 a single-writer claim on the one backend volume\nhint: keep one name: \
                 deregister the others once nothing claims them (`csivol volume deregister {}`)",
                d.external_id,
                d.plugin,
                d.volumes.len(),
                d.volumes.join(", "),
                d.volumes.last().map_or("", String::as_str),
            )
        })
        .collect())
}

/// `PUT /v1/volumes/{name}`: returns the volume and whether it was new or changed.
pub fn register_volume(
    ctx: &mut impl Txn,
    name: &str,
    spec: VolumeSpec,
    actor: &str,
) -> ApiResult<(api::Volume, bool)> {
    register_as(ctx, name, spec, actor, Lifecycle::Ready)
}

/// Registers `spec` as `volume register` does, recorded in `lifecycle`: `creating` for a
/// volume adopted once its plugin confirmed it (whose caller writes its own event).
pub(super) fn register_as(
    ctx: &mut impl Txn,
    name: &str,
    spec: VolumeSpec,
    actor: &str,
    lifecycle: Lifecycle,
) -> ApiResult<(api::Volume, bool)> {
    validate_name("volume", name).map_err(ApiError::invalid)?;
    spec.check_text().map_err(ApiError::text)?;
    check_spec_names(
        &spec.plugin,
        spec.attachment,
        &spec.fs_type,
        &spec.mount_flags,
    )?;
    if spec.external_id.is_empty() {
        return Err(ApiError::invalid(
            "`external_id` is required: the plugin's id for the volume",
        ));
    }
    check_segments("topology", &spec.topology)?;
    let mounts = volume_mounts(
        spec.attachment,
        &spec.mount_flags,
        &spec.claim_mount_flags,
        spec.selinux_context.as_deref(),
        spec.ownership,
    )?;
    let existing = ctx.volume(name)?;
    let own_id = existing
        .as_ref()
        .is_some_and(|e| e.plugin == spec.plugin && e.external_id == spec.external_id);
    if !own_id {
        one_name_per_backend_volume(&*ctx, name, &spec.plugin, &spec.external_id)?;
    }
    let row = VolumeRow {
        name: name.to_owned(),
        plugin: spec.plugin,
        external_id: spec.external_id,
        access_mode: spec.access_mode,
        attachment: spec.attachment,
        fs_type: spec.fs_type,
        mount_flags: spec.mount_flags,
        context: spec.context,
        parameters: spec.parameters,
        secrets: spec.secrets,
        capacity_bytes: existing.as_ref().and_then(|e| e.capacity_bytes),
        lifecycle,
        error: None,
        created_at: ctx.now(),
        updated_at: ctx.now(),
        modify_index: ctx.index(),
        expansion: None,
        accessible_topology: spec.topology,
        topology_request: None,
        mutable_parameters: existing
            .as_ref()
            .map(|e| e.mutable_parameters.clone())
            .unwrap_or_default(),
        modification: None,
    };
    if let Some(e) = &existing {
        let same = e.plugin == row.plugin
            && e.external_id == row.external_id
            && e.access_mode == row.access_mode
            && e.attachment == row.attachment
            && e.fs_type == row.fs_type
            && e.mount_flags == row.mount_flags
            && e.context == row.context
            && e.parameters == row.parameters
            && e.secrets == row.secrets
            && e.accessible_topology == row.accessible_topology
            && e.lifecycle == Lifecycle::Ready
            && ctx.volume_mounts(name)? == mounts;
        if same {
            return Ok((volume_view(ctx, name)?, false));
        }
        if e.lifecycle != Lifecycle::Ready {
            return Err(ApiError::conflict(format!(
                "volume `{name}` is {}; it cannot be re-registered now",
                e.lifecycle.as_str()
            )));
        }
        let claims = ctx.claims_of_volume(name)?;
        let atts = ctx.attachments_of_volume(name)?;
        if let Standing::Releasing { steps, .. } = Use::load(&*ctx, name)?.standing() {
            let under_way: Vec<String> = steps.iter().map(|s| s.describe()).collect();
            return Err(ApiError::conflict(format!(
                "volume `{name}` is registered with a different spec and is still being released: {}",
                under_way.join("; ")
            ))
            .with_hint(format!(
                "register the changed spec once the release has finished (`csivol status {name}` \
                 shows where it stands), or under another name"
            )));
        }
        if !claims.is_empty() || !atts.is_empty() {
            return Err(ApiError::conflict(format!(
                "volume `{name}` is registered with a different spec and is in use: {}",
                if claims.is_empty() {
                    "still attached".to_owned()
                } else {
                    claims_in_the_way(&claims)
                }
            ))
            .with_hint(
                "release its claims first, or register the changed spec under another name",
            ));
        }
    }
    insert_volume(ctx, &row)?;
    ctx.put_volume_mounts(name, &mounts)?;
    if lifecycle != Lifecycle::Ready {
        return Ok((volume_view(ctx, name)?, true));
    }
    let (verb, kind) = if existing.is_some() {
        ("updated", EventKind::VolumeUpdated)
    } else {
        ("registered", EventKind::VolumeRegistered)
    };
    event(
        ctx,
        kind,
        Some(name),
        None,
        None,
        actor,
        format!("volume {verb} (plugin {}, {})", row.plugin, row.access_mode),
    )?;
    Ok((volume_view(ctx, name)?, true))
}

/// `POST /v1/volumes/{name}/create`: records the volume as `creating` and queues
/// CreateVolume. Returns the volume and whether the request started something.
pub fn create_volume(
    ctx: &mut impl Txn,
    name: &str,
    spec: CreateVolumeSpec,
    actor: &str,
    limits: &Limits,
) -> ApiResult<(api::Volume, bool)> {
    validate_name("volume", name).map_err(ApiError::invalid)?;
    spec.check_text().map_err(ApiError::text)?;
    spec.check_source().map_err(ApiError::invalid)?;
    api::limits::size_bytes("capacity_bytes", spec.capacity_bytes)
        .map_err(ApiError::out_of_range)?;
    check_spec_names(
        &spec.plugin,
        spec.attachment,
        &spec.fs_type,
        &spec.mount_flags,
    )?;
    let mounts = volume_mounts(
        spec.attachment,
        &spec.mount_flags,
        &spec.claim_mount_flags,
        spec.selinux_context.as_deref(),
        spec.ownership,
    )?;
    // An empty request asks for nothing: recorded as none.
    let topology_request = spec.topology_request.filter(|r| !r.is_empty());
    if let Some(r) = &topology_request {
        check_topology_request(r)?;
    }
    if let Some(e) = ctx.volume(name)? {
        let same = e.plugin == spec.plugin
            && e.access_mode == spec.access_mode
            && e.attachment == spec.attachment
            && e.parameters == spec.parameters
            && e.topology_request == topology_request
            && ctx.volume_mounts(name)? == mounts
            && (spec.capacity_bytes == 0
                || e.capacity_bytes.is_none_or(|c| c >= spec.capacity_bytes));
        // The mutable parameters count while the volume is being created; once it is,
        // `volume modify` may have changed them, and the spec is still the volume's.
        let same = same
            && (e.lifecycle != Lifecycle::Creating
                || e.mutable_parameters == spec.mutable_parameters);
        if same && matches!(e.lifecycle, Lifecycle::Creating | Lifecycle::Ready) {
            return Ok((volume_view(ctx, name)?, false));
        }
        if e.lifecycle != Lifecycle::Failed {
            return Err(ApiError::conflict(format!(
                "volume `{name}` already exists with another spec"
            ))
            .with_hint(format!(
                "choose another name, or deregister it with `csivol volume deregister {name}`"
            )));
        }
    }
    // Refused at once rather than queued for a controller host that will never come: a
    // misspelt plugin would otherwise wait for good.
    let known = ctx.plugin_ids()?;
    if !known.contains(&spec.plugin) {
        return Err(unknown_plugin(&spec.plugin, &known));
    }
    if !spec.mutable_parameters.is_empty() {
        may_set_mutable(ctx, &spec.plugin)?;
    }
    let mut payload = serde_json::json!({ "capacity_bytes": spec.capacity_bytes });
    let mut from = String::new();
    if let Some(source) = &spec.source {
        // Resolved now, to the plugin's ids: the source is checked once, when the
        // operator asks, and the operation carries what it was checked against.
        let wire = super::snapshots::content_source(ctx, &spec.plugin, source)?;
        payload["source"] = serde_json::to_value(&wire)?;
        from = match source {
            api::ContentSource::Snapshot(s) => format!(" from snapshot `{s}`"),
            api::ContentSource::Volume(v) => format!(" as a clone of volume `{v}`"),
        };
    }
    let row = VolumeRow {
        name: name.to_owned(),
        plugin: spec.plugin.clone(),
        external_id: String::new(),
        access_mode: spec.access_mode,
        attachment: spec.attachment,
        fs_type: spec.fs_type,
        mount_flags: spec.mount_flags,
        context: BTreeMap::new(),
        parameters: spec.parameters,
        secrets: spec.secrets,
        capacity_bytes: (spec.capacity_bytes > 0).then_some(spec.capacity_bytes),
        lifecycle: Lifecycle::Creating,
        error: None,
        created_at: ctx.now(),
        updated_at: ctx.now(),
        modify_index: ctx.index(),
        expansion: None,
        accessible_topology: Vec::new(),
        topology_request,
        mutable_parameters: spec.mutable_parameters,
        modification: None,
    };
    insert_volume(ctx, &row)?;
    ctx.put_volume_mounts(name, &mounts)?;
    ctx.queue_op(
        OpKind::Create,
        &spec.plugin,
        name,
        None,
        &payload.to_string(),
    )?;
    event(
        ctx,
        EventKind::VolumeCreating,
        Some(name),
        None,
        None,
        actor,
        format!("CreateVolume requested from plugin {}{from}", spec.plugin),
    )?;
    schedule_ops(ctx, &spec.plugin, limits)?;
    Ok((volume_view(ctx, name)?, true))
}

/// Mutable parameters go to CreateVolume only for a plugin whose controller reports
/// MODIFY_VOLUME: the spec says the field "SHALL NOT be specified unless the SP has the
/// MODIFY_VOLUME controller capability", so a plugin nobody can ask is refused too.
fn may_set_mutable(ctx: &impl Txn, plugin: &str) -> ApiResult<()> {
    match ctx.controller_capabilities(plugin)? {
        Some(c) if c.modify_volume => Ok(()),
        Some(_) => Err(ApiError::invalid(format!(
            "plugin `{plugin}` takes no `mutable_parameters`: its controller does not report MODIFY_VOLUME"
        ))
        .with_hint(format!(
            "remove `mutable_parameters` from the spec; `csivol plugin show {plugin}` shows what its controller reports"
        ))),
        None => Err(ApiError::conflict(format!(
            "no agent hosts the controller of plugin `{plugin}`, so it cannot say whether it takes `mutable_parameters`"
        ))
        .with_hint(format!(
            "start an agent with `--controller {plugin}=ENDPOINT`, or create the volume without them"
        ))),
    }
}

/// `DELETE /v1/volumes/{name}`: removes the record (`None`), or with `delete` queues
/// DeleteVolume and returns the volume in `deleting`. With `delete` and `waits` (the
/// caller follows the outcome), a volume that only its release keeps attached is deleted
/// once the release has finished: `deleting` now, its DeleteVolume held until then.
pub fn deregister_volume(
    ctx: &mut impl Txn,
    name: &str,
    delete: bool,
    actor: &str,
    limits: &Limits,
    waits: bool,
) -> ApiResult<Option<api::Volume>> {
    let v = ctx.require_volume(name)?;
    if v.lifecycle == Lifecycle::Deleting {
        // Its DeleteVolume runs, or waits for the release it was asked to wait for.
        return Err(ApiError::conflict(format!(
            "volume `{name}` is deleting; wait for it to finish"
        ))
        .with_hint(format!("`csivol volume show {name}` shows where it stands")));
    }
    let claims = ctx.claims_of_volume(name)?;
    let atts = ctx.attachments_of_volume(name)?;
    let used = Use::load(&*ctx, name)?;
    let standing = used.standing();
    let held = match &standing {
        Standing::Releasing { .. } if delete => {
            let why = format!("volume `{name}`");
            let again = format!("csivol volume deregister {name} --delete --wait");
            let ask = Ask {
                volume: name,
                why: &why,
                again: &again,
            };
            match admit_detached(&standing, waits, &ask) {
                Verdict::Hold => true,
                Verdict::Refuse(r) => return Err(ApiError::conflict(r.message).with_hint(r.hint)),
                Verdict::Now | Verdict::InUse => unreachable!("a release is under way"),
            }
        }
        Standing::Releasing { steps, .. } => {
            // Forgetting a volume needs no plugin call to wait for: asked again once the
            // release has finished, it goes.
            let under_way: Vec<String> = steps.iter().map(|s| s.describe()).collect();
            return Err(ApiError::conflict(format!(
                "volume `{name}` is still being released: {}",
                under_way.join("; ")
            ))
            .with_hint(format!(
                "deregister it once the release has finished; `csivol status {name}` shows where it stands"
            )));
        }
        Standing::Free | Standing::InUse => {
            if !claims.is_empty() {
                return Err(ApiError::conflict(format!(
                    "volume `{name}` is claimed: {}",
                    claims_in_the_way(&claims)
                ))
                .with_hint(format!(
                    "release the claims first (`csivol release {name} --alloc ALLOC`)"
                )));
            }
            if !atts.is_empty() {
                let nodes: Vec<_> = atts
                    .iter()
                    .map(|a| format!("{} ({})", a.node, a.state))
                    .collect();
                return Err(ApiError::conflict(format!(
                    "volume `{name}` is still attached to {}",
                    nodes.join(", ")
                ))
                .with_hint(
                    "wait for the detach to finish; `csivol status` shows where it stands",
                ));
            }
            false
        }
    };
    no_snapshot_in_progress(ctx, name)?;
    if v.lifecycle == Lifecycle::Creating {
        if super::ops::kinds::validate::cancel(ctx, &v, actor)? {
            return Ok(None);
        }
        return cancel_create(ctx, &v, actor);
    }
    if let Some(e) = &v.expansion
        && e.phase != api::ExpansionPhase::Failed
    {
        return Err(ApiError::conflict(format!(
            "volume `{name}` is being expanded; wait for it to finish"
        ))
        .with_hint(format!(
            "`csivol volume show {name}` shows where the expansion stands"
        )));
    }
    if delete && v.lifecycle == Lifecycle::Ready {
        ctx.set_volume_lifecycle(name, Lifecycle::Deleting, None)?;
        ctx.touch(Key::Volume(name.to_owned()));
        let said = if held {
            // No new claim is taken while it is `deleting`, so the release is the last use.
            ctx.queue_held_op(OpKind::Delete, &v.plugin, name, "{}", &why_held(name))?;
            "DeleteVolume requested, to be sent once the volume's release has finished"
        } else {
            ctx.queue_op(OpKind::Delete, &v.plugin, name, None, "{}")?;
            "DeleteVolume requested"
        };
        event(
            ctx,
            EventKind::VolumeDeleting,
            Some(name),
            None,
            None,
            actor,
            said,
        )?;
        schedule_ops(ctx, &v.plugin, limits)?;
        return Ok(Some(volume_view(ctx, name)?));
    }
    ctx.delete_volume(name)?;
    ctx.touch(Key::Volume(name.to_owned()));
    event(
        ctx,
        EventKind::VolumeDeregistered,
        Some(name),
        None,
        None,
        actor,
        "volume deregistered",
    )?;
    Ok(None)
}

/// Refuses to deregister or delete a volume while a snapshot of it (alone or in a group)
/// is being cut: its CreateSnapshot needs the volume (and is repeated until the snapshot is
/// ready to use).
fn no_snapshot_in_progress(ctx: &impl Txn, volume: &str) -> ApiResult<()> {
    let cutting = |s: SnapshotState| matches!(s, SnapshotState::Creating | SnapshotState::Pending);
    let mut names: Vec<_> = ctx
        .snapshots(Some(volume))?
        .into_iter()
        .filter(|s| cutting(s.state) && s.group.is_none())
        .map(|s| s.name)
        .collect();
    names.extend(
        ctx.group_snapshots()?
            .into_iter()
            .filter(|g| cutting(g.state) && g.volumes.iter().any(|v| v == volume))
            .map(|g| g.name),
    );
    if names.is_empty() {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "volume `{volume}` has snapshots being created: {}",
        names.join(", ")
    ))
    .with_hint(format!(
        "wait until they are ready (`csivol snapshot list --volume {volume}`), or delete them"
    )))
}

/// A volume still `creating` is cancelled. Its CreateVolume never succeeded (success makes
/// it ready), so csivol holds no id of anything in the storage system: when no call is out,
/// the queued operation and the record go at once, and nothing is called in the plugin
/// (`None`). When a call is out at a controller host, its answer decides, for the CSI spec
/// makes the CO "responsible for cleaning up volumes it provisioned that it no longer needs"
/// (CreateVolume, `name`): the volume waits in `deleting` (returned); a volume made after
/// all is deleted through the plugin, a failed call ends the cancel as above
/// (`ops::kinds::create`).
fn cancel_create(ctx: &mut impl Txn, v: &VolumeRow, actor: &str) -> ApiResult<Option<api::Volume>> {
    let name = &v.name;
    let op = ctx.volume_op(OpKind::Create, name)?;
    if let Some(o) = &op
        && let Some(host) = &o.host
    {
        let why = format!(
            "creation cancelled while CreateVolume runs on node {host}: if it makes the volume, \
             DeleteVolume follows; if it fails, the volume is forgotten"
        );
        ctx.set_volume_lifecycle(name, Lifecycle::Deleting, Some(&why))?;
        ctx.touch(Key::Volume(name.clone()));
        event(
            ctx,
            EventKind::VolumeDeleting,
            Some(name),
            None,
            None,
            actor,
            why,
        )?;
        return Ok(Some(volume_view(ctx, name)?));
    }
    let attempts = op.as_ref().map_or(0, |o| o.attempt);
    let tried = match attempts {
        0 => "never ran".to_owned(),
        1 => "failed once".to_owned(),
        n => format!("failed {n} times"),
    };
    let last = v
        .error
        .as_deref()
        .map(|e| format!(" (last: {e})"))
        .unwrap_or_default();
    forget_cancelled(
        ctx,
        name,
        op.as_ref(),
        actor,
        &format!("{} {tried}{last}", v.plugin),
    )?;
    Ok(None)
}
