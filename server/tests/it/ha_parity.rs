//! The etcd store does what the SQLite store does: a change made through another server
//! reaches a node's agent as the changed volume's entries (not the node's whole desired
//! state), backups and restores go through csivol, `--check` checks what etcd holds, and
//! `migrate` reaches an etcd over TLS.

use csivol_tests::etcd::{Ha, start_ha};
use csivol_tests::{FakeAgent, TestDir};
use serde_json::json;

use super::{claim, register_volume};

#[tokio::test]
async fn another_servers_change_reaches_an_agent_as_that_volumes_entries() {
    let dir = TestDir::new("ha-remote-journal");
    let Ha { etcd: _etcd, a, b } = start_ha(&dir, &[]);
    let bb = b.api();
    let n1 = FakeAgent::new(&a, "n1").await;
    n1.register(0, false, json!([])).await;
    register_volume(&bb, "v1", "single-node-writer").await;
    register_volume(&bb, "v2", "single-node-writer").await;
    let (status, c) = claim(&bb, "v2", "a0", "n1", "write").await;
    assert_eq!(status, 201, "{c}");

    // A consistent read on A waits for A to apply what B acknowledged: the whole state
    // the agent then takes from A covers the claim of v2 (A's own state read is not
    // consistent, and under load may come before B's change reached it).
    let (status, v) = a.api().get("/v1/volumes/v2").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["claims"][0]["alloc"], "a0", "A applied B's claim: {v}");

    // The agent holds its whole state from A; a claim is made through B.
    let held = n1.desired().await;
    let index = held["index"].as_u64().unwrap();
    assert!(held.get("changes").is_none(), "the whole state: {held}");
    let (status, c) = claim(&bb, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let (status, d) = n1
        .api
        .get(&format!(
            "/v1/nodes/n1/desired?index={index}&wait=20s&since={index}"
        ))
        .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        d["changes"],
        json!({"since": index, "volumes": ["v1"]}),
        "A sends only the volume B changed: {d}"
    );
}

/// `csivol-server COMMAND ARGS...`: its exit status and output.
fn server_cmd(args: &[String]) -> (std::process::ExitStatus, String) {
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    cmd.args(args);
    csivol_tests::run_to_exit("csivol-server", cmd, std::time::Duration::from_secs(120))
}

#[tokio::test]
async fn a_backup_of_the_etcd_store_restores_into_an_empty_prefix() {
    let dir = TestDir::new("ha-etcd-backup");
    let Ha { etcd, a, b: _b } = start_ha(&dir, &[]);
    let aa = a.api();
    let n1 = FakeAgent::new(&a, "n1").await;
    n1.register(0, false, json!([])).await;
    register_volume(&aa, "v1", "single-node-writer").await;
    let (status, c) = claim(&aa, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let (status, t) = aa
        .post("/v1/tokens", json!({"role": "claimer", "name": "ci"}))
        .await;
    assert_eq!(status, 201, "{t}");

    // Taken through csivol while both servers serve: one etcd revision, one SQLite file.
    let endpoints = format!("--etcd-endpoints={}", etcd.endpoints());
    let backup = dir.join("backup.db");
    let (status, out) = server_cmd(&[
        "backup".into(),
        endpoints.clone(),
        format!("--to={}", backup.display()),
    ]);
    assert!(status.success(), "{out}");
    assert!(out.contains("1 volumes"), "{out}");

    // Restored into an empty prefix, once; a prefix that holds a cluster is refused.
    let restore = || {
        server_cmd(&[
            "restore".into(),
            format!("--from={}", backup.display()),
            endpoints.clone(),
            "--etcd-prefix=/restored".into(),
        ])
    };
    let (status, out) = restore();
    assert!(status.success(), "{out}");
    assert!(
        out.contains("verified") || out.contains("rows into etcd"),
        "{out}"
    );
    let (status, out) = restore();
    assert!(!status.success(), "{out}");
    assert!(out.contains("already holds"), "{out}");

    // A server on the restored prefix serves the same cluster: volume, claim, tokens.
    let key = format!("--secrets-key-file={}", dir.join("secrets.key").display());
    let mut c = csivol_tests::ServerProc::start(
        &dir.join("c"),
        &["--store=etcd", &endpoints, "--etcd-prefix=/restored", &key],
    );
    c.token = a.token.clone();
    let (status, v) = c.api().get("/v1/volumes/v1").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["claims"][0]["alloc"], "a1", "{v}");
    assert_eq!(v["secret_keys"], json!(["key"]), "{v}");
    let ci = c.api().with_token(t["token"].as_str());
    assert_eq!(
        ci.get("/v1/volumes").await.0,
        200,
        "the backup's tokens work"
    );
}

