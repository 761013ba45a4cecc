//! What a node agent's two steady calls do, a heartbeat and a batch of reports, whether
//! they come as requests (`nodes`) or as lines of the node channel (`channel`): one body
//! each, so that both ways in answer alike.

use csivol_api::{self as api, HeartbeatResponse, ReportBatch};

use crate::app::App;
use crate::error::{ApiError, ApiResult};
use crate::lifecycle;

/// The answer to one heartbeat, for `POST .../heartbeat` and the channel alike: liveness
/// (with the etcd store, forwarded to the other servers from there), `lost` when the node
/// must register again, not found when the server does not know it.
pub(super) async fn heartbeat(
    app: &App,
    node: &str,
    channel: bool,
) -> ApiResult<HeartbeatResponse> {
    app.metrics.heartbeat(channel);
    let (status, ticket) = app
        .live
        .heartbeat_ticket(node, app.clock.now_ms())
        .ok_or_else(|| {
            ApiError::not_found(format!("node `{node}` is not registered"))
                .with_hint("the agent registers again")
        })?;
    if let Some(t) = ticket
        && !app.live.passed_in_time(t).await
    {
        return Err(ApiError::unavailable(format!(
            "this server cannot pass heartbeats on to the other servers: etcd did not \
             take its last forward within {}",
            humantime::format_duration(app.live.forward_within())
        ))
        .with_hint("the agent sends its heartbeats to its next server"));
    }
    Ok(HeartbeatResponse {
        status,
        heartbeat_ttl_ms: app.live.ttl().as_millis() as u64,
    })
}

/// Takes a node's stats (a node channel's `stats` line) into the server's memory; a volume
/// that crossed the filling threshold with them is written as an event, off the channel's
/// way: the line has no answer to wait for it, and a failed write is only logged (the
/// volume is told of again once it falls clear and crosses again).
pub(super) fn record_stats(app: &App, node: &str, stats: &api::NodeStats) {
    app.calls.record(node, stats);
    let crossings = app.usage.record(node, stats, app.clock.now_ms());
    if crossings.is_empty() {
        return;
    }
    let db = app.db.clone();
    tokio::spawn(async move {
        for c in crossings {
            let cc = c.clone();
            let written = db
                .write(move |ctx| {
                    lifecycle::volume_filling(ctx, &cc.volume, &cc.alloc, &cc.node, &cc.what)
                })
                .await;
            if let Err(e) = written {
                tracing::warn!(
                    volume = c.volume,
                    alloc = c.alloc,
                    "failed to record that the volume is filling up: {e}"
                );
            }
        }
    });
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
    api::FreeText::check_text(&batch).map_err(ApiError::text)?;
    let count = batch.reports.len();
    app.metrics.node_reports(count as u64, channel);
    let node = node.to_owned();
    // Capacity samples are kept in memory, not written (`capacity`).
    let (capacity, reports): (Vec<_>, Vec<_>) = batch
        .reports
        .into_iter()
        .partition(|r| matches!(r, api::Report::Capacity { .. }));
    for r in capacity {
        if let api::Report::Capacity { plugin, samples } = r {
            keep_capacity(app, &node, plugin, samples).await?;
        }
    }
    // Snapshot listings are kept in memory for `plugin snapshots`, not written.
    let (snapshots, reports): (Vec<_>, Vec<_>) = reports
        .into_iter()
        .partition(|r| matches!(r, api::Report::ControllerSnapshots { .. }));
    for r in snapshots {
        if let api::Report::ControllerSnapshots { plugin, snapshots } = r
            && hosts_controller(app, &node, &plugin).await?
        {
            app.inventory
                .record_snapshots(&plugin, snapshots, app.clock.now_ms());
        }
    }
    // Listings are kept for `plugin volumes` too, and go on to the comparison.
    for r in &reports {
        if let api::Report::ControllerVolumes {
            plugin, volumes, ..
        } = r
            && hosts_controller(app, &node, plugin).await?
        {
            app.inventory
                .record(plugin, volumes.clone(), app.clock.now_ms());
        }
    }
    if !reports.is_empty() {
        // The generation of the state the reports are applied to: an operation's id means
        // something only within its generation (a late CreateVolume answer, `reports`).
        let generation = app.db.hub.generation().text();
        app.db
            .write(move |ctx| {
                lifecycle::apply_reports(ctx, &node, reports.clone(), &limits, Some(&generation))
            })
            .await?;
    }
    Ok(count)
}

/// Whether `node` hosts `plugin`'s controller: only its host speaks for the storage.
async fn hosts_controller(app: &App, node: &str, plugin: &str) -> ApiResult<bool> {
    let (n, p) = (node.to_owned(), plugin.to_owned());
    app.db
        .read(move |c| {
            use crate::store::Snapshot;
            Ok(c.node_plugin(&n, &p)?.is_some_and(|r| r.controller))
        })
        .await
}

/// A controller host's GetCapacity answers, kept if `node` hosts `plugin`'s controller: a
/// node's reports count for itself only, and capacity is the controller's to tell.
async fn keep_capacity(
    app: &App,
    node: &str,
    plugin: String,
    samples: Vec<api::CapacitySample>,
) -> ApiResult<()> {
    if hosts_controller(app, node, &plugin).await? {
        app.capacity.record(&plugin, samples, app.clock.now_ms());
    } else {
        tracing::warn!(
            node,
            plugin,
            "capacity report from a node that does not host the plugin's controller, ignored"
        );
    }
    Ok(())
}
