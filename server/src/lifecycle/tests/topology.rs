//! Topology: the segments a node plugin reports at registration, a volume's accessible
//! segments (registered, or returned by CreateVolume for its request), and the claims
//! refused at once on a node outside them (dry runs and `--queue` included).

use csivol_api::{
    ClaimMode, ClaimRequest, ClaimState, CreateVolumeSpec, ErrorCode, Report, Topology, VolumeSpec,
};
use serde_json::json;

use super::{Env, registration};
use crate::error::ApiError;

fn zone(z: &str) -> Topology {
    [("zone".to_owned(), z.to_owned())].into()
}

impl Env {
    /// Registers `node` (hosting the controller) whose plugin reports `zone=<z>`.
    pub(super) async fn register_in(&self, node: &str, z: &str) {
        let mut req = registration(node, true, &[]);
        let part = req.plugins[0].node.as_mut().expect("node service");
        part.info.accessible_topology = Some(zone(z));
        let n = node.to_owned();
        self.write(move |ctx, l| super::super::register_node(ctx, &n, &req, l))
            .await
            .unwrap();
    }

    /// Registers volume `name` accessible from `zones` (empty: from everywhere).
    pub(super) async fn zonal_volume(&self, name: &str, access_mode: &str, zones: &[&str]) {
        let spec: VolumeSpec = serde_json::from_value(json!({
            "plugin": "hp", "external_id": format!("ext-{name}"),
            "access_mode": access_mode, "attachment": "file-system",
            "topology": zones.iter().map(|z| json!({"zone": z})).collect::<Vec<_>>(),
        }))
        .unwrap();
        let n = name.to_owned();
        self.write(move |ctx, _| super::super::register_volume(ctx, &n, spec.clone(), "op"))
            .await
            .unwrap();
    }
}

#[track_caller]
fn assert_topology_refusal(e: &ApiError, node: &str, hint_names: &str) {
    assert_eq!(e.code(), ErrorCode::Topology, "{e:?}");
    assert!(
        e.message
            .contains(&format!("node `{node}` is outside the topology")),
        "{e:?}"
    );
    assert!(
        e.hint.as_deref().is_some_and(|h| h.contains(hint_names)),
        "the hint names {hint_names}: {e:?}"
    );
}

#[tokio::test]
async fn registration_records_each_node_plugins_segments() {
    let env = Env::new();
    env.register_in("n1", "a").await;
    env.register("n2", false, &[]).await;
    let n1 = env.read(|c| c.node_plugin("n1", "hp")).await.unwrap();
    assert_eq!(n1.topology, zone("a"));
    let n2 = env.read(|c| c.node_plugin("n2", "hp")).await.unwrap();
    assert!(n2.topology.is_empty(), "no segments reported: {n2:?}");
    // A registration replaces them: the plugin moved.
    env.register_in("n1", "b").await;
    let n1 = env.read(|c| c.node_plugin("n1", "hp")).await.unwrap();
    assert_eq!(n1.topology, zone("b"));
    let ready = env.read(|c| c.ready_plugin_nodes("hp")).await;
    assert_eq!(
        ready,
        [
            ("n1".to_owned(), zone("b")),
            ("n2".to_owned(), Topology::new())
        ]
    );
}

