//! Adoption: a volume or a snapshot the plugin's storage holds and csivol does not know,
//! registered once a controller host has asked the plugin about it. A volume is recorded
//! `creating` (no claim is taken on it) while ValidateVolumeCapabilities runs, and becomes
//! usable only when the plugin confirmed what it will be used with; a snapshot is recorded
//! `creating` while ListSnapshots looks for its id, and takes the plugin's answer. Their
//! parts of the queue are `ops::kinds::validate` and `ops::kinds::find_snapshot`.

use csivol_api::{self as api, FreeText, SnapshotAdoptRequest, SnapshotState, VolumeSpec};

use super::events::event;
use super::ops::kinds::snapshot::{op_key, touch};
use super::ops::schedule_ops;
use super::settings::Limits;
use super::snapshots::snapshot_view;
use super::volumes::{register_as, unknown_plugin, volume_view};
use crate::error::{ApiError, ApiResult};
use crate::model::{Lifecycle, SnapshotRow};
use crate::store::{Snapshot, Txn};
use csivol_rules::kinds::{EventKind, OpKind};

/// `POST /v1/volumes/{name}/adopt`, once the listing's checks passed (`inventory`): the
/// volume recorded `creating` and ValidateVolumeCapabilities queued, or, for a plugin
/// without a Controller service and an operator who said so, registered as it is. The
/// volume, and whether the request started something.
pub fn adopt_volume(
    ctx: &mut impl Txn,
    name: &str,
    spec: VolumeSpec,
    skip_validation: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<(api::Volume, bool)> {
    api::validate_key("volume", name).map_err(ApiError::invalid)?;
    let existing = ctx.volume(name)?;
    let registered = existing
        .as_ref()
        .is_some_and(|e| e.lifecycle == Lifecycle::Ready);
    if let Some(e) = existing {
        let same = e.plugin == spec.plugin && e.external_id == spec.external_id;
        let checking = ctx.volume_op(OpKind::ValidateVolume, name)?.is_some();
        if same && checking {
            return Ok((volume_view(ctx, name)?, false));
        }
        // A refused adoption's record is replaced by the next one, as a failed creation's.
        if e.lifecycle == Lifecycle::Failed && !checking && same {
            ctx.delete_volume(name)?;
        }
    }
    let known = ctx.plugin_ids()?;
    if !known.contains(&spec.plugin) {
        return Err(unknown_plugin(&spec.plugin, &known));
    }
    let plugin = spec.plugin.clone();
    if !has_controller_service(&*ctx, &plugin)? {
        if !skip_validation {
            return Err(ApiError::conflict(format!(
                "plugin `{plugin}` has no Controller service (no CONTROLLER_SERVICE in \
                 GetPluginCapabilities): csivol cannot check the volume with \
                 ValidateVolumeCapabilities"
            ))
            .with_hint(
                "make sure the volume supports the access mode and attachment you give, then \
                 adopt it without the check: add --skip-validation",
            ));
        }
        return register_as(ctx, name, spec, actor, Lifecycle::Ready);
    }
    if skip_validation {
        return Err(ApiError::invalid(format!(
            "--skip-validation is only for a plugin without a Controller service; plugin \
             `{plugin}` has one, and it must answer ValidateVolumeCapabilities"
        ))
        .with_hint("adopt it without --skip-validation"));
    }
    on_release_schema(&*ctx, "volume adopt")?;
    let id = spec.external_id.clone();
    let (view, started) = register_as(ctx, name, spec, actor, Lifecycle::Creating)?;
    if !started {
        // Registered with this very spec already: nothing to ask the plugin again.
        return Ok((view, false));
    }
    if registered {
        // A refusal would leave a volume csivol had registered `failed`: its spec is
        // changed as a registered volume's is (the write is rolled back).
        return Err(ApiError::conflict(format!(
            "volume `{name}` is already registered with another spec"
        ))
        .with_hint(format!(
            "change its spec with `csivol volume register FILE`, or adopt under another name \
             than `{name}`"
        )));
    }
    ctx.set_volume_error(
        name,
        &format!("waiting for ValidateVolumeCapabilities through plugin {plugin}"),
        false,
    )?;
    ctx.queue_op(OpKind::ValidateVolume, &plugin, name, None, "{}")?;
    event(
        ctx,
        EventKind::VolumeAdopting,
        Some(name),
        None,
        None,
        actor,
        format!("adopting volume {id}: ValidateVolumeCapabilities requested from plugin {plugin}"),
    )?;
    schedule_ops(ctx, &plugin, limits)?;
    Ok((volume_view(ctx, name)?, started))
}

/// Refused below this release's schema: the operation the adoption queues is of a kind
/// the servers of the release before do not know, and they may read the queue until
/// `upgrade finalize`.
fn on_release_schema(conn: &(impl Snapshot + ?Sized), what: &str) -> ApiResult<()> {
    if conn.release_schema()? {
        return Ok(());
    }
    Err(ApiError::conflict(format!(
        "this cluster runs on the previous schema, whose servers cannot run `{what}`'s check \
         through the plugin"
    ))
    .with_hint("run `csivol-server upgrade finalize` once every server runs this release"))
}

/// Whether a node registered `plugin` with the Controller service (CONTROLLER_SERVICE),
/// which ValidateVolumeCapabilities belongs to ("A Controller Plugin MUST implement this
/// RPC call", spec.md): a plugin without it cannot be asked.
pub fn has_controller_service(conn: &(impl Snapshot + ?Sized), plugin: &str) -> ApiResult<bool> {
    Ok(conn
        .plugin_registrations(plugin)?
        .iter()
        .any(|(_, _, r)| r.capabilities.controller_service))
}

/// `POST /v1/snapshots/{name}/adopt`: the snapshot recorded `creating` and ListSnapshots
/// of its id queued. The snapshot, and whether the request started something.
pub fn adopt_snapshot(
    ctx: &mut impl Txn,
    name: &str,
    req: SnapshotAdoptRequest,
    actor: &str,
    limits: &Limits,
) -> ApiResult<(api::Snapshot, bool)> {
    api::validate_key("snapshot", name).map_err(ApiError::invalid)?;
    api::validate_name("plugin", &req.plugin).map_err(ApiError::invalid)?;
    req.check_text().map_err(ApiError::text)?;
    if req.snapshot_id.is_empty() {
        return Err(ApiError::invalid(
            "`snapshot_id` is required: the plugin's id for the snapshot",
        ));
    }
    on_release_schema(&*ctx, "snapshot adopt")?;
    if ctx.group_snapshot(name)?.is_some() {
        return Err(
            ApiError::conflict(format!("group snapshot `{name}` already exists"))
                .with_hint("group snapshots and snapshots share names: choose another name"),
        );
    }
    let key = op_key(name);
    let payload = serde_json::json!({ "snapshot_id": req.snapshot_id }).to_string();
    if let Some(s) = ctx.snapshot(name)? {
        let looking = ctx
            .key_op(OpKind::FindSnapshot, &key)?
            .filter(|o| o.payload == payload);
        if s.plugin == req.plugin && (s.snapshot_id == req.snapshot_id || looking.is_some()) {
            return Ok((snapshot_view(ctx, name)?, false));
        }
        if s.state != SnapshotState::Failed || !s.snapshot_id.is_empty() {
            return Err(ApiError::conflict(format!(
                "snapshot `{name}` already exists, as snapshot `{}` of plugin `{}`",
                s.snapshot_id, s.plugin
            ))
            .with_hint("choose another name"));
        }
    }
    let known = ctx.plugin_ids()?;
    if !known.contains(&req.plugin) {
        return Err(unknown_plugin(&req.plugin, &known));
    }
    if let Some(other) = ctx
        .snapshots(None)?
        .into_iter()
        .find(|s| s.plugin == req.plugin && s.snapshot_id == req.snapshot_id)
    {
        // Named only to a request of its own namespace: another's names are not the
        // caller's to learn.
        let namespace = api::namespace_of(name);
        if api::namespace_of(&other.name) != namespace {
            return Err(ApiError::conflict(format!(
                "snapshot `{}` of plugin `{}` is already known to csivol, in another namespace",
                req.snapshot_id, req.plugin
            ))
            .with_hint("a snapshot of the storage is adopted once, into one namespace"));
        }
        let (_, known) = api::split_key(&other.name);
        return Err(ApiError::conflict(format!(
            "snapshot `{}` of plugin `{}` is already known to csivol as `{known}`",
            req.snapshot_id, req.plugin
        ))
        .with_hint(format!(
            "csivol snapshot show {}",
            api::cli_name(&other.name)
        )));
    }
    // Found with ListSnapshots: a plugin without LIST_SNAPSHOTS has nothing to find it with.
    let lists = ctx
        .controller_capabilities(&req.plugin)?
        .is_some_and(|c| c.list_snapshots);
    if !lists {
        return Err(ApiError::conflict(format!(
            "plugin `{}` does not list snapshots (no LIST_SNAPSHOTS on a controller host): \
             csivol cannot find snapshot `{}`",
            req.plugin, req.snapshot_id
        ))
        .with_hint(format!(
            "`csivol plugin show {}` shows its controller hosts and capabilities",
            req.plugin
        )));
    }
    // The snapshot id is the record's only once the plugin listed it: a record that was
    // never found holds no id a `snapshot delete` could send to DeleteSnapshot.
    let row = SnapshotRow {
        name: name.to_owned(),
        volume: String::new(),
        plugin: req.plugin.clone(),
        snapshot_id: String::new(),
        state: SnapshotState::Creating,
        ready_to_use: false,
        size_bytes: 0,
        creation_time: None,
        parameters: Default::default(),
        error: None,
        group: None,
        created_at: ctx.now(),
        updated_at: ctx.now(),
        modify_index: ctx.index(),
    };
    ctx.put_snapshot(&row)?;
    touch(ctx, &row);
    ctx.queue_op(OpKind::FindSnapshot, &req.plugin, &key, None, &payload)?;
    event(
        ctx,
        EventKind::SnapshotAdopting,
        None,
        None,
        None,
        actor,
        format!(
            "adopting snapshot {} as `{name}`: ListSnapshots requested from plugin {}",
            req.snapshot_id, req.plugin
        ),
    )?;
    schedule_ops(ctx, &req.plugin, limits)?;
    Ok((snapshot_view(ctx, name)?, true))
}
