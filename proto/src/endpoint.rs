//! Plugin endpoints (`unix:///path/to.sock`, `tcp://host:port`) and the gRPC channel to them.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

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
    /// A channel that connects on first use and reconnects after the plugin restarts.
    ///
    /// `deadline` is the default deadline of every call on the channel; a call may set a
    /// shorter one with [`with_deadline`].
    pub fn channel(&self, deadline: Duration) -> Channel {
        match self {
            Self::Unix(path) => {
                let path = path.clone();
                // The URI is never dialled: the connector below opens the socket instead.
                Endpoint::from_static("http://csi-plugin.invalid")
                    .timeout(deadline)
                    .connect_timeout(deadline)
                    .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(stream))
                        }
                    }))
            }
            Self::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))
                .expect("validated by FromStr")
                .timeout(deadline)
                .connect_timeout(deadline)
                .tcp_nodelay(true)
                .connect_lazy(),
        }
    }
}

/// Wraps a message in a request carrying `deadline` as its gRPC timeout.
pub fn with_deadline<T>(message: T, deadline: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(deadline);
    request
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
}
