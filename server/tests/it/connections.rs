//! Connections are bounded: a half-sent request is closed within the header timeout, so is
//! an idle keep-alive connection, and a flood of idle connections past the connection limit
//! does not keep a new call out (the server closes the connection silent longest to make
//! room for it, and says it is at the limit). A body is read only after its caller showed
//! a token, and only for the body timeout; connections that never showed one make room
//! for those that did.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::json;

fn addr(server: &ServerProc) -> String {
    server.url.trim_start_matches("http://").to_owned()
}

/// Reads until the server closes the connection; returns what it sent and how long it took.
fn until_closed(mut s: TcpStream, bound: Duration) -> (String, Duration) {
    let started = Instant::now();
    s.set_read_timeout(Some(bound)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!(
                "the server kept the connection open for {:?}: {e}",
                started.elapsed()
            ),
        }
    }
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test]
async fn slowloris_and_idle_connections_are_closed() {
    let dir = TestDir::new("server-slowloris");
    let server = ServerProc::start(&dir.join("server"), &["--header-timeout=1s"]);
    // Half a request, never finished.
    let mut s = TcpStream::connect(addr(&server)).unwrap();
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    let (_, took) = until_closed(s, Duration::from_secs(20));
    assert!(took < Duration::from_secs(20), "closed after {took:?}");

    // A keep-alive connection that answered one request and then says nothing.
    let mut s = TcpStream::connect(addr(&server)).unwrap();
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (answer, _) = until_closed(s, Duration::from_secs(20));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    // Nothing sent at all.
    let s = TcpStream::connect(addr(&server)).unwrap();
    until_closed(s, Duration::from_secs(20));
    let (status, _) = server.api().get("/v1/volumes").await;
    assert_eq!(status, 200, "the server serves on");
}

#[tokio::test]
async fn idle_connections_past_the_limit_do_not_keep_a_call_out() {
    let dir = TestDir::new("server-conn-limit");
    let server = ServerProc::start(
        &dir.join("server"),
        &["--header-timeout=2s", "--max-connections=50"],
    );
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(addr(&server)).unwrap())
        .collect();
    eventually(
        "the limit to be logged",
        Duration::from_secs(20),
        || async {
            server
                .log()
                .contains("connection limit reached")
                .then_some(())
        },
    )
    .await;
    let started = Instant::now();
    let (status, body) = server.api().get("/v1/volumes").await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the call got in after {:?}",
        started.elapsed()
    );
    drop(idle);
}

#[tokio::test]
async fn long_polls_have_their_own_budget() {
    let dir = TestDir::new("server-long-polls");
    let server = ServerProc::start(&dir.join("server"), &["--max-long-polls=1"]);
    let api = server.api();
    // Two long-polls at once with room for one: one waits, the other is refused at once.
    let poll =
        |api: Api| tokio::spawn(async move { api.get("/v1/events?index=1000000&wait=3s").await });
    let (a, b) = (poll(api.clone()), poll(api.clone()));
    let (status, _) = api.get("/v1/volumes").await;
    assert_eq!(status, 200, "other calls still get in");
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 503], "{a:?} {b:?}");
    let refused = if a.0 == 503 { a.1 } else { b.1 };
    assert_eq!(refused["error"]["code"], "unavailable", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-long-polls"),
        "{refused}"
    );
}

