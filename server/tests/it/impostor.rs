//! A node cannot pass for another at the storage: the CSI node id a node's plugin reports
//! is what ControllerPublishVolume and ControllerUnpublishVolume name, so a node that
//! registered another's id would have volumes attached to and detached from the other
//! machine on its own claims' behalf. The server refuses such a registration.

use csivol_tests::{FakeAgent, TestDir};
use serde_json::{Value, json};

use super::{claim, register_volume, start};

/// A registration of plugin `hp` (node service) with this CSI node id.
fn registration(node_id: &str) -> Value {
    json!({"plugins": [{
        "id": "hp",
        "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
        "capabilities": {"controller_service": true, "volume_accessibility_constraints": false},
        "node": {
            "info": {"node_id": node_id, "max_volumes_per_node": 0},
            "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}
        }
    }]})
}

#[tokio::test]
async fn a_node_cannot_register_another_nodes_csi_node_id() {
    let dir = TestDir::new("server-impostor");
    let server = start(&dir, &[]);
    let api = server.api();
    let host = FakeAgent::new(&server, "host").await;
    host.register(0, true, json!([])).await;
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    let n2 = FakeAgent::new(&server, "n2").await;

    let (status, body) = n2
        .api
        .post("/v1/nodes/n2/register", registration("csi-n1"))
        .await;
    assert_eq!(status, 409, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("reports the CSI node id `csi-n1`, which node `n1` registered"),
        "{body}"
    );
    assert!(
        body["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol node remove n1"),
        "{body}"
    );
    let (status, _) = api.get("/v1/nodes/n2").await;
    assert_eq!(status, 404, "n2 was not registered");
    let (_, events) = api.get("/v1/events?node=n2").await;
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "node-id-refused" && e["actor"] == "node:n2"),
        "{events}"
    );

    // With its own id it registers, and ControllerPublish for its claim names its machine.
    let (status, body) = n2
        .api
        .post("/v1/nodes/n2/register", registration("csi-n2"))
        .await;
    assert_eq!(status, 200, "{body}");
    register_volume(&api, "v", "multi-node-multi-writer").await;
    let (status, body) = claim(&api, "v", "a2", "n2", "write").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(host.wait_op("publish").await["node_id"], "csi-n2");
    // n1 registers again with its id: it is its own.
    n1.register(0, false, json!([])).await;

    // Once n1 is forgotten, its id is free.
    let (status, body) = api.delete("/v1/nodes/n1").await;
    assert_eq!(status, 204, "{body}");
    let n3 = FakeAgent::new(&server, "n3").await;
    let (status, body) = n3
        .api
        .post("/v1/nodes/n3/register", registration("csi-n1"))
        .await;
    assert_eq!(status, 200, "{body}");
}
