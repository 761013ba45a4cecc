//! The server's own state: `GET /v1/health` and `GET /v1/metrics`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use csivol_api::{self as api, Health};

use crate::app::App;
use crate::error::ApiResult;
use crate::store::Snapshot;

/// `GET /v1/health`, no token needed: `ok`, or `degraded` with the reasons while the
/// database refuses writes or a decided transition waits to be recorded.
pub(super) async fn health(State(app): State<App>) -> Json<Health> {
    let mut reasons = Vec::new();
    if let Some(e) = app.db.write_error() {
        reasons.push(format!(
            "the state database {} refuses writes: {e}",
            app.db.path().display()
        ));
    }
    let unrecorded = app.live.unrecorded();
    if !unrecorded.is_empty() {
        reasons.push(format!(
            "lost node(s) {} not recorded yet (retrying): their volumes are not blocked until then",
            unrecorded.join(", ")
        ));
    }
    Json(Health {
        status: if reasons.is_empty() { "ok" } else { "degraded" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        reasons,
        leader: app
            .leadership
            .as_ref()
            .map(crate::store::replicated::Leadership::is_leader),
        schema: Some(api::SchemaVersions {
            running: app.db.schema(),
            known: crate::store::sqlite::migrations::schema_version(),
        }),
    })
}

pub(super) async fn metrics(State(app): State<App>) -> ApiResult<Response> {
    let m = Arc::clone(&app.metrics);
    let now = app.clock.now_ms();
    let (counts, waiting) = app
        .db
        .read(move |c| Ok((c.state_counts()?, c.waiting_ops(None, now)?)))
        .await?;
    let text = m.render(&counts, &waiting, now)?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    )
        .into_response())
}
