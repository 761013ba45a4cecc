//! Volumes: registration, creation through the plugin, deregistration and deletion.

use std::collections::BTreeMap;

use csivol_proto::api::{self, CreateVolumeSpec, VolumeSpec, validate_name};
use rusqlite::{Connection, params};

use super::ops::{insert_op, schedule_ops};
use super::{Limits, event, exec};
use crate::server::db::WriteCtx;
use crate::server::error::{ApiError, ApiResult};
use crate::server::model::{AttachmentRow, ClaimRow, Lifecycle, VolumeRow, to_json};
use crate::server::watch::Key;

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

pub(super) fn insert_volume(ctx: &mut WriteCtx<'_>, v: &VolumeRow) -> ApiResult<()> {
    let secrets = crate::server::secrets::seal(&v.name, &v.secrets).map_err(ApiError::internal)?;
    exec(
        ctx.tx,
        "INSERT INTO volumes (name, plugin, external_id, access_mode, attachment, fs_type, mount_flags, context, \
         parameters, secrets, capacity_bytes, lifecycle, error, created_at, updated_at, modify_index) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?15) \
         ON CONFLICT (name) DO UPDATE SET plugin = ?2, external_id = ?3, access_mode = ?4, attachment = ?5, \
         fs_type = ?6, mount_flags = ?7, context = ?8, parameters = ?9, secrets = ?10, capacity_bytes = ?11, \
         lifecycle = ?12, error = ?13, updated_at = ?14, modify_index = ?15",
        params![
            v.name,
            v.plugin,
            v.external_id,
            v.access_mode.as_str(),
            v.attachment.as_str(),
            v.fs_type,
            to_json(&v.mount_flags),
            to_json(&v.context),
            to_json(&v.parameters),
            secrets,
            v.capacity_bytes.map(|c| c as i64),
            v.lifecycle.as_str(),
            v.error,
            ctx.now,
            ctx.index as i64,
        ],
    )?;
    ctx.touch(Key::Volume(v.name.clone()));
    Ok(())
}

/// Full view of a volume inside a transaction.
pub fn volume_view(conn: &Connection, name: &str) -> ApiResult<api::Volume> {
    let v = VolumeRow::require(conn, name)?;
    let claims = ClaimRow::of_volume(conn, name)?;
    let atts = AttachmentRow::of_volume(conn, name)?;
    Ok(v.to_api(&claims, &atts))
}

pub(super) fn claims_in_the_way(claims: &[ClaimRow]) -> String {
    let names: Vec<_> = claims
        .iter()
        .map(|c| format!("{} on {} ({})", c.alloc, c.node, c.state))
        .collect();
    names.join(", ")
}

/// `PUT /v1/volumes/{name}`: returns the volume and whether it was new or changed.
pub fn register_volume(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    spec: VolumeSpec,
    actor: &str,
) -> ApiResult<(api::Volume, bool)> {
    validate_name("volume", name).map_err(ApiError::invalid)?;
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
    let existing = VolumeRow::load(ctx.tx, name)?;
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
        lifecycle: Lifecycle::Ready,
        error: None,
        created_at: ctx.now,
        updated_at: ctx.now,
        modify_index: ctx.index,
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
            && e.lifecycle == Lifecycle::Ready;
        if same {
            return Ok((volume_view(ctx.tx, name)?, false));
        }
        if e.lifecycle != Lifecycle::Ready {
            return Err(ApiError::conflict(format!(
                "volume `{name}` is {}; it cannot be re-registered now",
                e.lifecycle.as_str()
            )));
        }
        let claims = ClaimRow::of_volume(ctx.tx, name)?;
        let atts = AttachmentRow::of_volume(ctx.tx, name)?;
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
    let verb = if existing.is_some() {
        "updated"
    } else {
        "registered"
    };
    event(
        ctx,
        &format!("volume-{verb}"),
        Some(name),
        None,
        None,
        actor,
        format!("volume {verb} (plugin {}, {})", row.plugin, row.access_mode),
    )?;
    Ok((volume_view(ctx.tx, name)?, true))
}

