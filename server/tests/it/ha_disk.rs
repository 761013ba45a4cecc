//! A server whose disk fills while another server writes: its copy of the state cannot
//! take those changes, and it must neither answer from that copy nor write on top of it
//! until it has reloaded the state from etcd.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use csivol_tests::etcd::EtcdCluster;
use csivol_tests::{ServerProc, TestDir, eventually};

use super::{WAIT, register_volume};

/// What a server logs when its copy of the state cannot take another server's change.
const MISSED: &str = "failed to apply another server's change to the mirror";
/// Most volumes registered through the other server while the disk is full.
const MAX_WHILE_FULL: usize = 2000;
/// Volumes registered through the server whose disk was full, once it is not.
const AFTER: usize = 12;

fn mount_tmpfs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48m", "tmpfs"])
        .arg(dir)
        .output()
        .expect("run mount");
    assert!(
        out.status.success(),
        "mount a tmpfs (the tests run as root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fills the file system of `dir` to its last byte.
fn fill(dir: &Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    let block = vec![0u8; 1 << 20];
    while f.write_all(&block).is_ok() {}
    while f.write_all(&[0u8; 512]).is_ok() {}
    while f.write_all(&[0u8; 1]).is_ok() {}
}

#[tokio::test]
async fn a_server_whose_disk_filled_reloads_before_it_serves_or_writes_again() {
    let dir = TestDir::new("ha-disk-full");
    let etcd = EtcdCluster::start(dir.path(), 3);
    let args = [
        "--store=etcd".to_owned(),
        format!("--etcd-endpoints={}", etcd.endpoints()),
        format!("--secrets-key-file={}", dir.join("secrets.key").display()),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = ServerProc::start(&dir.join("a"), &args);
    let b_dir = dir.join("b");
    mount_tmpfs(&b_dir);
    let mut b = ServerProc::start(&b_dir, &args);
    b.token = a.token.clone();
    let (aa, bb) = (a.api(), b.api());
    register_volume(&aa, "before", "single-node-writer").await;
    eventually("B to see the first volume", WAIT, || async {
        (bb.get("/v1/volumes/before").await.0 == 200).then_some(())
    })
    .await;

    // B's disk is full while A writes, until B fails to take one of A's changes (SQLite
    // may first reuse room its files already have).
    fill(&b_dir);
    let mut made = 0;
    while !b.log().contains(MISSED) {
        assert!(
            made < MAX_WHILE_FULL,
            "B took {made} changes on a full disk: {}",
            b.log()
        );
        register_volume(&aa, &format!("while-{made}"), "single-node-writer").await;
        made += 1;
    }

    // The disk freed, A's next change reaches B first: B must not apply it on top of the
    // one it missed (and then answer as if current), but reload.
    std::fs::remove_file(b_dir.join("filler")).unwrap();
    register_volume(&aa, "freed", "single-node-writer").await;
    eventually(
        "B to show the volume A registered once the disk was freed",
        WAIT,
        || async { (bb.get("/v1/volumes/freed").await.0 == 200).then_some(()) },
    )
    .await;
    // A consistent read of B shows all that A committed before: every earlier volume.
    for i in 0..made {
        let (status, body) = bb.get(&format!("/v1/volumes/while-{i}")).await;
        assert_eq!(status, 200, "B lost while-{i} of {made}: {body}");
    }

    // B's writes go on top of everything A wrote, overwriting none of it.
    for i in 0..AFTER {
        register_volume(&bb, &format!("after-{i}"), "single-node-writer").await;
    }
    let (status, events) = aa.get("/v1/events?limit=10000").await;
    assert_eq!(status, 200, "{events}");
    let events = events.as_array().expect("a list of events");
    for name in ["before".to_owned(), "freed".to_owned()]
        .into_iter()
        .chain((0..made).map(|i| format!("while-{i}")))
        .chain((0..AFTER).map(|i| format!("after-{i}")))
    {
        for api in [&aa, &bb] {
            let (status, body) = api.get(&format!("/v1/volumes/{name}")).await;
            assert_eq!(status, 200, "volume {name}: {body}");
        }
        assert!(
            events
                .iter()
                .any(|e| e["volume"] == name.as_str() && e["kind"] == "volume-registered"),
            "the registration of {name} is missing from the event log: {events:#?}"
        );
    }
}
