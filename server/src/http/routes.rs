//! Every route of the API with what its caller needs, in one table: the router is built
//! from it, one layer checks it before any handler runs (and before any body is read),
//! and the authorisation test reads it. A route cannot be added without saying who may
//! call it.

use axum::Router;
use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, Capability, CreateVolumeSpec};

use super::{
    backup, channel, claims, events, health, namespaces, nodes, plugins, pools, quotas, snapshots,
    tokens, volumes,
};
use crate::app::App;
use crate::error::ApiError;

/// What a caller needs for a route: a capability (`api::Capability`), and how the
/// route stands to a token narrowed to volume-name patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// No token: the health check.
    Anyone,
    /// The capability, for the volume or snapshot the path names (`{name}`), which a
    /// narrowed token's patterns must match.
    Named(Capability),
    /// The capability, for a listing the handler narrows to the token's volumes.
    Listed(Capability),
    /// The capability, for a log of every volume that a token narrowed to volume patterns
    /// may read only for one volume its patterns match, named by the query's `volume` (a
    /// token narrowed to namespaces alone reads the log of those).
    Filtered(Capability),
    /// The capability, for something that names no volume (plugins, the controller
    /// hosts of a plugin): narrowing changes nothing.
    Unnamed(Capability),
    /// The capability, over the whole cluster: a narrowed token is refused.
    Cluster(Capability),
    /// The capability, for a volume the server makes and names, or chooses, in the
    /// namespace the request names (a per-job volume, a pool's member, a pool's members
    /// by their labels): a token narrowed to namespaces must hold that namespace, and a
    /// token narrowed to volume patterns is refused, since the volume is the server's
    /// choice, not one its patterns were given for.
    Chosen(Capability),
    /// The capability, for the namespace the path names (`{name}`), which a token narrowed
    /// to namespaces must hold.
    Namespace(Capability),
    /// An agent's own endpoints: the token of the node the path names (or an operator's).
    OwnNode,
}

impl Need {
    /// The rule as the authorisation test writes it: `anyone`, `own-node`, or
    /// `CAPABILITY@named|listed|filtered|unnamed|cluster|chosen|namespace`.
    pub fn text(self) -> String {
        match self {
            Self::Anyone => "anyone".into(),
            Self::OwnNode => "own-node".into(),
            Self::Named(c) => format!("{c}@named"),
            Self::Listed(c) => format!("{c}@listed"),
            Self::Filtered(c) => format!("{c}@filtered"),
            Self::Unnamed(c) => format!("{c}@unnamed"),
            Self::Cluster(c) => format!("{c}@cluster"),
            Self::Chosen(c) => format!("{c}@chosen"),
            Self::Namespace(c) => format!("{c}@namespace"),
        }
    }

