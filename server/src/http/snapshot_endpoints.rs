//! The snapshot endpoints: `PUT/GET/DELETE /v1/snapshots/{name}`, `GET /v1/snapshots`.

use super::*;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SnapshotFilter {
    volume: Option<String>,
}

pub(super) async fn list_snapshots(
    State(app): State<App>,
    headers: HeaderMap,
    Q(f): Q<SnapshotFilter>,
) -> ApiResult<Json<Vec<api::Snapshot>>> {
    app.caller(&headers)?.require_reader()?;
    if let Some(v) = &f.volume {
        name("volume", v)?;
    }
    let snapshots = app
        .db
        .read(move |c| lifecycle::list_snapshots(c, f.volume.as_deref()))
        .await?;
    Ok(Json(snapshots))
}

pub(super) async fn get_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
    Q(b): Q<Blocking>,
) -> ApiResult<Response> {
    app.caller(&headers)?.require_reader()?;
    name("snapshot", &snapshot)?;
    let key = Key::Snapshot(snapshot.clone());
    let blocking = b.wait()?;
    let _permit = app.long_poll(blocking.is_some())?;
    let index = match blocking {
        Some((after, wait)) => app.db.hub.wait(&key, after, wait).await,
        None => app.db.hub.index(&key),
    };
    let s = app
        .db
        .read(move |c| lifecycle::snapshot_view(c, &snapshot))
        .await?;
    Ok(with_index(StatusCode::OK, index, s))
}

pub(super) async fn put_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
    Body(req): Body<api::SnapshotRequest>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    let (s, started) = app
        .db
        .write(move |ctx| lifecycle::create_snapshot(ctx, &snapshot, req.clone(), &actor, &limits))
        .await?;
    let status = if started {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(s)).into_response())
}

pub(super) async fn delete_snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    Path(snapshot): Path<String>,
) -> ApiResult<Response> {
    let (actor, limits) = app.operator(&headers)?;
    name("snapshot", &snapshot)?;
    let s = app
        .db
        .write(move |ctx| lifecycle::delete_snapshot(ctx, &snapshot, &actor, &limits))
        .await?;
    Ok(match s {
        Some(s) => (StatusCode::ACCEPTED, Json(s)).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}
