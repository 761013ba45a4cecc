//! Controller hosts: a registration that would host a controller without the right to is
//! refused (with one event per refusal), and operators allow or disallow nodes. Who may
//! host is decided by `csivol_rules::hosting::grant`.

use std::collections::BTreeSet;

use csivol_api::{RegisterRequest, validate_name};

use super::events::event;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::store::Txn;
use csivol_rules::hosting::{Credentials, grant};
use csivol_rules::kinds::EventKind;

/// The plugins whose controller `node` registers to host without the right to; an event
/// records the refusal (the caller commits it and answers `forbidden`).
pub fn refused_hosting(
    ctx: &mut impl Txn,
    caller: &Caller,
    node: &str,
    req: &RegisterRequest,
) -> ApiResult<Option<ApiError>> {
    let token = Credentials {
        role: caller.role,
        node: caller.node.as_deref(),
        controllers: &caller.controllers,
    };
    let mut refused = Vec::new();
    for p in req.plugins.iter().filter(|p| p.controller.is_some()) {
        let ok = ctx
            .controller_allowances(&p.id)?
            .iter()
            .any(|(n, _, _)| n == node);
        if grant(&token, node, &p.id, ok).is_none() {
            refused.push(p.id.clone());
        }
    }
    if refused.is_empty() {
        return Ok(None);
    }
    let list = refused.join(", ");
    let message = format!(
        "node `{node}` may not host the controller of plugin {list}: its token does not name it \
         and no operator allowed it"
    );
    // An agent retries its registration: one event per refusal, not one per retry.
    let event_message = format!("refused registration: {message}");
    let last = ctx.last_event_of_node(node)?;
    if last.as_ref().map(|(k, m)| (k.as_str(), m.as_str()))
        != Some((
            EventKind::ControllerHostRefused.as_str(),
            event_message.as_str(),
        ))
    {
        event(
            ctx,
            EventKind::ControllerHostRefused,
            None,
            Some(node),
            None,
            &caller.actor(),
            event_message,
        )?;
    }
    let first = &refused[0];
    Ok(Some(ApiError::forbidden(message).with_hint(format!(
        "if node {node} should host it, run: csivol plugin controllers {first} --allow {node} \
         (or give the node a token made with --controller {first}); otherwise drop --controller from its agent"
    ))))
}

/// `POST /v1/plugins/{id}/controllers`: an operator allows or disallows nodes. A
/// disallowed node that hosts the controller now keeps it until it registers again;
/// revoking its token cuts it off at once.
pub fn change_controller_hosts(
    ctx: &mut impl Txn,
    actor: &str,
    plugin: &str,
    allow: &[String],
    disallow: &[String],
) -> ApiResult<()> {
    validate_name("plugin", plugin).map_err(ApiError::invalid)?;
    let allow: BTreeSet<&String> = allow.iter().collect();
    for n in allow.iter().copied().chain(disallow) {
        validate_name("node", n).map_err(ApiError::invalid)?;
    }
    if let Some(n) = disallow.iter().find(|n| allow.contains(n)) {
        return Err(ApiError::invalid(format!(
            "node `{n}` is both allowed and disallowed"
        )));
    }
    for n in allow {
        if ctx.allow_controller_host(plugin, n, actor)? {
            event(
                ctx,
                EventKind::ControllerHostAllowed,
                None,
                Some(n),
                None,
                actor,
                format!("node {n} may host the controller of plugin {plugin}"),
            )?;
        }
    }
    for n in disallow {
        if ctx.disallow_controller_host(plugin, n)? {
            event(
                ctx,
                EventKind::ControllerHostDisallowed,
                None,
                Some(n),
                None,
                actor,
                format!(
                    "node {n} may no longer host the controller of plugin {plugin} (from its next registration)"
                ),
            )?;
        }
    }
    Ok(())
}
