//! Where the agent sends its node token: over plain HTTP only to a loopback address,
//! judged by the server address as parsed (a `USER@` before the host is refused
//! outright), and never through a proxy. A listener on loopback, given as the proxy too,
//! witnesses that a refused address was never connected to (and catches any request that
//! would otherwise leave the machine).

use std::process::Command;
use std::time::Duration;

use csivol_tests::sniffer::Sniffer;
use csivol_tests::{Proc, TestDir, bin_path, eventually, wait_for};

use super::procs::Server;
use super::support::{Hostpath, WAIT};

/// `csivol-agent run --server SERVER` for node n1, with the sniffer as its proxy.
fn agent(
    dir: &TestDir,
    name: &str,
    server: &str,
    token: &std::path::Path,
    hp: &Hostpath,
    sniffer: &Sniffer,
) -> (Proc, std::path::PathBuf) {
    let log = dir.join(format!("agent-{name}.log"));
    let mut cmd = Command::new(bin_path("csivol-agent"));
    cmd.args([
        "run".to_owned(),
        format!("--server={server}"),
        "--node=n1".to_owned(),
        format!("--data-dir={}", dir.join(format!("agent-{name}")).display()),
        format!("--token-file={}", token.display()),
        format!("--plugin=hp=unix://{}", hp.socket.display()),
    ])
    .env("RUST_LOG", "csivol_agent=debug")
    .env("http_proxy", sniffer.url())
    .env("HTTP_PROXY", sniffer.url())
    .env("https_proxy", sniffer.url())
    .env("HTTPS_PROXY", sniffer.url())
    .env_remove("no_proxy")
    .env_remove("NO_PROXY");
    (Proc::spawn("csivol-agent run", cmd, &log), log)
}

#[tokio::test]
async fn the_node_token_goes_in_clear_only_to_loopback() {
    let dir = TestDir::new("agent-server-address");
    let server = Server::start(&dir, &[]).await;
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let sniffer = Sniffer::start();

    for (name, addr, refusal) in [
        (
            "user-v6",
            format!("http://[::1]@{}", sniffer.addr),
            format!(
                "names a user before its host: the request would go to {}",
                sniffer.addr
            ),
        ),
        (
            "user-v4",
            format!("http://127.0.0.1@{}", sniffer.addr),
            format!("the request would go to {}", sniffer.addr),
        ),
        (
            "test-net",
            "http://192.0.2.1:7420".to_owned(),
            "refusing to send a token over plain HTTP to 192.0.2.1".to_owned(),
        ),
        (
            "bare",
            "192.0.2.1:7420".to_owned(),
            "server address `192.0.2.1:7420` has no scheme".to_owned(),
        ),
    ] {
        let (mut proc, log) = agent(&dir, name, &addr, &token, &hp, &sniffer);
        // It stops with the refusal; an agent that took the address would keep running
        // and send its token (to the sniffer, as the host or as the proxy).
        let stopped = wait_for(
            &format!("the agent given {addr} to stop or to connect"),
            Duration::from_secs(60),
            || match proc.exited() {
                Some(status) => Some(Some(status)),
                None => (!sniffer.seen().is_empty()).then_some(None),
            },
        );
        let out = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(
            sniffer.seen(),
            Vec::<String>::new(),
            "{addr}: nothing connected: {out}"
        );
        let status = stopped.expect("stopped");
        assert!(!status.success(), "{addr}: {out}");
        assert!(out.contains(&refusal), "{addr}: {out}");
        assert!(out.contains("\nhint: "), "{addr}: {out}");
    }

    // On loopback, plain HTTP works, and not through the proxy, which would have the
    // token in clear: the node registers.
    let (_agent, log) = agent(&dir, "loopback", &server.url(), &token, &hp, &sniffer);
    eventually("the node registered", WAIT, || async {
        assert_eq!(
            sniffer.seen(),
            Vec::<String>::new(),
            "nothing connected: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        (server.api.get("/v1/nodes/n1").await.0 == 200).then_some(())
    })
    .await;
}
