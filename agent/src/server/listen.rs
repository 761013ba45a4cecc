//! The server's accept loop: every connection is bounded. A request's headers must arrive
//! within the header timeout, which hyper also applies to a keep-alive connection waiting
//! for its next request (so an idle connection closes after it too); at most
//! `max_connections` are open at once (beyond that, new connections wait in the kernel's
//! backlog, and a log line says so); long-polls have their own budget (see `App`), so that
//! agents' long-polls cannot take every connection from operators.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How connections are bounded.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// A request's headers must arrive within this; an idle keep-alive connection closes
    /// after it too.
    pub header_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
}

/// How long connections still open at shutdown get to finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` within `bounds` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let permits = Arc::new(Semaphore::new(bounds.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    let mut at_limit = false;
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !at_limit {
                    tracing::warn!(
                        max_connections = bounds.max_connections,
                        "connection limit reached: new connections wait until one closes \
                         (idle ones close after the header timeout); raise --max-connections \
                         and the open-file limit if this is the normal load"
                    );
                    at_limit = true;
                }
                tokio::select! {
                    p = Arc::clone(&permits).acquire_owned() => p?,
                    () = &mut shutdown => break,
                }
            }
        };
        if at_limit && permits.available_permits() >= bounds.max_connections / 10 {
            tracing::info!("below the connection limit again");
            at_limit = false;
        }
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and the like: say so, and give closing connections a moment
                    // instead of spinning on accept.
                    tracing::warn!(error = %e, "failed to accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "connections still open {} after shutdown began were dropped",
            humantime::format_duration(SHUTDOWN_GRACE)
        );
    }
    Ok(())
}

/// Raises the open-file soft limit to the hard limit; returns the limit in force.
pub fn raise_open_file_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(cur), Some(max)) = (lim.current, lim.maximum)
        && cur < max
    {
        lim.current = Some(max);
        match setrlimit(Resource::Nofile, lim.clone()) {
            Ok(()) => tracing::debug!(from = cur, to = max, "raised the open-file limit"),
            Err(e) => tracing::warn!(error = %e, "failed to raise the open-file limit"),
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