#[tokio::test]
async fn check_refuses_state_in_etcd_that_does_not_fit_the_schema() {
    let dir = TestDir::new("ha-etcd-check");
    let Ha { etcd, a, b: _b } = start_ha(&dir, &[]);
    let aa = a.api();
    FakeAgent::new(&a, "n1")
        .await
        .register(0, false, json!([]))
        .await;
    register_volume(&aa, "v1", "single-node-writer").await;
    let (status, c) = claim(&aa, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let endpoints = format!("--etcd-endpoints={}", etcd.endpoints());
    let key = format!("--secrets-key-file={}", dir.join("secrets.key").display());
    let serve = |name: &str| {
        vec![
            "serve".to_owned(),
            format!("--data-dir={}", dir.join(name).display()),
            "--listen=127.0.0.1:0".to_owned(),
            "--store=etcd".to_owned(),
            endpoints.clone(),
            key.clone(),
            "--check".to_owned(),
        ]
    };
    // Healthy: a server with --check starts and says it checked.
    let flags = serve("checked");
    let flags: Vec<&str> = flags[3..].iter().map(String::as_str).collect();
    let checked = csivol_tests::ServerProc::start(&dir.join("checked"), &flags);
    assert!(
        checked.log().contains("the state in etcd passed its check"),
        "{}",
        checked.log()
    );
    drop(checked);

    // A second row for the same claim (volume, alloc) under another row id: loading keeps
    // one of them; the check finds that etcd holds more than fits.
    let ends: Vec<String> = etcd.members.iter().map(|m| m.client_url.clone()).collect();
    let client = csivol_etcd_client::Client::new(&ends).unwrap();
    let (_, rows) = client
        .range_prefix(b"/csivol/d/t/claims/", 0)
        .await
        .unwrap();
    let row = rows.first().expect("the claim's row");
    client
        .txn(
            vec![],
            vec![csivol_etcd_client::put(
                b"/csivol/d/t/claims/00000000000000099999".to_vec(),
                row.value.clone(),
                0,
            )],
            vec![],
        )
        .await
        .unwrap();
    let (status, out) = server_cmd(&serve("refused"));
    assert!(!status.success(), "{out}");
    assert!(out.contains("failed its check"), "{out}");
    assert!(out.contains("`claims`"), "names the table: {out}");
    assert!(out.contains("hint: restore"), "{out}");
}

#[tokio::test]
async fn migrate_reaches_an_etcd_over_tls() {
    let dir = TestDir::new("ha-migrate-tls");
    let (etcd, certs) = super::ha::etcd_over_tls(&dir);
    let mut single = csivol_tests::ServerProc::start(&dir.join("single"), &[]);
    register_volume(&single.api(), "v1", "single-node-writer").await;
    single.proc.terminate(std::time::Duration::from_secs(10));
    let migrate = |client_cert: bool| {
        let mut args = vec![
            "migrate".to_owned(),
            format!("--from=sqlite:{}", single.data_dir.display()),
            format!("--to=etcd:{}", etcd.endpoints()),
            format!("--etcd-ca-cert={}", certs.join("ca.pem").display()),
        ];
        if client_cert {
            args.push(format!(
                "--etcd-cert={}",
                certs.join("node-csivol-server.pem").display()
            ));
            args.push(format!(
                "--etcd-key={}",
                certs.join("node-csivol-server-key.pem").display()
            ));
        }
        server_cmd(&args)
    };
    let (status, out) = migrate(false);
    assert!(!status.success(), "etcd wants a client certificate: {out}");
    let (status, out) = migrate(true);
    assert!(status.success(), "{out}");
    assert!(out.contains("verified"), "{out}");
}
