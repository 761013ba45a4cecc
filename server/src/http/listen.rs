//! The server's accept loop: every connection is bounded. A request's headers must arrive
//! within the header timeout, which hyper also applies to a keep-alive connection waiting
//! for its next request (so an idle connection closes after it too); at most
//! `max_connections` are open at once: past that, each new connection is taken in and the
//! connection that has been silent longest (connected, not a byte sent) is closed to make
//! room, so a flood of idle connections cannot keep a new call out for as long as the
//! header timeout; only when every connection has spoken do new ones wait in the kernel's
//! backlog. A log line says when the limit is reached. Long-polls have their own budget
//! (see `App`), so that agents' long-polls cannot take every connection from operators.
//!
//! Connections may be upgraded (the node channel): an upgraded connection keeps its place
//! under the connection limit for as long as its socket lives, and at shutdown it is told
//! to close ([`Closing`]) like the connections still speaking HTTP.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};

/// The client certificate a TLS connection presented (mutual TLS), put in each request's
/// extensions; the HTTP layer checks it against the node token's node.
#[derive(Clone, Debug)]
pub struct PeerCert(pub rustls::pki_types::CertificateDer<'static>);

/// Set when the server begins to stop, in each request's extensions: what outlives its
/// request (an upgraded node channel) closes then.
#[derive(Clone, Debug)]
pub struct Closing(pub watch::Receiver<bool>);

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

/// The connections that have not sent a byte yet, by arrival: at the connection limit, the
/// first one is closed to make room for a new one. A client sends its request as soon as
/// it is connected, so the one silent longest is the least likely to be anyone's call.
#[derive(Default)]
struct Silent {
    next: u64,
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

impl Silent {
    /// A new connection; it is closed when the receiver fires.
    fn enter(this: &Mutex<Self>) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut s = this.lock().expect("silent list poisoned");
        let id = s.next;
        s.next += 1;
        s.waiting.insert(id, tx);
        (id, rx)
    }

    /// The connection spoke, or closed.
    fn leave(this: &Mutex<Self>, id: u64) {
        this.lock()
            .expect("silent list poisoned")
            .waiting
            .remove(&id);
    }

    /// Closes the connection silent longest; false when every connection has spoken.
    fn close_oldest(this: &Mutex<Self>) -> bool {
        let oldest = this
            .lock()
            .expect("silent list poisoned")
            .waiting
            .pop_first();
        oldest.is_some_and(|(_, tx)| tx.send(()).is_ok())
    }
}

/// A connection's stream, on the silent list until its first byte arrives. It holds the
/// connection's place under the limit, so that an upgraded connection keeps it.
struct Heard<S> {
    inner: S,
    silent: Option<(Arc<Mutex<Silent>>, u64)>,
    _permit: OwnedSemaphorePermit,
}

impl<S> Heard<S> {
    fn spoke(&mut self) {
        if let Some((list, id)) = self.silent.take() {
            Silent::leave(&list, id);
        }
    }
}

impl<S> Drop for Heard<S> {
    fn drop(&mut self) {
        self.spoke();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.spoke();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
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
    let silent = Arc::new(Mutex::new(Silent::default()));
    let (closing, _) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    let mut at_limit = false;
    // Silent connections closed to make room since the limit was reached.
    let mut made_room = 0u64;
    loop {
        // A connection is taken in before it has a permit: at the limit that is one file
        // more than `max_connections` (which leaves room below the open-file limit), and it
        // lets the server close a silent connection for it rather than leave it waiting.
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
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if !at_limit {
                    tracing::warn!(
                        max_connections = bounds.max_connections,
                        "connection limit reached: each new connection closes the one silent \
                         longest, and waits for one to close when all are busy; raise \
                         --max-connections and the open-file limit if this is the normal load"
                    );
                    at_limit = true;
                }
                if Silent::close_oldest(&silent) {
                    made_room += 1;
                }
                tokio::select! {
                    p = Arc::clone(&permits).acquire_owned() => p?,
                    () = &mut shutdown => break,
                }
            }
        };
        if at_limit && permits.available_permits() >= bounds.max_connections / 10 {
            tracing::info!(
                closed_silent = made_room,
                "below the connection limit again"
            );
            at_limit = false;
            made_room = 0;
        }
        let _ = stream.set_nodelay(true);
        let (id, closed) = Silent::enter(&silent);
        let stream = Heard {
            inner: stream,
            silent: Some((Arc::clone(&silent), id)),
            _permit: permit,
        };
        let router = router.clone();
        let builder = builder.clone();
        let tls = bounds.tls.clone();
        let closing = closing.subscribe();
        let handshake_timeout = bounds.header_timeout;
        tokio::spawn(async move {
            let serve = async move {
                let served = match tls {
                    None => {
                        serve_connection(&builder, TokioIo::new(stream), router, None, closing)
                            .await
                    }
                    Some(acceptor) => {
                        // The handshake is bounded like the headers that follow it.
                        let stream =
                            match tokio::time::timeout(handshake_timeout, acceptor.accept(stream))
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
                        serve_connection(&builder, TokioIo::new(stream), router, peer, closing)
                            .await
                    }
                };
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection closed with an error");
                }
            };
            tokio::select! {
                Ok(()) = closed => tracing::debug!("closed a silent connection to make room"),
                () = serve => {}
            }
        });
    }
    drop(listener);
    // Connections finish the request they serve, upgraded ones close; each gives its
    // permit back when its socket closes, so all permits back means all closed.
    closing.send_replace(true);
    let all = u32::try_from(bounds.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(SHUTDOWN_GRACE, permits.acquire_many(all))
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

/// Serves one connection (upgrades allowed) until it closes, or, once `closing` is set,
/// until it finished the request in flight.
async fn serve_connection<I>(
    builder: &hyper::server::conn::http1::Builder,
    io: I,
    router: Router,
    peer: Option<PeerCert>,
    mut closing: watch::Receiver<bool>,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let signal = Closing(closing.clone());
    let service = tower::ServiceExt::map_request(
        router,
        move |mut req: hyper::Request<hyper::body::Incoming>| {
            if let Some(p) = &peer {
                req.extensions_mut().insert(p.clone());
            }
            req.extensions_mut().insert(signal.clone());
            req
        },
    );
    let conn = builder
        .serve_connection(io, TowerToHyperService::new(service))
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        served = conn.as_mut() => return served,
        _ = closing.wait_for(|c| *c) => {}
    }
    conn.as_mut().graceful_shutdown();
    conn.await
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
