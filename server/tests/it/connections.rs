//! Connections are bounded: a half-sent request is closed within the header timeout, so is
//! an idle keep-alive connection, and a flood of idle connections past the connection limit
//! does not keep a new call out (the server closes the connection silent longest to make
//! room for it, and says it is at the limit).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use csivol_tests::{ServerProc, TestDir, eventually};

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
    let poll = |api: csivol_tests::Api| {
        tokio::spawn(async move { api.get("/v1/events?index=1000000&wait=3s").await })
    };
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
