//! The node and plugin endpoints: operators' node actions (eligibility, removal, unblock,
//! fence), the node and plugin views, and the agents' own endpoints (register, heartbeat,
//! desired state, reports).

use super::*;

pub(super) async fn node_labels(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<api::NodeLabelRequest>,
) -> ApiResult<Json<api::Node>> {
    let (actor, _) = app.operator(&headers)?;
    name("node", &node)?;
    let (wanted, fencing) = (node.clone(), Arc::clone(&app.fence));
    app.db
        .write(move |ctx| {
            lifecycle::set_labels(ctx, &wanted, &req, fencing.configured(&wanted), &actor)
        })
        .await?;
    one_node(&app, node, "its labels were set").await
}

/// The view of one node after an operator changed it.
async fn one_node(app: &App, node: String, after: &str) -> ApiResult<Json<api::Node>> {
    let beats = app.live.beats();
    let fencing = Arc::clone(&app.fence);
    let found = app
        .db
        .read(move |c| views::list_nodes(c, &beats, Some(&node), &fencing))
        .await?;
    found
        .into_iter()
        .next()
        .map(Json)
        .ok_or_else(|| ApiError::internal(format!("the node vanished after {after}")))
}

pub(super) async fn node_eligibility(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<api::EligibilityRequest>,
) -> ApiResult<Json<api::Node>> {
    let (actor, _) = app.operator(&headers)?;
    name("node", &node)?;
    let wanted = node.clone();
    app.db
        .write(move |ctx| lifecycle::set_eligibility(ctx, &wanted, req.eligibility, &actor))
        .await?;
    one_node(&app, node, "its eligibility was set").await
}

pub(super) async fn remove_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> ApiResult<StatusCode> {
    let (actor, _) = app.operator(&headers)?;
    name("node", &node)?;
    let wanted = node.clone();
    app.db
        .write(move |ctx| lifecycle::remove_node(ctx, &wanted, &actor))
        .await?;
    // Its heartbeats are unknown from now on: the agent, if it runs, registers again.
    app.live.forget(&node);
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn unblock_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<NodeUnblockRequest>,
) -> ApiResult<Json<api::ActionPlan>> {
    let (actor, limits) = app.operator(&headers)?;
    name("node", &node)?;
    let plan = app
        .db
        .write(move |ctx| {
            lifecycle::unblock_node(ctx, &node, &req.reason, req.dry_run, &actor, &limits)
        })
        .await?;
    Ok(Json(plan))
}

pub(super) async fn fence_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<api::FenceRequest>,
) -> ApiResult<Json<api::FenceOutcome>> {
    let (actor, limits) = app.operator(&headers)?;
    name("node", &node)?;
    lifecycle::require_reason(&req.reason, false, &limits.text)?;
    Ok(Json(fence::fence(&app, &node, &req, &actor).await?))
}

pub(super) async fn list_nodes(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<api::Node>>> {
    app.caller(&headers)?.require_reader()?;
    let beats = app.live.beats();
    let fencing = Arc::clone(&app.fence);
    Ok(Json(
        app.db
            .read(move |c| views::list_nodes(c, &beats, None, &fencing))
            .await?,
    ))
}

pub(super) async fn get_node(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
) -> ApiResult<Json<api::Node>> {
    app.caller(&headers)?.require_reader()?;
    name("node", &node)?;
    let beats = app.live.beats();
    let wanted = node.clone();
    let fencing = Arc::clone(&app.fence);
    let found = app
        .db
        .read(move |c| views::list_nodes(c, &beats, Some(&wanted), &fencing))
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
    caller.require_node(&node)?;
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
    app.live.registered(&node, now_ms());
    Ok(Json(RegisterResponse {
        heartbeat_ttl_ms: app.live.ttl().as_millis() as u64,
        index: app.db.hub.index(&Key::Node(node)),
    }))
}

/// `POST /v1/nodes/{node}/stopping`: the node's agent stops in order. Its node is
/// `stopped`, not lost, for `planned_stop_grace` (see `lifecycle::node_stopping`).
pub(super) async fn stopping(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(req): Body<api::StoppingRequest>,
) -> ApiResult<Json<serde_json::Value>> {
    app.caller(&headers)?.require_node(&node)?;
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
    headers: HeaderMap,
    Path(node): Path<String>,
) -> ApiResult<Json<HeartbeatResponse>> {
    app.caller(&headers)?.require_node(&node)?;
    name("node", &node)?;
    // The same answer as a heartbeat line on the node channel.
    channel::heartbeat(&app, &node, false).await.map(Json)
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
    app.caller(&headers)?.require_node(&node)?;
    name("node", &node)?;
    let key = Key::Node(node.clone());
    let since = checked_index(q.since)?;
    let blocking = Blocking {
        index: q.index,
        wait: q.wait,
    }
    .wait()?;
    // A query the server can answer at once (a node channel said the state changed) holds
    // no place in the long-poll budget; the index only grows, so it cannot come to wait.
    let waits = blocking.is_some_and(|(after, _)| app.db.hub.index(&key) <= after);
    let _permit = app.long_poll(waits)?;
    app.metrics.desired_fetches.inc();
    if waits {
        app.metrics.desired_waits.inc();
    }
    let index = match blocking {
        Some((after, wait)) => app.db.hub.wait(&key, after, wait).await,
        None => app.db.hub.index(&key),
    };
    // Which volumes changed is read after the wait, so that it covers every change up to
    // `index`; the read below sees at least those (later ones are sent again next time).
    let changes = since.and_then(|s| Some((s, app.db.hub.node_changes(&node, s)?)));
    // Changes name a few volumes: read them here. The whole state grows with the node's
    // inventory: read it on a blocking thread.
    let state = match changes {
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
    Ok(with_index(StatusCode::OK, index, state))
}

pub(super) async fn reports(
    State(app): State<App>,
    headers: HeaderMap,
    Path(node): Path<String>,
    Body(batch): Body<ReportBatch>,
) -> ApiResult<Json<serde_json::Value>> {
    app.caller(&headers)?.require_node(&node)?;
    name("node", &node)?;
    let count = apply_reports(&app, &node, batch, false).await?;
    Ok(Json(serde_json::json!({ "accepted": count })))
}

/// Commits a node's batch of reports, from a request or a node channel's `report` line;
/// how many there were.
pub(super) async fn apply_reports(
    app: &App,
    node: &str,
    batch: ReportBatch,
    channel: bool,
) -> ApiResult<usize> {
    let limits = app.limits.clone();
    let count = batch.reports.len();
    app.metrics.node_reports(count as u64, channel);
    let node = node.to_owned();
    app.db
        .write(move |ctx| lifecycle::apply_reports(ctx, &node, batch.reports.clone(), &limits))
        .await?;
    Ok(count)
}

pub(super) async fn list_plugins(
    State(app): State<App>,
    headers: HeaderMap,
) -> ApiResult<Json<Vec<api::Plugin>>> {
    app.caller(&headers)?.require_reader()?;
    let limits = app.limits.clone();
    Ok(Json(
        app.db
            .read(move |c| views::list_plugins(c, None, &limits))
            .await?,
    ))
}

pub(super) async fn get_plugin(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Plugin>> {
    app.caller(&headers)?.require_reader()?;
    name("plugin", &id)?;
    let limits = app.limits.clone();
    app.db
        .read(move |c| {
            let found = views::list_plugins(c, Some(&id), &limits)?;
            match found.into_iter().next() {
                Some(p) => Ok(Json(p)),
                None => Err(lifecycle::unknown_plugin(&id, &c.plugin_ids()?)),
            }
        })
        .await
}
