//! The agent's end of the node channel (`csivol_api::channel`, run by
//! `csivol_client::channel::Shared`): one upgraded connection to the server that carries
//! the heartbeats and reports, and brings the desired-state loop the node's desired
//! changes (or word that it changed), so that an idle node holds no long-poll and a claim
//! costs no request. Opened once the node registered; when it closes
//! (server restart, failover, a heartbeat left unanswered) the session goes back to plain
//! requests until it is open again. A server that does not offer it (404 or 426: older, or
//! `--no-node-channel`) is asked again now and then.

use std::time::Duration;

use csivol_client::channel::Shared;
use tokio::sync::watch;

use super::client::ApiClient;
use super::config::Backoff;

/// How often a server that does not offer the channel is asked again (it may have been
/// upgraded, or the agent failed over to another server).
const UNSUPPORTED_RECHECK: Duration = Duration::from_secs(300);
/// Pauses between attempts to open it after a failure.
const BACKOFF: Backoff = Backoff {
    base: Duration::from_millis(500),
    max: Duration::from_secs(30),
};

/// Keeps the channel open while the node is registered; returns when the agent stops.
pub async fn run(client: &ApiClient, shared: &Shared, mut registered: watch::Receiver<u64>) {
    let mut failures = 0u32;
    let mut offered = true;
    loop {
        if registered.wait_for(|n| *n > 0).await.is_err() {
            return;
        }
        let opened = match client.channel().await {
            Ok(channel) => channel.start().await.map_err(|e| e.to_string()),
            Err(e) if e.is_not_found() || e.status() == Some(426) => {
                if offered {
                    tracing::info!(
                        "the server does not offer the node channel ({e}); heartbeats and \
                         desired-state long-polls go as plain requests"
                    );
                    offered = false;
                }
                tokio::time::sleep(UNSUPPORTED_RECHECK).await;
                continue;
            }
            Err(e) => Err(format!("{e:#}")),
        };
        match opened {
            Ok((reader, writer)) => {
                failures = 0;
                offered = true;
                tracing::debug!("node channel open");
                let why = shared.serve(reader, writer).await;
                tracing::info!("node channel closed ({why}); opening it again");
            }
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(failures, "failed to open the node channel: {e}");
                }
            }
        }
        tokio::time::sleep(BACKOFF.delay(failures.max(1))).await;
    }
}
