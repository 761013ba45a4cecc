//! A flood of idle connections, held by a process of its own (the test helper binary
//! `csivol-idle-connections ADDR COUNT FOR SERVER_PID`). Open files are
//! counted per process: a test that needs 20,000 connections holds them in a few such
//! processes, and takes no file descriptors from the tests running beside it in the test
//! binary. Killing the process (by pid, as `Proc` does) closes every one of them.
//!
//! A connection counts only if the server has it: connections are opened no faster than
//! the server accepts them (counted from its open files), because past a full accept queue
//! the kernel answers with SYN cookies, and the client then holds connections the server
//! never heard of.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

/// A connection not established within this fails the run.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections opened at once.
const BATCH: usize = 256;
/// Connections the server may not have accepted yet before the next batch waits: with a
/// batch, well under its accept queue (1024).
const WINDOW: usize = 512;
/// How long a batch waits for the server to catch up; past it the server is taken to
/// accept no more (at its connection limit), and gets the rest anyway.
const STALL: Duration = Duration::from_millis(500);

/// What the process prints on stdout once every connection is open.
pub fn holding_line(count: usize, addr: SocketAddr) -> String {
    format!("holding {count} idle connections to {addr}")
}

/// `csivol-idle-connections ADDR COUNT FOR SERVER_PID`: see [`hold`].
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = || -> anyhow::Result<()> {
        let [addr, count, hold_for, server] = args.as_slice() else {
            anyhow::bail!("usage: csivol-idle-connections ADDR COUNT FOR SERVER_PID");
        };
        let addr: SocketAddr = addr.parse().context("invalid ADDR")?;
        let count: usize = count.parse().context("invalid COUNT")?;
        let hold_for = humantime::parse_duration(hold_for).context("invalid FOR")?;
        let server: u32 = server.parse().context("invalid SERVER_PID")?;
        hold(addr, count, hold_for, server)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Open files of process `pid`: with nothing else opening files, the connections it has
/// accepted, plus a constant.
fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Opens `count` TCP connections to `addr`, served by process `server`, and sends nothing
/// on them; once all are open, says so on stdout and holds them until killed, or for
/// `hold_for` at most (so that a test runner that dies without killing it leaks them for
/// a bounded time only). Connections are opened as fast as the server accepts them.
pub fn hold(addr: SocketAddr, count: usize, hold_for: Duration, server: u32) -> anyhow::Result<()> {
    raise_soft_open_file_limit(count as u64 + 64)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    let held = runtime.block_on(async {
        let base = open_files(server);
        let mut held = Vec::with_capacity(count);
        while held.len() < count {
            let waiting = std::time::Instant::now();
            while base + held.len() > open_files(server) + WINDOW && waiting.elapsed() < STALL {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let mut connects = tokio::task::JoinSet::new();
            for _ in 0..BATCH.min(count - held.len()) {
                connects.spawn(tokio::time::timeout(
                    CONNECT_TIMEOUT,
                    tokio::net::TcpStream::connect(addr),
                ));
            }
            while let Some(done) = connects.join_next().await {
                let stream = done
                    .context("a connecting task failed")?
                    .map_err(|_| {
                        anyhow::anyhow!("a connection to {addr} took over {CONNECT_TIMEOUT:?}")
                    })?
                    .with_context(|| format!("a connection to {addr} failed"))?;
                held.push(stream.into_std()?);
            }
        }
        anyhow::Ok(held)
    })?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", holding_line(count, addr))?;
    out.flush()?;
    // Not a synchronisation: this is the holding itself.
    std::thread::sleep(hold_for);
    drop(held);
    Ok(())
}

/// The soft limit up to `wanted`, within the hard limit (raising that takes
/// CAP_SYS_RESOURCE, which a test must not count on).
fn raise_soft_open_file_limit(wanted: u64) -> anyhow::Result<()> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|cur| cur < wanted) {
        if lim.maximum.is_some_and(|max| max < wanted) {
            anyhow::bail!(
                "the open-file hard limit ({}) is below the {wanted} this needs",
                lim.maximum.unwrap_or_default()
            );
        }
        lim.current = Some(wanted);
        setrlimit(Resource::Nofile, lim).context("failed to raise the open-file limit")?;
    }
    Ok(())
}
