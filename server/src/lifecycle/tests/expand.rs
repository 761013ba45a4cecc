//! Expansion: ControllerExpandVolume as a controller operation, then NodeExpandVolume on the
//! nodes where the volume is attached; the rules' refusals as the API gives them.

use csivol_api::{ErrorCode, ExpansionPhase, NodeExpansionState, RegisterRequest, Report};
use serde_json::json;

use super::{Env, PLUGIN, plugin_error};
use crate::error::ApiResult;

const G: u64 = 1 << 30;

/// `node` running plugin `hp` that hosts its controller, with EXPAND_VOLUME on the
/// controller (`controller_expand`) and the node, and VolumeExpansion `mode`.
pub(super) async fn register(env: &Env, node: &str, controller_expand: bool, mode: Option<&str>) {
    register_with(env, node, controller_expand, true, mode).await;
}

/// As [`register`], choosing the node's EXPAND_VOLUME too.
async fn register_with(
    env: &Env,
    node: &str,
    controller_expand: bool,
    node_expand: bool,
    mode: Option<&str>,
) {
    let mut caps = json!({"controller_service": true, "volume_accessibility_constraints": false});
    if let Some(m) = mode {
        caps["volume_expansion"] = json!(m);
    }
    let req: RegisterRequest = serde_json::from_value(json!({
        "plugins": [{
            "id": PLUGIN,
            "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
            "capabilities": caps,
            "node": {
                "info": {"node_id": format!("csi-{node}"), "max_volumes_per_node": 0},
                "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false,
                                 "volume_condition": false, "single_node_multi_writer": false,
                                 "expand_volume": node_expand}
            },
            "controller": {"create_delete_volume": true, "publish_unpublish_volume": true,
                           "list_volumes": false, "list_volumes_published_nodes": false,
                           "publish_readonly": false, "single_node_multi_writer": false,
                           "expand_volume": controller_expand},
        }],
    }))
    .unwrap();
    let n = node.to_owned();
    env.write(move |ctx, l| super::super::register_node(ctx, &n, &req, l))
        .await
        .unwrap();
}

async fn expand(env: &Env, volume: &str, bytes: u64) -> ApiResult<bool> {
    let v = volume.to_owned();
    let req = csivol_api::ExpandRequest {
        capacity_bytes: bytes,
        cancel: false,
    };
    env.write(move |ctx, l| super::super::expand_volume(ctx, &v, &req, "op", l, false))
        .await
        .map(|(_, started)| started)
}

async fn volume_row(env: &Env, name: &str) -> crate::model::VolumeRow {
    let n = name.to_owned();
    env.read(move |c| c.require_volume(&n)).await
}

async fn desired(env: &Env, node: &str) -> csivol_api::DesiredState {
    let n = node.to_owned();
    env.read(move |c| super::super::desired_state(c, &n, 0))
        .await
}

/// `node`'s desired state asks it to grow `volume` (alone) to `bytes`; it reports done, and
/// the volume has that capacity with no expansion left.
async fn node_grows(env: &Env, node: &str, volume: &str, bytes: u64) {
    let d = desired(env, node).await;
    assert_eq!(
        d.expand
            .iter()
            .map(|x| (x.volume.as_str(), x.capacity_bytes))
            .collect::<Vec<_>>(),
        [(volume, bytes)]
    );
    env.report(
        node,
        vec![Report::NodeExpanded {
            volume: volume.to_owned(),
            attempt: 0,
            capacity_bytes: bytes,
        }],
    )
    .await;
    let v = volume_row(env, volume).await;
    assert_eq!((v.capacity_bytes, v.expansion), (Some(bytes), None));
}

/// Answers the expand operation assigned to `host`.
async fn controller_expanded(env: &Env, host: &str, bytes: u64, node_required: bool) {
    let ops = env.ops_of(host).await;
    assert_eq!(ops.len(), 1, "{ops:?}");
    let o = &ops[0];
    env.report(
        host,
        vec![Report::Expanded {
            op: o.id as u64,
            attempt: o.attempt,
            capacity_bytes: bytes,
            node_expansion_required: node_required,
        }],
    )
    .await;
}

