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
