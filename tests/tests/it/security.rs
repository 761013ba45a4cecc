//! Safe on a real network: tokens that can be listed, expired and revoked, and
//! controller hosting that only authorised nodes get. Real server, agents and CLI.

use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::Cluster;

fn token(c: &Cluster, args: &[&str]) -> (String, String) {
    let mut all = vec!["token", "create", "-o", "json"];
    all.extend_from_slice(args);
    let out = c.csivol(&all);
    let v = out.ok().json();
    (
        v["id"].as_str().unwrap().to_owned(),
        v["token"].as_str().unwrap().to_owned(),
    )
}

fn token_row(c: &Cluster, id: &str) -> Value {
    let list = c.csivol(&["token", "list", "-o", "json"]).ok().json();
    list.as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("token {id} not listed: {list}"))
        .clone()
}

/// Tokens are listed without secrets, revoked tokens and expired tokens get 401 (exit 7)
/// with a message saying which, the last operator token cannot be revoked, and the event
/// log records creation and revocation with the actor.
#[test]
fn tokens_list_revoke_expire() {
    let c = Cluster::start("tokens", "30s", vec![]);
    let (id, secret) = token(&c, &["--role", "reader"]);
    assert_eq!(c.csivol_as(Some(&secret), &["volume", "list"]).code, 0);
    let row = token_row(&c, &id);
    assert_eq!(row["role"], "reader");
    assert_eq!(row["status"], "active");
    assert!(row["last_used_at"].is_string(), "{row}");
    assert!(row["expires_at"].is_null(), "{row}");
    let listed = c
        .csivol(&["token", "list", "-o", "json"])
        .ok()
        .stdout
        .clone();
    assert!(!listed.contains(&secret), "a secret was listed: {listed}");

    c.csivol(&["token", "revoke", &id]).ok();
    let refused = c.csivol_as(Some(&secret), &["volume", "list"]);
    assert_eq!(refused.code, 7, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("token {id} was revoked at")),
        "{refused:?}"
    );
    assert_eq!(token_row(&c, &id)["status"], "revoked");
    let again = c.csivol(&["token", "revoke", &id]);
    assert_eq!(again.code, 4, "{again:?}");

    // The only operator token cannot be revoked; with a second one it can.
    let ops: Vec<Value> = c
        .csivol(&["token", "list", "-o", "json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["role"] == "operator")
        .cloned()
        .collect();
    assert_eq!(ops.len(), 1);
    let first_op = ops[0]["id"].as_str().unwrap().to_owned();
    let last = c.csivol(&["token", "revoke", &first_op]);
    assert_eq!(last.code, 4, "{last:?}");
    assert!(
        last.stderr.contains("last usable operator token"),
        "{last:?}"
    );

    let (short_id, short) = token(&c, &["--role", "reader", "--ttl", "1s"]);
    assert!(token_row(&c, &short_id)["expires_at"].is_string());
    let expired = wait_for("the 1s token to expire", Duration::from_secs(20), || {
        let out = c.csivol_as(Some(&short), &["volume", "list"]);
        (out.code != 0).then_some(out)
    });
    assert_eq!(expired.code, 7, "{expired:?}");
    assert!(expired.stderr.contains("expired at"), "{expired:?}");

    let events = c.csivol(&["events", "-o", "json"]).ok().json();
    let actor = format!("operator:{first_op}");
    let has = |kind: &str, what: &str| {
        events.as_array().unwrap().iter().any(|e| {
            e["kind"] == kind
                && e["actor"] == actor.as_str()
                && e["message"].as_str().unwrap().contains(what)
        })
    };
    assert!(
        has("token-created", &format!("reader token {id} created")),
        "{events}"
    );
    assert!(
        has("token-revoked", &format!("reader token {id} revoked")),
        "{events}"
    );
}

/// A hijack attempt: a node token for a made-up node, and a real agent started with
/// it that offers to host the plugin's controller (its plugin is node-1's, so its
/// registration is node-1's copied). The registration is refused with an event; nothing
/// is handed to it; an operator can allow it.
#[test]
fn controller_hijack_is_refused() {
    let c = Cluster::start("hijack", "30s", vec![crate::cluster::NodeOpts::default()]);
    let (_, secret) = token(&c, &["--role", "node", "--node", "made-up"]);
    let dir = c.dir.join("made-up");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), &secret).unwrap();
    let endpoint = format!("unix://{}", c.nodes[0].dir.join("plugin.sock").display());
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-agent"));
    cmd.args([
        "run".to_owned(),
        format!("--server={}", c.url),
        "--node=made-up".to_owned(),
        format!("--data-dir={}", dir.join("agent").display()),
        format!("--token-file={}", dir.join("token").display()),
        format!("--plugin={}={endpoint}", crate::cluster::PLUGIN),
        format!("--controller={}={endpoint}", crate::cluster::PLUGIN),
    ]);
    let _agent = csivol_tests::Proc::spawn("agent", cmd, &dir.join("agent.log"));
    let refusal = wait_for("the refusal event", Duration::from_secs(30), || {
        let events = c
            .csivol(&["events", "--node", "made-up", "-o", "json"])
            .ok()
            .json();
        events
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == "controller-host-refused")
            .cloned()
    });
    assert_eq!(refusal["actor"], "node:made-up", "{refusal}");
    let hosts = c
        .csivol(&[
            "plugin",
            "controllers",
            crate::cluster::PLUGIN,
            "-o",
            "json",
        ])
        .ok()
        .json();
    assert_eq!(hosts["hosting"], serde_json::json!(["node-1"]), "{hosts}");
    let node = c.csivol(&["node", "show", "made-up"]);
    assert_eq!(
        node.code, 3,
        "the refused agent is not registered at all: {node:?}"
    );
    let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    assert!(
        log.contains("may not host the controller of plugin hostpath"),
        "the agent says why: {log}"
    );

    // The operator allows it; the table shows who allowed what.
    let out = c.csivol(&[
        "plugin",
        "controllers",
        crate::cluster::PLUGIN,
        "--allow",
        "made-up",
    ]);
    out.ok();
    assert!(out.stdout.contains("made-up"), "{out:?}");
    assert!(
        out.stdout.contains("token "),
        "node-1's grant is its token: {out:?}"
    );
}

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every regular file below `dir` (not following symlinks, not into other filesystems'
/// special files), with its contents.
fn files_below(dir: &std::path::Path, out: &mut Vec<(std::path::PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() {
            files_below(&e.path(), out);
        } else if t.is_file()
            && let Ok(bytes) = std::fs::read(e.path())
        {
            out.push((e.path(), bytes));
        }
    }
}

/// A volume with a secret, claimed and released through real agents and a real plugin:
/// the secret's value is in no file of the cluster afterwards (state.db and its WAL, the
/// agents' databases, every log); and the data dirs and state files have the modes the
/// security model promises.
#[test]
fn secrets_are_sealed_at_rest_and_files_are_private() {
    let c = Cluster::start("secrets", "30s", vec![crate::cluster::NodeOpts::default()]);
    let secret = format!("pw-{}", std::process::id() ^ 0x5eed_c0de);
    let spec = c.dir.join("secret-vol.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"sv\"\nplugin = \"{}\"\naccess_mode = \"single-node-writer\"\n\
             attachment = \"file-system\"\ncapacity_bytes = 1048576\n\n[secrets]\npassword = \"{secret}\"\n",
            crate::cluster::PLUGIN
        ),
    )
    .unwrap();
    c.csivol(&[
        "volume",
        "create",
        spec.to_str().unwrap(),
        "--wait",
        "-o",
        "json",
    ])
    .ok();
    std::fs::remove_file(&spec).unwrap();
    let claimed = c.csivol(&[
        "claim",
        "sv",
        "--node",
        "node-1",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ]);
    assert_eq!(claimed.ok().json()["state"], "ready", "{claimed:?}");
    let shown = c
        .csivol(&["volume", "show", "sv", "-o", "json"])
        .ok()
        .json();
    assert_eq!(shown["secret_keys"], serde_json::json!(["password"]));

    let server = c.dir.join("server");
    let wal = server.join("state.db-wal");
    assert!(wal.exists(), "the running server has a WAL");
    assert_eq!(mode(&server), 0o700);
    for f in [
        "state.db",
        "state.db-wal",
        "state.db-shm",
        "secrets.key",
        "operator.token",
    ] {
        assert_eq!(mode(&server.join(f)), 0o600, "{f}");
    }
    let agent = c.nodes[0].agent_dir();
    assert_eq!(mode(&agent), 0o711, "passable to workloads, not listable");
    assert_eq!(mode(&agent.join("targets")), 0o711);
    assert_eq!(mode(&agent.join("targets/sv")), 0o711);
    assert_eq!(mode(&agent.join("staging")), 0o700);
    assert_eq!(mode(&agent.join("agent.db")), 0o600);

    c.csivol(&[
        "release",
        "sv",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "60s",
    ])
    .ok();
    let mut files = Vec::new();
    files_below(c.dir.path(), &mut files);
    assert!(
        files.iter().any(|(p, _)| p.ends_with("server.log")),
        "the scan covers the logs"
    );
    assert!(files.iter().any(|(p, _)| p.ends_with("state.db-wal")));
    let leaks: Vec<_> = files
        .iter()
        .filter(|(_, bytes)| bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(leaks.is_empty(), "the secret's value is in {leaks:?}");
}

/// A data dir made by hand with 0755 is tightened at start, with a log line saying so.
#[test]
fn a_pre_existing_open_data_dir_is_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let dir = csivol_tests::TestDir::new("open-data-dir");
    let data = dir.join("server");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = csivol_tests::ServerProc::start(&data, &[]);
    assert_eq!(mode(&data), 0o700);
    assert!(
        server
            .log()
            .contains("tightened the server data dir's mode"),
        "{}",
        server.log()
    );
}

