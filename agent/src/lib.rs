//! csivol's server (the control plane over SQLite), node agent (drives the node's CSI
//! plugins toward the server's desired state) and dev mode.

pub mod dev;
pub mod node;
pub mod private;
pub mod server;
pub mod tls;

/// Completes on SIGTERM or SIGINT: how the server, the node agent and dev mode are asked to
/// stop. Without signal handlers (which should not happen) it never completes, and the
/// process still stops when killed.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
