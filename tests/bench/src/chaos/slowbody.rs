//! The slow-body client: anonymous connections that crowd the servers' connection limit,
//! as an attacker with no token would. Each of its talkers, over and over until the run
//! ends: connects to its server (TLS in HA mode), stays silent for a random moment, sends
//! the headers of a claim's `POST` with `Content-Length: 100000` and no token, then
//! trickles the body a byte at a time. The campaign starts the servers with a
//! `--max-connections` that leaves room for the load, the agents and the faults, and runs
//! twice as many talkers per server as that limit, so that the limit is reached over and
//! over.
//!
//! What must happen: the server answers each such request from its headers alone (401:
//! no token), never reading its body first; or it closes the connection to make room for
//! another (the silent ones first, then the anonymous ones). An answer other than 401 (a
//! 408 says the body was waited for; a 2xx or 422 that it was read) is a violation, and
//! so is a connection held without an answer or a close for [`HELD_AT_MOST`]: no fault
//! stops a server that long. Meanwhile the checks the load makes still hold: operators'
//! claims and releases answered within a cycle's time, agents' reports bringing claims to
//! ready; a crowd that kept them out leaves cycles stuck, which fails the run.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;

/// The body length the headers announce: far more than the talker will ever send.
const ANNOUNCED: usize = 100_000;

/// How long a talker stays silent at most before its headers (a silent connection is the
/// first the server closes to make room; the header timeout closes it too).
const SILENT_AT_MOST: Duration = Duration::from_secs(4);

/// A byte of the body every so often.
const TRICKLE: Duration = Duration::from_millis(500);

/// How long a connection may go without an answer or a close, from its connecting: a
/// server answers an anonymous request from its headers, and no fault stops a server for
/// anywhere near this (a stop lasts at most 4 s, a restart a few).
const HELD_AT_MOST: Duration = Duration::from_secs(45);

/// The connection limit the campaign gives each server: room for `clients` load clients
/// and the careless one (a connection each, per server at most), `nodes` agents (their
/// channel, a report and a long-poll each) and the faults' and the drain's requests, and
/// no more, so that the talkers crowd it.
pub fn max_connections(clients: u32, nodes: u32) -> usize {
    clients as usize + 1 + 3 * nodes as usize + 32
}

/// A server the talkers crowd.
#[derive(Clone)]
pub struct Target {
    addr: SocketAddr,
    host: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

/// The servers at `urls` (`http://` or `https://` with an IP address); `ca` verifies the
/// `https://` ones.
pub fn targets(urls: &[String], ca: Option<&Path>) -> anyhow::Result<Vec<Target>> {
    urls.iter()
        .map(|url| {
            let (tls, rest) = match url.strip_prefix("https://") {
                Some(rest) => (true, rest),
                None => (
                    false,
                    url.strip_prefix("http://")
                        .with_context(|| format!("{url} is neither http:// nor https://"))?,
                ),
            };
            let host = rest.trim_end_matches('/').to_owned();
            let addr: SocketAddr = host
                .parse()
                .with_context(|| format!("{url}: not an IP address and port"))?;
            let tls = match tls {
                false => None,
                true => {
                    let config = csivol_client::tls::client_config(ca, None)
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let name = ServerName::IpAddress(addr.ip().into());
                    Some((TlsConnector::from(Arc::new(config)), name))
                }
            };
            Ok(Target { addr, host, tls })
        })
        .collect()
}

/// What the talkers saw, counted.
#[derive(Debug, Default)]
pub struct SlowBodies {
    /// Connections made (the TCP connection taken).
    pub connections: u64,
    /// Requests answered 401 from their headers, their body unread.
    pub refused_from_headers: u64,
    /// Connections the server closed before any answer: to make room for another, or
    /// because a fault stopped it.
    pub closed_unanswered: u64,
    /// Answers 502 or 503 (a server a fault took down, behind nothing): neither a pass
    /// nor a violation.
    pub unavailable: u64,
    /// Connections refused (nothing listening: the server down meanwhile).
    pub unreachable: u64,
    /// Connections not taken within 5 s (the server stopped, or its listen backlog full
    /// while every connection under its limit carries an authenticated caller).
    pub not_accepted: u64,
    pub violations: Vec<String>,
}

impl SlowBodies {
    fn add(&mut self, o: SlowBodies) {
        self.connections += o.connections;
        self.refused_from_headers += o.refused_from_headers;
        self.closed_unanswered += o.closed_unanswered;
        self.unavailable += o.unavailable;
        self.unreachable += o.unreachable;
        self.not_accepted += o.not_accepted;
        self.violations.extend(o.violations);
    }
}

/// Runs `per_server` talkers on each of `targets` until `until`, each claiming one of
/// `volumes` at random.
pub async fn crowd(
    targets: Vec<Target>,
    per_server: usize,
    volumes: Vec<String>,
    until: Instant,
    seed: u64,
) -> SlowBodies {
    let volumes = Arc::new(volumes);
    let talkers: Vec<_> = (0..per_server * targets.len())
        .map(|i| {
            let target = targets[i % targets.len()].clone();
            let rng = StdRng::seed_from_u64(seed ^ 0x510b_0d1e ^ i as u64);
            tokio::spawn(talker(target, Arc::clone(&volumes), until, rng))
        })
        .collect();
    let mut all = SlowBodies::default();
    for t in talkers {
        match t.await {
            Ok(o) => all.add(o),
            Err(e) => all
                .violations
                .push(format!("a slow-body talker panicked: {e}")),
        }
    }
    all
}

/// How one connection ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Not connected: refused.
    Unreachable,
    /// Not connected within 5 s.
    NotAccepted,
    /// The status line of the answer.
    Answered(u16, String),
    /// Closed (or reset) by the server before an answer.
    Closed,
}