/// TLS end to end with certificates from `csivol-server tls init`: the CLI trusts the
/// server through `CSIVOL_CACERT` and refuses one signed by another CA (exit 8, saying
/// how to fix it); with mutual TLS, a node token presented with another node's
/// certificate is refused, with its own node's accepted.
#[tokio::test]
async fn tls_trust_and_mutual_tls_node_names() {
    let dir = csivol_tests::TestDir::new("tls");
    let init = |sub: &str, nodes: &[&str]| {
        let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
        cmd.args(["tls", "init", &format!("--dir={}", dir.join(sub).display())]);
        for n in nodes {
            cmd.arg(format!("--node={n}"));
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    init("tls", &["node-1", "node-2"]);
    init("other", &[]);
    let tls = dir.join("tls");
    assert_eq!(mode(&tls.join("ca-key.pem")), 0o600);
    assert_eq!(mode(&tls.join("server-key.pem")), 0o600);
    let server = csivol_tests::ServerProc::start(
        &dir.join("server"),
        &[
            &format!("--tls-cert={}", tls.join("server.pem").display()),
            &format!("--tls-key={}", tls.join("server-key.pem").display()),
            &format!("--tls-client-ca={}", tls.join("ca.pem").display()),
        ],
    );
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let cli = |ca: Option<&std::path::Path>, args: &[&str]| {
        let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol"));
        cmd.args(args)
            .env_clear()
            .env("CSIVOL_ADDR", &server.url)
            .env("CSIVOL_TOKEN", &server.token)
            .env("HOME", dir.join("home"))
            .stdin(std::process::Stdio::null());
        if let Some(ca) = ca {
            cmd.env("CSIVOL_CACERT", ca);
        }
        crate::cluster::run(cmd)
    };
    let ok = cli(Some(&tls.join("ca.pem")), &["volume", "list", "-o", "json"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    for ca in [Some(dir.join("other/ca.pem")), None] {
        let refused = cli(ca.as_deref(), &["volume", "list"]);
        assert_eq!(refused.code, 8, "{refused:?}");
        assert!(refused.stderr.contains("certificate"), "{refused:?}");
        assert!(refused.stderr.contains("--ca-cert"), "{refused:?}");
    }

    // Mutual TLS: node-1's token with node-2's certificate, then with its own.
    let token = cli(
        Some(&tls.join("ca.pem")),
        &["token", "create", "--role", "node", "--node", "node-1"],
    );
    assert_eq!(token.code, 0, "{token:?}");
    let token = token.stdout.trim().to_owned();
    let heartbeat = |cert_node: &str| {
        let cfg = csivol_client::tls::client_config(
            Some(&tls.join("ca.pem")),
            Some((
                &tls.join(format!("node-{cert_node}.pem")),
                &tls.join(format!("node-{cert_node}-key.pem")),
            )),
        )
        .unwrap();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(cfg)
            .build()
            .unwrap();
        let req = client
            .post(format!("{}/v1/nodes/node-1/heartbeat", server.url))
            .bearer_auth(&token)
            .json(&serde_json::json!({}));
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, body) = heartbeat("node-2").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not for node `node-1`"),
        "{body}"
    );
    let (status, body) = heartbeat("node-1").await;
    assert_eq!(
        status, 404,
        "past the certificate check, to `not registered`: {body}"
    );
}
