//! Where the CLI sends its token: over plain HTTP only to a loopback address, judged by
//! the address as parsed (a `USER@` before the host is refused outright), and never
//! through a proxy. Every refusal comes before any connection: a listener on loopback,
//! given as the proxy too, sees nothing (and catches any request that would otherwise
//! leave the machine).

use csivol_tests::sniffer::Sniffer;

use crate::support::{Env, Run, run};

/// `csivol status --addr ADDR` with the sniffer as the proxy and no CA.
async fn status(env: &Env, sniffer: &Sniffer, addr: &str) -> Run {
    let mut cmd = env.command(&["status", "--addr", addr]);
    cmd.env("http_proxy", sniffer.url())
        .env("HTTP_PROXY", sniffer.url())
        .env("https_proxy", sniffer.url())
        .env("HTTPS_PROXY", sniffer.url())
        .env_remove("no_proxy")
        .env_remove("NO_PROXY")
        .env_remove("CSIVOL_CACERT");
    run(cmd).await
}

#[tokio::test]
async fn the_token_goes_in_clear_only_to_loopback() {
    let env = Env::start("plain-http");
    let sniffer = Sniffer::start();
    let mut runs = Vec::new();
    // The host after the `@` is where the request would go, whatever precedes it; plain
    // HTTP off loopback (a TEST-NET-1 address); a bare address off loopback without a CA,
    // which would be plain HTTP. Each refused before any connection.
    for addr in [
        format!("http://[::1]@{}", sniffer.addr),
        format!("http://127.0.0.1@{}", sniffer.addr),
        "http://192.0.2.1:7420".to_owned(),
        "192.0.2.1:7420".to_owned(),
    ] {
        runs.push(status(&env, &sniffer, &addr).await);
    }
    // On loopback, plain HTTP works, `localhost` included (never looked up), and not
    // through the proxy, which would have the token in clear.
    let bare = env.server.url.trim_start_matches("http://");
    let localhost = env.server.url.replace("127.0.0.1", "localhost");
    let mut served = Vec::new();
    for addr in [env.server.url.as_str(), &localhost, bare] {
        served.push((addr, status(&env, &sniffer, addr).await));
    }
    assert_eq!(sniffer.seen(), Vec::<String>::new(), "nothing connected");
    for (addr, r) in served {
        assert_eq!(r.code, 0, "{addr}: {r}");
    }

    let [trick, trick_v4, plain, bare] = &runs[..] else {
        unreachable!()
    };
    snap!(trick, @r"
    exit: 2
    --- stdout
    --- stderr
    error: server address `http://[::1]@127.0.0.1:[PORT]` names a user before its host: the request would go to 127.0.0.1:[PORT], and a server address takes no user name or password
    hint: give the server as scheme://host:port, without `USER@`: http://127.0.0.1:[PORT]
    ");
    assert_eq!(trick_v4.code, 2, "{trick_v4}");
    snap!(plain, @r"
    exit: 2
    --- stdout
    --- stderr
    error: refusing to send a token over plain HTTP to 192.0.2.1, which is not a loopback address: it would cross the network in clear
    hint: use https://192.0.2.1:7420 and give the CA that signed the server's certificate with --ca-cert (`csivol-server tls init` makes both); plain http:// is only for 127.0.0.0/8, ::1 and localhost
    ");
    snap!(bare, @r"
    exit: 2
    --- stdout
    --- stderr
    error: server address `192.0.2.1:7420` has no scheme, and without a CA it would be plain HTTP, which is only for a loopback address, not 192.0.2.1
    hint: write https://192.0.2.1:7420, or give the CA that signed the server's certificate with --ca-cert (a bare address is then https)
    ");
}
