//! Everything that changes cluster state, each function running inside one write
//! transaction: volumes, claims, the attachment lifecycle, controller operations, node
//! loss and return, agents' reports and operators' actions.
//!
//! Handlers change the facts (a claim is recorded, a node reports a volume unstaged) and
//! then call [`advance_volume`], which moves the volume's claims and attachments as far
//! forward as those facts allow. Keeping that one function the only place that derives
//! the next step is what keeps the lifecycle consistent.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use csivol_api::domain::ErrorClass;
use csivol_api::{
    self as api, ActionPlan, AttachmentState, ClaimMode, ClaimRef, ClaimRequest, ClaimState,
    ControllerOpKind, CreateVolumeSpec, NodeStatus, PlannedAction, PluginError, RegisterRequest,
    Report, VolumeSpec, validate_name,
};
use rusqlite::{Connection, OptionalExtension, params};

use super::db::WriteCtx;
use super::error::{ApiError, ApiResult};
use super::model::{
    AttachmentRow, ClaimRow, Lifecycle, NodePluginRow, NodeRow, VolumeRow,
    needs_controller_publish, slots_used, time, to_json,
};
use super::queue;
use super::rules::{self, Accept, ConflictRule, Held, Refusal, Wanted};
use super::watch::Key;

/// Server settings the lifecycle depends on, and where it records latencies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Controller operations in flight per plugin.
    pub controller_concurrency: u32,
    pub metrics: std::sync::Arc<super::metrics::Metrics>,
}

