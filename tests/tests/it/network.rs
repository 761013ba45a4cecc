//! Safe on a real network, the network's side, with the real binaries: a flood of 20,000 idle
//! connections, more than the server has open files for, does not keep a new `csivol` call
//! out; and plain HTTP is refused off loopback unless `--insecure-http` says otherwise (and
//! even then csivol's own clients send no token there in clear).
//! Both run in network namespaces the tests make (tests never bind the host's other
//! addresses, and the flood's ports are not taken from the tests beside it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use csivol_tests::netns::{NetNs, tool};
use csivol_tests::{Proc, ServerProc, TestDir, bin_path, idle, run_to_exit, wait_for};

/// The flood of the probe.
const IDLE_CONNECTIONS: u64 = 20_000;
/// The open-file hard limit the server gets (as from `LimitNOFILE=` or `ulimit -Hn`): that
/// of the probe, so the flood is more than the server could hold on any machine.
const SERVER_HARD_LIMIT: u64 = 20_000;
/// The server's `--header-timeout` in the flood: long enough that every idle connection is
/// still open when the last one arrives (a debug build on a loaded machine takes tens of
/// seconds to accept 20,000), and longer than the CLI's 30 s request timeout, so that a
/// call which had to wait for idle connections to time out would fail.
const FLOOD_HEADER_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `csivol` with `args` against `server` (optionally under `wrapper`), killed by pid
/// if it outlives `timeout`; returns its exit status, what it printed, and how long it took.
fn csivol(
    dir: &TestDir,
    server: &ServerProc,
    wrapper: &[&str],
    args: &[&str],
    timeout: Duration,
) -> (ExitStatus, String, Duration) {
    let cli = bin_path("csivol");
    let mut cmd = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut cmd = Command::new(program);
            cmd.args(rest).arg(cli);
            cmd
        }
        None => Command::new(cli),
    };
    cmd.args(args)
        .env_clear()
        .env("CSIVOL_ADDR", &server.url)
        .env("CSIVOL_TOKEN", &server.token)
        .env("HOME", dir.join("cli-home"))
        .env("XDG_CONFIG_HOME", dir.join("cli-config"))
        .env("NO_COLOR", "1");
    let started = Instant::now();
    let (status, out) = run_to_exit("csivol", cmd, timeout);
    (status, out, started.elapsed())
}

/// The open-file hard limit of this process (`None`: unlimited).
fn hard_open_file_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum
}