#[tokio::test]
async fn online_expansion_grows_a_claimed_volume_on_the_controller_then_on_its_node() {
    let env = Env::new();
    register(&env, "n1", true, Some("online")).await;
    env.volume("v", "single-node-writer").await;
    env.ready_claim("v", "a1", "n1").await;

    assert!(expand(&env, "v", 2 * G).await.unwrap());
    assert_eq!(
        volume_row(&env, "v").await.expansion.unwrap().progress(),
        "expanding to 2 GiB: controller pending"
    );
    // Asking again for the same capacity changes nothing.
    assert!(!expand(&env, "v", 2 * G).await.unwrap());
    assert_eq!(env.ops().await, ["expand v - n1 0"]);
    let d = desired(&env, "n1").await;
    assert!(
        matches!(&d.controller_ops[0].kind,
            csivol_api::ControllerOpKind::Expand { capacity_bytes, .. } if *capacity_bytes == 2 * G),
        "{d:?}"
    );

    controller_expanded(&env, "n1", 2 * G, true).await;
    let v = volume_row(&env, "v").await;
    assert_eq!(v.capacity_bytes, Some(2 * G));
    let e = v.expansion.expect("the node still grows it");
    assert_eq!(e.phase, ExpansionPhase::Node);
    assert_eq!(e.progress(), "expanding to 2 GiB: n1 pending");
    let d = desired(&env, "n1").await;
    assert_eq!(d.expand.len(), 1);
    assert_eq!(
        (d.expand[0].capacity_bytes, d.expand[0].attempt),
        (2 * G, 0)
    );

    // A retryable error is retried with backoff and shown; a report of an old attempt is
    // ignored.
    env.report(
        "n1",
        vec![Report::NodeExpandError {
            volume: "v".into(),
            attempt: 0,
            error: plugin_error("UNAVAILABLE", false),
        }],
    )
    .await;
    let e = volume_row(&env, "v").await.expansion.unwrap();
    assert_eq!(e.nodes[0].attempt, 1);
    assert!(
        e.error
            .unwrap()
            .contains("NodeExpandVolume on n1 failed: UNAVAILABLE")
    );
    assert!(desired(&env, "n1").await.expand[0].not_before_ms > 0);
    let done = |attempt| Report::NodeExpanded {
        volume: "v".into(),
        attempt,
        capacity_bytes: 2 * G,
    };
    env.report("n1", vec![done(0)]).await;
    assert_eq!(
        volume_row(&env, "v").await.expansion.unwrap().nodes[0].state,
        NodeExpansionState::Pending
    );
    env.report("n1", vec![done(1)]).await;
    let v = volume_row(&env, "v").await;
    assert!(v.expansion.is_none(), "{:?}", v.expansion);
    assert!(desired(&env, "n1").await.expand.is_empty());
    assert_eq!(
        env.events_of("volume-expanding").await,
        ["volume-expanding v - -", "volume-expanding v - -"]
    );
    assert_eq!(
        env.events_of("volume-expanded").await,
        ["volume-expanded v - -"]
    );

    // Shrinking is refused, as the request's fault.
    let e = expand(&env, "v", G).await.unwrap_err();
    assert_eq!(e.body().code, ErrorCode::Invalid);
    assert!(e.body().message.contains("shrinking it to 1 GiB"), "{e:?}");
}

#[tokio::test]
async fn offline_expansion_is_refused_while_claimed_and_grows_on_the_next_node_to_stage_it() {
    let env = Env::new();
    register(&env, "n1", true, Some("offline")).await;
    env.volume("used", "single-node-writer").await;
    env.ready_claim("used", "a1", "n1").await;
    let e = expand(&env, "used", 2 * G).await.unwrap_err();
    assert_eq!(e.body().code, ErrorCode::Conflict);
    assert!(e.body().message.contains("only offline"), "{e:?}");
    assert!(e.body().hint.unwrap().contains("csivol release used"));
    assert!(env.ops().await.is_empty());

    env.volume("free", "single-node-writer").await;
    assert!(expand(&env, "free", 2 * G).await.unwrap());
    // The plugin asks for node expansion while no node has the volume: the next node to
    // stage it grows it, as the spec orders an offline expansion.
    controller_expanded(&env, "n1", 2 * G, true).await;
    let v = volume_row(&env, "free").await;
    assert_eq!(v.capacity_bytes, Some(2 * G));
    let e = v.expansion.expect("waits for a node to stage it");
    assert!(e.when_staged && e.nodes.is_empty(), "{e:?}");
    assert!(desired(&env, "n1").await.expand.is_empty());
    // Meanwhile it may be expanded again (its capacity is what counts), or asked for the
    // same size with nothing to do.
    assert!(!expand(&env, "free", 2 * G).await.unwrap());

    env.ready_claim("free", "a2", "n1").await;
    let e = volume_row(&env, "free").await.expansion.unwrap();
    assert_eq!(e.progress(), "expanding to 2 GiB: n1 pending");
    node_grows(&env, "n1", "free", 2 * G).await;
    assert_eq!(
        env.events_of("volume-expanded").await,
        ["volume-expanded free - -"]
    );
}