#[tokio::test]
async fn a_claim_outside_the_volumes_topology_is_refused_naming_nodes_inside() {
    let env = Env::new();
    env.register_in("n1", "a").await;
    env.register_in("n2", "b").await;
    env.register_in("n3", "a").await;
    env.zonal_volume("v", "multi-node-multi-writer", &["a"])
        .await;

    let e = env
        .claim("v", "a1", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_topology_refusal(&e, "n2", "n1, n3");
    assert!(
        e.message.contains("{zone=a}") && e.message.contains("{zone=b}"),
        "{e:?}"
    );
    assert_eq!(env.claim_state("v", "a1").await, None, "nothing recorded");

    // The dry run answers the same, and a node inside is accepted.
    let req = ClaimRequest::new("a1", "n2", ClaimMode::Write);
    let limits = env.limits.clone();
    let dry = env
        .read(move |c| {
            super::super::claim_dry_run(c, "v", &req, &limits, crate::clock::Clock::wall().now_ms())
        })
        .await;
    assert!(!dry.accepted);
    assert_eq!(
        dry.error.as_ref().map(|e| e.code),
        Some(ErrorCode::Topology)
    );
    let c = env.claim("v", "a1", "n3", ClaimMode::Write).await.unwrap();
    assert_eq!(c.node, "n3");

    // A node outside that is ineligible or lost is not named.
    env.write(|ctx, l| super::super::nodes::mark_lost(ctx, "n1", "missed heartbeats", l))
        .await
        .unwrap();
    let e = env
        .claim("v", "a2", "n2", ClaimMode::Read)
        .await
        .unwrap_err();
    assert_topology_refusal(
        &e,
        "n2",
        "claim it on a node in that topology: n3 (e.g. --node n3)",
    );
}

#[tokio::test]
async fn a_queued_claim_never_waits_for_a_node_outside_the_topology() {
    let env = Env::new();
    env.register_in("n1", "a").await;
    env.register_in("n2", "b").await;
    env.zonal_volume("v", "single-node-writer", &["a"]).await;
    env.ready_claim("v", "holder", "n1").await;

    // Held on n1: a queued claim on n1 waits in line...
    let mut inside = ClaimRequest::new("q1", "n1", ClaimMode::Write);
    inside.queue = true;
    let c = env.claim_with("v", inside).await.unwrap();
    assert_eq!(c.state, ClaimState::Queued);
    // ...one on n2 can never fit: refused at once, whatever holds the volume.
    let mut outside = ClaimRequest::new("q2", "n2", ClaimMode::Write);
    outside.queue = true;
    let e = env.claim_with("v", outside).await.unwrap_err();
    assert_topology_refusal(&e, "n2", "n1");
    assert_eq!(env.claim_state("v", "q2").await, None);
}

#[tokio::test]
async fn a_volume_without_topology_is_claimed_anywhere_and_a_node_without_segments_is_outside_any()
{
    let env = Env::new();
    env.register_in("n1", "a").await;
    env.register("n2", true, &[]).await;
    env.zonal_volume("any", "multi-node-multi-writer", &[])
        .await;
    env.claim("any", "a1", "n1", ClaimMode::Write)
        .await
        .unwrap();
    env.claim("any", "a2", "n2", ClaimMode::Write)
        .await
        .unwrap();

    env.zonal_volume("za", "multi-node-multi-writer", &["a", "c"])
        .await;
    let e = env
        .claim("za", "a3", "n2", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_topology_refusal(&e, "n2", "n1");
    assert!(e.message.contains("{zone=a} or {zone=c}"), "{e:?}");
    assert!(e.message.contains("reports {} there"), "{e:?}");
}

#[tokio::test]
async fn create_passes_the_request_and_records_where_the_volume_landed() {
    let env = Env::new();
    env.register_in("n1", "a").await;
    env.register_in("n2", "b").await;
    let spec: CreateVolumeSpec = serde_json::from_value(json!({
        "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
        "topology_request": {"required": [{"zone": "b"}, {"zone": "c"}], "preferred": [{"zone": "b"}]},
    }))
    .unwrap();
    let (v, _) = env
        .write(move |ctx, l| super::super::create_volume(ctx, "new", spec.clone(), "op", l))
        .await
        .unwrap();
    let asked = v.topology_request.clone().expect("recorded");
    assert_eq!(asked.required, [zone("b"), zone("c")]);
    assert_eq!(asked.preferred, [zone("b")]);

    let host = if env.ops_of("n1").await.is_empty() {
        "n2"
    } else {
        "n1"
    };
    let op = env.ops_of(host).await.remove(0);
    let api_op = env
        .read(move |c| super::super::ops::op_to_api(c, &op))
        .await
        .expect("the volume exists");
    match &api_op.kind {
        csivol_api::ControllerOpKind::Create {
            topology_request, ..
        } => assert_eq!(topology_request.as_ref(), Some(&asked)),
        other => panic!("expected a create, got {other:?}"),
    }

    env.report(
        host,
        vec![Report::Created {
            op: api_op.id,
            attempt: api_op.attempt,
            external_id: "disk-b".into(),
            capacity_bytes: 0,
            context: Default::default(),
            accessible_topology: vec![zone("b")],
            made_for: None,
        }],
    )
    .await;
    let v = env.read(|c| c.require_volume("new")).await;
    assert_eq!(v.accessible_topology, [zone("b")]);
    assert_eq!(
        env.events_of("volume-created").await,
        ["volume-created new - -"]
    );
    let e = env
        .claim("new", "a1", "n1", ClaimMode::Write)
        .await
        .unwrap_err();
    assert_topology_refusal(&e, "n1", "n2");
    env.claim("new", "a1", "n2", ClaimMode::Write)
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_topology_in_a_spec_is_refused_with_what_to_fix() {
    let env = Env::new();
    env.register_in("n1", "a").await;
    let create = |request: serde_json::Value| -> CreateVolumeSpec {
        serde_json::from_value(json!({
            "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
            "topology_request": request,
        }))
        .unwrap()
    };
    // (request, what the message says)
    let cases = [
        (
            json!({"required": [{"zone": "a"}], "preferred": [{"zone": "b"}]}),
            "preferred segment {zone=b} is not among the required ones",
        ),
        (
            json!({"required": [{"zone": ""}]}),
            "`topology_request.required` segment 1 has an empty key or value",
        ),
        (
            json!({"preferred": [{"zone": "a"}, {}]}),
            "`topology_request.preferred` segment 2 is empty",
        ),
        (
            json!({"required": [{"zone": "a"}, {"zone": "a"}]}),
            "`topology_request.required` lists segment {zone=a} twice",
        ),
    ];
    for (request, want) in cases {
        let spec = create(request.clone());
        let e = env
            .write(move |ctx, l| super::super::create_volume(ctx, "v", spec.clone(), "op", l))
            .await
            .unwrap_err();
        assert_eq!(e.code(), ErrorCode::Invalid, "{request}: {e:?}");
        assert!(e.message.contains(want), "{request}: {e:?}");
        assert!(e.hint.is_some(), "{request}: a hint says what to do: {e:?}");
    }
    let spec: VolumeSpec = serde_json::from_value(json!({
        "plugin": "hp", "external_id": "x", "access_mode": "single-node-writer",
        "attachment": "file-system", "topology": [{"": "a"}],
    }))
    .unwrap();
    let e = env
        .write(move |ctx, _| super::super::register_volume(ctx, "v", spec.clone(), "op"))
        .await
        .unwrap_err();
    assert!(
        e.message.contains("`topology` segment 1 has an empty key"),
        "{e:?}"
    );
}