/// `POST /v1/volumes/{name}/create`: records the volume as `creating` and queues
/// CreateVolume. Returns the volume and whether the request started something.
pub fn create_volume(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    spec: CreateVolumeSpec,
    actor: &str,
    limits: &Limits,
) -> ApiResult<(api::Volume, bool)> {
    validate_name("volume", name).map_err(ApiError::invalid)?;
    check_spec_names(
        &spec.plugin,
        spec.attachment,
        &spec.fs_type,
        &spec.mount_flags,
    )?;
    if let Some(e) = VolumeRow::load(ctx.tx, name)? {
        let same = e.plugin == spec.plugin
            && e.access_mode == spec.access_mode
            && e.attachment == spec.attachment
            && e.parameters == spec.parameters
            && (spec.capacity_bytes == 0
                || e.capacity_bytes.is_none_or(|c| c >= spec.capacity_bytes));
        if same && matches!(e.lifecycle, Lifecycle::Creating | Lifecycle::Ready) {
            return Ok((volume_view(ctx.tx, name)?, false));
        }
        if e.lifecycle != Lifecycle::Failed {
            return Err(ApiError::conflict(format!(
                "volume `{name}` is already registered with another spec"
            ))
            .with_hint(format!(
                "choose another name, or deregister it with `csivol volume deregister {name}`"
            )));
        }
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
        created_at: ctx.now,
        updated_at: ctx.now,
        modify_index: ctx.index,
    };
    insert_volume(ctx, &row)?;
    let payload = serde_json::json!({ "capacity_bytes": spec.capacity_bytes });
    insert_op(
        ctx,
        "create",
        &spec.plugin,
        name,
        None,
        &payload.to_string(),
    )?;
    event(
        ctx,
        "volume-creating",
        Some(name),
        None,
        None,
        actor,
        format!("CreateVolume requested from plugin {}", spec.plugin),
    )?;
    schedule_ops(ctx, &spec.plugin, limits)?;
    Ok((volume_view(ctx.tx, name)?, true))
}

/// `DELETE /v1/volumes/{name}`: removes the record (`None`), or with `delete` queues
/// DeleteVolume and returns the volume in `deleting`.
pub fn deregister_volume(
    ctx: &mut WriteCtx<'_>,
    name: &str,
    delete: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<Option<api::Volume>> {
    let v = VolumeRow::require(ctx.tx, name)?;
    let claims = ClaimRow::of_volume(ctx.tx, name)?;
    if !claims.is_empty() {
        return Err(ApiError::conflict(format!(
            "volume `{name}` is claimed: {}",
            claims_in_the_way(&claims)
        ))
        .with_hint(format!(
            "release the claims first (`csivol release {name} --alloc ALLOC`)"
        )));
    }
    let atts = AttachmentRow::of_volume(ctx.tx, name)?;
    if !atts.is_empty() {
        let nodes: Vec<_> = atts
            .iter()
            .map(|a| format!("{} ({})", a.node, a.state))
            .collect();
        return Err(ApiError::conflict(format!(
            "volume `{name}` is still attached to {}",
            nodes.join(", ")
        ))
        .with_hint("wait for the detach to finish; `csivol status` shows where it stands"));
    }
    match v.lifecycle {
        Lifecycle::Creating | Lifecycle::Deleting => {
            return Err(ApiError::conflict(format!(
                "volume `{name}` is {}; wait for it to finish",
                v.lifecycle.as_str()
            )));
        }
        Lifecycle::Ready | Lifecycle::Failed => {}
    }
    if delete && v.lifecycle == Lifecycle::Ready {
        exec(
            ctx.tx,
            "UPDATE volumes SET lifecycle = 'deleting', error = NULL, updated_at = ?1, modify_index = ?2 WHERE name = ?3",
            params![ctx.now, ctx.index as i64, name],
        )?;
        ctx.touch(Key::Volume(name.to_owned()));
        insert_op(ctx, "delete", &v.plugin, name, None, "{}")?;
        event(
            ctx,
            "volume-deleting",
            Some(name),
            None,
            None,
            actor,
            "DeleteVolume requested",
        )?;
        schedule_ops(ctx, &v.plugin, limits)?;
        return Ok(Some(volume_view(ctx.tx, name)?));
    }
    ctx.tx
        .execute("DELETE FROM volumes WHERE name = ?1", [name])?;
    ctx.tx
        .execute("DELETE FROM ops WHERE volume = ?1", [name])?;
    ctx.touch(Key::Volume(name.to_owned()));
    event(
        ctx,
        "volume-deregistered",
        Some(name),
        None,
        None,
        actor,
        "volume deregistered",
    )?;
    Ok(None)
}