async fn talker(
    target: Target,
    volumes: Arc<Vec<String>>,
    until: Instant,
    mut rng: StdRng,
) -> SlowBodies {
    let mut out = SlowBodies::default();
    // Spread the talkers' first connections over a second.
    tokio::time::sleep(Duration::from_millis(rng.random_range(0..1000))).await;
    while Instant::now() < until {
        let volume = &volumes[rng.random_range(0..volumes.len())];
        let silent = Duration::from_millis(rng.random_range(0..SILENT_AT_MOST.as_millis() as u64));
        let head = format!(
            "POST /v1/volumes/{volume}/claims HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {ANNOUNCED}\r\n\r\n{{",
            target.host
        );
        let began = Instant::now();
        let ended = match tokio::time::timeout(HELD_AT_MOST, one(&target, silent, &head)).await {
            Ok(e) => e,
            Err(_) => {
                out.connections += 1;
                out.violations.push(format!(
                    "an anonymous slow body to {} was held {}s without an answer or a close: the server waits for the body of a request without a token",
                    target.addr,
                    HELD_AT_MOST.as_secs()
                ));
                continue;
            }
        };
        if !matches!(ended, Ended::Unreachable | Ended::NotAccepted) {
            out.connections += 1;
        }
        match ended {
            Ended::Unreachable => out.unreachable += 1,
            Ended::NotAccepted => out.not_accepted += 1,
            Ended::Closed => out.closed_unanswered += 1,
            Ended::Answered(401, _) => out.refused_from_headers += 1,
            Ended::Answered(502 | 503, _) => out.unavailable += 1,
            Ended::Answered(status, line) => out.violations.push(format!(
                "an anonymous slow body to {} was answered {status} ({line}) after {:.1}s, not refused from its headers (401)",
                target.addr,
                began.elapsed().as_secs_f64()
            )),
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..1000))).await;
    }
    out
}

/// One connection: silent for `silent`, then `head`, then the body a byte at a time
/// until an answer or a close.
async fn one(target: &Target, silent: Duration, head: &str) -> Ended {
    let tcp =
        match tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(target.addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => return Ended::Unreachable,
            Err(_) => return Ended::NotAccepted,
        };
    tokio::time::sleep(silent).await;
    match &target.tls {
        None => talk(tcp, head).await,
        Some((connector, name)) => match connector.connect(name.clone(), tcp).await {
            Ok(tls) => talk(tls, head).await,
            // Closed for room while silent, or the server went down.
            Err(_) => Ended::Closed,
        },
    }
}

/// Sends `head`, then a byte of the body every [`TRICKLE`], reading meanwhile: the first
/// status line that comes back, or the close.
async fn talk<S: AsyncRead + AsyncWrite + Unpin>(stream: S, head: &str) -> Ended {
    let (mut rd, mut wr) = tokio::io::split(stream);
    if wr.write_all(head.as_bytes()).await.is_err() {
        return Ended::Closed;
    }
    let _ = wr.flush().await;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let mut tick = tokio::time::interval(TRICKLE);
    tick.tick().await;
    let mut writing = true;
    loop {
        tokio::select! {
            n = rd.read(&mut buf) => match n {
                Ok(0) | Err(_) => return status_of(&got).unwrap_or(Ended::Closed),
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    if let Some(e) = status_of(&got) {
                        return e;
                    }
                }
            },
            _ = tick.tick(), if writing => {
                // A write the server no longer takes: its answer, or its close, follows.
                writing = wr.write_all(b" ").await.is_ok() && wr.flush().await.is_ok();
            }
        }
    }
}

/// The answer's status, once its status line is whole.
fn status_of(got: &[u8]) -> Option<Ended> {
    let end = got.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&got[..end]).into_owned();
    let status = line.split(' ').nth(1).and_then(|s| s.parse().ok())?;
    Some(Ended::Answered(status, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_is_read_once_whole() {
        assert_eq!(status_of(b"HTTP/1.1 40"), None);
        assert_eq!(
            status_of(b"HTTP/1.1 401 Unauthorized\r\ncontent-length"),
            Some(Ended::Answered(401, "HTTP/1.1 401 Unauthorized".to_owned()))
        );
    }

    /// A server that waits for the body before it answers (as one that authenticates
    /// after reading it) holds the talker: it writes, and never hears. One that answers
    /// from the headers is heard at once.
    #[tokio::test]
    async fn a_talker_hears_an_answer_from_the_headers_and_not_one_after_the_body() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let target = Target {
            addr,
            host: addr.to_string(),
            tls: None,
        };
        let head = "POST /v1/volumes/v/claims HTTP/1.1\r\nContent-Length: 100000\r\n\r\n";
        // Answers once the headers are in.
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            // Reads on, as a server draining the body would, until the talker goes.
            while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
            listener
        });
        let ended = one(&target, Duration::ZERO, head).await;
        assert_eq!(
            ended,
            Ended::Answered(401, "HTTP/1.1 401 Unauthorized".to_owned())
        );
        let listener = server.await.unwrap();
        // Waits for the whole body (which never comes) before any answer.
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 256];
            let mut n = 0;
            while n < 100_000 {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(k) => n += k,
                }
            }
        });
        let held =
            tokio::time::timeout(Duration::from_secs(3), one(&target, Duration::ZERO, head)).await;
        assert!(held.is_err(), "{held:?}");
        server.abort();
    }
}