/// The probe: about 20,000 idle connections exhausted the server's open files, it
/// logged `Too many open files`, and new CLI calls failed with exit 8 until they closed.
/// Here, in a network namespace of its own (its ports and accept queues are the test's
/// alone), the server runs under the probe's open-file limit (hard 20,000, soft 1024: it
/// raises the soft limit and caps connections below it) and a header timeout longer than
/// the CLI waits; helper processes open 20,000 connections no faster than it accepts them
/// (so that they reach it, see `csivol_tests::idle`) and hold them, sending nothing. While
/// they are all held, `csivol status` must succeed, well within the CLI's own timeout: the
/// server makes room for it by closing a silent connection, rather than making it wait
/// for the header timeout.
/// Afterwards the server serves on, and it never ran out of open files.
#[test]
fn twenty_thousand_idle_connections_do_not_stop_a_cli_call() {
    let dir = TestDir::new("idle-flood");
    let ns = netns(&dir);
    let hard = hard_open_file_limit().unwrap_or(u64::MAX);
    let server_hard = hard.min(SERVER_HARD_LIMIT);
    let nofile = format!("--nofile=1024:{server_hard}");
    let prlimit = tool("prlimit", "util-linux");
    let mut wrapper = ns.prefix();
    wrapper.extend([
        prlimit.to_str().unwrap().to_owned(),
        nofile,
        "--".to_owned(),
    ]);
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let header_timeout = format!("--header-timeout={}s", FLOOD_HEADER_TIMEOUT.as_secs());
    let mut server = ServerProc::start_via(
        &wrapper,
        &dir.join("server"),
        "127.0.0.1:0",
        &[&header_timeout],
    );
    let listening = server.log();
    let max_connections: u64 = listening
        .lines()
        .find(|l| l.contains("csivol server listening"))
        .and_then(|l| l.split("max_connections=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no max_connections in the server's log: {listening}"));
    assert!(
        listening.contains(&format!("open_files={server_hard}")),
        "the server raised its soft limit to the hard limit: {listening}"
    );
    assert!(
        max_connections < IDLE_CONNECTIONS,
        "the flood must be more than the server holds: {max_connections}"
    );

    // Helpers of at most 5,000 connections each, within this machine's hard limit (which a
    // helper cannot raise without CAP_SYS_RESOURCE), one after the other: each paces its
    // connections by what the server has accepted, counted from the server's open files.
    let per_helper = 5_000.min(hard.saturating_sub(100));
    assert!(
        per_helper >= 1_000,
        "the open-file hard limit {hard} is too low"
    );
    let addr: SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let in_ns = ns.prefix();
    let in_ns: Vec<&str> = in_ns.iter().map(String::as_str).collect();
    let mut helpers = Vec::new();
    let mut left = IDLE_CONNECTIONS;
    let started = Instant::now();
    while left > 0 {
        let n = left.min(per_helper);
        left -= n;
        let i = helpers.len();
        let mut cmd = Command::new(in_ns[0]);
        cmd.args(&in_ns[1..])
            .arg(env!("CARGO_BIN_EXE_csivol-idle-connections"))
            .args([
                &addr.to_string(),
                &n.to_string(),
                "300s",
                &server.proc.pid().to_string(),
            ]);
        let log = dir.join(format!("idle-{i}.log"));
        let mut proc = Proc::spawn(&format!("idle connections {i}"), cmd, &log);
        let line = idle::holding_line(n as usize, addr);
        wait_for(
            "a helper's idle connections to be open",
            Duration::from_secs(90),
            || {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                if let Some(status) = proc.exited() {
                    panic!("{} exited with {status}: {said}", proc.name);
                }
                said.contains(&line).then_some(())
            },
        );
        helpers.push((proc, log));
    }
    let opened = started.elapsed();
    assert!(
        opened < FLOOD_HEADER_TIMEOUT,
        "opening them took {opened:?}: the first ones may have timed out already"
    );
    wait_for(
        "the server to log its connection limit",
        Duration::from_secs(10),
        || {
            server
                .log()
                .contains("connection limit reached")
                .then_some(())
        },
    );
    let server_files = std::fs::read_dir(format!("/proc/{}/fd", server.proc.pid()))
        .map(|d| d.count())
        .unwrap_or_default();

    // A new call while all 20,000 are held.
    let (status, out, took) = csivol(&dir, &server, &in_ns, &["status"], Duration::from_secs(60));
    assert!(
        status.success(),
        "csivol status failed after {took:?}: {out}"
    );
    assert!(out.contains("volumes:"), "{out}");
    // Well inside the CLI's own timeout, and nowhere near the header timeout that waiting
    // for an idle connection to close would take. (A bound, not a benchmark.)
    assert!(
        took < Duration::from_secs(20),
        "csivol status got in after {took:?}"
    );
    for (proc, log) in &mut helpers {
        assert!(
            proc.exited().is_none(),
            "{} held its connections throughout: {}",
            proc.name,
            std::fs::read_to_string(&*log).unwrap_or_default()
        );
    }

    // Released: the server is healthy, answers at once, and says how many silent
    // connections it closed to make room.
    for (mut proc, _) in helpers {
        proc.kill();
    }
    let (status, out, _) = csivol(&dir, &server, &in_ns, &["status"], Duration::from_secs(60));
    assert!(status.success(), "after the flood: {out}");
    let below = wait_for(
        "the server to log that it is below the limit again",
        Duration::from_secs(30),
        || {
            server
                .log()
                .lines()
                .find(|l| l.contains("below the connection limit again"))
                .map(str::to_owned)
        },
    );
    let closed: u64 = below
        .split("closed_silent=")
        .nth(1)
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{below}"));
    assert!(closed >= 1, "the CLI's connection made room: {below}");
    assert!(
        server.proc.exited().is_none(),
        "the server is still running"
    );
    let log = server.log();
    for bad in ["Too many open files", "failed to accept"] {
        assert!(!log.contains(bad), "the server logged `{bad}`: {log}");
    }
    eprintln!(
        "{IDLE_CONNECTIONS} idle connections opened in {opened:?}; the server held \
         {server_files} open files under its cap of {max_connections} connections (hard \
         limit {server_hard}), closed {closed} silent ones to make room, and answered \
         csivol status in {took:?}"
    );
}

/// The address [`add_address`] gives a namespace.
const ADDR: &str = "10.213.0.1";

/// A namespace of the test's own (held as long as a test may run).
fn netns(dir: &TestDir) -> NetNs {
    NetNs::new(dir.path(), "test", Duration::from_secs(300))
}

/// Adds [`ADDR`] on a veth link in `ns`.
fn add_address(ns: &NetNs) {
    let addr = format!("{ADDR}/24");
    for args in [
        &[
            "link", "add", "csivol0", "type", "veth", "peer", "name", "csivol1",
        ][..],
        &["addr", "add", addr.as_str(), "dev", "csivol0"],
        &["link", "set", "csivol1", "up"],
        &["link", "set", "csivol0", "up"],
    ] {
        ns.ip(args);
    }
}

