//! The HTTP API: the routes, and the layers every request passes (admission, the client
//! certificate, consistent reads). One file per resource holds its handlers (`volumes`,
//! `claims`, `nodes`, `plugins`, `snapshots`, `tokens`, `events`, `backup`, `health`, and
//! the node channel); the rest is what they share: what an agent's heartbeat and reports
//! do, by request or over the channel (`agent`), who the caller is (`access`), what a
//! request carries (`extract`), exact retries (`once`), blocking queries (`blocking`),
//! the wait header (`waits`), errors as status codes (`error`) and the accept loop
//! (`listen`). Every route and who may call it is one table (`routes`), checked before
//! any handler runs; handlers parse and call the lifecycle.

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
mod namespaces;
mod nodes;
mod once;
mod plugins;
mod pools;
mod quotas;
mod reads;
pub mod routes;
mod snapshots;
mod tokens;
mod volumes;
mod waits;

use axum::Router;
use axum::extract::DefaultBodyLimit;

use self::admit::BODY_LIMIT;
use crate::app::App;
use crate::error::ApiError;

pub fn router(app: App) -> Router {
    // Before routing: the namespace a request names becomes its volume's key in the path
    // that is routed (`namespaces::qualify`).
    let routed = routed(app);
    Router::new().fallback_service(tower::Layer::layer(
        &axum::middleware::from_fn(namespaces::qualify),
        routed,
    ))
}

fn routed(app: App) -> Router {
    routes::routes(Router::new())
        // On the matched routes only: an unknown path is answered 404 whoever asks.
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            routes::authorise,
        ))
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
