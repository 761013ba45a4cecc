//! The node endpoints: operators' node actions (eligibility, labels, removal, unblock,
//! fence), the node views, and the agents' own endpoints (register, heartbeat, stopping,
//! desired state, reports).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use csivol_api::{
    self as api, HeartbeatResponse, NodeUnblockRequest, RegisterRequest, RegisterResponse,
    ReportBatch,
};
use csivol_rules::fence::FenceConfig;
use serde::Deserialize;

use super::blocking::{Blocking, checked_index, sent_generation, with_index};
use super::extract::{Body, Q, name};
use super::once::{Answer, Once, ok};
use super::{agent, once};
use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::store::sqlite::writer::WriteCtx;
use crate::watch::{Cursor, Key};
use crate::{fence, lifecycle, views};

pub(super) async fn node_labels(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    once: Once,
    Body(req): Body<api::NodeLabelRequest>,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    name("node", &node)?;
    let (fencing, beats, body) = (Arc::clone(&app.fence), app.live.beats(), req.clone());
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::set_labels(ctx, &node, &req, fencing.configured(&node), &actor)?;
        one_node(ctx, &beats, &node, &fencing)
    };
    once.respond(&app, &body, write, ok).await
}

/// The view of one node after an operator changed it, from the change's own transaction
/// (the answer kept under the request's key is what the change left).
fn one_node(
    ctx: &WriteCtx<'_>,
    beats: &crate::liveness::Beats,
    node: &str,
    fencing: &FenceConfig,
) -> ApiResult<api::Node> {
    let found = views::list_nodes(ctx, beats, Some(node), fencing, ctx.now)?;
    found
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("the node vanished while it was being changed"))
}

pub(super) async fn node_eligibility(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    once: Once,
    Body(req): Body<api::EligibilityRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("node", &node)?;
    let (fencing, beats, body) = (Arc::clone(&app.fence), app.live.beats(), req.clone());
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::set_eligibility(ctx, &node, req.eligibility, &actor, &limits)?;
        one_node(ctx, &beats, &node, &fencing)
    };
    once.respond(&app, &body, write, ok).await
}

pub(super) async fn remove_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    once: Once,
) -> ApiResult<Response> {
    let (actor, _) = app.acting(&headers)?;
    name("node", &node)?;
    let wanted = node.clone();
    let write = move |ctx: &mut WriteCtx<'_>| lifecycle::remove_node(ctx, &wanted, &actor);
    let removed = |_: &()| Answer::empty(StatusCode::NO_CONTENT);
    match once.write(&app, &(), write, removed).await? {
        once::Outcome::Done((), answer) => {
            // Its heartbeats are unknown from now on: the agent, if it runs, registers again.
            app.live.forget(&node);
            Ok(answer.into_response())
        }
        once::Outcome::Replayed(r) => Ok(r),
    }
}

pub(super) async fn unblock_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    once: Once,
    Body(req): Body<NodeUnblockRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.acting(&headers)?;
    name("node", &node)?;
    let body = req.clone();
    let write = move |ctx: &mut WriteCtx<'_>| {
        lifecycle::unblock_node(ctx, &node, &req.reason, req.dry_run, &actor, &limits)
    };
    once.respond(&app, &body, write, ok).await
}

pub(super) async fn fence_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<api::FenceRequest>,
) -> ApiResult<Json<api::FenceOutcome>> {
    let (actor, limits) = app.acting(&headers)?;
    name("node", &node)?;
    lifecycle::require_reason(&req.reason, false, &limits.text)?;
    Ok(Json(
        fence::fence(&app.fencing(), &node, &req, &actor).await?,
    ))
}

pub(super) async fn list_nodes(State(app): State<App>) -> ApiResult<Json<Vec<api::Node>>> {
    let beats = app.live.beats();
    let (fencing, now) = (Arc::clone(&app.fence), app.clock.now_ms());
    Ok(Json(
        app.db
            .read(move |c| views::list_nodes(c, &beats, None, &fencing, now))
            .await?,
    ))
}

pub(super) async fn get_node(
    State(app): State<App>,
    Path(node): Path<String>,
) -> ApiResult<Json<api::Node>> {
    name("node", &node)?;
    let beats = app.live.beats();
    let wanted = node.clone();
    let (fencing, now) = (Arc::clone(&app.fence), app.clock.now_ms());
    let found = app
        .db
        .read(move |c| views::list_nodes(c, &beats, Some(&wanted), &fencing, now))
        .await?;
    found.into_iter().next().map(Json).ok_or_else(|| {
        ApiError::not_found(format!("node `{node}` is not registered")).with_hint(
            "`csivol node list` shows the registered nodes; a node registers when its agent starts",
        )
    })
}

