//! Volume secrets at rest: sealed under `secrets.key`, rotated with the server stopped,
//! refused at start under the wrong key.

use std::process::Command;
use std::time::Duration;

use csivol_tests::{FakeAgent, ServerProc, TestDir, bin_path, run_to_exit};
use serde_json::json;

use super::{make_ready, register_volume};

const WAIT: Duration = Duration::from_secs(20);

fn contains(path: &std::path::Path, needle: &str) -> bool {
    std::fs::read(path)
        .unwrap_or_default()
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Runs `csivol-server COMMAND ARGS` on `data` (`serve` on a free port) to its end.
fn server_cmd(data: &std::path::Path, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.args(args).arg(format!("--data-dir={}", data.display()));
    if args[0] == "serve" {
        cmd.arg("--listen=127.0.0.1:0");
    }
    let (status, out) = run_to_exit(&format!("csivol-server {}", args[0]), cmd, WAIT);
    (status.success(), out)
}

#[tokio::test]
async fn secrets_are_sealed_rotated_and_need_their_key() {
    let dir = TestDir::new("server-secrets");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v1", "single-node-writer").await;
    for f in ["state.db", "state.db-wal"] {
        assert!(!contains(&data.join(f), "s3cret"), "{f} holds the secret");
    }
    let key = std::fs::read_to_string(data.join("secrets.key")).unwrap();
    server.proc.kill();

    // Rotation refuses a running server, then seals again under a new key.
    let (ok, out) = server_cmd(&data, &["rotate-secrets-key"]);
    assert!(ok, "{out}");
    assert!(out.contains("sealed the secrets of 1 volume(s)"), "{out}");
    let rotated = std::fs::read_to_string(data.join("secrets.key")).unwrap();
    assert_ne!(key, rotated);
    assert!(!data.join("secrets.key.new").exists());

    // The old key no longer opens them: the server refuses to start, saying why.
    let old = dir.join("old.key");
    std::fs::write(&old, &key).unwrap();
    let (ok, out) = server_cmd(
        &data,
        &["serve", &format!("--secrets-key-file={}", old.display())],
    );
    assert!(!ok, "{out}");
    assert!(out.contains("sealed with key"), "{out}");
    assert!(out.contains("hint: start with the secrets key"), "{out}");

    // With the new key everything works: the node still gets the secret it needs.
    let server = ServerProc::start(&data, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    let (status, running) = server_cmd(&data, &["rotate-secrets-key"]);
    assert!(!status, "{running}");
    assert!(running.contains("stop that server"), "{running}");
    make_ready(&api, &n1, &n1, "v1", "a1").await;
    assert!(!contains(&data.join("state.db-wal"), "s3cret"));
    assert!(!server.log().contains("s3cret"));
}

/// A data dir started with a key file that is not its own is refused even when no volume
/// has secrets yet (nothing else would notice until a secret is needed); a key made afresh
/// for it (a backup restored without its key file) takes over, since no secret is lost.
#[tokio::test]
async fn another_key_is_refused_before_any_secret_needs_it() {
    let dir = TestDir::new("server-secrets-check");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    server.proc.kill();
    let other = dir.join("other.key");
    std::fs::write(&other, format!("{}\n", "ab".repeat(32))).unwrap();
    let (ok, out) = server_cmd(
        &data,
        &["serve", &format!("--secrets-key-file={}", other.display())],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("is not the one this cluster's secrets are sealed with"),
        "{out}"
    );
    assert!(
        out.contains("hint: give every server of the cluster the same key file"),
        "{out}"
    );
    // Rotated, the data dir's own key still passes.
    let (ok, out) = server_cmd(&data, &["rotate-secrets-key"]);
    assert!(ok, "{out}");
    let mut server = ServerProc::start(&data, &[]);
    assert_eq!(server.api().get("/v1/health").await.0, 200);
    server.proc.kill();
    // The key file gone: a new one is made, and it takes over.
    std::fs::remove_file(data.join("secrets.key")).unwrap();
    let server = ServerProc::start(&data, &[]);
    assert_eq!(server.api().get("/v1/health").await.0, 200);
    assert!(
        server.log().contains("this key seals them from now on"),
        "{}",
        server.log()
    );
}
