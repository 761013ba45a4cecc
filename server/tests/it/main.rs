//! csivol-server tests: the server over real HTTP on loopback, with real SQLite files in
//! temp dirs (and a real etcd cluster for `--store etcd`). Node agents are played by a test
//! client of the agent endpoints (the real agent has its own tests, in csivol-agent's).

mod access;
mod authorisation;
mod availability;
mod bounds;
mod channel;
mod claims;
mod connections;
mod controller;
mod counts;
mod durability;
mod fence;
mod generation;
mod ha;
mod ha_disk;
mod ha_faults;
mod ha_fence;
mod ha_members;
mod ha_namespaces;
mod ha_parity;
mod ha_reads;
mod ha_retries;
mod ha_scopes;
mod ha_upgrade;
mod hosting;
mod impostor;
mod listings;
mod lost;
mod namespace_claims;
mod owners;
mod pools;
mod queue_and_leases;
mod retries;
mod secrets;
mod start;
mod state;

use std::time::Duration;

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::{Value, json};

pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) fn start(dir: &TestDir, extra: &[&str]) -> ServerProc {
    ServerProc::start(&dir.join("server"), extra)
}

pub(crate) async fn wait_volume_state(api: &Api, volume: &str, state: &str) {
    eventually(&format!("{volume} {state}"), WAIT, || async {
        let (_, v) = api.get(&format!("/v1/volumes/{volume}")).await;
        (v["state"] == state).then_some(())
    })
    .await;
}

pub(crate) async fn register_volume(api: &Api, name: &str, mode: &str) {
    let (status, body) = api
        .put(
            &format!("/v1/volumes/{name}"),
            json!({"plugin": "hp", "external_id": format!("ext-{name}"), "access_mode": mode, "attachment": "file-system", "secrets": {"key": "s3cret"}}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

/// Nodes n1 and n2 registered through `server` (holding nothing), and volumes `v0` ..
/// `v{volumes-1}` of access mode `mode` through `api`: what the HA load tests claim.
pub(crate) async fn two_nodes_and_volumes(
    server: &ServerProc,
    api: &Api,
    volumes: usize,
    mode: &str,
) {
    for n in ["n1", "n2"] {
        FakeAgent::new(server, n)
            .await
            .register(0, false, json!([]))
            .await;
    }
    for i in 0..volumes {
        register_volume(api, &format!("v{i}"), mode).await;
    }
}

pub(crate) async fn claim(
    api: &Api,
    volume: &str,
    alloc: &str,
    node: &str,
    mode: &str,
) -> (u16, Value) {
    api.post(
        &format!("/v1/volumes/{volume}/claims"),
        json!({"alloc": alloc, "node": node, "mode": mode}),
    )
    .await
}

pub(crate) async fn claim_state(api: &Api, volume: &str, alloc: &str) -> Option<String> {
    let (status, body) = api
        .get(&format!("/v1/volumes/{volume}/claims/{alloc}"))
        .await;
    (status == 200).then(|| body["state"].as_str().unwrap().to_owned())
}

/// Drives a claim to ready through a controller host and the node.
pub(crate) async fn make_ready(
    api: &Api,
    host: &FakeAgent,
    node: &FakeAgent,
    volume: &str,
    alloc: &str,
) {
    let (status, body) = claim(api, volume, alloc, &node.node, "write").await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["state"], "attaching");
    let op = host.wait_op("publish").await;
    assert_eq!(
        op["node_id"],
        format!("csi-{}", node.node),
        "ControllerPublish names the plugin's node id"
    );
    host.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {"dev": "/dev/x"}}])).await;
    assert_eq!(
        claim_state(api, volume, alloc).await.as_deref(),
        Some("publishing")
    );
    let d = node.desired().await;
    let p = d["publish"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["alloc"] == alloc)
        .cloned()
        .expect("claim in desired state");
    assert_eq!(p["publish_context"]["dev"], "/dev/x");
    assert_eq!(
        p["secrets"]["key"], "s3cret",
        "the node gets the secrets it needs"
    );
    node.report(json!([{"kind": "published", "volume": volume, "alloc": alloc, "target_path": format!("/mnt/{alloc}")}])).await;
    assert_eq!(
        claim_state(api, volume, alloc).await.as_deref(),
        Some("ready")
    );
}

/// Takes a database this build made back to the schema of the release before: this
/// release's schema changes are one migration (the retries' tables, the external-id and
/// parameter-set indexes, the claims' `drift` and `claimer` columns, the namespaces and
/// their quotas), undone here, and the version one
/// lower, so that the next start migrates it as an upgrade does. Rows the older schema
/// has are kept with their ids.
pub(crate) fn back_to_the_previous_schema(conn: &rusqlite::Connection) {
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    conn.execute_batch(
        "DROP INDEX volumes_external_id;
         DROP INDEX volumes_parameters;
         DROP TABLE request_keys;
         DROP TABLE claim_tombstones;
         DROP INDEX claims_claimer;
         ALTER TABLE claims DROP COLUMN claimer;
         ALTER TABLE claims DROP COLUMN drift;
         ALTER TABLE claims DROP COLUMN mount;
         DROP TABLE volume_mounts;
         DROP TABLE volume_availability;
         ALTER TABLE tokens DROP COLUMN scope;
         DROP TABLE job_volumes;

         DROP TABLE volume_labels;
         DROP TABLE pools;
         DROP TABLE volume_cache_keys;
         DROP INDEX pool_claims_pool;
         DROP INDEX pool_claims_member;
         DROP TABLE pool_claims;
         DROP TABLE pool_waiters;
         DROP INDEX lingers_node;
         DROP INDEX lingers_until;
         DROP TABLE lingers;
         DROP TABLE namespaces;
         DROP TABLE namespace_quotas;",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", version - 1)
        .unwrap();
}
