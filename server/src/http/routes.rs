//! Every route of the API with what its caller needs, in one table: the router is built
//! from it, one layer checks it before any handler runs (and before any body is read),
//! and the authorisation test reads it. A route cannot be added without saying who may
//! call it.

use axum::Router;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, CreateVolumeSpec};

use super::{
    backup, channel, claims, events, health, nodes, plugins, pools, snapshots, tokens, volumes,
};
use crate::app::App;
use crate::error::ApiError;

/// What a caller needs for a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// No token: the health check.
    Anyone,
    /// Reading the cluster: reader, claimer and operator tokens.
    Read,
    /// Claiming, renewing and releasing claims: claimer and operator tokens (which claims
    /// a claimer may renew or release is the lifecycle's rule: its own).
    Claim,
    /// Changing the cluster: operator tokens.
    Operate,
    /// An agent's own endpoints: the token of the node the path names (or an operator's).
    OwnNode,
}

impl Need {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anyone => "anyone",
            Self::Read => "read",
            Self::Claim => "claim",
            Self::Operate => "operate",
            Self::OwnNode => "own-node",
        }
    }
}

/// One row of the table: an HTTP method (lowercase), a path template as the router
/// matches it, and what its caller needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub method: &'static str,
    pub path: &'static str,
    pub need: Need,
}

/// Writes the table and the router from one list, so that the two cannot differ.
macro_rules! table {
    ($($method:ident $path:literal $need:ident => $handler:expr;)*) => {
        /// Every route of the API and what its caller needs.
        pub const TABLE: &[Rule] = &[
            $(Rule { method: stringify!($method), path: $path, need: Need::$need },)*
        ];

        /// The router of every route of [`TABLE`] (axum merges the methods of one path).
        pub(super) fn routes(router: Router<App>) -> Router<App> {
            $(let router = router.route($path, axum::routing::$method($handler));)*
            router
        }
    };
}

table! {
    get "/v1/health" Anyone => health::health;
    get "/v1/metrics" Read => health::metrics;
    post "/v1/tokens" Operate => tokens::create_token;
    get "/v1/tokens" Operate => tokens::list_tokens;
    delete "/v1/tokens/{id}" Operate => tokens::revoke_token;
    get "/v1/volumes" Read => volumes::list_volumes;
    get "/v1/volumes/{name}" Read => volumes::get_volume;
    put "/v1/volumes/{name}" Operate => volumes::put_volume;
    delete "/v1/volumes/{name}" Operate => volumes::delete_volume;
    post "/v1/volumes/{name}/create" Operate => volumes::start_operation::<CreateVolumeSpec>;
    post "/v1/volumes/{name}/expand" Operate => volumes::start_operation::<api::ExpandRequest>;
    post "/v1/volumes/{name}/modify" Operate => volumes::start_operation::<api::ModifyRequest>;
    post "/v1/volumes/{name}/adopt" Operate => volumes::adopt_volume;
    post "/v1/snapshots/{name}/adopt" Operate => snapshots::adopt_snapshot;
    post "/v1/volumes/{name}/claims" Claim => claims::post_claim;
    get "/v1/volumes/{name}/claims/{alloc}" Read => claims::get_claim;
    delete "/v1/volumes/{name}/claims/{alloc}" Claim => claims::delete_claim;
    post "/v1/volumes/{name}/claims/{alloc}/renew" Claim => claims::renew_claim;
    get "/v1/claims" Read => claims::list_claims;
    post "/v1/volumes/{name}/unblock" Operate => volumes::unblock_volume;
    post "/v1/volumes/{name}/detach" Operate => volumes::detach;
    post "/v1/volumes/{name}/eligibility" Operate => volumes::volume_eligibility;
    post "/v1/volumes/{name}/labels" Operate => pools::volume_labels;
    get "/v1/pools" Read => pools::list_pools;
    get "/v1/pools/{name}" Read => pools::get_pool;
    put "/v1/pools/{name}" Operate => pools::put_pool;
    delete "/v1/pools/{name}" Operate => pools::delete_pool;
    post "/v1/pools/{name}/claims" Claim => pools::post_pool_claim;
    get "/v1/nodes" Read => nodes::list_nodes;
    get "/v1/nodes/{node}" Read => nodes::get_node;
    delete "/v1/nodes/{node}" Operate => nodes::remove_node;
    post "/v1/nodes/{node}/eligibility" Operate => nodes::node_eligibility;
    post "/v1/nodes/{node}/labels" Operate => nodes::node_labels;
    post "/v1/nodes/{node}/unblock" Operate => nodes::unblock_node;
    post "/v1/nodes/{node}/fence" Operate => nodes::fence_node;
    post "/v1/nodes/{node}/register" OwnNode => nodes::register;
    post "/v1/nodes/{node}/heartbeat" OwnNode => nodes::heartbeat;
    get "/v1/nodes/{node}/desired" OwnNode => nodes::desired;
    get "/v1/nodes/{node}/channel" OwnNode => channel::open;
    post "/v1/nodes/{node}/reports" OwnNode => nodes::reports;
    post "/v1/nodes/{node}/stopping" OwnNode => nodes::stopping;
    get "/v1/plugins" Read => plugins::list_plugins;
    get "/v1/plugins/{id}" Read => plugins::get_plugin;
    get "/v1/plugins/{id}/volumes" Read => plugins::plugin_volumes;
    get "/v1/plugins/{id}/snapshots" Read => plugins::plugin_snapshots;
    get "/v1/plugins/{id}/controllers" Read => plugins::get_controller_hosts;
    post "/v1/plugins/{id}/controllers" Operate => plugins::change_controller_hosts;
    get "/v1/snapshots" Read => snapshots::list_snapshots;
    get "/v1/snapshots/{name}" Read => snapshots::get_snapshot;
    put "/v1/snapshots/{name}" Operate => snapshots::put_snapshot;
    delete "/v1/snapshots/{name}" Operate => snapshots::delete_snapshot;
    get "/v1/group-snapshots" Read => snapshots::list_group_snapshots;
    get "/v1/group-snapshots/{name}" Read => snapshots::get_group_snapshot;
    put "/v1/group-snapshots/{name}" Operate => snapshots::put_group_snapshot;
    delete "/v1/group-snapshots/{name}" Operate => snapshots::delete_group_snapshot;
    get "/v1/events" Read => events::events;
    get "/v1/controller-findings" Read => plugins::controller_findings;
    get "/v1/backup" Operate => backup::download;
}

