//! Plugin endpoints (`unix:///path/to.sock`, `tcp://host:port`) and the gRPC connection to
//! them.

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::{Authority, Scheme, Uri};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tonic::Status;
use tonic::body::Body;

/// Where a CSI plugin listens.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CsiEndpoint {
    /// A unix domain socket, `unix:///absolute/path.sock`.
    Unix(PathBuf),
    /// A TCP address, `tcp://host:port`.
    Tcp(String),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EndpointError {
    #[error(
        "invalid plugin endpoint `{0}`: expected `unix:///absolute/path.sock` or `tcp://host:port`"
    )]
    Syntax(String),
    #[error("invalid plugin endpoint `{0}`: a unix socket path must be absolute")]
    RelativePath(String),
}

impl FromStr for CsiEndpoint {
    type Err = EndpointError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(EndpointError::RelativePath(s.to_owned()));
            }
            return Ok(Self::Unix(PathBuf::from(path)));
        }
        if let Some(addr) = s.strip_prefix("tcp://") {
            let valid = addr
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(EndpointError::Syntax(s.to_owned()));
            }
            return Ok(Self::Tcp(addr.to_owned()));
        }
        Err(EndpointError::Syntax(s.to_owned()))
    }
}

impl fmt::Display for CsiEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unix(path) => write!(f, "unix://{}", path.display()),
            Self::Tcp(addr) => write!(f, "tcp://{addr}"),
        }
    }
}

impl CsiEndpoint {
    /// A connection that connects on first use and again after the plugin restarts.
    ///
    /// `deadline` is the default deadline of every call on the connection; a call may set a
    /// shorter one with [`with_deadline`].
    pub fn connection(&self, deadline: Duration) -> PluginConnection {
        let authority = match self {
            // Never dialled: the socket is the address.
            Self::Unix(_) => Authority::from_static("csi-plugin.invalid"),
            Self::Tcp(addr) => addr.parse().expect("validated by FromStr"),
        };
        PluginConnection(
            Arc::new(Inner {
                endpoint: self.clone(),
                authority,
                deadline,
                conn: tokio::sync::Mutex::new(None),
            }),
            None,
        )
    }
}

/// Told of every call made on a [`PluginConnection::metered`] connection: its method
/// (`NodePublishVolume`), the gRPC code it answered with, and how long it took.
pub trait CallMeter: fmt::Debug + Send + Sync {
    fn record(&self, method: &str, code: tonic::Code, took: Duration);
}

/// Wraps a message in a request carrying `deadline` as its gRPC timeout.
pub fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline);
    request
}

/// The calls to one plugin: one HTTP/2 connection on its endpoint, made at the first call
/// and made again at the first call after it broke (the plugin restarted); calls share it,
/// each on a stream of its own. Every call has a deadline: the connection's, or the shorter
/// one its request carries (`grpc-timeout`, from [`with_deadline`]); past it the call is
/// given up as `DEADLINE_EXCEEDED`, and a connection that cannot be made is `UNAVAILABLE`.
///
/// A generated client takes it in place of tonic's `Channel`, which does the same through
/// a stack of services: a task that every request is handed to and answered from, then
/// reconnect, origin, user-agent and timeout layers, each boxed. On a node agent's claim
/// path, where every step is a call to the plugin on its local socket, that stack cost
/// about a sixth of the client's CPU per call.
#[derive(Clone, Debug)]
pub struct PluginConnection(Arc<Inner>, Option<Arc<dyn CallMeter>>);

impl PluginConnection {
    /// The connection, its calls told to `meter`. A call's time runs until the plugin's
    /// answer headers, which a unary CSI call's server sends with its message once its
    /// handler returned; its code is the headers' `grpc-status` (a plugin that failed the
    /// call answers with trailers only, PROTOCOL-HTTP2.md "Trailers-Only"), else `OK`.
    pub fn metered(self, meter: Arc<dyn CallMeter>) -> Self {
        Self(self.0, Some(meter))
    }
}

#[derive(Debug)]
struct Inner {
    endpoint: CsiEndpoint,
    /// What requests name as their `:authority`.
    authority: Authority,
    deadline: Duration,
    /// The live connection's sender. Held while connecting: one connection at a time.
    conn: tokio::sync::Mutex<Option<SendRequest<Body>>>,
}

