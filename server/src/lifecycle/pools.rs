//! An operator's labels on volumes and the pools they make: a pool is the set of volumes
//! whose labels carry every `key=value` of its selector, and a volume belongs to one pool
//! at most, so that a member is chosen for one pool's jobs only. Both a pool whose
//! selector would take another pool's member and a label change that would put a volume
//! in two pools are refused, naming the volume and both pools. What a pool's claims choose
//! is `pool_claims`.

use std::collections::BTreeMap;

use csivol_api::limits::{MAX_VOLUME_LABELS, VOLUME_LABEL_VALUE_BYTES};
use csivol_api::{self as api, AttachmentState, PoolSpec, VolumeLabelRequest};
use csivol_rules::kinds::EventKind;

use super::attachments::advance_volume;
use super::changes::touch_volume;
use super::events::event;
use super::settings::Limits;
use crate::error::{ApiError, ApiResult};
use crate::model::{PoolRow, time};
use crate::store::{Snapshot, Txn};

/// A label key: 1 to 63 letters, digits, `.`, `_`, `-` or `/`, starting with a letter or
/// digit (a selector names it as `KEY=VALUE`).
fn check_key(what: &str, key: &str) -> ApiResult<()> {
    let ok = (1..=63).contains(&key.len())
        && key.starts_with(|c: char| c.is_ascii_alphanumeric())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    if ok {
        return Ok(());
    }
    Err(ApiError::invalid(format!(
        "invalid {what} key `{}`: use 1 to 63 letters, digits, `.`, `_`, `-` or `/`, starting \
         with a letter or digit",
        key.escape_debug()
    )))
}

