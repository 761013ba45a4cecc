//! Attach limits that change while the node runs: `<backend>/limits/<node>` stands for the
//! storage system's own limit changing (other attachments, another instance type), and
//! NodeGetInfo, ControllerPublishVolume and (without a controller) NodeStageVolume follow
//! it; beyond it they answer RESOURCE_EXHAUSTED.

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;
use tonic::Code;

use crate::support::*;

async fn reported_limit(p: &mut Plugin) -> i64 {
    p.node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .max_volumes_per_node
}

fn set_limit(dir: &TestDir, node: &str, limit: u32) {
    std::fs::write(dir.join("backend/limits").join(node), format!("{limit}\n")).unwrap();
}

#[tokio::test]
async fn the_limit_follows_the_storage_system() {
    let dir = TestDir::new("hostpath-limits");
    let mut p = Plugin::start(&dir, "node-1", &["--max-volumes-per-node=2"]).await;
    assert_eq!(reported_limit(&mut p).await, 2);
    let mode = AccessMode::SingleNodeWriter;
    let a = create(&mut p, "a", mode).await;
    let b = create(&mut p, "b", mode).await;
    let c = create(&mut p, "c", mode).await;
    controller_publish(&mut p, &a, "node-1", mode)
        .await
        .unwrap();

    set_limit(&dir, "node-1", 1);
    assert_eq!(
        reported_limit(&mut p).await,
        1,
        "NodeGetInfo reads it again"
    );
    let err = controller_publish(&mut p, &b, "node-1", mode)
        .await
        .expect_err("beyond the lowered limit");
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("1 of at most 1"),
        "{}",
        err.message()
    );
    // What is published stays published, and publishing it again is still OK.
    controller_publish(&mut p, &a, "node-1", mode)
        .await
        .unwrap();

    set_limit(&dir, "node-1", 3);
    assert_eq!(reported_limit(&mut p).await, 3);
    controller_publish(&mut p, &b, "node-1", mode)
        .await
        .unwrap();
    controller_publish(&mut p, &c, "node-1", mode)
        .await
        .unwrap();
}

/// A node-only plugin (no ControllerPublishVolume) enforces its limit when staging.
#[tokio::test]
async fn a_node_only_plugin_refuses_staging_beyond_its_limit() {
    let dir = TestDir::new("hostpath-limits-stage");
    let mut p = Plugin::start(
        &dir,
        "node-1",
        &["--no-controller", "--max-volumes-per-node=1"],
    )
    .await;
    let mode = AccessMode::SingleNodeWriter;
    let a = create(&mut p, "a", mode).await;
    let b = create(&mut p, "b", mode).await;
    let none = Default::default();
    let (sa, sb) = (dir.join("staging-a"), dir.join("staging-b"));
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::create_dir_all(&sb).unwrap();
    p.node
        .node_stage_volume(stage_req(&a, &sa, &none))
        .await
        .unwrap();
    assert_eq!(
        code(p.node.node_stage_volume(stage_req(&b, &sb, &none)).await),
        Code::ResourceExhausted
    );
    // Staging the same volume again is not a new volume.
    p.node
        .node_stage_volume(stage_req(&a, &sa, &none))
        .await
        .unwrap();
    set_limit(&dir, "node-1", 2);
    p.node
        .node_stage_volume(stage_req(&b, &sb, &none))
        .await
        .unwrap();
    for (v, s) in [(&a, &sa), (&b, &sb)] {
        p.node.node_unstage_volume(unstage_req(v, s)).await.unwrap();
    }
}
