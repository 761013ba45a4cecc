//! What the server acknowledged survives kill -9, and a database from a newer version is refused.

use csivol_tests::{Api, FakeAgent, TestDir, eventually};
use serde_json::{Value, json};

use super::{WAIT, register_volume, start};

#[tokio::test]
async fn acknowledged_claims_survive_kill_9() {
    let dir = TestDir::new("server-kill");
    let mut server = start(&dir, &[]);
    let api = server.api();
    FakeAgent::new(&server, "n1")
        .await
        .register(0, false, json!([]))
        .await;
    for i in 0..200 {
        register_volume(&api, &format!("v{i}"), "multi-node-multi-writer").await;
    }
    // Claims arrive from many clients; the server is killed while they do.
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                let r = api
                    .http_post_lenient(
                        &format!("/v1/volumes/v{i}/claims"),
                        json!({"alloc": format!("a{i}"), "node": "n1", "mode": "write"}),
                    )
                    .await;
                (i, r)
            })
        })
        .collect();
    // Kill once some claims were acknowledged. Two hundred clients claiming at once take a
    // while on a busy machine before the first twenty are through: a deadline of minutes.
    eventually("some claims acknowledged", 6 * WAIT, || async {
        let (_, vols) = api.get("/v1/volumes?state=attached").await;
        (vols.as_array().map_or(0, Vec::len) >= 20).then_some(())
    })
    .await;
    server.restart_after_kill();
    let mut acknowledged = Vec::new();
    for t in tasks {
        let (i, status) = t.await.unwrap();
        if status == Some(201) {
            acknowledged.push(i);
        }
    }
    assert!(
        acknowledged.len() >= 20,
        "only {} acknowledged",
        acknowledged.len()
    );
    let api = server.api();
    for i in &acknowledged {
        let (status, c) = api.get(&format!("/v1/volumes/v{i}/claims/a{i}")).await;
        assert_eq!(
            status, 200,
            "acknowledged claim a{i} lost after kill -9: {c}"
        );
    }
    // Nothing half-written: every claim that exists has its attachment.
    let (_, vols) = api.get("/v1/volumes").await;
    for v in vols.as_array().unwrap() {
        let claims = v["claims"].as_array().unwrap();
        let atts = v["attachments"].as_array().unwrap();
        assert_eq!(
            claims.len(),
            atts.len(),
            "claim without attachment or the reverse: {v}"
        );
    }
}

trait Lenient {
    async fn http_post_lenient(&self, path: &str, body: Value) -> Option<u16>;
}

impl Lenient for Api {
    /// A POST that reports a dropped connection as `None` instead of panicking.
    async fn http_post_lenient(&self, path: &str, body: Value) -> Option<u16> {
        // A client of its own, as each claimant would have.
        let own = Api::new(&self.base, self.token.as_deref());
        let answer = own.send("POST", path, Some(body)).await;
        answer.ok().map(|r| r.status.as_u16())
    }
}

#[test]
fn refuses_a_database_from_a_newer_version() {
    let dir = TestDir::new("server-schema");
    let data = dir.join("server");
    std::fs::create_dir_all(&data).unwrap();
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    conn.pragma_update(None, "user_version", 42).unwrap();
    drop(conn);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_csivol-server"))
        .args(["serve", "--listen=127.0.0.1:0"])
        .arg(format!("--data-dir={}", data.display()))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("schema version 42, newer than this csivol-server"),
        "{err}"
    );
}