pub(super) async fn register(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<RegisterRequest>,
) -> ApiResult<Json<RegisterResponse>> {
    let caller = app.caller(&headers)?;
    name("node", &node)?;
    let limits = app.limits.clone();
    let n = node.clone();
    // A refusal is answered after its event committed, so it is an Ok of the write.
    app.db
        .write(move |ctx| {
            if let Some(refusal) = lifecycle::refused_hosting(ctx, &caller, &n, &req)? {
                return Ok(Err(refusal));
            }
            if let Some(refusal) = lifecycle::node_id_refused(ctx, &n, &req)? {
                return Ok(Err(refusal));
            }
            lifecycle::register_node(ctx, &n, &req, &limits).map(Ok)
        })
        .await??;
    app.live.registered(&node, app.clock.now_ms());
    Ok(Json(RegisterResponse {
        heartbeat_ttl_ms: app.live.ttl().as_millis() as u64,
        index: app.db.hub.index(&Key::Node(node)),
        generation: Some(app.db.hub.generation().text()),
    }))
}

/// `POST /v1/nodes/{node}/stopping`: the node's agent stops in order. Its node is
/// `stopped`, not lost, for `planned_stop_grace` (see `lifecycle::node_stopping`).
pub(super) async fn stopping(
    State(app): State<App>,
    Path(node): Path<String>,
    Body(req): Body<api::StoppingRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    name("node", &node)?;
    let limits = app.limits.clone();
    let grace = app.live.planned_stop_grace();
    let n = node.clone();
    app.db
        .write(move |ctx| lifecycle::node_stopping(ctx, &n, req.took_down, grace, &limits))
        .await?;
    app.live.stopped(&node, std::time::Instant::now() + grace);
    Ok(Json(serde_json::json!({})))
}

pub(super) async fn heartbeat(
    State(app): State<App>,
    Path(node): Path<String>,
) -> ApiResult<Json<HeartbeatResponse>> {
    name("node", &node)?;
    // The same answer as a heartbeat line on the node channel.
    agent::heartbeat(&app, &node, false).await.map(Json)
}

/// `?index=N&wait=30s&since=M`: a blocking query whose answer holds only the volumes changed
/// after index `M` (the state the agent holds), when the server can say which.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DesiredQuery {
    index: Option<u64>,
    wait: Option<String>,
    since: Option<u64>,
}

pub(super) async fn desired(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Q(q): Q<DesiredQuery>,
) -> ApiResult<Response> {
    name("node", &node)?;
    let key = Key::Node(node.clone());
    let hub = &app.db.hub;
    let since = checked_index(q.since)?;
    let blocking = Blocking {
        index: q.index,
        wait: q.wait,
    }
    .wait()?;
    let began = hub.generation();
    // What the agent holds is of another generation of the state, or ahead of every index
    // this server gave (an agent that names no generation, of an older release, after the
    // state went back in time): it is answered at once, with the whole state. Waiting for
    // the state to pass its index would leave the node holding what the state may no longer
    // have. An agent takes the index it is given, so it asks from there next.
    let generation = sent_generation(&headers);
    let outdated = |index: u64| hub.outdated(&Cursor { generation, index });
    let at_once = blocking.is_some_and(|(after, _)| outdated(after)) || since.is_some_and(outdated);
    let blocking = blocking.filter(|_| !at_once);
    let since = since.filter(|_| !at_once);
    // A query the server can answer at once (a node channel said the state changed) holds
    // no place in the long-poll budget; one whose index is past the state's was answered
    // at once above, so this one cannot come to wait.
    let waits = blocking.is_some_and(|(after, _)| hub.index(&key) <= after);
    let _permit = app.long_poll(waits)?;
    app.metrics.desired_fetches.inc();
    if waits {
        app.metrics.desired_waits.inc();
    }
    let index = match blocking {
        Some((after, wait)) => hub.wait(&key, after, wait).await,
        None => hub.index(&key),
    };
    // The state went back in time while the agent waited: the whole state, at an index of
    // the new generation.
    let now = hub.generation();
    let (index, since) = if now == began {
        (index, since)
    } else {
        (hub.index(&key), None)
    };
    // Which volumes changed is read after the wait, so that it covers every change up to
    // `index`; the read below sees at least those (later ones are sent again next time).
    let changes = since.and_then(|s| Some((s, hub.node_changes(&node, s)?)));
    // Changes name a few volumes: read them here. The whole state grows with the node's
    // inventory: read it on a blocking thread.
    let mut state = match changes {
        Some((since, volumes)) => {
            (app.db)
                .read_small(|c| lifecycle::desired_changes(c, &node, index, since, volumes))
                .await?
        }
        None => {
            (app.db)
                .read(move |c| lifecycle::desired_state(c, &node, index))
                .await?
        }
    };
    state.generation = Some(now.text());
    if hub.unsettled() {
        // The state went back in time under this server a moment ago, and what the nodes
        // are to report is not recorded yet: nothing is to act on it meanwhile.
        state.register_again = true;
        state.status = Some(api::NodeStatus::Lost);
    }
    Ok(with_index(StatusCode::OK, (index, now), state))
}

pub(super) async fn reports(
    State(app): State<App>,
    Path(node): Path<String>,
    Body(batch): Body<ReportBatch>,
) -> ApiResult<Json<serde_json::Value>> {
    name("node", &node)?;
    let count = agent::apply_reports(&app, &node, batch, false).await?;
    Ok(Json(serde_json::json!({ "accepted": count })))
}
