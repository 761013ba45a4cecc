//! Namespaces: made and forgotten by an operator, and required of every volume made in
//! one. `default` always exists and is never forgotten; any other namespace is forgotten
//! only while nothing lives in it.

use csivol_api::{self as api, DEFAULT_NAMESPACE, closest, validate_namespace};
use csivol_rules::kinds::EventKind;

use super::events::event;

use crate::error::{ApiError, ApiResult};
use crate::model::time;
use crate::store::Snapshot;

/// How many volumes a refusal to forget a namespace names.
const NAMED: usize = 5;

/// The namespace `name` as the API shows it, with what lives in it.
fn view(
    conn: &(impl Snapshot + ?Sized),
    name: &str,
    created: Option<i64>,
) -> ApiResult<api::Namespace> {
    let c = conn.namespace_contents(name, 0)?;
    Ok(api::Namespace {
        name: name.to_owned(),
        created_at: created.map(time),
        volumes: c.volumes,
        claims: c.claims,
        snapshots: c.snapshots,
        capacity_bytes: c.capacity_bytes,
        fresh_volumes: c.fresh_volumes,
        quota: conn.namespace_quota(name)?,
    })
}

/// Every namespace, `default` first.
pub fn namespace_views(conn: &(impl Snapshot + ?Sized)) -> ApiResult<Vec<api::Namespace>> {
    let mut out = vec![view(conn, DEFAULT_NAMESPACE, None)?];
    for (name, created) in conn.namespaces()? {
        out.push(view(conn, &name, Some(created))?);
    }
    Ok(out)
}

/// One namespace, or its refusal ([`require_namespace`]).
pub fn namespace_view(conn: &(impl Snapshot + ?Sized), name: &str) -> ApiResult<api::Namespace> {
    let created = require_namespace(conn, name)?;
    view(conn, name, created)
}

/// Refuses a namespace that does not exist, with the one closest to it and how to make
/// it; when it was made (`None` for `default`).
pub fn require_namespace(conn: &(impl Snapshot + ?Sized), name: &str) -> ApiResult<Option<i64>> {
    validate_namespace(name).map_err(ApiError::invalid)?;
    if name == DEFAULT_NAMESPACE {
        return Ok(None);
    }
    if !conn.namespaces_kept()? {
        return Err(crate::store::sqlite::namespaces::below_schema());
    }
    if let Some(created) = conn.namespace(name)? {
        return Ok(Some(created));
    }
    let mut known: Vec<String> = conn.namespaces()?.into_iter().map(|(n, _)| n).collect();
    known.push(DEFAULT_NAMESPACE.to_owned());
    let mut e = ApiError::not_found(format!("no namespace `{name}`"));
    let hint = match closest(name, &known) {
        Some(best) => {
            format!("did you mean `{best}`? To make `{name}`, run `csivol namespace create {name}`")
        }
        None => format!("make it with `csivol namespace create {name}`"),
    };
    e = e.with_hint(hint);
    Err(e)
}

/// Makes a namespace; whether it is new (`default` always was). A new one is an event
/// with its actor.
pub fn create_namespace(
    ctx: &mut (impl crate::store::Txn + ?Sized),
    name: &str,
    actor: &str,
) -> ApiResult<(api::Namespace, bool)> {
    validate_namespace(name).map_err(|e| {
        ApiError::invalid(e)
            .with_hint("a namespace is named like a volume, in at most 63 characters")
    })?;
    let made = name != DEFAULT_NAMESPACE && ctx.put_namespace(name)?;
    if made {
        let message = format!("namespace {name} created");
        event(
            ctx,
            EventKind::NamespaceCreated,
            None,
            None,
            None,
            actor,
            message,
        )?;
    }
    let created = ctx.namespace(name)?;
    Ok((view(&*ctx, name, created)?, made))
}

/// Forgets a namespace, refused while anything lives in it (naming what) and for `default`;
/// an event with its actor.
pub fn delete_namespace(
    ctx: &mut (impl crate::store::Txn + ?Sized),
    name: &str,
    actor: &str,
) -> ApiResult<()> {
    if name == DEFAULT_NAMESPACE {
        return Err(
            ApiError::invalid("the namespace `default` cannot be deleted")
                .with_hint("it holds everything that names no namespace; it always exists"),
        );
    }
    require_namespace(&*ctx, name)?;
    let c = ctx.namespace_contents(name, NAMED)?;
    if c.volumes > 0 || c.claims > 0 || c.snapshots > 0 {
        let names: Vec<String> = c
            .first_volumes
            .iter()
            .map(|k| format!("`{}`", api::split_key(k).1))
            .collect();
        let more = if c.volumes > NAMED as u64 {
            ", …"
        } else {
            ""
        };
        let mut what = vec![format!(
            "{} volume(s) ({}{more})",
            c.volumes,
            names.join(", ")
        )];
        if c.snapshots > 0 {
            what.push(format!("{} snapshot(s)", c.snapshots));
        }
        return Err(ApiError::conflict(format!(
            "namespace `{name}` still holds {}",
            what.join(" and ")
        ))
        .with_hint(format!(
            "delete them first: `csivol volume list -n {name}` lists its volumes"
        )));
    }
    let pools: Vec<String> = ctx
        .pools()?
        .into_iter()
        .filter(|p| api::namespace_of(&p.name) == name)
        .map(|p| format!("`{}`", api::split_key(&p.name).1))
        .collect();
    if !pools.is_empty() {
        return Err(ApiError::conflict(format!(
            "namespace `{name}` still holds pool(s) {}",
            pools.join(", ")
        ))
        .with_hint(format!(
            "delete them first: `csivol pool delete POOL -n {name}`"
        )));
    }
    ctx.delete_namespace(name)?;
    let message = format!("namespace {name} deleted");
    event(
        ctx,
        EventKind::NamespaceDeleted,
        None,
        None,
        None,
        actor,
        message,
    )
}
