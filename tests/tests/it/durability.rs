//! The server on a data dir that fills up: a node lost meanwhile is recorded once the disk
//! has room again, the server says it is degraded (API and `csivol status`), and no log
//! line claims a change that was rolled back. A real tmpfs (the tests run as root).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, bin_path, eventually, run_to_exit};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// Mounts a small tmpfs at `path` (undone by the TestDir holding it, even on a panic).
fn mount_tmpfs(path: &Path, size: &str) {
    use rustix::mount::{MountFlags, mount};
    std::fs::create_dir_all(path).unwrap();
    let opts = std::ffi::CString::new(format!("size={size}")).unwrap();
    mount(
        "tmpfs",
        path,
        "tmpfs",
        MountFlags::empty(),
        Some(opts.as_c_str()),
    )
    .unwrap_or_else(|e| {
        panic!(
            "mount a tmpfs at {} (the tests run as root): {e}",
            path.display()
        )
    });
}

/// Fills the filesystem of `dir` with `dir/filler` until it has no room left.
fn fill(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        if f.write_all(&block).is_err() {
            break;
        }
    }
    // Small writes too, down to the last page.
    while f.write_all(&[0u8; 512]).is_ok() {}
    let _ = f.sync_all();
}

async fn health(api: &Api) -> Value {
    let (status, h) = api.get("/v1/health").await;
    assert_eq!(status, 200, "{h}");
    h
}

fn csivol_status(server: &ServerProc) -> String {
    let mut cmd = Command::new(bin_path("csivol"));
    cmd.args(["status", "--no-color"])
        .env("CSIVOL_ADDR", &server.url)
        .env("CSIVOL_TOKEN", &server.token)
        .env_remove("CSIVOL_TOKEN_FILE");
    let (status, out) = run_to_exit("csivol status", cmd, WAIT);
    assert!(status.success(), "{out}");
    out
}

#[tokio::test]
async fn a_lost_node_is_recorded_once_a_full_disk_has_room_again() {
    let dir = TestDir::new("durability-full");
    let data = dir.join("server");
    mount_tmpfs(&data, "4m");
    let server = ServerProc::start(&data, &["--heartbeat-ttl=1s"]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    let beating = n1.keep_alive();
    let (status, body) = api
        .put(
            "/v1/volumes/v1",
            json!({"plugin": "hp", "external_id": "e1", "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = api
        .post(
            "/v1/volumes/v1/claims",
            json!({"alloc": "a1", "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(health(&api).await["status"], "ok");

    fill(&data);
    // A write on a full disk is refused, and not logged as done.
    let (status, body) = api
        .put(
            "/v1/volumes/never",
            json!({"plugin": "hp", "external_id": "e2", "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable");
    assert!(
        !server.log().contains("never"),
        "a rolled-back change is not logged: {}",
        server.log()
    );

    // The node dies while the database refuses writes.
    drop(beating);
    let h = eventually(
        "the server to say the loss is not recorded",
        WAIT,
        || async {
            let h = health(&api).await;
            let reasons = h["reasons"].to_string();
            (h["status"] == "degraded" && reasons.contains("n1")).then_some(h)
        },
    )
    .await;
    assert!(h["reasons"].to_string().contains("refuses writes"), "{h}");
    let out = csivol_status(&server);
    assert!(out.contains("server:  degraded"), "{out}");
    assert!(out.contains("lost node(s) n1 not recorded yet"), "{out}");

    std::fs::remove_file(data.join("filler")).unwrap();
    eventually("the loss to be recorded", WAIT, || async {
        let (_, c) = api.get("/v1/volumes/v1/claims/a1").await;
        (c["state"] == "blocked").then_some(())
    })
    .await;
    let (_, n) = api.get("/v1/nodes/n1").await;
    assert_eq!(n["status"], "lost", "{n}");
    eventually("health to be ok again", WAIT, || async {
        (health(&api).await["status"] == "ok").then_some(())
    })
    .await;
    assert!(
        server
            .log()
            .contains("recorded a lost node after the database refused it"),
        "{}",
        server.log()
    );
    let out = csivol_status(&server);
    assert!(!out.contains("degraded"), "{out}");
    // Nothing the server acknowledged was lost, and nothing refused appeared.
    let (status, _) = api.get("/v1/volumes/never").await;
    assert_eq!(status, 404);
}
