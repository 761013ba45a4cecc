//! Who may host a plugin's controller. A controller host receives every controller
//! operation of its plugin (secrets included) and its reports move volumes between nodes,
//! so a node hosts one only when its token says so (`token create --controller PLUGIN`)
//! or an operator allowed it (`csivol plugin controllers PLUGIN --allow NODE`). The
//! server records the refusals and the operators' choices.

use csivol_api::Role;

/// What the token that registers a node says, as far as hosting goes.
#[derive(Clone, Copy, Debug)]
pub struct Credentials<'a> {
    pub role: Role,
    /// The node a node token acts for.
    pub node: Option<&'a str>,
    /// The plugins whose controller a node token's node may host.
    pub controllers: &'a [String],
}

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

/// Whether a caller with `token`, registering `node`, may host `plugin`'s controller,
/// given whether an operator allowed that node.
pub fn grant(token: &Credentials<'_>, node: &str, plugin: &str, allowed: bool) -> Option<Grant> {
    match token.role {
        Role::Operator => Some(Grant::Operator),
        Role::Node if token.node == Some(node) && token.controllers.iter().any(|p| p == plugin) => {
            Some(Grant::Token)
        }
        _ if allowed => Some(Grant::Allowed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_may_host_a_controller() {
        let hp = ["hp".to_owned()];
        let token = |role, node, controllers| Credentials {
            role,
            node,
            controllers,
        };
        let op = token(Role::Operator, None, &[]);
        let granted = token(Role::Node, Some("n1"), &hp);
        let plain = token(Role::Node, Some("n1"), &[]);
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
