//! The server's state is never silently lost or wrong: a data dir that held a cluster does
//! not start as an empty one, backups restore, and transitions decided in memory are
//! recorded even after the database refused them for a while.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use csivol_tests::{ServerProc, TestDir, bin_path, run_to_exit};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// Starts `csivol-agent server` on `data_dir` expecting it to refuse; returns what it said.
fn refused_start(data_dir: &Path) -> String {
    let mut cmd = Command::new(bin_path("csivol-agent"));
    cmd.args(["server", "--listen=127.0.0.1:0"])
        .arg(format!("--data-dir={}", data_dir.display()));
    let (status, out) = run_to_exit("csivol-agent server", cmd, WAIT);
    assert!(!status.success(), "the server started: {out}");
    out
}

/// A cluster with one volume, whose server was killed (its state still in the WAL).
async fn killed_cluster(dir: &TestDir) -> (std::path::PathBuf, String) {
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let (status, body) = server
        .api()
        .put(
            "/v1/volumes/v1",
            json!({"plugin": "hp", "external_id": "e1", "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = std::fs::read_to_string(data.join("cluster.id")).unwrap();
    assert_eq!(
        id.trim().len(),
        32,
        "a cluster id is written beside the database: {id}"
    );
    server.proc.kill();
    (data, id.trim().to_owned())
}

#[tokio::test]
async fn a_restart_keeps_the_cluster_and_its_id() {
    let dir = TestDir::new("state-restart");
    let (data, id) = killed_cluster(&dir).await;
    let server = ServerProc::start(&data, &[]);
    let (status, v) = server.api().get("/v1/volumes/v1").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        std::fs::read_to_string(data.join("cluster.id"))
            .unwrap()
            .trim(),
        id
    );
    assert!(
        server.log().contains(&format!("cluster={id}")),
        "{}",
        server.log()
    );
}

#[tokio::test]
async fn a_lost_wal_is_refused_not_started_as_an_empty_cluster() {
    let dir = TestDir::new("state-no-wal");
    let (data, id) = killed_cluster(&dir).await;
    let wal = data.join("state.db-wal");
    assert!(
        wal.exists(),
        "a small database keeps its changes in the WAL"
    );
    std::fs::remove_file(&wal).unwrap();
    let out = refused_start(&data);
    assert!(out.contains("holds no cluster state"), "{out}");
    assert!(
        out.contains("state.db-wal"),
        "names the missing file: {out}"
    );
    assert!(out.contains(&format!("cluster {id}")), "{out}");
    assert!(
        out.contains("hint: restore the latest backup with `csivol-agent server restore"),
        "{out}"
    );
    // Refusing twice is as safe as once: the first refusal changed nothing.
    let again = refused_start(&data);
    assert!(again.contains("holds no cluster state"), "{again}");
    assert!(!again.contains("migrated"), "{again}");
}

#[tokio::test]
async fn an_empty_or_missing_database_is_refused() {
    let dir = TestDir::new("state-empty-db");
    let (data, _) = killed_cluster(&dir).await;
    for f in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(data.join(f));
    }
    std::fs::File::create(data.join("state.db")).unwrap(); // truncated to 0 bytes
    let out = refused_start(&data);
    assert!(out.contains("is empty (0 bytes)"), "{out}");
    std::fs::remove_file(data.join("state.db")).unwrap();
    let out = refused_start(&data);
    assert!(out.contains("is missing"), "{out}");
    assert!(
        !data.join("state.db").exists(),
        "a refused start creates nothing"
    );
    // An operator token alone is a sign of a cluster too.
    std::fs::remove_file(data.join("cluster.id")).unwrap();
    let out = refused_start(&data);
    assert!(out.contains("operator.token"), "{out}");
}

#[tokio::test]
async fn a_database_of_another_cluster_is_refused() {
    let dir = TestDir::new("state-other-cluster");
    let (data, _) = killed_cluster(&dir).await;
    std::fs::write(
        data.join("cluster.id"),
        "0123456789abcdef0123456789abcdef\n",
    )
    .unwrap();
    let out = refused_start(&data);
    assert!(
        out.contains("belongs to cluster 0123456789abcdef0123456789abcdef"),
        "{out}"
    );
}

#[tokio::test]
async fn two_servers_never_share_a_data_dir() {
    let dir = TestDir::new("state-lock");
    let data = dir.join("server");
    let _server = ServerProc::start(&data, &[]);
    let out = refused_start(&data);
    assert!(
        out.contains("another csivol server is running on data dir"),
        "{out}"
    );
}
