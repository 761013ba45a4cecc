//! The plugin as a process: node-only without staging, a stale socket, SIGTERM.

use std::collections::HashMap;
use std::time::Duration;

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::{TestDir, is_mounted, wait_for};
use tonic::Code;

use crate::support::*;

#[tokio::test]
async fn node_only_plugin_without_staging() {
    let dir = TestDir::new("hostpath-nostage");
    let mut p = Plugin::start(&dir, "node-1", &["--no-controller", "--no-stage"]).await;
    let caps = p
        .controller
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .unwrap();
    let caps = csivol_api::domain::ControllerCapabilities::from(caps.get_ref());
    assert!(!caps.publish_unpublish_volume && caps.create_delete_volume);
    let ncaps = p
        .node
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .unwrap();
    assert!(!csivol_api::domain::NodeCapabilities::from(ncaps.get_ref()).stage_unstage_volume);

    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let err = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    assert_eq!(
        code(
            p.node
                .node_stage_volume(stage_req(&v, &staging, &HashMap::new()))
                .await
        ),
        Code::Unimplemented
    );

    let target = dir.join("target");
    p.node
        .node_publish_volume(publish_req(&v, None, &target, &HashMap::new(), false))
        .await
        .unwrap();
    assert!(is_mounted(&target));
    std::fs::write(target.join("f"), "data").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("backend/data").join(&v.volume_id).join("f")).unwrap(),
        "data"
    );
    p.node
        .node_unpublish_volume(unpublish_req(&v, &target))
        .await
        .unwrap();
    assert!(dir.mounts().is_empty());
}

#[tokio::test]
async fn replaces_stale_socket_and_stops_on_sigterm() {
    let dir = TestDir::new("hostpath-signals");
    std::fs::write(dir.join("node-1.sock"), "stale").unwrap();
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    assert!(p.socket.exists());
    let status = p
        .proc
        .terminate(Duration::from_secs(10))
        .expect("exits on SIGTERM");
    assert!(
        status.success(),
        "{status}: {}",
        std::fs::read_to_string(&p.log).unwrap()
    );
    wait_for("socket removal", Duration::from_secs(5), || {
        (!p.socket.exists()).then_some(())
    });
}
