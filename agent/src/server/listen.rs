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

/// The client certificate a TLS connection presented (mutual TLS), put in each request's
/// extensions; the HTTP layer checks it against the node token's node.
#[derive(Clone, Debug)]
pub struct PeerCert(pub rustls::pki_types::CertificateDer<'static>);

/// How connections are bounded.
#[derive(Clone)]
pub struct Bounds {
    /// A request's headers must arrive within this; an idle keep-alive connection closes
    /// after it too.
    pub header_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// TLS, unless the server was allowed plain HTTP.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bounds")
            .field("header_timeout", &self.header_timeout)
            .field("max_connections", &self.max_connections)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// The server's TLS configuration: its certificate and key, and the CA that client
/// certificates must chain to (optional for clients: the CLI presents none).
pub fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
    client_ca: Option<&std::path::Path>,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use csivol_client::tls;
    tls::install_provider();
    let certs = tls::load_certs(cert).map_err(anyhow::Error::msg)?;
    let key = tls::load_key(key).map_err(anyhow::Error::msg)?;
    let builder = rustls::ServerConfig::builder();
    let builder = match client_ca {
        Some(ca) => {
            let roots = Arc::new(tls::roots(Some(ca)).map_err(anyhow::Error::msg)?);
            let verifier = rustls::server::WebPkiClientVerifier::builder(roots)
                .allow_unauthenticated()
                .build()
                .map_err(|e| anyhow::anyhow!("invalid client CA {}: {e}", ca.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| anyhow::anyhow!("invalid server certificate {}: {e}", cert.display()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
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
        let router = router.clone();
        let builder = builder.clone();
        let tls = bounds.tls.clone();
        let watcher = graceful.watcher();
        let handshake_timeout = bounds.header_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            let served = match tls {
                None => {
                    let conn = builder
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
                    watcher.watch(conn).await
                }
                Some(acceptor) => {
                    // The handshake is bounded like the headers that follow it.
                    let stream = match tokio::time::timeout(
                        handshake_timeout,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    };
                    let peer = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .map(|c| PeerCert(c.clone().into_owned()));
                    let service = tower::ServiceExt::map_request(
                        router,
                        move |mut req: hyper::Request<hyper::body::Incoming>| {
                            if let Some(p) = &peer {
                                req.extensions_mut().insert(p.clone());
                            }
                            req
                        },
                    );
                    let conn = builder
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
                    watcher.watch(conn).await
                }
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection closed with an error");
            }
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
        match setrlimit(Resource::Nofile, lim) {
            Ok(()) => tracing::debug!(from = cur, to = max, "raised the open-file limit"),
            Err(e) => tracing::warn!(error = %e, "failed to raise the open-file limit"),
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