/// `dir` and every file in it, with its mode, modification time and contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, i64, i64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let meta = std::fs::metadata(dir).unwrap();
    out.insert(
        dir.to_owned(),
        (meta.mode(), meta.mtime(), meta.mtime_nsec(), Vec::new()),
    );
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        let bytes = if m.is_file() {
            std::fs::read(e.path()).unwrap()
        } else {
            Vec::new()
        };
        out.insert(e.path(), (m.mode(), m.mtime(), m.mtime_nsec(), bytes));
    }
    out
}

/// The server refuses plain HTTP on a non-loopback address, at start, before it creates
/// or changes anything, with an error that names the fix; with `--insecure-http` it
/// serves there, with a warning, and the CLI talks to it. All in a network namespace the
/// test makes, where the address exists: a refusal is the server's, not a failed bind.
#[test]
fn plain_http_off_loopback_is_refused_unless_insecure_http() {
    let dir = TestDir::new("plain-http");
    let ns = netns(&dir);
    add_address(&ns);
    let prefix = ns.prefix();
    let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
    let refused = |data_dir: &Path, listen: &str| {
        let mut cmd = Command::new(prefix[0]);
        cmd.args(&prefix[1..])
            .arg(bin_path("csivol-server"))
            .args([
                "serve",
                &format!("--data-dir={}", data_dir.display()),
                &format!("--listen={listen}"),
            ])
            .env("RUST_LOG", "info");
        let (status, out) = run_to_exit("csivol-server serve", cmd, Duration::from_secs(30));
        assert!(!status.success(), "{listen}: {out}");
        assert!(
            out.contains(&format!(
                "refusing to serve plain HTTP on {listen}: tokens and volume secrets would \
                 cross the network in clear"
            )),
            "{out}"
        );
        let hint = out
            .lines()
            .find(|l| l.starts_with("hint:"))
            .unwrap_or_else(|| panic!("no hint: {out}"));
        for fix in ["--tls-cert", "csivol-server tls init", "--insecure-http"] {
            assert!(hint.contains(fix), "the hint names `{fix}`: {out}");
        }
        out
    };

    // A first start, refused: no data dir, key or token is left behind.
    let fresh = dir.join("fresh");
    for listen in [format!("{}:0", ADDR), "0.0.0.0:0".to_owned()] {
        let out = refused(&fresh, &listen);
        assert!(
            !fresh.exists(),
            "{listen}: the refused start made {fresh:?}: {out}"
        );
        assert!(!out.contains("operator token"), "{out}");
    }

    // With --insecure-http it serves there and says so (for a proxy in front of it that
    // speaks TLS to the clients), but csivol's own clients send no token there in clear:
    // the CLI in the namespace refuses the address before connecting, and names the fix.
    let data = dir.join("server");
    let mut server =
        ServerProc::start_via(&prefix, &data, &format!("{}:0", ADDR), &["--insecure-http"]);
    assert!(
        server.url.starts_with(&format!("http://{}:", ADDR)),
        "{}",
        server.url
    );
    assert!(
        server.log().contains(
            "serving plain HTTP on a non-loopback address (--insecure-http): tokens and \
             volume secrets cross the network in clear"
        ),
        "{}",
        server.log()
    );
    let port = server.url.rsplit(':').next().unwrap().to_owned();
    let health = {
        let mut cmd = Command::new(prefix[0]);
        cmd.args(&prefix[1..]).args([
            "bash",
            "-c",
            &format!(
                "exec 3<>/dev/tcp/{ADDR}/{port}; printf 'GET /v1/health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n' >&3; \
                 cat <&3"
            ),
        ]);
        run_to_exit("a health request", cmd, Duration::from_secs(30)).1
    };
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let (status, out, _) = csivol(&dir, &server, &prefix, &["status"], Duration::from_secs(30));
    assert_eq!(status.code(), Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "refusing to send a token over plain HTTP to {ADDR}, which is not a loopback address"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("hint: use https://{ADDR}:{port}")),
        "{out}"
    );
    let stopped = server.proc.terminate(Duration::from_secs(20));
    assert!(stopped.is_some(), "the server stops on SIGTERM");

    // A refused start on that cluster's data dir changes nothing in it.
    let before = snapshot(&data);
    refused(&data, &format!("{}:0", ADDR));
    assert_eq!(
        snapshot(&data),
        before,
        "the refused start changed the data dir"
    );
}