#[tokio::test]
async fn expansion_is_refused_without_the_capability_and_fails_on_a_final_error() {
    let env = Env::new();
    env.volume("v", "single-node-writer").await;
    // Nobody hosts the controller yet: nobody can say.
    let e = expand(&env, "v", 2 * G).await.unwrap_err();
    assert_eq!(e.body().code, ErrorCode::Conflict);
    assert!(e.body().hint.unwrap().contains("--controller hp=ENDPOINT"));

    register_with(&env, "n1", false, false, Some("online")).await;
    let e = expand(&env, "v", 2 * G).await.unwrap_err();
    assert_eq!(e.body().code, ErrorCode::Invalid);
    assert!(
        e.body()
            .message
            .contains("neither its controller nor its nodes report EXPAND_VOLUME"),
        "{e:?}"
    );

    register(&env, "n1", true, Some("online")).await;
    assert!(expand(&env, "v", 2 * G).await.unwrap());
    // Another capacity while one is under way is refused.
    let e = expand(&env, "v", 3 * G).await.unwrap_err();
    assert!(
        e.body().message.contains("is being expanded to 2 GiB"),
        "{e:?}"
    );
    // Nor is it deregistered meanwhile.
    let e = env
        .write(|ctx, l| super::super::deregister_volume(ctx, "v", true, "op", l, false))
        .await
        .unwrap_err();
    assert_eq!(e.body().code, ErrorCode::Conflict);
    let o = env.ops_of("n1").await.remove(0);
    env.report(
        "n1",
        vec![Report::OpError {
            op: o.id as u64,
            attempt: o.attempt,
            error: plugin_error("OUT_OF_RANGE", true),
        }],
    )
    .await;
    let v = volume_row(&env, "v").await;
    let e = v.expansion.expect("kept, failed");
    assert_eq!(e.phase, ExpansionPhase::Failed);
    assert!(
        e.error
            .unwrap()
            .contains("ControllerExpandVolume failed: OUT_OF_RANGE")
    );
    assert_eq!(v.capacity_bytes, None);
    assert!(env.ops().await.is_empty());
    // A failed expansion may be asked again.
    assert!(expand(&env, "v", G).await.unwrap());
    assert_eq!(env.ops().await, ["expand v - n1 0"]);
}

#[tokio::test]
async fn a_node_the_volume_left_has_nothing_to_grow() {
    let env = Env::new();
    register(&env, "n1", true, Some("online")).await;
    env.volume("v", "single-node-writer").await;
    env.ready_claim("v", "a1", "n1").await;
    assert!(expand(&env, "v", 2 * G).await.unwrap());
    controller_expanded(&env, "n1", 2 * G, true).await;
    assert_eq!(desired(&env, "n1").await.expand.len(), 1);

    // The claim is released before the node grew it: unpublished, unstaged, detached.
    env.release("v", "a1").await.unwrap();
    env.report(
        "n1",
        vec![
            Report::Unpublished {
                volume: "v".into(),
                alloc: "a1".into(),
            },
            Report::Unstaged { volume: "v".into() },
        ],
    )
    .await;
    let ops = env.ops_of("n1").await;
    let o = ops
        .iter()
        .find(|o| o.kind == csivol_rules::kinds::OpKind::Unpublish)
        .expect("unpublish");
    env.report(
        "n1",
        vec![Report::ControllerUnpublished {
            op: o.id as u64,
            attempt: o.attempt,
        }],
    )
    .await;
    let v = volume_row(&env, "v").await;
    assert!(v.expansion.is_none(), "{:?}", v.expansion);
    assert_eq!(v.capacity_bytes, Some(2 * G));
    assert!(desired(&env, "n1").await.expand.is_empty());
}

#[tokio::test]
async fn a_node_only_plugin_grows_the_volume_on_its_nodes_and_the_capacity_follows() {
    let env = Env::new();
    register_with(&env, "n1", false, true, Some("online")).await;
    env.volume("v", "single-node-writer").await;
    env.ready_claim("v", "a1", "n1").await;
    let before = volume_row(&env, "v").await.capacity_bytes;

    assert!(expand(&env, "v", 2 * G).await.unwrap());
    // No controller step: n1 grows it, asked for the new capacity.
    assert!(env.ops().await.is_empty());
    let v = volume_row(&env, "v").await;
    assert_eq!(v.capacity_bytes, before, "recorded once the node grew it");
    assert_eq!(
        v.expansion.unwrap().progress(),
        "expanding to 2 GiB: n1 pending"
    );
    node_grows(&env, "n1", "v", 2 * G).await;
    assert_eq!(
        env.events_of("volume-expanded").await,
        ["volume-expanded v - -"]
    );

    // Nowhere staged: it waits for the next node to stage it.
    env.volume("w", "single-node-writer").await;
    assert!(expand(&env, "w", G).await.unwrap());
    let e = volume_row(&env, "w").await.expansion.unwrap();
    assert!(e.when_staged && e.nodes.is_empty(), "{e:?}");
    env.ready_claim("w", "a2", "n1").await;
    assert_eq!(desired(&env, "n1").await.expand.len(), 1);
}