impl Inner {
    async fn call(
        &self,
        mut req: http::Request<Body>,
    ) -> Result<http::Response<hyper::body::Incoming>, Status> {
        let mut parts = std::mem::take(req.uri_mut()).into_parts();
        parts.scheme = Some(Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        *req.uri_mut() = Uri::from_parts(parts)
            .map_err(|e| Status::internal(format!("invalid request URI: {e}")))?;
        let mut send = self.sender().await?;
        let unavailable = |e: hyper::Error| {
            Status::unavailable(format!(
                "the plugin at {} did not answer: {e}",
                self.endpoint
            ))
        };
        // Waits while the plugin's concurrent-stream limit is reached.
        std::future::poll_fn(|cx| send.poll_ready(cx))
            .await
            .map_err(unavailable)?;
        send.send_request(req).await.map_err(unavailable)
    }

    /// A sender on the live connection, connecting first when there is none or it broke.
    async fn sender(&self) -> Result<SendRequest<Body>, Status> {
        let mut conn = self.conn.lock().await;
        if let Some(send) = conn.as_ref().filter(|s| !s.is_closed()) {
            return Ok(send.clone());
        }
        *conn = None;
        let send = self.connect().await.map_err(|e| {
            Status::unavailable(format!(
                "failed to connect to the plugin at {}: {e}",
                self.endpoint
            ))
        })?;
        *conn = Some(send.clone());
        Ok(send)
    }

    async fn connect(&self) -> Result<SendRequest<Body>, Box<dyn std::error::Error + Send + Sync>> {
        match &self.endpoint {
            CsiEndpoint::Unix(path) => {
                let stream = tokio::net::UnixStream::connect(path).await?;
                handshake(TokioIo::new(stream)).await
            }
            CsiEndpoint::Tcp(addr) => {
                let stream = tokio::net::TcpStream::connect(addr).await?;
                stream.set_nodelay(true)?;
                handshake(TokioIo::new(stream)).await
            }
        }
    }
}

/// An HTTP/2 connection on `io`, driven by a task of its own until it ends.
async fn handshake<T>(io: T) -> Result<SendRequest<Body>, Box<dyn std::error::Error + Send + Sync>>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(io)
        .await?;
    // It ends when the plugin closes the socket; the next call then connects again.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

impl tower::Service<http::Request<Body>> for PluginConnection {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let inner = Arc::clone(&self.0);
        let meter = self.1.clone();
        Box::pin(async move {
            let method = meter.as_ref().map(|_| {
                let path = req.uri().path();
                path.rsplit('/').next().unwrap_or(path).to_owned()
            });
            let started = std::time::Instant::now();
            let deadline =
                grpc_timeout(req.headers()).map_or(inner.deadline, |d| d.min(inner.deadline));
            let answer = match tokio::time::timeout(deadline, inner.call(req)).await {
                Ok(answer) => answer,
                Err(_) => Err(Status::deadline_exceeded(format!(
                    "the plugin at {} did not answer within {deadline:?}",
                    inner.endpoint
                ))),
            };
            if let (Some(meter), Some(method)) = (meter, method) {
                let code = match &answer {
                    Ok(r) => r
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<i32>().ok())
                        .map_or(tonic::Code::Ok, tonic::Code::from_i32),
                    Err(s) => s.code(),
                };
                meter.record(&method, code, started.elapsed());
            }
            answer
        })
    }
}

/// The deadline a request carries in its `grpc-timeout` header: at most eight digits and a
/// unit, `H`, `M`, `S`, `m` (ms), `u` (µs) or `n` (ns), as the gRPC over HTTP/2 protocol
/// writes it (PROTOCOL-HTTP2.md: `Timeout → "grpc-timeout" TimeoutValue TimeoutUnit`).
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    let v = headers.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_endpoints() {
        assert_eq!(
            "unix:///run/csi.sock".parse(),
            Ok(CsiEndpoint::Unix("/run/csi.sock".into()))
        );
        assert_eq!(
            "tcp://127.0.0.1:9000".parse(),
            Ok(CsiEndpoint::Tcp("127.0.0.1:9000".into()))
        );
        assert_eq!(
            "unix://run/csi.sock".parse::<CsiEndpoint>(),
            Err(EndpointError::RelativePath("unix://run/csi.sock".into()))
        );
        for bad in [
            "/run/csi.sock",
            "tcp://:9000",
            "tcp://host",
            "tcp://h:99999",
            "http://x:1",
        ] {
            assert_eq!(
                bad.parse::<CsiEndpoint>(),
                Err(EndpointError::Syntax(bad.into())),
                "{bad}"
            );
        }
        let e: CsiEndpoint = "unix:///a/b.sock".parse().unwrap();
        assert_eq!(e.to_string(), "unix:///a/b.sock");
    }

    #[test]
    fn reads_the_deadline_a_request_carries() {
        let with = |v: &str| {
            let mut h = http::HeaderMap::new();
            h.insert("grpc-timeout", v.parse().unwrap());
            grpc_timeout(&h)
        };
        assert_eq!(with("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(with("3M"), Some(Duration::from_secs(180)));
        assert_eq!(with("10S"), Some(Duration::from_secs(10)));
        assert_eq!(with("250m"), Some(Duration::from_millis(250)));
        assert_eq!(with("7u"), Some(Duration::from_micros(7)));
        assert_eq!(with("99999999n"), Some(Duration::from_nanos(99_999_999)));
        for bad in ["", "S", "123456789S", "10s", "-1S", "1.5S"] {
            assert_eq!(with(bad), None, "{bad}");
        }
        assert_eq!(grpc_timeout(&http::HeaderMap::new()), None);
    }
}
