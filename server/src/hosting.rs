//! Who may host a plugin's controller. A controller host receives every controller
//! operation of its plugin (secrets included) and its reports move volumes between nodes,
//! so a node hosts one only when its token says so (`token create --controller PLUGIN`)
//! or an operator allowed it (`csivol plugin controllers PLUGIN --allow NODE`).

use std::collections::BTreeSet;

use csivol_api::{ControllerHost, ControllerHosts, RegisterRequest, Role, validate_name};
use rusqlite::{Connection, OptionalExtension, params};

use super::auth::Caller;
use super::db::WriteCtx;
use super::error::{ApiError, ApiResult};
use super::lifecycle::event;
use super::model::time;
use csivol_rules::kinds::EventKind;

/// Why a registering node may host a plugin's controller, if it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// An operator token registered the node (operators may do anything).
    Operator,
    /// The node's own token names the plugin.
    Token,
    /// An operator allowed the node (`controller_hosts`).
    Allowed,
}

/// Pure: whether `caller`, registering `node`, may host `plugin`'s controller, given
/// whether an operator allowed that node.
pub fn grant(caller: &Caller, node: &str, plugin: &str, allowed: bool) -> Option<Grant> {
    match caller.role {
        Role::Operator => Some(Grant::Operator),
        Role::Node
            if caller.node.as_deref() == Some(node)
                && caller.controllers.iter().any(|p| p == plugin) =>
        {
            Some(Grant::Token)
        }
        _ if allowed => Some(Grant::Allowed),
        _ => None,
    }
}

fn allowed(conn: &Connection, plugin: &str, node: &str) -> ApiResult<bool> {
    Ok(conn.query_row(
        "SELECT count(*) FROM controller_hosts WHERE plugin = ?1 AND node = ?2",
        params![plugin, node],
        |r| r.get::<_, i64>(0),
    )? > 0)
}

/// The plugins whose controller `node` registers to host without the right to; an event
/// records the refusal (the caller commits it and answers `forbidden`).
pub fn refused(
    ctx: &mut WriteCtx<'_>,
    caller: &Caller,
    node: &str,
    req: &RegisterRequest,
) -> ApiResult<Option<ApiError>> {
    let mut refused = Vec::new();
    for p in req.plugins.iter().filter(|p| p.controller.is_some()) {
        let ok = allowed(ctx.tx, &p.id, node)?;
        if grant(caller, node, &p.id, ok).is_none() {
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
    let last: Option<(String, String)> = ctx
        .tx
        .query_row(
            "SELECT kind, message FROM events WHERE node = ?1 ORDER BY idx DESC LIMIT 1",
            [node],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
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

/// `GET /v1/plugins/{id}/controllers`: who may host, and who does.
pub fn list(conn: &Connection, plugin: &str) -> ApiResult<ControllerHosts> {
    let mut hosts = Vec::new();
    let mut stmt = conn.prepare(
        "SELECT node, allowed_by, allowed_at FROM controller_hosts WHERE plugin = ?1 ORDER BY node",
    )?;
    for row in stmt.query_map([plugin], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
        ))
    })? {
        let (node, by, at) = row?;
        hosts.push(ControllerHost {
            node,
            source: "operator".into(),
            by: Some(by),
            since: Some(time(at)),
        });
    }
    let mut stmt = conn.prepare(
        "SELECT node, id, controllers FROM tokens WHERE role = 'node' AND revoked_at IS NULL \
         AND controllers != '[]' ORDER BY node, id",
    )?;
    for row in stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
        ))
    })? {
        let (node, id, controllers) = row?;
        let names: Vec<String> = serde_json::from_str(&controllers).unwrap_or_default();
        if names.iter().any(|p| p == plugin) {
            hosts.push(ControllerHost {
                node,
                source: "token".into(),
                by: Some(id),
                since: None,
            });
        }
    }
    let mut stmt = conn.prepare(
        "SELECT node FROM node_plugins WHERE plugin = ?1 AND controller = 1 ORDER BY node",
    )?;
    let hosting = stmt
        .query_map([plugin], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ControllerHosts {
        plugin: plugin.to_owned(),
        allowed: hosts,
        hosting,
    })
}

/// `POST /v1/plugins/{id}/controllers`: an operator allows or disallows nodes. A
/// disallowed node that hosts the controller now keeps it until it registers again;
/// revoking its token cuts it off at once.
pub fn change(
    ctx: &mut WriteCtx<'_>,
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
        let added = ctx.tx.execute(
            "INSERT INTO controller_hosts (plugin, node, allowed_by, allowed_at) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (plugin, node) DO NOTHING",
            params![plugin, n, actor, ctx.now],
        )?;
        if added > 0 {
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
        let removed = ctx.tx.execute(
            "DELETE FROM controller_hosts WHERE plugin = ?1 AND node = ?2",
            params![plugin, n],
        )?;
        if removed > 0 {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(role: Role, node: Option<&str>, controllers: &[&str]) -> Caller {
        Caller {
            token_id: "t".into(),
            role,
            node: node.map(str::to_owned),
            name: None,
            controllers: controllers.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn who_may_host_a_controller() {
        let op = caller(Role::Operator, None, &[]);
        let granted = caller(Role::Node, Some("n1"), &["hp"]);
        let plain = caller(Role::Node, Some("n1"), &[]);
        let cases = [
            // (caller, node, plugin, operator allowed, expected)
            (&op, "n1", "hp", false, Some(Grant::Operator)),
            (&granted, "n1", "hp", false, Some(Grant::Token)),
            (&granted, "n1", "other", false, None),
            (&granted, "n2", "hp", false, None),
            (&plain, "n1", "hp", false, None),
            (&plain, "n1", "hp", true, Some(Grant::Allowed)),
        ];
        for (c, node, plugin, allowed, want) in cases {
            assert_eq!(
                grant(c, node, plugin, allowed),
                want,
                "{c:?} registering {node} for {plugin} (allowed: {allowed})"
            );
        }
    }
}
