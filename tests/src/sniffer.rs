//! A loopback listener that records every connection made to it and what was sent on it,
//! and answers nothing: the witness for a test that a client did NOT connect somewhere.
//! Given as a client's `http_proxy`, it also catches a request that would otherwise have
//! left the machine, so such a test never reaches off loopback even when it fails.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// See the module documentation. Its thread stops when it is dropped.
#[derive(Debug)]
pub struct Sniffer {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sniffer {
    /// Listens on a free port of 127.0.0.1.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("the listener's address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (record, stopped) = (Arc::clone(&seen), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            loop {
                let accepted = listener.accept();
                // The drop's own connection, which wakes this thread to stop.
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok((mut stream, from)) = accepted else {
                    continue;
                };
                let at = {
                    let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
                    seen.push(format!("a connection from {from}"));
                    seen.len() - 1
                };
                // What the client sends within a second (its request), then the
                // connection is closed without an answer.
                let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while got.len() < 64 << 10 {
                    match stream.read(&mut buf) {
                        Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
                seen[at] = format!(
                    "a connection from {from}, which sent:\n{}",
                    String::from_utf8_lossy(&got)
                );
            }
        });
        Self {
            addr,
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The connections made so far, each with what it sent.
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `http://ADDR`, to give a client as its proxy.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Sniffer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
