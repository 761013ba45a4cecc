//! A plain-HTTP proxy in front of a server that loses answers on purpose: each request is
//! passed on to the server and recorded as sent; the answers the test asks it to drop are
//! read from the server and never given back (the client's connection is closed), as when
//! a network loses an answer after the server acted. A recorded request can be sent to a
//! server again later, byte for byte: a delayed duplicate.
//!
//! HTTP/1.1 only as the API speaks it: requests and answers with `Content-Length` bodies
//! (or none), keep-alive on the client's side, one fresh connection to the server per
//! request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The proxy; it stops accepting when dropped.
#[derive(Debug)]
pub struct LossyProxy {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Requests recorded, in the order they reached the proxy, as sent.
    requests: Mutex<Vec<Vec<u8>>>,
    /// How many of the next answers to mutating requests are dropped.
    drop_answers: AtomicUsize,
    stopped: AtomicBool,
}

/// An answer as a server sent it.
#[derive(Debug, Clone)]
pub struct RawAnswer {
    pub status: u16,
    /// Header lines as sent (`name: value`), names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

impl LossyProxy {
    /// A proxy to `target` (`http://127.0.0.1:PORT`).
    pub fn start(target: &str) -> Self {
        let target = target
            .strip_prefix("http://")
            .expect("a plain-HTTP server")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (s, target) = (Arc::clone(&s), target.clone());
                std::thread::spawn(move || serve(conn, &target, &s));
            }
        });
        Self { url, shared }
    }

    /// The next `n` answers to mutating requests (not GET) are lost.
    pub fn drop_answers(&self, n: usize) {
        self.shared.drop_answers.store(n, Ordering::SeqCst);
    }

    /// The mutating requests recorded so far, as sent.
    pub fn mutations(&self) -> Vec<Vec<u8>> {
        let all = self.shared.requests.lock().unwrap();
        all.iter()
            .filter(|r| !r.starts_with(b"GET "))
            .cloned()
            .collect()
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
    }
}

/// Sends a recorded request to the server at `target` (`http://…`) as it was sent, and
/// returns its answer.
pub fn send_raw(target: &str, request: &[u8]) -> RawAnswer {
    let addr = target.trim_start_matches("http://").trim_end_matches('/');
    let mut server = TcpStream::connect(addr).expect("connect to the server");
    server
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    server.write_all(request).expect("send the request");
    let mut reader = BufReader::new(server);
    let (raw, answer) = read_message(&mut reader).expect("an answer");
    drop(raw);
    answer
}

fn serve(client: TcpStream, target: &str, s: &Shared) {
    let mut reader = BufReader::new(client.try_clone().expect("clone the connection"));
    let mut client = client;
    loop {
        let Some(request) = read_request(&mut reader) else {
            return;
        };
        s.requests.lock().unwrap().push(request.clone());
        let mutating = !request.starts_with(b"GET ");
        let Ok(mut server) = TcpStream::connect(target) else {
            return;
        };
        if server.write_all(&request).is_err() {
            return;
        }
        let mut from_server = BufReader::new(server.try_clone().unwrap());
        let Some((raw, _)) = read_message(&mut from_server) else {
            return;
        };
        let _ = server.shutdown(Shutdown::Both);
        let lose = mutating
            && s.drop_answers
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if lose {
            // The server acted and answered; the client never hears of it.
            let _ = client.shutdown(Shutdown::Both);
            return;
        }
        if client.write_all(&raw).is_err() {
            return;
        }
    }
}

/// One request's bytes: head and `Content-Length` body.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let (head, length) = read_head(reader)?;
    let mut raw = head;
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    raw.extend(body);
    Some(raw)
}

/// One answer's bytes, and the answer parsed.
fn read_message(reader: &mut BufReader<TcpStream>) -> Option<(Vec<u8>, RawAnswer)> {
    let (head, length) = read_head(reader)?;
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let mut raw = head;
    raw.extend(&body);
    Some((
        raw,
        RawAnswer {
            status,
            headers,
            body,
        },
    ))
}

/// The head up to its blank line, and the body's length.
fn read_head(reader: &mut BufReader<TcpStream>) -> Option<(Vec<u8>, usize)> {
    let mut head = Vec::new();
    let mut length = 0;
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
        if let Some(v) = text.strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        assert!(
            !text.starts_with("transfer-encoding:"),
            "the lossy proxy reads Content-Length bodies only"
        );
        head.extend(&line);
        if line == b"\r\n" {
            return Some((head, length));
        }
    }
}