pub fn event(
    ctx: &mut WriteCtx<'_>,
    kind: &str,
    volume: Option<&str>,
    node: Option<&str>,
    alloc: Option<&str>,
    actor: &str,
    message: impl Into<String>,
) -> ApiResult<()> {
    let message = message.into();
    ctx.tx.prepare_cached(
        "INSERT INTO events (at, kind, volume, node, alloc, actor, message) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![ctx.now, kind, volume, node, alloc, actor, message])?;
    ctx.touch(Key::Events);
    // Logged once committed: a change that was rolled back never happened.
    let (kind, volume, node, alloc, actor) = (
        kind.to_owned(),
        volume.map(str::to_owned),
        node.map(str::to_owned),
        alloc.map(str::to_owned),
        actor.to_owned(),
    );
    ctx.after_commit(move || {
        tracing::info!(kind, volume, node, alloc, actor, "{message}");
    });
    Ok(())
}

/// Runs one statement through the connection's statement cache: the same few statements
/// run for every claim, and preparing them each time would cost more than running them.
fn exec(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> ApiResult<usize> {
    Ok(conn.prepare_cached(sql)?.execute(params)?)
}

fn touch_volume(ctx: &mut WriteCtx<'_>, volume: &str) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("UPDATE volumes SET modify_index = ?1, updated_at = ?2 WHERE name = ?3")?
        .execute(params![ctx.index as i64, ctx.now, volume])?;
    ctx.touch(Key::Volume(volume.to_owned()));
    Ok(())
}

fn set_claim_state(ctx: &mut WriteCtx<'_>, c: &ClaimRow, state: ClaimState) -> ApiResult<()> {
    ctx.tx
        .prepare_cached(
            "UPDATE claims SET state = ?1, updated_at = ?2, modify_index = ?3, \
             error = CASE WHEN ?1 IN ('ready', 'releasing') THEN NULL ELSE error END, \
             next_retry_at = CASE WHEN ?1 IN ('ready', 'releasing', 'failed', 'blocked') THEN NULL ELSE next_retry_at END, \
             waiting = CASE WHEN ?1 = 'publishing' THEN waiting END, \
             waiting_since = CASE WHEN ?1 = 'publishing' THEN waiting_since END, \
             waiting_timeout_ms = CASE WHEN ?1 = 'publishing' THEN waiting_timeout_ms END, \
             condition = CASE WHEN ?1 IN ('ready', 'publishing', 'blocked') THEN condition END \
             WHERE volume = ?4 AND alloc = ?5",
        )?
        .execute(params![state.as_str(), ctx.now, ctx.index as i64, c.volume, c.alloc])?;
    ctx.touch(Key::Node(c.node.clone()));
    touch_volume(ctx, &c.volume)
}

/// Starts releasing a claim through its node (for a lease that ran out).
pub fn begin_release(ctx: &mut WriteCtx<'_>, c: &ClaimRow) -> ApiResult<()> {
    set_claim_state(ctx, c, ClaimState::Releasing)
}

/// Forgets a claim that holds nothing (a queued one).
pub fn remove_claim(ctx: &mut WriteCtx<'_>, c: &ClaimRow) -> ApiResult<()> {
    delete_claim(ctx, c)
}

fn delete_claim(ctx: &mut WriteCtx<'_>, c: &ClaimRow) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("DELETE FROM claims WHERE volume = ?1 AND alloc = ?2")?
        .execute(params![c.volume, c.alloc])?;
    ctx.touch(Key::Node(c.node.clone()));
    touch_volume(ctx, &c.volume)
}

fn set_attachment_state(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    node: &str,
    state: AttachmentState,
) -> ApiResult<()> {
    ctx.tx
        .prepare_cached(
            "UPDATE attachments SET state = ?1, updated_at = ?2, error = NULL, next_retry_at = NULL \
             WHERE volume = ?3 AND node = ?4",
        )?
        .execute(params![state.as_str(), ctx.now, volume, node])?;
    ctx.touch(Key::Node(node.to_owned()));
    touch_volume(ctx, volume)
}

fn delete_attachment(ctx: &mut WriteCtx<'_>, volume: &str, node: &str) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("DELETE FROM attachments WHERE volume = ?1 AND node = ?2")?
        .execute(params![volume, node])?;
    ctx.touch(Key::Node(node.to_owned()));
    touch_volume(ctx, volume)
}

// ---- volumes ----

fn check_spec_names(
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

fn insert_volume(ctx: &mut WriteCtx<'_>, v: &VolumeRow) -> ApiResult<()> {
    let secrets = super::secrets::seal(&v.name, &v.secrets).map_err(ApiError::internal)?;
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

fn claims_in_the_way(claims: &[ClaimRow]) -> String {
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

// ---- claims ----

/// What recording a claim would do.
#[derive(Debug)]
pub enum ClaimDecision {
    New,
    Existing(ClaimRow),
    /// Other claims are in the way and the claimant asked to wait: it is queued, with why.
    Queue(String),
}

fn unblock_hint(volume: &str, node: &str) -> String {
    format!(
        "if node {node} is really gone or fenced, run: csivol unblock {volume} --reason \"...\" \
         (or wait for the node to come back)"
    )
}

/// The rules' refusal as the API error it becomes, and whether it may be waited out in
/// the volume's queue.
fn refusal_error(volume: &str, v: &VolumeRow, req: &ClaimRequest, r: Refusal) -> (bool, ApiError) {
    let wait = queue::may_wait(&r);
    let e = match r {
        Refusal::ReadOnlyMode { access_mode } => ApiError::invalid(format!(
            "volume `{volume}` is {access_mode}: it takes read claims only"
        ))
        .with_hint("claim it with --read-only"),
        Refusal::AllocHoldsOther { node, mode, state } => ApiError::conflict(format!(
            "alloc `{}` already holds a {} claim on volume `{volume}` on node {node} ({state})",
            req.alloc,
            mode.as_str()
        ))
        .with_hint(match state {
            ClaimState::Releasing | ClaimState::Failed => {
                "wait for that claim to be gone, then claim again".to_owned()
            }
            _ => format!(
                "release it first: csivol release {volume} --alloc {}",
                req.alloc
            ),
        }),
        Refusal::Conflict {
            rule,
            holder_alloc,
            holder_node,
            blocked,
        } => {
            let why = match rule {
                ConflictRule::SingleNode => {
                    format!("is {} and is claimed on node {holder_node}", v.access_mode)
                }
                ConflictRule::SingleWriter => {
                    format!("is {} and already has a writer", v.access_mode)
                }
                ConflictRule::SingleClaim => format!("is {} and already claimed", v.access_mode),
            };
            if blocked {
                ApiError::blocked(format!(
                    "volume `{volume}` {why}: alloc {holder_alloc} on node {holder_node}, which was lost; \
                     the claim is blocked until that node comes back or is unblocked"
                ))
                .with_hint(unblock_hint(volume, &holder_node))
            } else {
                ApiError::conflict(format!(
                    "volume `{volume}` {why}: held by alloc {holder_alloc} on node {holder_node}"
                ))
                .with_hint(format!(
                    "wait for it to be released (csivol release {volume} --alloc {holder_alloc}), \
                     or claim with --queue to wait in line"
                ))
            }
        }
    };
    (wait, e)
}

/// Whether a claim of `v` on `node` may start there: the node is not lost, runs the
/// plugin, and has room. `Err((true, _))` when only room is missing (worth waiting for).
fn node_may_start(
    conn: &Connection,
    v: &VolumeRow,
    claims: &[ClaimRow],
    node: &str,
) -> ApiResult<Result<(), (bool, ApiError)>> {
    let volume = &v.name;
    let n = NodeRow::require(conn, node)?;
    if n.status == NodeStatus::Fenced {
        return Ok(Err((
            false,
            ApiError::blocked(format!(
                "node `{node}` was fenced (powered off); no claim can be placed on it until its agent registers again"
            ))
            .with_hint(format!(
                "choose another node, or power {node} on again (`csivol node show {node}` shows its fence)"
            )),
        )));
    }
    if n.status == NodeStatus::Lost {
        return Ok(Err((
            false,
            ApiError::blocked(format!(
                "node `{node}` is lost{}; no claim can be placed on it",
                n.lost_at
                    .map(|t| format!(" since {}", time(t)))
                    .unwrap_or_default()
            ))
            .with_hint(format!("choose another node, or bring {node}'s agent back")),
        )));
    }
    let np = NodePluginRow::load(conn, node, &v.plugin)?;
    let Some(np) = np.filter(|p| p.node_service) else {
        return Ok(Err((
            false,
            ApiError::invalid(format!(
                "node `{node}` does not run plugin `{}` (needed by volume `{volume}`)",
                v.plugin
            ))
            .with_hint("`csivol plugin show` lists the nodes that run it"),
        )));
    };
    let attached_here = claims
        .iter()
        .any(|c| c.node == node && c.state != ClaimState::Queued)
        || AttachmentRow::of_volume(conn, volume)?
            .iter()
            .any(|a| a.node == node);
    if !attached_here {
        let used = slots_used(conn, node, &v.plugin)?;
        if !rules::has_room(used, np.max_volumes) {
            return Ok(Err((
                true,
                ApiError::conflict(format!(
                    "node `{node}` has no free slot for plugin `{}`: {used} of {} volumes in use \
                     (attachments still detaching count)",
                    v.plugin, np.max_volumes
                ))
                .with_hint(
                    "release a claim on that node, choose another node, or claim with --queue",
                ),
            )));
        }
    }
    Ok(Ok(()))
}

fn held_of(claims: &[ClaimRow]) -> Vec<Held<'_>> {
    claims
        .iter()
        .filter(|c| c.state != ClaimState::Queued)
        .map(|c| Held {
            alloc: &c.alloc,
            node: &c.node,
            mode: c.mode,
            state: c.state,
        })
        .collect()
}

/// Checks a claim against every rule, without changing anything.
pub fn evaluate_claim(
    conn: &Connection,
    volume: &str,
    req: &ClaimRequest,
) -> ApiResult<ClaimDecision> {
    validate_name("volume", volume).map_err(ApiError::invalid)?;
    validate_name("alloc", &req.alloc).map_err(ApiError::invalid)?;
    validate_name("node", &req.node).map_err(ApiError::invalid)?;
    for k in req.labels.keys() {
        if k.is_empty() || k.len() > 63 || k.contains(['=', ',']) {
            return Err(ApiError::invalid(format!(
                "invalid label key `{k}`: 1 to 63 characters, without `=` or `,`"
            )));
        }
    }
    if req.ttl_ms == Some(0) {
        return Err(ApiError::invalid("`ttl_ms` must be longer than zero"));
    }
    let v = VolumeRow::require(conn, volume)?;
    match v.lifecycle {
        Lifecycle::Ready => {}
        Lifecycle::Creating => {
            return Err(
                ApiError::conflict(format!("volume `{volume}` is still being created"))
                    .with_hint("wait for `csivol volume show` to say it is free"),
            );
        }
        Lifecycle::Deleting => {
            return Err(ApiError::conflict(format!(
                "volume `{volume}` is being deleted"
            )));
        }
        Lifecycle::Failed => {
            return Err(ApiError::conflict(format!(
                "volume `{volume}` failed to be created: {}",
                v.error.as_deref().unwrap_or("unknown error")
            )));
        }
    }
    let claims = ClaimRow::of_volume(conn, volume)?;
    // The alloc's own claim, queued or not: asking for the same claim again is a no-op.
    if let Some(own) = claims.iter().find(|c| c.alloc == req.alloc) {
        let same = own.node == req.node
            && own.mode == req.mode
            && !matches!(own.state, ClaimState::Releasing | ClaimState::Failed);
        if same {
            return Ok(ClaimDecision::Existing(own.clone()));
        }
    }
    // A node the operator took out of service (ineligible, draining) takes no new claims.
    if let Some(n) = NodeRow::load(conn, &req.node)?
        && let Some(refusal) = super::nodes::claim_refusal(&req.node, n.eligibility)
    {
        return Err(refusal);
    }
    let wanted = Wanted {
        alloc: &req.alloc,
        node: &req.node,
        mode: req.mode,
    };
    let own_holds = claims
        .iter()
        .any(|c| c.alloc == req.alloc && c.state == ClaimState::Queued);
    match rules::check_claim(v.access_mode, &held_of(&claims), wanted) {
        // The alloc's own claim was answered above; should the rules find it all the same,
        // it is that claim.
        Ok(Accept::Existing) => {
            if let Some(own) = claims.iter().find(|c| c.alloc == req.alloc) {
                return Ok(ClaimDecision::Existing(own.clone()));
            }
        }
        Ok(Accept::New) if own_holds => {
            let (_, e) = refusal_error(
                volume,
                &v,
                req,
                Refusal::AllocHoldsOther {
                    node: req.node.clone(),
                    mode: req.mode,
                    state: ClaimState::Queued,
                },
            );
            return Err(e);
        }
        Ok(Accept::New) => {}
        Err(r) => {
            let (wait, e) = refusal_error(volume, &v, req, r);
            if wait && req.queue {
                return Ok(ClaimDecision::Queue(e.message));
            }
            return Err(e);
        }
    }
    // Nobody overtakes the queue.
    let ahead = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued)
        .count();
    if ahead > 0 {
        let why = format!("{ahead} claim(s) are queued for volume `{volume}` ahead of it");
        if req.queue {
            return Ok(ClaimDecision::Queue(why));
        }
        return Err(ApiError::conflict(why).with_hint("claim with --queue to wait in line"));
    }
    match node_may_start(conn, &v, &claims, &req.node)? {
        Ok(()) => Ok(ClaimDecision::New),
        Err((true, e)) if req.queue => Ok(ClaimDecision::Queue(e.message)),
        Err((_, e)) => Err(e),
    }
}

/// Grants the volume's queued claims that may start now, in arrival order, inside the
/// transaction that freed the room.
fn grant_queued(ctx: &mut WriteCtx<'_>, v: &VolumeRow) -> ApiResult<()> {
    let claims = ClaimRow::of_volume(ctx.tx, &v.name)?;
    let queued: Vec<Wanted<'_>> = claims
        .iter()
        .filter(|c| c.state == ClaimState::Queued)
        .map(|c| Wanted {
            alloc: &c.alloc,
            node: &c.node,
            mode: c.mode,
        })
        .collect();
    if queued.is_empty() {
        return Ok(());
    }
    let conn: &Connection = ctx.tx;
    let mut error = None;
    let granted: Vec<String> =
        queue::grants(
            v.access_mode,
            &held_of(&claims),
            &queued,
            |w| match node_may_start(conn, v, &claims, w.node) {
                Ok(r) => r.is_ok(),
                Err(e) => {
                    error.get_or_insert(e);
                    false
                }
            },
        )
        .into_iter()
        .map(str::to_owned)
        .collect();
    if let Some(e) = error {
        return Err(e);
    }
    for alloc in granted {
        let c = claims
            .iter()
            .find(|c| c.alloc == alloc)
            .expect("granted from the queue");
        set_claim_state(ctx, c, ClaimState::Pending)?;
        event(
            ctx,
            "claim-granted",
            Some(&v.name),
            Some(&c.node),
            Some(&c.alloc),
            "server",
            format!("{} claim granted from the queue", c.mode.as_str()),
        )?;
    }
    Ok(())
}

/// The state a new claim of `volume` on `node` would start in (for dry runs); the same
/// decision [`advance_volume`] makes.
pub fn initial_state(conn: &Connection, volume: &str, node: &str) -> ApiResult<ClaimState> {
    let v = VolumeRow::require(conn, volume)?;
    let atts = AttachmentRow::of_volume(conn, volume)?;
    Ok(
        match atts.iter().find(|a| a.node == node).map(|a| a.state) {
            Some(AttachmentState::Attached) => ClaimState::Publishing,
            Some(AttachmentState::Attaching) => ClaimState::Attaching,
            Some(AttachmentState::Unstaging) => ClaimState::Publishing,
            Some(AttachmentState::Detaching) => ClaimState::Pending,
            Some(AttachmentState::Blocked) => ClaimState::Blocked,
            None if v.access_mode.is_single_node() && !atts.is_empty() => ClaimState::Pending,
            None if needs_controller_publish(conn, &v.plugin)? => ClaimState::Attaching,
            None => ClaimState::Publishing,
        },
    )
}

/// `POST /v1/volumes/{name}/claims`: returns the claim and whether it is new.
pub fn create_claim(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    req: &ClaimRequest,
    actor: &str,
    limits: &Limits,
) -> ApiResult<(api::Claim, bool)> {
    match evaluate_claim(ctx.tx, volume, req)? {
        ClaimDecision::Existing(c) => Ok((c.to_api_at(ctx.tx)?, false)),
        decision => {
            let state = match &decision {
                ClaimDecision::Queue(_) => ClaimState::Queued,
                _ => ClaimState::Pending,
            };
            let expires_at = req.ttl_ms.map(|t| ctx.now.saturating_add(t as i64));
            ctx.tx
                .prepare_cached(
                    "INSERT INTO claims (volume, alloc, node, mode, state, created_at, updated_at, modify_index, \
                     ttl_ms, expires_at, labels) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10)",
                )?
                .execute(params![
                    volume,
                    req.alloc,
                    req.node,
                    req.mode.as_str(),
                    state.as_str(),
                    ctx.now,
                    ctx.index as i64,
                    req.ttl_ms.map(|t| t as i64),
                    expires_at,
                    to_json(&req.labels)
                ])?;
            let mut message = format!("{} claim recorded", req.mode.as_str());
            if let Some(t) = req.ttl_ms {
                message.push_str(&format!(
                    " with a lease of {}",
                    humantime::format_duration(Duration::from_millis(t))
                ));
            }
            if !req.labels.is_empty() {
                let labels: Vec<String> =
                    req.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                message.push_str(&format!(" (labels: {})", labels.join(", ")));
            }
            if let ClaimDecision::Queue(why) = &decision {
                message.push_str(&format!("; queued: {why}"));
            }
            let kind = if state == ClaimState::Queued {
                "claim-queued"
            } else {
                "claim-created"
            };
            event(
                ctx,
                kind,
                Some(volume),
                Some(&req.node),
                Some(&req.alloc),
                actor,
                message,
            )?;
            if state == ClaimState::Queued {
                touch_volume(ctx, volume)?;
            } else {
                advance_volume(ctx, volume, limits)?;
            }
            let c = ClaimRow::load(ctx.tx, volume, &req.alloc)?.expect("just inserted");
            Ok((c.to_api_at(ctx.tx)?, true))
        }
    }
}

/// `DELETE /v1/volumes/{name}/claims/{alloc}`: starts the release; idempotent.
pub fn release_claim(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    alloc: &str,
    actor: &str,
) -> ApiResult<api::Claim> {
    let c = ClaimRow::load(ctx.tx, volume, alloc)?.ok_or_else(|| {
        ApiError::not_found(format!(
            "alloc `{alloc}` holds no claim on volume `{volume}`"
        ))
    })?;
    match c.state {
        ClaimState::Releasing | ClaimState::Failed => {}
        ClaimState::Queued => {
            delete_claim(ctx, &c)?;
            event(
                ctx,
                "claim-dequeued",
                Some(volume),
                Some(&c.node),
                Some(alloc),
                actor,
                "left the queue: release requested",
            )?;
            return Ok(c.to_api());
        }
        ClaimState::Blocked => {
            return Err(ApiError::blocked(format!(
                "the claim of alloc `{alloc}` on volume `{volume}` is blocked: its node {} was lost, so it \
                 cannot be released through the node",
                c.node
            ))
            .with_hint(unblock_hint(volume, &c.node)));
        }
        _ => {
            set_claim_state(ctx, &c, ClaimState::Releasing)?;
            event(
                ctx,
                "claim-releasing",
                Some(volume),
                Some(&c.node),
                Some(alloc),
                actor,
                "release requested",
            )?;
        }
    }
    Ok(ClaimRow::load(ctx.tx, volume, alloc)?
        .expect("still there")
        .to_api())
}

// ---- the attachment lifecycle ----

fn insert_op(
    ctx: &mut WriteCtx<'_>,
    kind: &str,
    plugin: &str,
    volume: &str,
    node: Option<&str>,
    payload: &str,
) -> ApiResult<()> {
    let exists: Option<i64> = ctx
        .tx
        .prepare_cached("SELECT id FROM ops WHERE volume = ?1 AND kind = ?2 AND node IS ?3")?
        .query_row(params![volume, kind, node], |r| r.get(0))
        .optional()?;
    if exists.is_none() {
        ctx.tx
            .prepare_cached("INSERT INTO ops (kind, plugin, volume, node, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?
            .execute(params![kind, plugin, volume, node, payload, ctx.now])?;
    }
    Ok(())
}

/// Moves a volume's claims and attachments as far forward as the recorded facts allow.
pub fn advance_volume(ctx: &mut WriteCtx<'_>, volume: &str, limits: &Limits) -> ApiResult<()> {
    let Some(v) = VolumeRow::load(ctx.tx, volume)? else {
        return Ok(());
    };
    grant_queued(ctx, &v)?;
    let claims = ClaimRow::of_volume(ctx.tx, volume)?;
    let mut atts: BTreeMap<String, AttachmentRow> = AttachmentRow::of_volume(ctx.tx, volume)?
        .into_iter()
        .map(|a| (a.node.clone(), a))
        .collect();
    let needs_cp = needs_controller_publish(ctx.tx, &v.plugin)?;
    let mut ops_added = false;

    // An attachment with no claim left waits for the node to unstage; one that gains a
    // claim again is simply attached.
    for a in atts.values_mut() {
        let has_claims = claims
            .iter()
            .any(|c| c.node == a.node && c.state != ClaimState::Queued);
        let next = match a.state {
            AttachmentState::Attached if !has_claims => AttachmentState::Unstaging,
            AttachmentState::Unstaging if has_claims => AttachmentState::Attached,
            _ => continue,
        };
        set_attachment_state(ctx, volume, &a.node.clone(), next)?;
        a.state = next;
    }

    for c in &claims {
        if !matches!(
            c.state,
            ClaimState::Pending | ClaimState::Attaching | ClaimState::Publishing
        ) {
            continue;
        }
        let next = match atts.get(&c.node).map(|a| a.state) {
            Some(AttachmentState::Attached) => ClaimState::Publishing,
            Some(AttachmentState::Attaching) => ClaimState::Attaching,
            Some(AttachmentState::Detaching | AttachmentState::Unstaging) => ClaimState::Pending,
            Some(AttachmentState::Blocked) => ClaimState::Blocked,
            None => {
                let elsewhere = atts.keys().any(|n| *n != c.node);
                if v.access_mode.is_single_node() && elsewhere {
                    // The volume must be detached from its other node first.
                    ClaimState::Pending
                } else {
                    let state = if needs_cp {
                        AttachmentState::Attaching
                    } else {
                        AttachmentState::Attached
                    };
                    ctx.tx
                        .prepare_cached(
                            "INSERT INTO attachments (volume, node, state, publish_context, updated_at) \
                             VALUES (?1, ?2, ?3, '{}', ?4)",
                        )?
                        .execute(params![volume, c.node, state.as_str(), ctx.now])?;
                    ctx.touch(Key::Node(c.node.clone()));
                    if needs_cp {
                        insert_op(ctx, "publish", &v.plugin, volume, Some(&c.node), "{}")?;
                        ops_added = true;
                    }
                    atts.insert(
                        c.node.clone(),
                        AttachmentRow {
                            volume: volume.to_owned(),
                            node: c.node.clone(),
                            state,
                            publish_context: BTreeMap::new(),
                            forced: false,
                            error: None,
                            next_retry_at: None,
                            updated_at: ctx.now,
                        },
                    );
                    if needs_cp {
                        ClaimState::Attaching
                    } else {
                        ClaimState::Publishing
                    }
                }
            }
        };
        if next != c.state {
            set_claim_state(ctx, c, next)?;
        }
    }
    if ops_added {
        schedule_ops(ctx, &v.plugin, limits)?;
    }
    Ok(())
}

/// Starts taking an attachment down: ControllerUnpublish where the plugin needs it, else the
/// attachment is simply gone.
fn begin_detach(
    ctx: &mut WriteCtx<'_>,
    v: &VolumeRow,
    node: &str,
    forced: bool,
    limits: &Limits,
) -> ApiResult<()> {
    if needs_controller_publish(ctx.tx, &v.plugin)? {
        exec(
            ctx.tx,
            "UPDATE attachments SET state = 'detaching', forced = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
             WHERE volume = ?3 AND node = ?4",
            params![forced, ctx.now, v.name, node],
        )?;
        exec(
            ctx.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = 'publish' AND node = ?2",
            params![v.name, node],
        )?;
        insert_op(ctx, "unpublish", &v.plugin, &v.name, Some(node), "{}")?;
        ctx.touch(Key::Node(node.to_owned()));
        touch_volume(ctx, &v.name)?;
        schedule_ops(ctx, &v.plugin, limits)?;
    } else {
        delete_attachment(ctx, &v.name, node)?;
        event(
            ctx,
            "volume-detached",
            Some(&v.name),
            Some(node),
            None,
            "server",
            "detached from node",
        )?;
    }
    Ok(())
}

/// Exponential backoff with jitter: 1 s doubling to 5 min, ±20 %.
pub fn backoff(attempt: u32) -> Duration {
    use rand::Rng;
    let base = Duration::from_secs(1)
        .saturating_mul(1u32 << attempt.min(9))
        .min(Duration::from_secs(300));
    base.mul_f64(rand::rng().random_range(0.8..1.2))
}

/// Hands unassigned, due controller operations of `plugin` to healthy hosts, within the
/// limits: one in flight per (plugin, node) and `controller_concurrency` per plugin.
pub fn schedule_ops(ctx: &mut WriteCtx<'_>, plugin: &str, limits: &Limits) -> ApiResult<()> {
    let hosts: Vec<String> = ctx
        .tx
        .prepare_cached(
            "SELECT np.node FROM node_plugins np JOIN nodes n ON n.name = np.node \
             WHERE np.plugin = ?1 AND np.controller = 1 AND n.status = 'ready' ORDER BY np.node",
        )?
        .query_map([plugin], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let waiting: Vec<(i64, Option<String>)> = ctx
        .tx
        .prepare_cached(
            "SELECT id, node FROM ops WHERE plugin = ?1 AND host IS NULL AND not_before <= ?2 ORDER BY id LIMIT 1000",
        )?
        .query_map(params![plugin, ctx.now], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    if waiting.is_empty() {
        return Ok(());
    }
    if hosts.is_empty() {
        // Say why on everything that waits, so `status` and `claim --wait` can show it.
        let msg = format!(
            "waiting for a controller host: no healthy agent hosts the controller of plugin `{plugin}`"
        );
        for (id, node) in &waiting {
            let changed = exec(
                ctx.tx,
                "UPDATE ops SET error = ?1 WHERE id = ?2 AND error IS NOT ?1",
                params![msg, id],
            )?;
            if changed == 0 {
                continue;
            }
            let volume: String = ctx
                .tx
                .prepare_cached("SELECT volume FROM ops WHERE id = ?1")?
                .query_row([id], |r| r.get(0))?;
            match node {
                Some(n) => {
                    exec(
                        ctx.tx,
                        "UPDATE attachments SET error = ?1 WHERE volume = ?2 AND node = ?3",
                        params![msg, volume, n],
                    )?;
                    exec(
                        ctx.tx,
                        "UPDATE claims SET error = ?1, modify_index = ?2 \
                         WHERE volume = ?3 AND node = ?4 AND state IN ('attaching', 'pending')",
                        params![msg, ctx.index as i64, volume, n],
                    )?;
                }
                None => {
                    exec(
                        ctx.tx,
                        "UPDATE volumes SET error = ?1, modify_index = ?2 WHERE name = ?3",
                        params![msg, ctx.index as i64, volume],
                    )?;
                }
            }
            touch_volume(ctx, &volume)?;
        }
        return Ok(());
    }
    let mut load: HashMap<String, u32> = hosts.iter().map(|h| (h.clone(), 0)).collect();
    let mut busy_nodes = BTreeSet::new();
    let mut in_flight = 0;
    {
        let mut stmt = ctx
            .tx
            .prepare_cached("SELECT host, node FROM ops WHERE plugin = ?1 AND host IS NOT NULL")?;
        let rows = stmt.query_map([plugin], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
        })?;
        for row in rows {
            let (host, node) = row?;
            in_flight += 1;
            *load.entry(host).or_default() += 1;
            if let Some(n) = node {
                busy_nodes.insert(n);
            }
        }
    }
    for (id, node) in waiting {
        if in_flight >= limits.controller_concurrency {
            break;
        }
        if let Some(n) = &node
            && !busy_nodes.insert(n.clone())
        {
            continue;
        }
        let host = hosts
            .iter()
            .min_by_key(|h| load[*h])
            .expect("hosts is not empty")
            .clone();
        *load.get_mut(&host).expect("known host") += 1;
        in_flight += 1;
        ctx.tx
            .prepare_cached("UPDATE ops SET host = ?1, assigned_at = ?2 WHERE id = ?3")?
            .execute(params![host, ctx.now, id])?;
        ctx.touch(Key::Node(host));
    }
    Ok(())
}

/// Plugins with controller operations due for assignment (for the periodic scheduler).
pub fn plugins_with_due_ops(conn: &Connection, now: i64) -> ApiResult<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT plugin FROM ops WHERE host IS NULL AND not_before <= ?1",
    )?;
    let rows = stmt
        .query_map([now], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

// ---- nodes ----

/// `POST /v1/nodes/{node}/register`. Returns whether the node had been lost.
pub fn register_node(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    req: &RegisterRequest,
    limits: &Limits,
) -> ApiResult<bool> {
    validate_name("node", node).map_err(ApiError::invalid)?;
    let mut ids = BTreeSet::new();
    for p in &req.plugins {
        validate_name("plugin", &p.id).map_err(ApiError::invalid)?;
        if !ids.insert(&p.id) {
            return Err(ApiError::invalid(format!(
                "plugin `{}` is listed twice",
                p.id
            )));
        }
    }
    let existing = NodeRow::load(ctx.tx, node)?;
    let was_lost = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Lost);
    let was_fenced = existing
        .as_ref()
        .is_some_and(|n| n.status == NodeStatus::Fenced);
    exec(
        ctx.tx,
        "INSERT INTO nodes (name, status, registered_at, fence_after_ms, labels) VALUES (?1, 'ready', ?2, ?3, ?4) \
         ON CONFLICT (name) DO UPDATE SET status = 'ready', lost_at = NULL, fence_after_ms = ?3, labels = ?4, \
         fence_failures = 0, fence_error = NULL",
        params![
            node,
            ctx.now,
            req.fence_after_ms.map(|v| v as i64),
            to_json(&req.labels)
        ],
    )?;
    let old_plugins: BTreeSet<String> = NodePluginRow::of_node(ctx.tx, node)?
        .into_iter()
        .map(|p| p.plugin)
        .collect();
    ctx.tx
        .execute("DELETE FROM node_plugins WHERE node = ?1", [node])?;
    for p in &req.plugins {
        let node_part = p.node.as_ref();
        exec(
            ctx.tx,
            "INSERT INTO node_plugins (node, plugin, registration, csi_node_id, max_volumes, node_service, controller, \
             controller_service, controller_publish, stage_unstage) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                node,
                p.id,
                to_json(p),
                node_part.map(|n| n.info.node_id.clone()),
                node_part.map_or(0, |n| n.info.max_volumes_per_node),
                node_part.is_some(),
                p.controller.is_some(),
                p.capabilities.controller_service,
                p.controller.is_some_and(|c| c.publish_unpublish_volume),
                node_part.is_some_and(|n| n.capabilities.stage_unstage_volume),
            ],
        )?;
    }
    ctx.touch(Key::Node(node.to_owned()));
    if was_fenced {
        // Its claims were force-released by the fence's unblock: nothing is resumed.
        super::fence::returned(ctx, node, req)?;
    } else if was_lost {
        return_from_loss(ctx, node, &req.published, limits)?;
        event(
            ctx,
            "node-returned",
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            "lost node registered again",
        )?;
    } else {
        not_mounted_any_more(ctx, node, &req.published, limits)?;
        let verb = if existing.is_some() {
            "re-registered"
        } else {
            "registered"
        };
        let names: Vec<_> = req.plugins.iter().map(|p| p.id.as_str()).collect();
        event(
            ctx,
            "node-registered",
            None,
            Some(node),
            None,
            &format!("node:{node}"),
            format!("node {verb} with plugins {}", names.join(", ")),
        )?;
    }
    let plugins: BTreeSet<String> = req
        .plugins
        .iter()
        .map(|p| p.id.clone())
        .chain(old_plugins)
        .collect();
    for p in plugins {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(was_lost)
}

/// A lost node is back. csivol runs no workloads, so those of its claims may still be
/// running: a blocked claim that nobody released meanwhile and that the node reports still
/// published (checked against its mount table) is ready again; one it no longer has (it
/// fenced itself, or its mounts are gone) is released. A claim it still has that an
/// operator released meanwhile is not in its desired state any more, so the node takes it
/// down; that is recorded here. Blocked attachments resume their normal lifecycle.
fn return_from_loss(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    published: &[ClaimRef],
    limits: &Limits,
) -> ApiResult<()> {
    let blocked = claims_of_node(ctx.tx, node, Some(ClaimState::Blocked))?;
    let still_published = |c: &ClaimRow| {
        published
            .iter()
            .any(|p| p.volume == c.volume && p.alloc == c.alloc)
    };
    let mut volumes = BTreeSet::new();
    for c in &blocked {
        if c.release_pending {
            set_claim_state(ctx, c, ClaimState::Releasing)?;
            event(
                ctx,
                "claim-releasing",
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                "node came back: releasing the claim whose release was under way when the node was lost",
            )?;
        } else if super::leases::expires(ClaimState::Ready, c.expires_at, ctx.now) {
            // Its lease ran out while the node was away: released the normal way, through
            // the node (which takes down whatever it still has).
            super::leases::release_expired(ctx, c)?;
        } else if still_published(c) {
            // A claim whose `published` report never reached the server before the loss
            // has no target path yet: it is publishing until the node's report (queued or
            // made again) says where, so that nobody sees it ready without its path.
            let (state, message) = if c.target_path.is_some() {
                (
                    ClaimState::Ready,
                    "node came back with the volume still mounted from it: the claim is ready again",
                )
            } else {
                (
                    ClaimState::Publishing,
                    "node came back with the volume mounted from it: the claim is ready again once the node reports where",
                )
            };
            set_claim_state(ctx, c, state)?;
            event(
                ctx,
                "claim-resumed",
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                message,
            )?;
        } else {
            delete_claim(ctx, c)?;
            event(
                ctx,
                "claim-released",
                Some(&c.volume),
                Some(node),
                Some(&c.alloc),
                &format!("node:{node}"),
                "node came back without it published: blocked claim released",
            )?;
        }
        volumes.insert(c.volume.clone());
    }
    for p in published {
        let kept = ClaimRow::load(ctx.tx, &p.volume, &p.alloc)?.is_some_and(|c| c.node == node);
        if !kept && VolumeRow::load(ctx.tx, &p.volume)?.is_some() {
            event(
                ctx,
                "claim-taken-down",
                Some(&p.volume),
                Some(node),
                Some(&p.alloc),
                &format!("node:{node}"),
                "node came back with a claim that was released while it was lost: the node takes it down",
            )?;
        }
    }
    let atts: Vec<String> = ctx
        .tx
        .prepare_cached("SELECT volume FROM attachments WHERE node = ?1 AND state = 'blocked'")?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for v in atts {
        set_attachment_state(ctx, &v, node, AttachmentState::Attached)?;
        volumes.insert(v);
    }
    for v in volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// A node registers with what is really mounted on it. A claim recorded ready there that
/// it does not report is not ready any more (its agent restarted without the mount, or the
/// node was taken down): it is publishing again, and its drift is recorded.
fn not_mounted_any_more(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    published: &[ClaimRef],
    limits: &Limits,
) -> ApiResult<()> {
    for c in claims_of_node(ctx.tx, node, Some(ClaimState::Ready))? {
        if published
            .iter()
            .any(|p| p.volume == c.volume && p.alloc == c.alloc)
        {
            continue;
        }
        record_drift(
            ctx,
            &c,
            &format!("node {node} registered without it mounted"),
            limits,
        )?;
    }
    Ok(())
}

/// A ready claim is not mounted from its volume any more: it is publishing again, with
/// why as its error, and the drift is an event.
fn record_drift(
    ctx: &mut WriteCtx<'_>,
    c: &ClaimRow,
    reason: &str,
    limits: &Limits,
) -> ApiResult<()> {
    limits.metrics.claim_drifts.inc();
    set_claim_state(ctx, c, ClaimState::Publishing)?;
    exec(
        ctx.tx,
        "UPDATE claims SET error = ?1 WHERE volume = ?2 AND alloc = ?3",
        params![format!("{DRIFT}{reason}"), c.volume, c.alloc],
    )?;
    event(
        ctx,
        "claim-drift",
        Some(&c.volume),
        Some(&c.node),
        Some(&c.alloc),
        &format!("node:{}", c.node),
        format!("{DRIFT}{reason}; the claim waits for its node to publish it again"),
    )
}

pub fn claims_of_node(
    conn: &Connection,
    node: &str,
    state: Option<ClaimState>,
) -> ApiResult<Vec<ClaimRow>> {
    let sql = format!(
        "SELECT {} FROM claims WHERE node = ?1 AND (?2 IS NULL OR state = ?2) ORDER BY volume, alloc",
        super::model::CLAIM_COLUMNS
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map(params![node, state.map(|s| s.as_str())], ClaimRow::from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The node missed its heartbeats: its claims and attachments are blocked, and controller
/// operations it hosted go to another host.
/// `why` opens the event (`no heartbeat for 30s`).
pub fn mark_lost(ctx: &mut WriteCtx<'_>, node: &str, why: &str, limits: &Limits) -> ApiResult<()> {
    let Some(n) = NodeRow::load(ctx.tx, node)? else {
        return Ok(());
    };
    // A fenced node is off already: its volumes were unblocked, nothing is left to block.
    if n.status != NodeStatus::Ready {
        return Ok(());
    }
    exec(
        ctx.tx,
        "UPDATE nodes SET status = 'lost', lost_at = ?1 WHERE name = ?2",
        params![ctx.now, node],
    )?;
    ctx.touch(Key::Node(node.to_owned()));
    let claims = claims_of_node(ctx.tx, node, None)?;
    // A queued claim holds nothing: it stays in the queue (its lease, if any, runs on). A
    // claim being released (or cleaned up) when its node was lost stays released: when the
    // node returns it is taken down, not resumed.
    for c in &claims {
        if matches!(c.state, ClaimState::Releasing | ClaimState::Failed) {
            exec(
                ctx.tx,
                "UPDATE claims SET release_pending = 1 WHERE volume = ?1 AND alloc = ?2",
                params![c.volume, c.alloc],
            )?;
        }
        if !matches!(c.state, ClaimState::Blocked | ClaimState::Queued) {
            set_claim_state(ctx, c, ClaimState::Blocked)?;
        }
    }
    let atts: Vec<String> = ctx
        .tx
        .prepare_cached("SELECT volume FROM attachments WHERE node = ?1 AND state IN ('attaching', 'attached', 'unstaging')")?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for v in &atts {
        set_attachment_state(ctx, v, node, AttachmentState::Blocked)?;
        // A publish to a lost node is pointless; an unblock will unpublish whatever it did.
        exec(
            ctx.tx,
            "DELETE FROM ops WHERE volume = ?1 AND kind = 'publish' AND node = ?2",
            params![v, node],
        )?;
    }
    let hosted: Vec<String> = ctx
        .tx
        .prepare_cached("SELECT DISTINCT plugin FROM ops WHERE host = ?1")?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    exec(
        ctx.tx,
        "UPDATE ops SET host = NULL, assigned_at = NULL WHERE host = ?1",
        [node],
    )?;
    let volumes: BTreeSet<&str> = claims
        .iter()
        .map(|c| c.volume.as_str())
        .chain(atts.iter().map(String::as_str))
        .collect();
    event(
        ctx,
        "node-lost",
        None,
        Some(node),
        None,
        "server",
        format!(
            "{why}: node lost; {} claim(s) and {} attachment(s) blocked until it returns or is unblocked",
            claims.len(),
            atts.len()
        ),
    )?;
    for v in volumes {
        let allocs: Vec<_> = claims
            .iter()
            .filter(|c| c.volume == v)
            .map(|c| c.alloc.as_str())
            .collect();
        event(
            ctx,
            "volume-blocked",
            Some(v),
            Some(node),
            None,
            "server",
            format!(
                "blocked: node {node} lost (claims: {})",
                list_or(&allocs, "none")
            ),
        )?;
    }
    for p in hosted {
        schedule_ops(ctx, &p, limits)?;
    }
    Ok(())
}

/// `a, b, c`, or `empty` when there is nothing to list.
fn list_or<S: AsRef<str>>(items: &[S], empty: &str) -> String {
    if items.is_empty() {
        return empty.to_owned();
    }
    items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ")
}

/// How a drift report starts a claim's error, so that the next `published` is recorded
/// as its repair.
const DRIFT: &str = "drift: ";

fn format_error(e: &PluginError) -> String {
    format!("{}: {}", e.code, e.message)
}

/// `POST /v1/nodes/{node}/reports`.
pub fn apply_reports(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    reports: Vec<Report>,
    limits: &Limits,
) -> ApiResult<()> {
    let actor = format!("node:{node}");
    let mut touched_volumes = BTreeSet::new();
    for report in reports {
        match report {
            Report::Published {
                volume,
                alloc,
                target_path,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                exec(
                    ctx.tx,
                    "UPDATE claims SET target_path = ?1, updated_at = ?2, modify_index = ?3 WHERE volume = ?4 AND alloc = ?5",
                    params![target_path, ctx.now, ctx.index as i64, volume, alloc],
                )?;
                touch_volume(ctx, &volume)?;
                if matches!(
                    c.state,
                    ClaimState::Publishing | ClaimState::Attaching | ClaimState::Pending
                ) {
                    let drift = c.error.as_deref().and_then(|e| e.strip_prefix(DRIFT));
                    set_claim_state(ctx, &c, ClaimState::Ready)?;
                    match drift {
                        Some(why) => event(
                            ctx,
                            "claim-repaired",
                            Some(&volume),
                            Some(node),
                            Some(&alloc),
                            &actor,
                            format!(
                                "repaired after drift ({why}): mounted from the volume again at {target_path}"
                            ),
                        )?,
                        None => {
                            limits
                                .metrics
                                .claim_ready_seconds
                                .observe((ctx.now - c.created_at).max(0) as f64 / 1000.0);
                            event(
                                ctx,
                                "claim-ready",
                                Some(&volume),
                                Some(node),
                                Some(&alloc),
                                &actor,
                                format!("published at {target_path}"),
                            )?
                        }
                    }
                }
            }
            Report::Drift {
                volume,
                alloc,
                reason,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?
                    .filter(|c| c.node == node && c.state == ClaimState::Ready)
                else {
                    continue;
                };
                record_drift(ctx, &c, &reason, limits)?;
            }
            Report::Waiting {
                volume,
                alloc,
                reason,
                since_ms,
                timeout_ms,
            } => {
                if ClaimRow::load(ctx.tx, &volume, &alloc)?
                    .is_some_and(|c| c.node == node && c.state == ClaimState::Publishing)
                {
                    exec(
                        ctx.tx,
                        "UPDATE claims SET waiting = ?1, waiting_since = ?2, waiting_timeout_ms = ?3, \
                         updated_at = ?4, modify_index = ?5 WHERE volume = ?6 AND alloc = ?7",
                        params![
                            reason,
                            since_ms as i64,
                            timeout_ms as i64,
                            ctx.now,
                            ctx.index as i64,
                            volume,
                            alloc
                        ],
                    )?;
                    touch_volume(ctx, &volume)?;
                }
            }
            Report::Condition {
                volume,
                alloc,
                abnormal,
                message,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                let condition = abnormal.then(|| message.clone());
                if c.condition == condition {
                    continue;
                }
                exec(
                    ctx.tx,
                    "UPDATE claims SET condition = ?1, updated_at = ?2, modify_index = ?3 \
                     WHERE volume = ?4 AND alloc = ?5",
                    params![condition, ctx.now, ctx.index as i64, volume, alloc],
                )?;
                touch_volume(ctx, &volume)?;
                let text = if abnormal {
                    format!("the plugin reports the volume abnormal: {message}")
                } else {
                    format!("the plugin reports the volume normal again: {message}")
                };
                event(
                    ctx,
                    "volume-condition",
                    Some(&volume),
                    Some(node),
                    Some(&alloc),
                    &actor,
                    text,
                )?;
            }
            Report::Unpublished { volume, alloc } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                if matches!(
                    c.state,
                    ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
                ) {
                    delete_claim(ctx, &c)?;
                    let how = if c.state == ClaimState::Blocked {
                        "blocked claim released by its returning node"
                    } else {
                        "released"
                    };
                    event(
                        ctx,
                        "claim-released",
                        Some(&volume),
                        Some(node),
                        Some(&alloc),
                        &actor,
                        how,
                    )?;
                    touched_volumes.insert(volume);
                }
            }
            Report::Unstaged { volume } => {
                let Some(v) = VolumeRow::load(ctx.tx, &volume)? else {
                    continue;
                };
                let atts = AttachmentRow::of_volume(ctx.tx, &volume)?;
                let Some(a) = atts.iter().find(|a| a.node == node) else {
                    continue;
                };
                let claims_here = ClaimRow::of_volume(ctx.tx, &volume)?
                    .into_iter()
                    .any(|c| c.node == node);
                // Attached counts too: a batch may carry the last claim's `unpublished`
                // and the `unstaged` together, before the attachment moved on.
                let waiting = matches!(
                    a.state,
                    AttachmentState::Attached
                        | AttachmentState::Unstaging
                        | AttachmentState::Blocked
                );
                if !claims_here && waiting {
                    event(
                        ctx,
                        "volume-unstaged",
                        Some(&volume),
                        Some(node),
                        None,
                        &actor,
                        "node unstaged the volume",
                    )?;
                    begin_detach(ctx, &v, node, false, limits)?;
                    touched_volumes.insert(volume);
                }
            }
            Report::ClaimError {
                volume,
                alloc,
                error,
            } => {
                let Some(c) = ClaimRow::load(ctx.tx, &volume, &alloc)?.filter(|c| c.node == node)
                else {
                    continue;
                };
                exec(
                    ctx.tx,
                    "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 WHERE volume = ?5 AND alloc = ?6",
                    params![
                        format_error(&error),
                        error.next_retry_at_ms.map(|t| t as i64),
                        ctx.now,
                        ctx.index as i64,
                        volume,
                        alloc
                    ],
                )?;
                touch_volume(ctx, &volume)?;
                if error.is_final
                    && !matches!(
                        c.state,
                        ClaimState::Releasing | ClaimState::Failed | ClaimState::Blocked
                    )
                {
                    set_claim_state(ctx, &c, ClaimState::Failed)?;
                    event(
                        ctx,
                        "claim-failed",
                        Some(&volume),
                        Some(node),
                        Some(&alloc),
                        &actor,
                        format!("failed: {}", format_error(&error)),
                    )?;
                }
            }
            Report::VolumeError { volume, error } => {
                let changed = exec(
                    ctx.tx,
                    "UPDATE attachments SET error = ?1, next_retry_at = ?2, updated_at = ?3 \
                     WHERE volume = ?4 AND node = ?5",
                    params![
                        format!("NodeUnstageVolume failed: {}", format_error(&error)),
                        error.next_retry_at_ms.map(|t| t as i64),
                        ctx.now,
                        volume,
                        node
                    ],
                )?;
                if changed > 0 {
                    touch_volume(ctx, &volume)?;
                }
            }
            Report::ControllerPublished {
                op,
                attempt,
                publish_context,
            } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                delete_op(ctx, op)?;
                let updated = exec(
                    ctx.tx,
                    "UPDATE attachments SET state = 'attached', publish_context = ?1, error = NULL, next_retry_at = NULL, updated_at = ?2 \
                     WHERE volume = ?3 AND node = ?4 AND state = 'attaching'",
                    params![to_json(&publish_context), ctx.now, o.volume, o.node],
                )?;
                if updated > 0 {
                    let target = o.node.clone().unwrap_or_default();
                    ctx.touch(Key::Node(target.clone()));
                    event(
                        ctx,
                        "volume-attached",
                        Some(&o.volume),
                        Some(&target),
                        None,
                        &actor,
                        "ControllerPublishVolume succeeded",
                    )?;
                }
                touched_volumes.insert(o.volume);
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::ControllerUnpublished { op, attempt } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                finish_unpublish(ctx, &o, &actor)?;
                touched_volumes.insert(o.volume);
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::Created {
                op,
                attempt,
                external_id,
                capacity_bytes,
                context,
            } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                delete_op(ctx, op)?;
                exec(
                    ctx.tx,
                    "UPDATE volumes SET external_id = ?1, capacity_bytes = ?2, context = ?3, lifecycle = 'ready', error = NULL, \
                     updated_at = ?4, modify_index = ?5 WHERE name = ?6 AND lifecycle = 'creating'",
                    params![
                        external_id,
                        capacity_bytes as i64,
                        to_json(&context),
                        ctx.now,
                        ctx.index as i64,
                        o.volume
                    ],
                )?;
                ctx.touch(Key::Volume(o.volume.clone()));
                event(
                    ctx,
                    "volume-created",
                    Some(&o.volume),
                    None,
                    None,
                    &actor,
                    format!("created as {external_id}"),
                )?;
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::Deleted { op, attempt } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "ok");
                finish_delete(ctx, &o, &actor)?;
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::OpError { op, attempt, error } => {
                let Some(o) = load_op(ctx.tx, op, attempt, node)? else {
                    continue;
                };
                observe_op(limits, ctx.now, &o, "error");
                op_failed(ctx, &o, &error, &actor)?;
                touched_volumes.insert(o.volume.clone());
                schedule_ops(ctx, &o.plugin, limits)?;
            }
            Report::Fenced { at_ms, volumes } => {
                exec(
                    ctx.tx,
                    "UPDATE nodes SET fenced_at = ?1 WHERE name = ?2",
                    params![at_ms as i64, node],
                )?;
                // The agent waits for a fresh desired state after a fence; wake it.
                ctx.touch(Key::Node(node.to_owned()));
                event(
                    ctx,
                    "node-fenced",
                    None,
                    Some(node),
                    None,
                    &actor,
                    format!(
                        "node fenced itself at {} after losing the server: took down {}",
                        time(at_ms as i64),
                        list_or(&volumes, "nothing")
                    ),
                )?;
            }
        }
    }
    for v in touched_volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

/// A controller operation as stored.
#[derive(Clone, Debug)]
pub struct OpRow {
    pub id: i64,
    pub kind: String,
    pub plugin: String,
    pub volume: String,
    pub node: Option<String>,
    pub host: Option<String>,
    pub attempt: u32,
    pub not_before: i64,
    pub payload: String,
    pub created_at: i64,
}

const OP_COLUMNS: &str =
    "id, kind, plugin, volume, node, host, attempt, not_before, payload, created_at";

fn op_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OpRow> {
    Ok(OpRow {
        id: r.get(0)?,
        kind: r.get(1)?,
        plugin: r.get(2)?,
        volume: r.get(3)?,
        node: r.get(4)?,
        host: r.get(5)?,
        attempt: r.get(6)?,
        not_before: r.get(7)?,
        payload: r.get(8)?,
        created_at: r.get(9)?,
    })
}

/// The operation a report answers, if the report is current: same attempt, from its host.
fn load_op(conn: &Connection, id: u64, attempt: u32, host: &str) -> ApiResult<Option<OpRow>> {
    let sql = format!("SELECT {OP_COLUMNS} FROM ops WHERE id = ?1");
    let op = super::db::optional(
        conn.prepare_cached(&sql)?
            .query_row([id as i64], op_from_row),
    )?;
    Ok(op.filter(|o| o.attempt == attempt && o.host.as_deref() == Some(host)))
}

pub fn ops_of_host(conn: &Connection, host: &str) -> ApiResult<Vec<OpRow>> {
    let sql = format!("SELECT {OP_COLUMNS} FROM ops WHERE host = ?1 ORDER BY id");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt
        .query_map([host], op_from_row)?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// Records how long an operation took from queueing to `result`.
fn observe_op(limits: &Limits, now: i64, o: &OpRow, result: &str) {
    let label = super::metrics::OpLabel {
        kind: o.kind.clone(),
        result: result.to_owned(),
    };
    limits
        .metrics
        .op_seconds
        .get_or_create(&label)
        .observe((now - o.created_at).max(0) as f64 / 1000.0);
}

fn delete_op(ctx: &mut WriteCtx<'_>, id: u64) -> ApiResult<()> {
    ctx.tx
        .prepare_cached("DELETE FROM ops WHERE id = ?1")?
        .execute([id as i64])?;
    Ok(())
}

fn finish_unpublish(ctx: &mut WriteCtx<'_>, o: &OpRow, actor: &str) -> ApiResult<()> {
    delete_op(ctx, o.id as u64)?;
    let node = o.node.clone().unwrap_or_default();
    let forced = AttachmentRow::of_volume(ctx.tx, &o.volume)?
        .into_iter()
        .any(|a| a.node == node && a.forced);
    delete_attachment(ctx, &o.volume, &node)?;
    let how = if forced {
        "force-detached (ControllerUnpublishVolume without the node)"
    } else {
        "ControllerUnpublishVolume succeeded: detached"
    };
    event(
        ctx,
        "volume-detached",
        Some(&o.volume),
        Some(&node),
        None,
        actor,
        how,
    )
}

fn finish_delete(ctx: &mut WriteCtx<'_>, o: &OpRow, actor: &str) -> ApiResult<()> {
    delete_op(ctx, o.id as u64)?;
    exec(
        ctx.tx,
        "DELETE FROM volumes WHERE name = ?1 AND lifecycle = 'deleting'",
        [&o.volume],
    )?;
    ctx.touch(Key::Volume(o.volume.clone()));
    event(
        ctx,
        "volume-deleted",
        Some(&o.volume),
        None,
        None,
        actor,
        "DeleteVolume succeeded; volume deregistered",
    )
}

fn op_failed(ctx: &mut WriteCtx<'_>, o: &OpRow, error: &PluginError, actor: &str) -> ApiResult<()> {
    let class = ErrorClass::of_name(&error.code);
    let message = format!("{} failed: {}", op_call(&o.kind), format_error(error));
    let node = o.node.clone();
    // NOT_FOUND from an unpublish or delete means the job is already done.
    if error.code == "NOT_FOUND" && matches!(o.kind.as_str(), "unpublish" | "delete") {
        return if o.kind == "unpublish" {
            finish_unpublish(ctx, o, actor)
        } else {
            finish_delete(ctx, o, actor)
        };
    }
    let retry = class == ErrorClass::Retry || matches!(o.kind.as_str(), "unpublish");
    if retry {
        // An attachment is never dropped on an error: unpublish is retried until it
        // succeeds, so the volume is never reported free while it may still be attached.
        let next = ctx.now + backoff(o.attempt).as_millis() as i64;
        exec(
            ctx.tx,
            "UPDATE ops SET attempt = attempt + 1, host = NULL, assigned_at = NULL, not_before = ?1, error = ?2 WHERE id = ?3",
            params![next, message, o.id],
        )?;
        if let Some(n) = &node {
            exec(
                ctx.tx,
                "UPDATE attachments SET error = ?1, next_retry_at = ?2, updated_at = ?3 WHERE volume = ?4 AND node = ?5",
                params![message, next, ctx.now, o.volume, n],
            )?;
            exec(
                ctx.tx,
                "UPDATE claims SET error = ?1, next_retry_at = ?2, updated_at = ?3, modify_index = ?4 \
                 WHERE volume = ?5 AND node = ?6 AND state IN ('attaching', 'pending')",
                params![message, next, ctx.now, ctx.index as i64, o.volume, n],
            )?;
        } else {
            exec(
                ctx.tx,
                "UPDATE volumes SET error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![
                    format!("{message}; retrying at {}", time(next)),
                    ctx.now,
                    ctx.index as i64,
                    o.volume
                ],
            )?;
        }
        touch_volume(ctx, &o.volume)?;
        return Ok(());
    }
    delete_op(ctx, o.id as u64)?;
    event(
        ctx,
        "operation-failed",
        Some(&o.volume),
        node.as_deref(),
        None,
        actor,
        message.clone(),
    )?;
    match o.kind.as_str() {
        "publish" => {
            let n = node.unwrap_or_default();
            delete_attachment(ctx, &o.volume, &n)?;
            for c in ClaimRow::of_volume(ctx.tx, &o.volume)? {
                if c.node == n && matches!(c.state, ClaimState::Attaching | ClaimState::Pending) {
                    exec(
                        ctx.tx,
                        "UPDATE claims SET error = ?1, next_retry_at = NULL WHERE volume = ?2 AND alloc = ?3",
                        params![message, c.volume, c.alloc],
                    )?;
                    set_claim_state(ctx, &c, ClaimState::Failed)?;
                }
            }
        }
        "create" => {
            exec(
                ctx.tx,
                "UPDATE volumes SET lifecycle = 'failed', error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![message, ctx.now, ctx.index as i64, o.volume],
            )?;
            ctx.touch(Key::Volume(o.volume.clone()));
        }
        "delete" => {
            exec(
                ctx.tx,
                "UPDATE volumes SET lifecycle = 'ready', error = ?1, updated_at = ?2, modify_index = ?3 WHERE name = ?4",
                params![message, ctx.now, ctx.index as i64, o.volume],
            )?;
            ctx.touch(Key::Volume(o.volume.clone()));
        }
        _ => {}
    }
    Ok(())
}

fn op_call(kind: &str) -> &'static str {
    match kind {
        "publish" => "ControllerPublishVolume",
        "unpublish" => "ControllerUnpublishVolume",
        "create" => "CreateVolume",
        _ => "DeleteVolume",
    }
}

/// Builds what an agent needs to run an operation.
pub fn op_to_api(conn: &Connection, o: &OpRow) -> ApiResult<Option<api::ControllerOp>> {
    let Some(v) = VolumeRow::load(conn, &o.volume)? else {
        return Ok(None);
    };
    let csi_node_id = |node: &Option<String>| -> ApiResult<String> {
        let n = node.as_deref().unwrap_or_default();
        Ok(NodePluginRow::load(conn, n, &o.plugin)?
            .and_then(|p| p.csi_node_id)
            .unwrap_or_else(|| n.to_owned()))
    };
    let kind = match o.kind.as_str() {
        "publish" => ControllerOpKind::Publish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(&o.node)?,
            capability: v.capability(),
            readonly: v.access_mode.max_writers() == Some(0),
            context: v.context.clone(),
            secrets: v.secrets.clone(),
        },
        "unpublish" => ControllerOpKind::Unpublish {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            node_id: csi_node_id(&o.node)?,
            secrets: v.secrets.clone(),
        },
        "create" => {
            let payload: serde_json::Value = serde_json::from_str(&o.payload)?;
            ControllerOpKind::Create {
                volume: v.name.clone(),
                capability: v.capability(),
                capacity_bytes: payload["capacity_bytes"].as_u64().unwrap_or(0),
                parameters: v.parameters.clone(),
                secrets: v.secrets.clone(),
            }
        }
        _ => ControllerOpKind::Delete {
            volume: v.name.clone(),
            external_id: v.external_id.clone(),
            secrets: v.secrets.clone(),
        },
    };
    Ok(Some(api::ControllerOp {
        id: o.id as u64,
        attempt: o.attempt,
        plugin: o.plugin.clone(),
        not_before_ms: o.not_before.max(0) as u64,
        kind,
    }))
}

/// `GET /v1/nodes/{node}/desired`.
pub fn desired_state(conn: &Connection, node: &str, index: u64) -> ApiResult<api::DesiredState> {
    let n = NodeRow::require(conn, node)?;
    let mut publish = Vec::new();
    let mut unpublish = Vec::new();
    let mut volumes: HashMap<String, VolumeRow> = HashMap::new();
    let claims = claims_of_node(conn, node, None)?;
    for c in &claims {
        if !volumes.contains_key(&c.volume)
            && let Some(v) = VolumeRow::load(conn, &c.volume)?
        {
            volumes.insert(c.volume.clone(), v);
        }
    }
    let mut att_stmt = conn.prepare_cached(
        "SELECT state, publish_context FROM attachments WHERE volume = ?1 AND node = ?2",
    )?;
    for c in claims {
        let Some(v) = volumes.get(&c.volume) else {
            continue;
        };
        match c.state {
            ClaimState::Publishing | ClaimState::Ready => {
                let att: Option<(String, String)> = att_stmt
                    .query_row(params![c.volume, node], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()?;
                let Some((state, ctx_json)) = att else {
                    continue;
                };
                if state != AttachmentState::Attached.as_str() {
                    continue;
                }
                publish.push(api::DesiredPublish {
                    alloc: c.alloc.clone(),
                    read_only: c.mode == ClaimMode::Read,
                    volume: api::NodeVolume {
                        volume: v.name.clone(),
                        plugin: v.plugin.clone(),
                        external_id: v.external_id.clone(),
                        capability: v.capability(),
                        context: v.context.clone(),
                        secrets: v.secrets.clone(),
                        publish_context: serde_json::from_str(&ctx_json)?,
                    },
                });
            }
            ClaimState::Releasing | ClaimState::Failed => unpublish.push(api::DesiredUnpublish {
                volume: v.name.clone(),
                alloc: c.alloc.clone(),
                plugin: v.plugin.clone(),
                external_id: v.external_id.clone(),
            }),
            _ => {}
        }
    }
    let mut unstage = Vec::new();
    let mut stmt = conn.prepare_cached(
        "SELECT a.volume, v.plugin, v.external_id FROM attachments a JOIN volumes v ON v.name = a.volume \
         WHERE a.node = ?1 AND a.state = 'unstaging' ORDER BY a.volume",
    )?;
    for row in stmt.query_map([node], |r| {
        Ok(api::DesiredUnstage {
            volume: r.get(0)?,
            plugin: r.get(1)?,
            external_id: r.get(2)?,
        })
    })? {
        unstage.push(row?);
    }
    let mut controller_ops = Vec::new();
    for o in ops_of_host(conn, node)? {
        if let Some(op) = op_to_api(conn, &o)? {
            controller_ops.push(op);
        }
    }
    Ok(api::DesiredState {
        index,
        status: Some(n.status),
        publish,
        unpublish,
        unstage,
        controller_ops,
    })
}

// ---- operator actions ----

fn lost_since(conn: &Connection, node: &str) -> ApiResult<Option<String>> {
    Ok(NodeRow::load(conn, node)?.and_then(|n| n.lost_at).map(time))
}

/// Plans (and unless `dry_run`, carries out) the unblock of `volume`, on `node` or on every
/// node holding it blocked.
pub fn unblock_volume(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    node: Option<&str>,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    let v = VolumeRow::require(ctx.tx, volume)?;
    if let Some(n) = node {
        NodeRow::require(ctx.tx, n)?;
    }
    let on_node = |n: &str| node.is_none_or(|want| want == n);
    let claims: Vec<ClaimRow> = ClaimRow::of_volume(ctx.tx, volume)?
        .into_iter()
        .filter(|c| c.state == ClaimState::Blocked && on_node(&c.node))
        .collect();
    let atts: Vec<AttachmentRow> = AttachmentRow::of_volume(ctx.tx, volume)?
        .into_iter()
        .filter(|a| a.state == AttachmentState::Blocked && on_node(&a.node))
        .collect();
    if claims.is_empty() && atts.is_empty() {
        return Err(ApiError::conflict(format!(
            "volume `{volume}` is not blocked{}",
            node.map(|n| format!(" on node {n}")).unwrap_or_default()
        ))
        .with_hint("`csivol status --blocked` lists blocked volumes"));
    }
    let mut actions = Vec::new();
    for c in &claims {
        actions.push(PlannedAction {
            action: "force-release".into(),
            volume: volume.to_owned(),
            node: c.node.clone(),
            alloc: Some(c.alloc.clone()),
            lost_since: lost_since(ctx.tx, &c.node)?,
        });
    }
    for a in &atts {
        actions.push(PlannedAction {
            action: "force-detach".into(),
            volume: volume.to_owned(),
            node: a.node.clone(),
            alloc: None,
            lost_since: lost_since(ctx.tx, &a.node)?,
        });
    }
    if dry_run {
        return Ok(ActionPlan { dry_run, actions });
    }
    for c in &claims {
        delete_claim(ctx, c)?;
        event(
            ctx,
            "claim-force-released",
            Some(volume),
            Some(&c.node),
            Some(&c.alloc),
            actor,
            format!("force-released by unblock: {reason}"),
        )?;
    }
    for a in &atts {
        begin_detach(ctx, &v, &a.node, true, limits)?;
        event(
            ctx,
            "volume-force-detaching",
            Some(volume),
            Some(&a.node),
            None,
            actor,
            format!("force-detach by unblock: {reason}"),
        )?;
    }
    event(
        ctx,
        "volume-unblocked",
        Some(volume),
        node,
        None,
        actor,
        format!("unblocked: {reason}"),
    )?;
    advance_volume(ctx, volume, limits)?;
    Ok(ActionPlan { dry_run, actions })
}

/// Unblocks every volume blocked on `node`.
pub fn unblock_node(
    ctx: &mut WriteCtx<'_>,
    node: &str,
    reason: &str,
    dry_run: bool,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    NodeRow::require(ctx.tx, node)?;
    let volumes: Vec<String> = ctx
        .tx
        .prepare_cached(
            "SELECT volume FROM claims WHERE node = ?1 AND state = 'blocked' \
             UNION SELECT volume FROM attachments WHERE node = ?1 AND state = 'blocked' ORDER BY 1",
        )?
        .query_map([node], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if volumes.is_empty() {
        return Err(
            ApiError::conflict(format!("node `{node}` holds no blocked volume"))
                .with_hint("`csivol status --blocked` lists blocked volumes"),
        );
    }
    let mut actions = Vec::new();
    for v in volumes {
        actions
            .extend(unblock_volume(ctx, &v, Some(node), reason, dry_run, actor, limits)?.actions);
    }
    Ok(ActionPlan { dry_run, actions })
}

/// `POST /v1/volumes/{name}/detach`: releases every claim of the volume on a live node
/// through the node; on a lost node, `force` is an unblock.
pub fn detach(
    ctx: &mut WriteCtx<'_>,
    volume: &str,
    req: &api::DetachRequest,
    actor: &str,
    limits: &Limits,
) -> ApiResult<ActionPlan> {
    let (node, reason, force, dry_run) = (
        req.node.as_str(),
        req.reason.as_str(),
        req.force,
        req.dry_run,
    );
    VolumeRow::require(ctx.tx, volume)?;
    let n = NodeRow::require(ctx.tx, node)?;
    if n.status == NodeStatus::Lost {
        if !force {
            return Err(ApiError::blocked(format!(
                "node `{node}` is lost; its claims cannot be released through it"
            ))
            .with_hint(format!("to detach without the node, run: csivol detach {volume} --node {node} --force --reason \"...\"")));
        }
        return unblock_volume(ctx, volume, Some(node), reason, dry_run, actor, limits);
    }
    if force {
        return Err(ApiError::conflict(format!(
            "node `{node}` is ready; --force is only for a lost node"
        ))
        .with_hint(format!(
            "detach through the node: csivol detach {volume} --node {node} --reason \"...\""
        )));
    }
    let claims: Vec<ClaimRow> = ClaimRow::of_volume(ctx.tx, volume)?
        .into_iter()
        .filter(|c| {
            c.node == node && !matches!(c.state, ClaimState::Releasing | ClaimState::Failed)
        })
        .collect();
    let actions: Vec<PlannedAction> = claims
        .iter()
        .map(|c| PlannedAction {
            action: "release".into(),
            volume: volume.to_owned(),
            node: node.to_owned(),
            alloc: Some(c.alloc.clone()),
            lost_since: None,
        })
        .collect();
    if dry_run {
        return Ok(ActionPlan { dry_run, actions });
    }
    for c in &claims {
        set_claim_state(ctx, c, ClaimState::Releasing)?;
        event(
            ctx,
            "claim-releasing",
            Some(volume),
            Some(node),
            Some(&c.alloc),
            actor,
            format!("released by detach: {reason}"),
        )?;
    }
    event(
        ctx,
        "volume-detach",
        Some(volume),
        Some(node),
        None,
        actor,
        format!("detach requested: {reason}"),
    )?;
    Ok(ActionPlan { dry_run, actions })
}