    /// The capability it needs, if any.
    pub fn capability(self) -> Option<Capability> {
        match self {
            Self::Named(c)
            | Self::Listed(c)
            | Self::Filtered(c)
            | Self::Unnamed(c)
            | Self::Cluster(c)
            | Self::Chosen(c)
            | Self::Namespace(c) => Some(c),
            Self::Anyone | Self::OwnNode => None,
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
    ($($method:ident $path:literal $need:ident $(($cap:ident))? => $handler:expr;)*) => {
        /// Every route of the API and what its caller needs.
        pub const TABLE: &[Rule] = &[
            $(Rule {
                method: stringify!($method),
                path: $path,
                need: Need::$need $((Capability::$cap))?,
            },)*
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
    get "/v1/metrics" Cluster(Read) => health::metrics;
    post "/v1/tokens" Cluster(ManageTokens) => tokens::create_token;
    get "/v1/tokens" Cluster(ManageTokens) => tokens::list_tokens;
    delete "/v1/tokens/{id}" Cluster(ManageTokens) => tokens::revoke_token;
    get "/v1/namespaces" Listed(Read) => namespaces::list_namespaces;
    get "/v1/namespaces/{name}" Namespace(Read) => namespaces::get_namespace;
    put "/v1/namespaces/{name}" Cluster(CreateDelete) => namespaces::put_namespace;
    delete "/v1/namespaces/{name}" Cluster(CreateDelete) => namespaces::delete_namespace;
    put "/v1/namespaces/{name}/quota" Cluster(CreateDelete) => quotas::put_quota;
    get "/v1/volumes" Listed(Read) => volumes::list_volumes;
    get "/v1/volumes/{name}" Named(Read) => volumes::get_volume;
    put "/v1/volumes/{name}" Named(CreateDelete) => volumes::put_volume;
    delete "/v1/volumes/{name}" Named(CreateDelete) => volumes::delete_volume;
    post "/v1/volumes/{name}/create" Named(CreateDelete) => volumes::start_operation::<CreateVolumeSpec>;
    post "/v1/volumes/{name}/expand" Named(ExpandModify) => volumes::start_operation::<api::ExpandRequest>;
    post "/v1/volumes/{name}/modify" Named(ExpandModify) => volumes::start_operation::<api::ModifyRequest>;
    post "/v1/volumes/{name}/adopt" Named(CreateDelete) => volumes::adopt_volume;
    post "/v1/snapshots/{name}/adopt" Named(Snapshot) => snapshots::adopt_snapshot;
    post "/v1/volumes/{name}/claims" Named(Claim) => claims::post_claim;
    get "/v1/volumes/{name}/claims/{alloc}" Named(Read) => claims::get_claim;
    delete "/v1/volumes/{name}/claims/{alloc}" Named(Claim) => claims::delete_claim;
    post "/v1/volumes/{name}/claims/{alloc}/renew" Named(Claim) => claims::renew_claim;
    get "/v1/claims" Listed(Read) => claims::list_claims;
    post "/v1/fresh-claims" Chosen(Claim) => claims::post_fresh_claim;
    post "/v1/volumes/{name}/unblock" Named(UnblockDetach) => volumes::unblock_volume;
    post "/v1/volumes/{name}/detach" Named(UnblockDetach) => volumes::detach;
    post "/v1/volumes/{name}/eligibility" Named(ExpandModify) => volumes::volume_eligibility;
    post "/v1/volumes/{name}/labels" Chosen(ExpandModify) => pools::volume_labels;
    get "/v1/pools" Chosen(Read) => pools::list_pools;
    get "/v1/pools/{name}" Chosen(Read) => pools::get_pool;
    put "/v1/pools/{name}" Chosen(CreateDelete) => pools::put_pool;
    delete "/v1/pools/{name}" Chosen(CreateDelete) => pools::delete_pool;
    post "/v1/pools/{name}/claims" Chosen(Claim) => pools::post_pool_claim;
    get "/v1/pools/{name}/claims/{alloc}" Chosen(Read) => pools::get_pool_claim;
    delete "/v1/pools/{name}/claims/{alloc}" Chosen(Claim) => pools::delete_pool_claim;
    post "/v1/pools/{name}/claims/{alloc}/renew" Chosen(Claim) => pools::renew_pool_claim;
    get "/v1/nodes" Cluster(Read) => nodes::list_nodes;
    get "/v1/nodes/{node}" Cluster(Read) => nodes::get_node;
    delete "/v1/nodes/{node}" Cluster(ManageNodes) => nodes::remove_node;
    post "/v1/nodes/{node}/eligibility" Cluster(ManageNodes) => nodes::node_eligibility;
    post "/v1/nodes/{node}/labels" Cluster(ManageNodes) => nodes::node_labels;
    post "/v1/nodes/{node}/unblock" Cluster(Fence) => nodes::unblock_node;
    post "/v1/nodes/{node}/fence" Cluster(Fence) => nodes::fence_node;
    post "/v1/nodes/{node}/register" OwnNode => nodes::register;
    post "/v1/nodes/{node}/heartbeat" OwnNode => nodes::heartbeat;
    get "/v1/nodes/{node}/desired" OwnNode => nodes::desired;
    get "/v1/nodes/{node}/channel" OwnNode => channel::open;
    post "/v1/nodes/{node}/reports" OwnNode => nodes::reports;
    post "/v1/nodes/{node}/stopping" OwnNode => nodes::stopping;
    get "/v1/plugins" Unnamed(Read) => plugins::list_plugins;
    get "/v1/plugins/{id}" Unnamed(Read) => plugins::get_plugin;
    get "/v1/plugins/{id}/volumes" Cluster(Read) => plugins::plugin_volumes;
    get "/v1/plugins/{id}/snapshots" Cluster(Read) => plugins::plugin_snapshots;
    get "/v1/plugins/{id}/controllers" Unnamed(Read) => plugins::get_controller_hosts;
    post "/v1/plugins/{id}/controllers" Cluster(ManageNodes) => plugins::change_controller_hosts;
    get "/v1/snapshots" Listed(Read) => snapshots::list_snapshots;
    get "/v1/snapshots/{name}" Named(Read) => snapshots::get_snapshot;
    put "/v1/snapshots/{name}" Named(Snapshot) => snapshots::put_snapshot;
    delete "/v1/snapshots/{name}" Named(Snapshot) => snapshots::delete_snapshot;
    get "/v1/group-snapshots" Cluster(Read) => snapshots::list_group_snapshots;
    get "/v1/group-snapshots/{name}" Cluster(Read) => snapshots::get_group_snapshot;
    put "/v1/group-snapshots/{name}" Cluster(Snapshot) => snapshots::put_group_snapshot;
    delete "/v1/group-snapshots/{name}" Cluster(Snapshot) => snapshots::delete_group_snapshot;
    get "/v1/events" Filtered(Read) => events::events;
    get "/v1/controller-findings" Cluster(Read) => plugins::controller_findings;
    get "/v1/backup" Cluster(Backup) => backup::download;
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

/// The value of the path's parameter `name`, percent-decoded as the handler reads it.
async fn path_param(
    parts: &mut axum::http::request::Parts,
    app: &App,
    name: &str,
) -> Option<String> {
    let axum::extract::Path(params) =
        axum::extract::Path::<Vec<(String, String)>>::from_request_parts(parts, app)
            .await
            .ok()?;
    params.into_iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// The value of the path's parameter `name`, as sent.
async fn raw_path_param(
    parts: &mut axum::http::request::Parts,
    app: &App,
    name: &str,
) -> Option<String> {
    let params = RawPathParams::from_request_parts(parts, app).await.ok()?;
    params
        .iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
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
        let what = format!("{} {}", rule.method.to_uppercase(), rule.path);
        let asked = parts.extensions.get::<namespaces::Asked>().cloned();
        let checked = match app.caller(&parts.headers) {
            Err(e) => Err(e),
            // A namespace the request names must be one the token holds, whatever else the
            // route needs (only a token that holds it learns whether it exists).
            Ok(caller) if rule.need.capability().is_some_and(|c| caller.has(c)) => {
                match asked.as_ref().and_then(namespaces::Asked::named) {
                    Some(ns) => caller.require_namespace(ns).map(|()| caller),
                    None => Ok(caller),
                }
            }
            Ok(caller) => Ok(caller),
        };
        let checked = match checked {
            Err(e) => Err(e),
            Ok(caller) => match rule.need {
                Need::Anyone => Ok(()),
                Need::Unnamed(c) | Need::Listed(c) => caller.require(c, &what),
                Need::Cluster(c) => caller
                    .require(c, &what)
                    .and_then(|()| caller.require_whole_cluster(&what)),
                Need::Chosen(c) => caller.require(c, &what).and_then(|()| {
                    let why = format!("{what} touches a volume the server makes or chooses");
                    caller.require_no_volume_patterns(&why)
                }),
                Need::Namespace(c) => match caller.require(c, &what) {
                    Err(e) => Err(e),
                    Ok(()) => match path_param(&mut parts, &app, "name").await {
                        Some(ns) => caller.require_namespace(&ns),
                        None => Err(ApiError::internal(format!(
                            "the route {} names no namespace",
                            path.as_str()
                        ))),
                    },
                },
                Need::Filtered(c) => caller.require(c, &what).and_then(|()| {
                    // A token narrowed to namespaces alone reads their whole log: the
                    // handler reads only the namespaces it holds.
                    if caller.scope.volumes.is_empty() {
                        return Ok(());
                    }
                    let volume =
                        axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&parts.uri)
                            .ok()
                            .and_then(|q| q.0.into_iter().find(|(k, _)| k == "volume"))
                            .map(|(_, v)| v);
                    match volume {
                        Some(v) => caller.require_touches("volume", &v),
                        None => caller.require_whole_cluster(&format!("{what} without `volume`")),
                    }
                }),
                Need::Named(c) => match caller.require(c, &what) {
                    Err(e) => Err(e),
                    Ok(()) => match path_param(&mut parts, &app, "name").await {
                        Some(name) => {
                            let kind = if rule.path.starts_with("/v1/snapshots/") {
                                "snapshot"
                            } else {
                                "volume"
                            };
                            caller.require_touches(kind, &name)
                        }
                        None => Err(ApiError::internal(format!(
                            "the route {} names no volume",
                            path.as_str()
                        ))),
                    },
                },
                Need::OwnNode => match raw_path_param(&mut parts, &app, "node").await {
                    Some(node) => caller.require_node(&node),
                    None => Err(ApiError::internal(format!(
                        "the route {} names no node",
                        path.as_str()
                    ))),
                },
            },
        };
        // A namespace that does not exist is named only to a caller the route admits.
        let checked = match checked {
            Ok(()) => namespaces::require_asked(&app, asked.as_ref()).await,
            Err(e) => Err(e),
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
            assert!(
                !matches!(r.need, Need::Named(_)) || r.path.contains("{name}"),
                "{} {} is checked against the volume it names but names none",
                r.method,
                r.path
            );
        }
    }
}
