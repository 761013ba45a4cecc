//! Storage capacity, the agent's half: each hosted controller whose plugin reports
//! GET_CAPACITY is asked GetCapacity for every query its desired state gives (the
//! plugin's topology segments and parameter sets in use), every
//! `controller_list_interval`, when the queries change, and after each CreateVolume and
//! DeleteVolume this agent ran; the answers are reported. The server keeps them in memory
//! and judges; the agent decides nothing.

use std::sync::Arc;

use csivol_api::{CapacityQueries, Report};

use super::Shared;

pub(super) async fn run(shared: Arc<Shared>) {
    if !shared
        .plugins
        .controller
        .values()
        .any(|p| p.reports_capacity())
    {
        return;
    }
    let mut desired = shared.desired.clone();
    let mut tick = tokio::time::interval(shared.cfg.controller_list_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut asked: Vec<CapacityQueries> = Vec::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = shared.capacity_wake.notified() => {}
            changed = desired.changed() => {
                if changed.is_err() {
                    return;
                }
                // Only new queries are worth a round before the next tick.
                if desired.borrow().capacity == asked {
                    continue;
                }
            }
        }
        if shared.reports.is_closed() {
            return;
        }
        asked = desired.borrow().capacity.clone();
        for q in &asked {
            let Some(plugin) = shared
                .plugins
                .controller
                .get(&q.plugin)
                .filter(|p| p.reports_capacity())
            else {
                continue;
            };
            let mut samples = Vec::new();
            for query in &q.queries {
                match plugin.get_capacity(query).await {
                    Ok(Some(s)) => samples.push(s),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(plugin = plugin.id, "failed to read capacity: {e}"),
                }
            }
            if !samples.is_empty() {
                shared.report(Report::Capacity {
                    plugin: plugin.id.clone(),
                    samples,
                });
            }
        }
    }
}
