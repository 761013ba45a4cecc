//! Fault injection, calls in flight, and a restart that keeps what the plugin did.

use std::time::{Duration, Instant};

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;
use tonic::Code;

use crate::support::*;

#[tokio::test]
async fn fault_injection_fails_then_recovers_and_delays() {
    let dir = TestDir::new("hostpath-faults");
    let mut p = Plugin::start(
        &dir,
        "node-1",
        &[
            "--fail=CreateVolume=UNAVAILABLE:2",
            "--fail=DeleteVolume=INTERNAL",
            "--delay=NodeGetInfo=300ms",
        ],
    )
    .await;
    let req = csi::CreateVolumeRequest {
        name: "v".into(),
        volume_capabilities: vec![mount_cap(AccessMode::SingleNodeWriter)],
        ..Default::default()
    };
    assert_eq!(
        code(p.controller.create_volume(req.clone()).await),
        Code::Unavailable
    );
    assert_eq!(
        code(p.controller.create_volume(req.clone()).await),
        Code::Unavailable
    );
    p.controller.create_volume(req).await.unwrap();
    for _ in 0..3 {
        let delete = csi::DeleteVolumeRequest {
            volume_id: "x".into(),
            ..Default::default()
        };
        assert_eq!(
            code(p.controller.delete_volume(delete).await),
            Code::Internal
        );
    }
    let started = Instant::now();
    p.node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the delay was applied"
    );

    let creates: Vec<_> = p
        .calls()
        .into_iter()
        .filter(|c| c["rpc"] == "CreateVolume")
        .map(|c| c["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(creates, ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
}

#[tokio::test]
async fn delayed_calls_are_seen_in_flight_together() {
    let dir = TestDir::new("hostpath-inflight");
    let p = Plugin::start(&dir, "node-1", &["--delay=NodeGetInfo=400ms"]).await;
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let mut node = p.node.clone();
            tokio::spawn(async move {
                node.node_get_info(csi::NodeGetInfoRequest {})
                    .await
                    .unwrap()
            })
        })
        .collect();
    for c in calls {
        c.await.unwrap();
    }
    let max = p
        .calls()
        .iter()
        .filter(|c| c["rpc"] == "NodeGetInfo")
        .map(|c| c["in_flight"].as_u64().unwrap())
        .max();
    assert_eq!(max, Some(3), "the call log counts concurrent node calls");
}

#[tokio::test]
async fn restart_keeps_what_it_did() {
    let dir = TestDir::new("hostpath-restart");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let ctx = controller_publish(&mut p, &v, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap();
    let staging = dir.join("staging");
    std::fs::create_dir(&staging).unwrap();
    let target = dir.join("target");
    p.node
        .node_stage_volume(stage_req(&v, &staging, &ctx))
        .await
        .unwrap();
    p.node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap();

    let mut p = p.restart_after_kill().await;
    // The restarted plugin remembers the staging and publication: repeating them is a no-op,
    // and unstaging before unpublishing is still refused.
    p.node
        .node_stage_volume(stage_req(&v, &staging, &ctx))
        .await
        .unwrap();
    p.node
        .node_publish_volume(publish_req(&v, Some(&staging), &target, &ctx, false))
        .await
        .unwrap();
    assert_eq!(
        code(p.node.node_unstage_volume(unstage_req(&v, &staging)).await),
        Code::FailedPrecondition
    );
    assert_eq!(
        dir.mounts().len(),
        2,
        "nothing mounted twice: {:?}",
        dir.mounts()
    );

    p.node
        .node_unpublish_volume(unpublish_req(&v, &target))
        .await
        .unwrap();
    p.node
        .node_unstage_volume(unstage_req(&v, &staging))
        .await
        .unwrap();
    let unpublish = csi::ControllerUnpublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        node_id: "node-1".into(),
        ..Default::default()
    };
    p.controller
        .controller_unpublish_volume(unpublish)
        .await
        .unwrap();
    let delete = csi::DeleteVolumeRequest {
        volume_id: v.volume_id.clone(),
        ..Default::default()
    };
    p.controller.delete_volume(delete).await.unwrap();
    assert!(dir.mounts().is_empty());
}

#[tokio::test]
async fn the_plugin_connection_keeps_deadlines_and_connects_again_after_a_restart() {
    use csivol_csi::CsiEndpoint;
    use csivol_csi::endpoint::with_deadline;
    let dir = TestDir::new("hostpath-connection");
    let mut p = Plugin::start(&dir, "node-1", &["--delay=NodeGetInfo=5s"]).await;
    let conn = CsiEndpoint::Unix(p.socket.clone()).connection(Duration::from_secs(30));
    let mut node = Node::new(conn.clone());
    // The request's own deadline: the call gives up long before the plugin answers.
    let started = Instant::now();
    let late = node
        .node_get_info(with_deadline(
            csi::NodeGetInfoRequest {},
            Duration::from_millis(300),
        ))
        .await;
    assert_eq!(code(late), Code::DeadlineExceeded);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // The connection's deadline, for a request without one.
    let short = CsiEndpoint::Unix(p.socket.clone()).connection(Duration::from_millis(300));
    let started = Instant::now();
    let late = Node::new(short)
        .node_get_info(csi::NodeGetInfoRequest {})
        .await;
    assert_eq!(code(late), Code::DeadlineExceeded);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    // The plugin dies: a call finds nobody to connect to. Started again on the same
    // socket, it is reached through the same connection.
    let mut identity = Identity::new(conn);
    identity.probe(csi::ProbeRequest {}).await.unwrap();
    p.proc.kill();
    assert_eq!(
        code(identity.probe(csi::ProbeRequest {}).await),
        Code::Unavailable
    );
    let _p = Plugin::spawn(
        p.socket.clone(),
        p.args.clone(),
        p.state_dir.clone(),
        p.log.clone(),
    )
    .await;
    identity.probe(csi::ProbeRequest {}).await.unwrap();
}
