//! The server's accept loop: every connection is bounded. A request's headers must arrive
//! within the header timeout, which hyper also applies to a keep-alive connection waiting
//! for its next request (so an idle connection closes after it too); its body within the
//! body timeout after them (`http::admit`, which also refuses a request without a valid
//! token before reading its body). At most `max_connections` are open at once: past that,
//! each new connection is taken in and one that carries no authenticated caller is closed
//! to make room: the one silent longest (connected, not a byte sent), else the oldest that
//! has spoken but never shown a valid token or client certificate. So neither a flood of
//! idle connections nor one of anonymous talkers keeps an operator's or an agent's call
//! out; only when every connection carries an authenticated caller do new ones wait in
//! the kernel's backlog. A log line says when the limit is reached. Long-polls have their
//! own budget (see `App`), so that agents' long-polls cannot take every connection from
//! operators.
//!
//! Connections may be upgraded (the node channel): an upgraded connection keeps its place
//! under the connection limit for as long as its socket lives, and at shutdown it is told
//! to close ([`Closing`]) like the connections still speaking HTTP.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// The connections that may be closed to make room at the connection limit, by arrival:
/// first those that have not sent a byte yet (`silent`), then those that have spoken but
/// never shown a valid token or client certificate (`anonymous`). A client sends its
/// request as soon as it is connected and an operator's or an agent's request carries its
/// token, so the one closed is the least likely to be anyone's call; a connection on which
/// a caller authenticated ([`Admitted::trust`]) is never closed for room.
#[derive(Default)]
struct Evictable {
    next: u64,
    silent: BTreeMap<u64, oneshot::Sender<()>>,
    anonymous: BTreeMap<u64, oneshot::Sender<()>>,
}

impl Evictable {
    /// A new connection, silent; it is closed when the receiver fires.
    fn enter(this: &Mutex<Self>) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut s = lock(this);
        let id = s.next;
        s.next += 1;
        s.silent.insert(id, tx);
        (id, rx)
    }

    /// The connection sent its first byte: anonymous until a caller authenticates on it.
    fn spoke(this: &Mutex<Self>, id: u64) {
        let mut s = lock(this);
        if let Some(tx) = s.silent.remove(&id) {
            s.anonymous.insert(id, tx);
        }
    }

    /// A caller authenticated on the connection: it is kept at the limit.
    fn trust(this: &Mutex<Self>, id: u64) {
        let mut s = lock(this);
        s.silent.remove(&id);
        s.anonymous.remove(&id);
    }

    /// The connection closed.
    fn leave(this: &Mutex<Self>, id: u64) {
        Self::trust(this, id);
    }

    /// Closes the connection silent longest, else the oldest anonymous one; `None` when
    /// every connection is trusted (or closing already).
    fn close_one(this: &Mutex<Self>) -> Option<Closed> {
        let mut s = lock(this);
        while let Some((_, tx)) = s.silent.pop_first() {
            if tx.send(()).is_ok() {
                return Some(Closed::Silent);
            }
        }
        while let Some((_, tx)) = s.anonymous.pop_first() {
            if tx.send(()).is_ok() {
                return Some(Closed::Anonymous);
            }
        }
        None
    }
}

fn lock(list: &Mutex<Evictable>) -> std::sync::MutexGuard<'_, Evictable> {
    list.lock().unwrap_or_else(|e| e.into_inner())
}

/// Which kind of connection was closed to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closed {
    Silent,
    Anonymous,
}

/// A connection's place on the list of those that may be closed for room, in each of its
/// requests' extensions: the HTTP layer calls [`Admitted::trust`] once a request on it
/// showed a valid token.
#[derive(Clone)]
pub struct Admitted {
    list: Arc<Mutex<Evictable>>,
    id: u64,
    /// Set once trusted: the requests that follow on the connection take no lock.
    trusted: Arc<AtomicBool>,
}

impl Admitted {
    /// The connection carries an authenticated caller: it is no longer closed to make
    /// room for another.
    pub fn trust(&self) {
        if !self.trusted.swap(true, Ordering::Relaxed) {
            Evictable::trust(&self.list, self.id);
        }
    }
}