/// The rule of a matched route (a HEAD is a GET's).
fn rule_of(method: &axum::http::Method, path: &str) -> Option<&'static Rule> {
    let method = if method == axum::http::Method::HEAD {
        "get"
    } else {
        method.as_str()
    };
    TABLE
        .iter()
        .find(|r| r.path == path && r.method.eq_ignore_ascii_case(method))
}

/// The layer on every route: the caller's token must give what the route's rule needs,
/// or the request is refused before its handler runs, with what the token lacks.
pub(super) async fn authorise(
    State(app): State<App>,
    req: Request,
    next: axum::middleware::Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let Some(path) = parts.extensions.get::<MatchedPath>().cloned() else {
        return ApiError::internal("a route was matched without its path").into_response();
    };
    let Some(rule) = rule_of(&parts.method, path.as_str()) else {
        // A method the path does not take: the path's router answers 405 without running
        // any handler (every handler was routed from a row of the table).
        return next.run(Request::from_parts(parts, body)).await;
    };
    if rule.need != Need::Anyone {
        let checked = match app.caller(&parts.headers) {
            Err(e) => Err(e),
            Ok(caller) => match rule.need {
                Need::Anyone => Ok(()),
                Need::Read => caller.require_reader(),
                Need::Claim => caller.require_claimer(),
                Need::Operate => caller.require_operator(),
                Need::OwnNode => {
                    let params = RawPathParams::from_request_parts(&mut parts, &app).await;
                    let node = params.ok().and_then(|p| {
                        p.iter()
                            .find(|(k, _)| *k == "node")
                            .map(|(_, v)| v.to_owned())
                    });
                    match node {
                        Some(node) => caller.require_node(&node),
                        None => Err(ApiError::internal(format!(
                            "the route {} names no node",
                            path.as_str()
                        ))),
                    }
                }
            },
        };
        if let Err(e) = checked {
            return e.into_response();
        }
    }
    next.run(Request::from_parts(parts, body)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_has_one_rule() {
        let mut seen = std::collections::BTreeSet::new();
        for r in TABLE {
            assert!(
                seen.insert((r.method, r.path)),
                "{} {} twice in the table",
                r.method,
                r.path
            );
            assert!(
                r.need != Need::OwnNode || r.path.contains("{node}"),
                "{} {} needs its node's token but names no node",
                r.method,
                r.path
            );
        }
    }
}
