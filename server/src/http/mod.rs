//! The HTTP API: the routes, and the layers every request passes (admission, the client
//! certificate, consistent reads). One file per resource holds its handlers (`volumes`,
//! `claims`, `nodes`, `plugins`, `snapshots`, `tokens`, `events`, `backup`, `health`, and
//! the node channel); the rest is what they share: what an agent's heartbeat and reports
//! do, by request or over the channel (`agent`), who the caller is (`access`), what a
//! request carries (`extract`), exact retries (`once`), blocking queries (`blocking`),
//! the wait header (`waits`), errors as status codes (`error`) and the accept loop
//! (`listen`). Handlers authorise, parse and call the lifecycle.

mod access;
mod admit;
mod agent;
mod backup;
mod blocking;
mod channel;
mod claims;
pub(crate) mod error;
mod events;
mod extract;
mod health;
pub(crate) mod listen;
mod listing;
mod nodes;
mod once;
mod plugins;
mod reads;
mod snapshots;
mod tokens;
mod volumes;
mod waits;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use csivol_api::{self as api, CreateVolumeSpec};

use self::admit::BODY_LIMIT;
use crate::app::App;
use crate::error::ApiError;

pub fn router(app: App) -> Router {
    Router::new()
        .route("/v1/health", get(health::health))
        .route("/v1/metrics", get(health::metrics))
        .route(
            "/v1/tokens",
            post(tokens::create_token).get(tokens::list_tokens),
        )
        .route("/v1/tokens/{id}", delete(tokens::revoke_token))
        .route("/v1/volumes", get(volumes::list_volumes))
        .route(
            "/v1/volumes/{name}",
            get(volumes::get_volume)
                .put(volumes::put_volume)
                .delete(volumes::delete_volume),
        )
        .route(
            "/v1/volumes/{name}/create",
            post(volumes::start_operation::<CreateVolumeSpec>),
        )
        .route(
            "/v1/volumes/{name}/expand",
            post(volumes::start_operation::<api::ExpandRequest>),
        )
        .route(
            "/v1/volumes/{name}/modify",
            post(volumes::start_operation::<api::ModifyRequest>),
        )
        .route("/v1/volumes/{name}/adopt", post(volumes::adopt_volume))
        .route(
            "/v1/snapshots/{name}/adopt",
            post(snapshots::adopt_snapshot),
        )
        .route("/v1/volumes/{name}/claims", post(claims::post_claim))
        .route(
            "/v1/volumes/{name}/claims/{alloc}",
            get(claims::get_claim).delete(claims::delete_claim),
        )
        .route(
            "/v1/volumes/{name}/claims/{alloc}/renew",
            post(claims::renew_claim),
        )
        .route("/v1/claims", get(claims::list_claims))
        .route("/v1/volumes/{name}/unblock", post(volumes::unblock_volume))
        .route("/v1/volumes/{name}/detach", post(volumes::detach))
        .route("/v1/nodes", get(nodes::list_nodes))
        .route(
            "/v1/nodes/{node}",
            get(nodes::get_node).delete(nodes::remove_node),
        )
        .route(
            "/v1/nodes/{node}/eligibility",
            post(nodes::node_eligibility),
        )
        .route("/v1/nodes/{node}/labels", post(nodes::node_labels))
        .route("/v1/nodes/{node}/unblock", post(nodes::unblock_node))
        .route("/v1/nodes/{node}/fence", post(nodes::fence_node))
        .route("/v1/nodes/{node}/register", post(nodes::register))
        .route("/v1/nodes/{node}/heartbeat", post(nodes::heartbeat))
        .route("/v1/nodes/{node}/desired", get(nodes::desired))
        .route("/v1/nodes/{node}/channel", get(channel::open))
        .route("/v1/nodes/{node}/reports", post(nodes::reports))
        .route("/v1/nodes/{node}/stopping", post(nodes::stopping))
        .route("/v1/plugins", get(plugins::list_plugins))
        .route("/v1/plugins/{id}", get(plugins::get_plugin))
        .route("/v1/plugins/{id}/volumes", get(plugins::plugin_volumes))
        .route("/v1/plugins/{id}/snapshots", get(plugins::plugin_snapshots))
        .route(
            "/v1/plugins/{id}/controllers",
            get(plugins::get_controller_hosts).post(plugins::change_controller_hosts),
        )
        .route("/v1/snapshots", get(snapshots::list_snapshots))
        .route(
            "/v1/snapshots/{name}",
            get(snapshots::get_snapshot)
                .put(snapshots::put_snapshot)
                .delete(snapshots::delete_snapshot),
        )
        .route("/v1/group-snapshots", get(snapshots::list_group_snapshots))
        .route(
            "/v1/group-snapshots/{name}",
            get(snapshots::get_group_snapshot)
                .put(snapshots::put_group_snapshot)
                .delete(snapshots::delete_group_snapshot),
        )
        .route("/v1/events", get(events::events))
        .route("/v1/controller-findings", get(plugins::controller_findings))
        .route("/v1/backup", get(backup::download))
        .fallback(|| async {
            ApiError::not_found("no such endpoint").with_hint("the API lives under /v1/")
        })
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            reads::consistent,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            access::client_cert_names_the_node,
        ))
        // Outermost: nothing reads a body before its caller showed a token.
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            admit::admit,
        ))
        .with_state(app)
}