impl std::fmt::Debug for Admitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admitted").field("id", &self.id).finish()
    }
}

/// A connection's stream, moved off the silent list when its first byte arrives. It holds
/// the connection's place under the limit, so that an upgraded connection keeps it.
struct Heard<S> {
    inner: S,
    admitted: Admitted,
    heard: bool,
    _permit: OwnedSemaphorePermit,
}

impl<S> Heard<S> {
    fn spoke(&mut self) {
        if !self.heard {
            self.heard = true;
            Evictable::spoke(&self.admitted.list, self.admitted.id);
        }
    }
}

impl<S> Drop for Heard<S> {
    fn drop(&mut self) {
        Evictable::leave(&self.admitted.list, self.admitted.id);
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
    let evictable = Arc::new(Mutex::new(Evictable::default()));
    let (closing, _) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    let mut at_limit = false;
    // Connections closed to make room since the limit was reached, silent and anonymous.
    let mut made_room = (0u64, 0u64);
    loop {
        // A connection is taken in before it has a permit: at the limit that is one file
        // more than `max_connections` (which leaves room below the open-file limit), and it
        // lets the server close a silent or anonymous connection for it rather than leave
        // it waiting.
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
                         longest, else the oldest that never showed a valid token, and waits \
                         for one to close when every connection carries an authenticated \
                         caller; raise --max-connections and the open-file limit if this is \
                         the normal load"
                    );
                    at_limit = true;
                }
                match Evictable::close_one(&evictable) {
                    Some(Closed::Silent) => made_room.0 += 1,
                    Some(Closed::Anonymous) => made_room.1 += 1,
                    None => {}
                }
                tokio::select! {
                    p = Arc::clone(&permits).acquire_owned() => p?,
                    () = &mut shutdown => break,
                }
            }
        };
        if at_limit && permits.available_permits() >= bounds.max_connections / 10 {
            tracing::info!(
                closed_silent = made_room.0,
                closed_anonymous = made_room.1,
                "below the connection limit again"
            );
            at_limit = false;
            made_room = (0, 0);
        }
        let _ = stream.set_nodelay(true);
        let (id, closed) = Evictable::enter(&evictable);
        let admitted = Admitted {
            list: Arc::clone(&evictable),
            id,
            trusted: Arc::default(),
        };
        let stream = Heard {
            inner: stream,
            admitted: admitted.clone(),
            heard: false,
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
                        let conn = Conn {
                            peer: None,
                            admitted,
                            closing,
                        };
                        serve_connection(&builder, TokioIo::new(stream), router, conn).await
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
                        // A certificate the client CA signed (the verifier checked it in
                        // the handshake) is a cluster member's: its connection is kept.
                        if peer.is_some() {
                            admitted.trust();
                        }
                        let conn = Conn {
                            peer,
                            admitted,
                            closing,
                        };
                        serve_connection(&builder, TokioIo::new(stream), router, conn).await
                    }
                };
                if let Err(e) = served {
                    tracing::debug!(error = %e, "connection closed with an error");
                }
            };
            tokio::select! {
                Ok(()) = closed => tracing::debug!("closed a connection to make room"),
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

/// What a connection's requests carry in their extensions, and its shutdown signal.
struct Conn {
    peer: Option<PeerCert>,
    admitted: Admitted,
    closing: watch::Receiver<bool>,
}

/// Serves one connection (upgrades allowed) until it closes, or, once `closing` is set,
/// until it finished the request in flight.
async fn serve_connection<I>(
    builder: &hyper::server::conn::http1::Builder,
    io: I,
    router: Router,
    conn: Conn,
) -> hyper::Result<()>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let Conn {
        peer,
        admitted,
        mut closing,
    } = conn;
    let signal = Closing(closing.clone());
    let service = tower::ServiceExt::map_request(
        router,
        move |mut req: hyper::Request<hyper::body::Incoming>| {
            if let Some(p) = &peer {
                req.extensions_mut().insert(p.clone());
            }
            req.extensions_mut().insert(signal.clone());
            req.extensions_mut().insert(admitted.clone());
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
