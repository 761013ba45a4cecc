//! Controller-side reconciliation and the storage's inventory, the agent's half: every
//! `controller_list_interval`, each hosted controller whose plugin lists volumes is listed
//! (all pages) and the listing is reported. The server shows it beside its records
//! (`plugin volumes`) and, where the listing has the published nodes, compares it with its
//! attachments; the agent decides nothing and fixes nothing. A plugin that lists snapshots
//! is listed too, for `plugin snapshots`.

use std::sync::Arc;

use csivol_api::Report;

use super::Shared;
use crate::store::now_ms;

pub(super) async fn run(shared: Arc<Shared>) {
    let listing: Vec<_> = shared
        .plugins
        .controller
        .values()
        .filter(|p| p.capabilities.list_volumes || p.capabilities.list_snapshots)
        .collect();
    if listing.is_empty() {
        return;
    }
    let mut tick = tokio::time::interval(shared.cfg.controller_list_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if shared.reports.is_closed() {
            return;
        }
        for plugin in &listing {
            if plugin.capabilities.list_volumes {
                let started_ms = now_ms();
                match plugin.list_volumes().await {
                    Ok(volumes) => shared.report(Report::ControllerVolumes {
                        plugin: plugin.id.clone(),
                        started_ms,
                        volumes,
                    }),
                    Err(e) => tracing::warn!(plugin = plugin.id, "failed to list volumes: {e}"),
                }
            }
            if plugin.capabilities.list_snapshots {
                match plugin.list_snapshots().await {
                    Ok(snapshots) => shared.report(Report::ControllerSnapshots {
                        plugin: plugin.id.clone(),
                        snapshots,
                    }),
                    Err(e) => tracing::warn!(plugin = plugin.id, "failed to list snapshots: {e}"),
                }
            }
        }
    }
}
