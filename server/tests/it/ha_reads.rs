//! Reads over the etcd store are linearizable: a read on one server sees every write any
//! server acknowledged before it was sent, with no waiting on the caller's side; a read
//! that cannot be made so is refused as unavailable, never answered from a copy that may
//! be stale, unless the caller asked for a stale read.

use std::time::Duration;

use csivol_tests::TestDir;
use csivol_tests::etcd::{Ha, start_ha};

use super::register_volume;

#[tokio::test]
async fn a_read_on_either_server_sees_every_write_acknowledged_before_it() {
    let dir = TestDir::new("ha-consistent-reads");
    let Ha { mut etcd, a, b } = start_ha(&dir, &[]);
    let (aa, bb) = (a.api(), b.api());

    // Written through one server, read at once through the other: the read is sent only
    // after the write was acknowledged, so it must see it, every time.
    for i in 0..100 {
        let (writer, reader) = if i % 2 == 0 { (&aa, &bb) } else { (&bb, &aa) };
        let name = format!("v{i}");
        register_volume(writer, &name, "single-node-writer").await;
        let (status, v) = reader.get(&format!("/v1/volumes/{name}")).await;
        assert_eq!(
            status, 200,
            "{name} read right after it was written elsewhere: {v}"
        );
        let (status, list) = reader.get("/v1/volumes?limit=1000").await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(
            list.as_array().map(Vec::len),
            Some(i + 1),
            "the list holds {name}"
        );
    }
    let (status, stale) = bb.get("/v1/volumes/v0?stale=true").await;
    assert_eq!(
        status, 200,
        "a stale read is allowed when asked for: {stale}"
    );
    let (status, bad) = bb.get("/v1/volumes/v0?stale=maybe").await;
    assert_eq!(status, 400, "{bad}");

    // Without a quorum nothing can say what is current: reads are refused, unless stale.
    etcd.kill(1);
    etcd.kill(2);
    let (status, body) = bb.get("/v1/volumes/v0").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    assert!(
        body["error"]["hint"].as_str().unwrap().contains("--stale"),
        "{body}"
    );
    let (status, v) = bb.get("/v1/volumes/v0?stale=true").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["name"], "v0");
    // The CLI: exit 8 (unavailable) for a consistent read, the copy with --stale.
    let cli = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol"));
        cmd.args(["volume", "show", "v0", "-o", "json"])
            .args(extra)
            .env_clear()
            .env("CSIVOL_ADDR", &b.url)
            .env("CSIVOL_TOKEN", &a.token)
            .env("HOME", dir.join("home"))
            .stdin(std::process::Stdio::null());
        csivol_tests::run_to_exit("csivol volume show", cmd, Duration::from_secs(60))
    };
    let (exit, out) = cli(&[]);
    assert_eq!(exit.code(), Some(8), "{out}");
    assert!(out.contains("could not be made consistent"), "{out}");
    let (exit, out) = cli(&["--stale"]);
    assert_eq!(exit.code(), Some(0), "{out}");
    assert!(out.contains("\"v0\""), "{out}");
}