/// Sends one byte to each stream every `every` until dropped (a slow sender: a body or a
/// header that never ends); a stream the server closed is let go.
struct Trickle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Trickle {
    fn start(streams: &[TcpStream], every: Duration) -> Self {
        let mut streams: Vec<TcpStream> = streams.iter().map(|s| s.try_clone().unwrap()).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) && !streams.is_empty() {
                streams.retain_mut(|s| s.write_all(b"a").is_ok());
                std::thread::sleep(every);
            }
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A connection that has spoken: it asked for `/v1/health` (no token needed) and read the
/// answer, so the server has read from it and knows it is no silent one.
fn spoken(server: &ServerProc) -> TcpStream {
    let mut s = TcpStream::connect(addr(server)).unwrap();
    s.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    // The headers, then as many bytes as they announce.
    let complete = |got: &[u8]| {
        let text = String::from_utf8_lossy(got);
        let (head, body) = text.split_once("\r\n\r\n")?;
        let length: usize = head
            .lines()
            .find_map(|l| {
                let l = l.to_ascii_lowercase();
                l.strip_prefix("content-length:")
                    .map(|v| v.trim().to_owned())
            })?
            .parse()
            .ok()?;
        (body.len() >= length).then(|| head.to_owned())
    };
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let head = loop {
        if let Some(head) = complete(&got) {
            break head;
        }
        let n = s.read(&mut buf).expect("an answer to /v1/health");
        assert!(
            n > 0,
            "the server closed the connection: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    };
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

/// A `POST` on a connection that has spoken, its body announced as 100,000 bytes, with
/// `auth` headers; the body is for the caller to send.
fn slow_body(server: &ServerProc, auth: &str) -> TcpStream {
    let mut s = spoken(server);
    let head = format!(
        "POST /v1/volumes/v/claims HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: 100000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).unwrap();
    s
}

/// A request on a connection that has spoken whose headers never end.
fn endless_headers(server: &ServerProc) -> TcpStream {
    let mut s = spoken(server);
    s.write_all(b"GET /v1/volumes HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    s
}

/// A node token's agent whose client holds no connection yet.
async fn agent(server: &ServerProc) -> FakeAgent {
    let agent = FakeAgent::new(server, "n1").await;
    FakeAgent {
        api: Api::new(&server.url, agent.api.token.as_deref()),
        node: agent.node,
    }
}

/// An operator's call, an agent's registration and its report are each answered, and in
/// time: what a crowd of anonymous connections must not prevent.
async fn operator_and_agent_get_in(server: &ServerProc, agent: &FakeAgent) {
    let within = Duration::from_secs(60);
    let answered = |what: &'static str| move |_| panic!("{what} got no answer within {within:?}");
    let (status, body) = tokio::time::timeout(within, server.api().get("/v1/volumes"))
        .await
        .unwrap_or_else(answered("an operator's call"));
    assert_eq!(status, 200, "{body}");
    let (status, body) = tokio::time::timeout(within, agent.try_register(0, false, json!([])))
        .await
        .unwrap_or_else(answered("the agent's registration"));
    assert_eq!(status, 200, "{body}");
    let reports = format!("/v1/nodes/{}/reports", agent.node);
    let (status, body) =
        tokio::time::timeout(within, agent.api.post(&reports, json!({"reports": []})))
            .await
            .unwrap_or_else(answered("the agent's report"));
    assert_eq!(status, 200, "{body}");
}

/// As many anonymous slow bodies as the server allows connections, each announced long
/// and sent a byte a second: each is refused from its headers (401) and its connection
/// closed, so an operator's call is still answered, and an agent still registers and
/// reports.
#[tokio::test]
async fn anonymous_slow_bodies_do_not_hold_connections() {
    const LIMIT: usize = 16;
    let dir = TestDir::new("server-slow-bodies");
    let limit = format!("--max-connections={LIMIT}");
    let server = ServerProc::start(&dir.join("server"), &[&limit]);
    let agent = agent(&server).await;
    let bodies: Vec<TcpStream> = (0..LIMIT).map(|_| slow_body(&server, "")).collect();
    let _trickle = Trickle::start(&bodies, Duration::from_secs(1));
    operator_and_agent_get_in(&server, &agent).await;
    for s in bodies {
        let (answer, took) = until_closed(s, Duration::from_secs(60));
        // The refusal may be lost to a reset when the server closes the connection with
        // body bytes unread; that it closed is the point.
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 401"),
            "after {took:?}: {answer}"
        );
    }
}

/// Anonymous connections that have spoken take every connection the server allows and
/// hold them with headers that never end (the header timeout is far beyond the test): at
/// the limit the server closes the oldest of them for each new connection, so an
/// operator's call is still answered, and an agent still registers and reports.
#[tokio::test]
async fn anonymous_talkers_make_room_for_authenticated_callers() {
    const LIMIT: usize = 16;
    let dir = TestDir::new("server-anonymous-room");
    let limit = format!("--max-connections={LIMIT}");
    let server = ServerProc::start(&dir.join("server"), &[&limit, "--header-timeout=10m"]);
    let agent = agent(&server).await;
    let talkers: Vec<TcpStream> = (0..LIMIT).map(|_| endless_headers(&server)).collect();
    let _trickle = Trickle::start(&talkers, Duration::from_secs(1));
    operator_and_agent_get_in(&server, &agent).await;
    let log = server.log();
    assert!(log.contains("connection limit reached"), "{log}");
    drop(talkers);
}

/// A caller with a token gets the body timeout for its body, not more: a body sent a byte
/// at a time is answered 408 and its connection closed.
#[tokio::test]
async fn a_slow_body_is_cut_after_the_body_timeout() {
    let dir = TestDir::new("server-body-timeout");
    let server = ServerProc::start(&dir.join("server"), &["--body-timeout=2s"]);
    let s = slow_body(
        &server,
        &format!("Authorization: Bearer {}\r\n", server.token),
    );
    let _trickle = Trickle::start(std::slice::from_ref(&s), Duration::from_millis(200));
    let (answer, _) = until_closed(s, Duration::from_secs(60));
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("--body-timeout"), "{answer}");
    let (status, _) = server.api().get("/v1/volumes").await;
    assert_eq!(status, 200, "the server serves on");
}
