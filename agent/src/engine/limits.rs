//! Live attach limits, the agent's half: each node plugin's `max_volumes_per_node` is read
//! again with NodeGetInfo every `node_limits_refresh`, and at once when a NodeStageVolume
//! answered RESOURCE_EXHAUSTED or the server asks (a ControllerPublishVolume to this node
//! answered it). A changed limit is reported, and so is every read that was asked for; the
//! server counts claims against the limit it last heard.
//!
//! The spec allows the reads (NodeGetInfo: "The CO MAY call this RPC more than once for a
//! given node. The SP SHALL NOT expect the CO to call this RPC more than once."), so a
//! plugin whose limit never changes answers the same each time and nothing is reported.
//! A NodeStageVolume answering RESOURCE_EXHAUSTED is not in the spec's error table for that
//! call; a plugin that holds its limit at staging may still answer it, and reading the
//! limit again costs one NodeGetInfo.

use std::sync::Arc;

use csivol_api::Report;

use super::Shared;

/// Why a NodeGetInfo read after a NodeStageVolume answered RESOURCE_EXHAUSTED.
pub(super) const AFTER_STAGE: &str = "NodeStageVolume answered RESOURCE_EXHAUSTED";
/// Why a read the server asked for.
const SERVER_ASKED: &str = "ControllerPublishVolume to this node answered RESOURCE_EXHAUSTED";

pub(super) async fn run(shared: Arc<Shared>) {
    if shared.plugins.node.is_empty() {
        return;
    }
    let every = shared.cfg.node_limits_refresh;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once; the limits were read when the plugins were connected.
    tick.tick().await;
    let mut desired = shared.desired.clone();
    let mut asked_at = 0;
    loop {
        let (reason, asked) = tokio::select! {
            _ = tick.tick() => (format!("read every {}", humantime::format_duration(every)), false),
            () = shared.limits_wake.notified() => (AFTER_STAGE.to_owned(), true),
            changed = desired.changed() => {
                if changed.is_err() {
                    return;
                }
                let at = desired.borrow_and_update().refresh_limits;
                if at == 0 || at == asked_at {
                    continue;
                }
                asked_at = at;
                (SERVER_ASKED.to_owned(), true)
            }
        };
        if shared.reports.is_closed() {
            return;
        }
        for plugin in shared.plugins.node.values() {
            let before = plugin.limit();
            match plugin.refresh_limit().await {
                Ok(limit) => {
                    if limit != before {
                        tracing::info!(
                            plugin = plugin.id,
                            "the attach limit changed from {before} to {limit} ({reason})"
                        );
                    }
                    if limit != before || asked {
                        shared.report(Report::NodeLimits {
                            plugin: plugin.id.clone(),
                            max_volumes_per_node: limit,
                            reason: reason.clone(),
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(plugin = plugin.id, "failed to read the attach limit: {e}")
                }
            }
        }
    }
}