fn check_value(what: &str, key: &str, value: &str) -> ApiResult<()> {
    api::check_text(&format!("{what}.{key}"), value).map_err(ApiError::text)?;
    if value.is_empty() || value.len() > VOLUME_LABEL_VALUE_BYTES {
        return Err(ApiError::invalid(format!(
            "{what} `{key}` needs a value of 1 to {VOLUME_LABEL_VALUE_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Checks a volume's labels as a spec gives them. A pool chooses its members among the
/// volumes of its own namespace only (`PoolRow::selects`), so a label puts a volume in a
/// pool of its namespace at most.
pub fn check_labels(volume: &str, labels: &BTreeMap<String, String>) -> ApiResult<()> {
    for (k, v) in labels {
        check_key("label", k)?;
        check_value("label", k, v)?;
    }
    if labels.len() > MAX_VOLUME_LABELS {
        return Err(ApiError::invalid(format!(
            "volume `{volume}` would have {} labels, more than the {MAX_VOLUME_LABELS} csivol \
             allows",
            labels.len()
        )));
    }
    Ok(())
}

/// The pool whose selector takes a volume with `labels`, refusing labels two pools would
/// take (`except`: a pool not to count, the one being made or changed).
fn pool_taking(
    conn: &(impl Snapshot + ?Sized),
    volume: &str,
    labels: &BTreeMap<String, String>,
) -> ApiResult<Option<PoolRow>> {
    let mut taking = conn
        .pools()?
        .into_iter()
        .filter(|p| p.selects(volume, labels));
    let first = taking.next();
    if let (Some(a), Some(b)) = (&first, taking.next()) {
        return Err(ApiError::conflict(format!(
            "volume `{volume}` would belong to two pools, `{}` ({}) and `{}` ({}): a volume \
             belongs to one pool at most",
            api::split_key(&a.name).1,
            selector_text(&a.selector),
            api::split_key(&b.name).1,
            selector_text(&b.selector)
        ))
        .with_hint("change its labels so that one pool's selector takes it, not both"));
    }
    Ok(first)
}

/// `k=v,k=v`, as the CLI takes a selector.
pub fn selector_text(s: &BTreeMap<String, String>) -> String {
    s.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Records a volume's labels as its spec gives them (registration, creation): a spec
/// without labels leaves the ones an operator set.
pub fn labels_from_spec(
    ctx: &mut impl Txn,
    volume: &str,
    labels: &BTreeMap<String, String>,
) -> ApiResult<()> {
    if labels.is_empty() || ctx.volume_labels(volume)? == *labels {
        return Ok(());
    }
    check_labels(volume, labels)?;
    pool_taking(&*ctx, volume, labels)?;
    ctx.put_volume_labels(volume, labels)
}

/// `POST /v1/volumes/{name}/labels`: an operator sets and removes a volume's labels, with
/// an event naming who. A change that would put the volume in two pools is refused.
pub fn set_volume_labels(
    ctx: &mut impl Txn,
    volume: &str,
    req: &VolumeLabelRequest,
    actor: &str,
    limits: &Limits,
) -> ApiResult<()> {
    ctx.require_volume(volume)?;
    if !req.set.is_empty() && ctx.job_volume(volume)?.is_some() {
        // A label could put a volume made for one job into a pool, for other jobs to take.
        return Err(ApiError::invalid(format!(
            "volume `{volume}` is a per-job volume, made for one job alone: it takes no labels"
        ))
        .with_hint("label a volume that is not made for one job"));
    }
    if req.set.is_empty() && req.remove.is_empty() {
        return Err(
            ApiError::invalid("no label to set or remove").with_hint(format!(
                "e.g. csivol volume label {volume_cli} pool=build-cache team-",
                volume_cli = csivol_api::cli_name(volume)
            )),
        );
    }
    for key in &req.remove {
        check_key("label", key)?;
        if req.set.contains_key(key) {
            return Err(ApiError::invalid(format!(
                "label `{key}` is both set and removed"
            )));
        }
    }
    let current = ctx.volume_labels(volume)?;
    let mut labels = current.clone();
    let mut changes = Vec::new();
    for (key, value) in &req.set {
        check_key("label", key)?;
        check_value("label", key, value)?;
        match labels.insert(key.clone(), value.clone()) {
            Some(old) if old == *value => {}
            Some(old) => changes.push(format!("{key}={value} (was {old})")),
            None => changes.push(format!("{key}={value}")),
        }
    }
    for key in &req.remove {
        if let Some(old) = labels.remove(key) {
            changes.push(format!("removed {key}={old}"));
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    check_labels(volume, &labels)?;
    let before = pool_taking(&*ctx, volume, &current).ok().flatten();
    let after = pool_taking(&*ctx, volume, &labels)?;
    ctx.put_volume_labels(volume, &labels)?;
    touch_volume(ctx, volume)?;
    let mut message = format!("labels: {}", changes.join(", "));
    match (before.map(|p| p.name), after.map(|p| p.name)) {
        (Some(a), Some(b)) if a == b => {}
        (Some(a), Some(b)) => message.push_str(&format!("; moved from pool {a} to pool {b}")),
        (None, Some(b)) => message.push_str(&format!("; now a member of pool {b}")),
        (Some(a), None) => message.push_str(&format!("; no longer a member of pool {a}")),
        (None, None) => {}
    }
    event(
        ctx,
        EventKind::VolumeLabelled,
        Some(volume),
        None,
        None,
        actor,
        message,
    )?;
    // Out of its pool, or into one that lingers otherwise: a staging kept ends.
    end_lingers_for(ctx, volume, limits)
}

/// Ends the stagings kept after a release of `volume` that are no longer to be kept (its
/// pool no longer asks for them, an operation waits for the release): `advance_volume`
/// reads whether it still lingers and settles them, saying why.
pub(super) fn end_lingers_for(ctx: &mut impl Txn, volume: &str, limits: &Limits) -> ApiResult<()> {
    if ctx.lingers(Some(volume), None)?.is_empty() {
        return Ok(());
    }
    advance_volume(ctx, volume, limits)
}

/// Whether a staging kept after a release has run out on a ready node, where ending it
/// moves something (checked by the leader twice a second, writing only then).
pub fn any_linger_due(conn: &(impl Snapshot + ?Sized), now: i64) -> ApiResult<bool> {
    for l in conn.lingers_due(now)? {
        let attached = conn
            .attachment(&l.volume, &l.node)?
            .is_none_or(|a| a.state != AttachmentState::Blocked);
        let ready = conn
            .node(&l.node)?
            .is_none_or(|n| n.status == api::NodeStatus::Ready);
        if attached && ready {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Ends the stagings kept after a release whose linger ran out: their nodes unstage them
/// and the volumes are detached as after any release.
pub fn end_due_lingers(ctx: &mut impl Txn, limits: &Limits) -> ApiResult<()> {
    let now = ctx.now();
    let mut volumes = std::collections::BTreeSet::new();
    for l in ctx.lingers_due(now)? {
        if ctx.volume(&l.volume)?.is_none() || ctx.attachment(&l.volume, &l.node)?.is_none() {
            // Nothing is staged to take down (the volume was deregistered): the row goes.
            ctx.delete_linger(&l.volume, &l.node)?;
        } else {
            volumes.insert(l.volume);
        }
    }
    for v in volumes {
        advance_volume(ctx, &v, limits)?;
    }
    Ok(())
}

pub(super) use super::pool_members::members;

/// The pool (by key), or a refusal naming it and the pools of its namespace.
pub(super) fn require_pool(conn: &(impl Snapshot + ?Sized), key: &str) -> ApiResult<PoolRow> {
    if let Some(p) = conn.pool(key)? {
        return Ok(p);
    }
    let (namespace, name) = api::split_key(key);
    if !conn.pools_kept()? {
        return Err(ApiError::not_found(format!(
            "no pool `{name}`: this cluster runs on the previous schema, which keeps no pools"
        ))
        .with_hint("run `csivol-server upgrade finalize` once every server runs this release"));
    }
    // Only the pools of its namespace are named: another's are not the caller's to learn.
    let names: Vec<String> = conn
        .pools()?
        .into_iter()
        .filter(|p| api::namespace_of(&p.name) == namespace)
        .map(|p| api::split_key(&p.name).1.to_owned())
        .collect();
    let guess = api::closest(name, &names)
        .map(|g| format!("did you mean `{g}`? "))
        .unwrap_or_default();
    Err(
        ApiError::not_found(format!("no pool `{name}`")).with_hint(format!(
            "{guess}`csivol pool list` lists the pools; `csivol pool create {name} --selector \
         KEY=VALUE` makes one"
        )),
    )
}

/// `PUT /v1/pools/{name}`: makes a pool; the same spec again changes nothing, another one
/// is refused. A selector that takes a volume another pool has is refused.
pub fn create_pool(ctx: &mut impl Txn, key: &str, spec: &PoolSpec, actor: &str) -> ApiResult<bool> {
    super::namespaces::require_namespace(&*ctx, api::namespace_of(key))?;
    // Messages name the pool within its namespace; its event, in the cluster's log, by key.
    let name = api::split_key(key).1;
    if spec.selector.is_empty() {
        return Err(
            ApiError::invalid("a pool needs a selector").with_hint(format!(
                "e.g. csivol pool create {name} --selector pool={name}"
            )),
        );
    }
    for (k, v) in &spec.selector {
        check_key("selector", k)?;
        check_value("selector", k, v)?;
    }
    if let Some(l) = spec.linger_ms {
        api::limits::duration_ms("linger_ms", l).map_err(ApiError::out_of_range)?;
    }
    if let Some(p) = ctx.pool(key)? {
        if p.selector == spec.selector && p.linger_ms == spec.linger_ms {
            return Ok(false);
        }
        return Err(ApiError::conflict(format!(
            "pool `{name}` exists with another spec (selector {})",
            selector_text(&p.selector)
        ))
        .with_hint(format!(
            "delete it first (csivol pool delete {name}), or use another name"
        )));
    }
    let row = PoolRow {
        name: key.to_owned(),
        selector: spec.selector.clone(),
        linger_ms: spec.linger_ms,
        created_at: ctx.now(),
    };
    let pools = ctx.pools()?;
    let mut members = Vec::new();
    for (volume, labels) in ctx.all_volume_labels()? {
        if !row.selects(&volume, &labels) {
            continue;
        }
        if let Some(other) = pools.iter().find(|p| p.selects(&volume, &labels)) {
            return Err(ApiError::conflict(format!(
                "selector {} takes volume `{volume}`, a member of pool `{}` ({}): a volume \
                 belongs to one pool at most",
                selector_text(&row.selector),
                api::split_key(&other.name).1,
                selector_text(&other.selector)
            ))
            .with_hint(format!(
                "narrow the selector, or move the volume out of pool `{}` first \
                 (csivol volume label {volume_cli} KEY-)",
                api::split_key(&other.name).1,
                volume_cli = csivol_api::cli_name(&volume)
            )));
        }
        members.push(volume);
    }
    ctx.put_pool(&row)?;
    let mut message = format!(
        "pool {key} created: selector {}",
        selector_text(&row.selector)
    );
    if let Some(l) = row.linger_ms {
        message.push_str(&format!(
            ", linger {}",
            humantime::format_duration(std::time::Duration::from_millis(l))
        ));
    }
    message.push_str(&format!("; {} member(s)", members.len()));
    event(
        ctx,
        EventKind::PoolCreated,
        None,
        None,
        None,
        actor,
        message,
    )?;
    Ok(true)
}

/// `DELETE /v1/pools/{name}`: forgets a pool. Its members stay, with their labels, claims
/// and cache keys; the claims waiting in its line leave it.
pub fn delete_pool(ctx: &mut impl Txn, name: &str, actor: &str, limits: &Limits) -> ApiResult<()> {
    let p = require_pool(&*ctx, name)?;
    let all = members(&*ctx, &p)?;
    super::pool_line::empty_line(ctx, name, actor)?;
    ctx.delete_pool(name)?;
    event(
        ctx,
        EventKind::PoolDeleted,
        None,
        None,
        None,
        actor,
        format!("pool {name} deleted; its members keep their labels and claims"),
    )?;
    // Its members linger no more: what their nodes kept staged is taken down.
    for volume in &all {
        end_lingers_for(ctx, volume, limits)?;
    }
    Ok(())
}

/// A pool as `pool show` and `pool list` show it.
pub fn pool_view(conn: &(impl Snapshot + ?Sized), name: &str, now: i64) -> ApiResult<api::Pool> {
    let p = require_pool(conn, name)?;
    let mut out = Vec::new();
    for volume in members(conn, &p)? {
        let holders = conn
            .claims_of_volume(&volume)?
            .into_iter()
            .map(|c| c.alloc)
            .collect();
        let staged_on = conn
            .attachments_of_volume(&volume)?
            .into_iter()
            .filter(|a| {
                matches!(
                    a.state,
                    AttachmentState::Attached | AttachmentState::Unstaging
                )
            })
            .map(|a| a.node)
            .collect();
        out.push(api::PoolMember {
            holders,
            cache_key: conn.cache_key(&volume)?.map(|(k, _)| k),
            availability: conn.volume_availability(&volume)?.map(|a| a.eligibility),
            staged_on,
            volume: api::split_key(&volume).1.to_owned(),
        });
    }
    let recent = conn.recent_pool_claims(name, api::Pool::RECENT)?;
    Ok(api::Pool {
        recent_claims: recent.len() as u32,
        warm_hits: recent
            .iter()
            .filter(|c| c.choice == api::PoolChoice::SameKey)
            .count() as u32,
        name: api::split_key(&p.name).1.to_owned(),
        namespace: api::namespace_of(&p.name).to_owned(),
        selector: p.selector,
        linger_ms: p.linger_ms,
        members: out,
        line: super::pool_line::line_view(conn, name, now)?,
        created_at: time(p.created_at),
    })
}

/// Every pool of the namespaces `of` passes (a namespace's name), by key.
pub fn pool_views(
    conn: &(impl Snapshot + ?Sized),
    now: i64,
    of: &dyn Fn(&str) -> bool,
) -> ApiResult<Vec<api::Pool>> {
    conn.pools()?
        .into_iter()
        .filter(|p| of(api::namespace_of(&p.name)))
        .map(|p| pool_view(conn, &p.name, now))
        .collect()
}
