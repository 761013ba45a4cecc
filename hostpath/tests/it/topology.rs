//! Topology: nodes in two zones share a backend; NodeGetInfo reports each node's segment,
//! CreateVolume places volumes where the requirement and the nodes allow and refuses when
//! no segment fits, ControllerPublishVolume refuses a node the volume cannot reach.

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;
use tonic::Code;

use crate::support::*;

fn zone(z: &str) -> csi::Topology {
    csi::Topology {
        segments: [("topology.csivol.dev/zone".to_owned(), z.to_owned())].into(),
    }
}

fn zonal(name: &str, requisite: &[&str], preferred: &[&str]) -> csi::CreateVolumeRequest {
    let mut req = create_req(name, mount_cap(AccessMode::SingleNodeWriter), 1 << 20);
    req.accessibility_requirements = Some(csi::TopologyRequirement {
        requisite: requisite.iter().map(|z| zone(z)).collect(),
        preferred: preferred.iter().map(|z| zone(z)).collect(),
    });
    req
}

#[tokio::test]
async fn volumes_are_placed_and_reached_by_zone() {
    let dir = TestDir::new("hostpath-topology");
    let mut a = Plugin::start(
        &dir,
        "node-1",
        &[
            "--topology=topology.csivol.dev/zone=a",
            "--topology=rack=r1",
        ],
    )
    .await;
    let _b = Plugin::start(&dir, "node-2", &["--topology=topology.csivol.dev/zone=b"]).await;

    let info = a
        .node
        .node_get_info(csi::NodeGetInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let segments = info.accessible_topology.unwrap().segments;
    assert_eq!(
        segments.get("topology.csivol.dev/zone").map(String::as_str),
        Some("a")
    );
    assert_eq!(segments.get("rack").map(String::as_str), Some("r1"));
    let plugin = a
        .identity
        .get_plugin_capabilities(csi::GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(plugin.capabilities.iter().any(|c| matches!(
        &c.r#type,
        Some(csi::plugin_capability::Type::Service(s))
            if s.r#type() == csi::plugin_capability::service::Type::VolumeAccessibilityConstraints
    )));

    // Requisite b: placed in b, returned as accessible_topology.
    let in_b = create_with(&mut a, zonal("in-b", &["c", "b"], &[])).await;
    assert_eq!(in_b.accessible_topology, [zone("b")]);
    // Preferred first among the requisite.
    let pref = create_with(&mut a, zonal("pref", &["a", "b"], &["b"])).await;
    assert_eq!(pref.accessible_topology, [zone("b")]);
    // Idempotent by name, but not with a requirement the volume does not meet.
    let again = create_with(&mut a, zonal("in-b", &["c", "b"], &[])).await;
    assert_eq!(again, in_b);
    assert_eq!(
        code(a.controller.create_volume(zonal("in-b", &["a"], &[])).await),
        Code::AlreadyExists
    );
    // No node lies in zone c: RESOURCE_EXHAUSTED, the table's "unable to provision".
    let err = a
        .controller
        .create_volume(zonal("in-c", &["c"], &[]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{}", err.message());
    assert!(err.message().contains("zone=c"), "{}", err.message());
    // No requirement: the controller's own segment.
    let plain = create(&mut a, "plain", AccessMode::SingleNodeWriter).await;
    assert_eq!(plain.accessible_topology.len(), 1);
    assert_eq!(
        plain.accessible_topology[0]
            .segments
            .get("topology.csivol.dev/zone")
            .map(String::as_str),
        Some("a")
    );

    // A node in zone a cannot reach a volume in zone b; one in b can.
    let err = controller_publish(&mut a, &in_b, "node-1", AccessMode::SingleNodeWriter)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("node-1"), "{}", err.message());
    controller_publish(&mut a, &in_b, "node-2", AccessMode::SingleNodeWriter)
        .await
        .unwrap();

    // GetCapacity per segment: none where no node lies.
    let capacity = |t: csi::Topology| csi::GetCapacityRequest {
        accessible_topology: Some(t),
        ..Default::default()
    };
    let in_zone = a
        .controller
        .get_capacity(capacity(zone("b")))
        .await
        .unwrap()
        .into_inner();
    assert!(in_zone.available_capacity > 0);
    let nowhere = a
        .controller
        .get_capacity(capacity(zone("c")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(nowhere.available_capacity, 0);
}

#[tokio::test]
async fn segment_capacity_lowers_get_capacity_in_that_segment_only() {
    let dir = TestDir::new("hostpath-segment-capacity");
    let pool = 64 << 20;
    let mut a = Plugin::start(
        &dir,
        "node-1",
        &[
            "--topology=topology.csivol.dev/zone=a",
            &format!("--capacity={pool}"),
            "--segment-capacity=topology.csivol.dev/zone=b:8388608",
        ],
    )
    .await;
    let _b = Plugin::start(&dir, "node-2", &["--topology=topology.csivol.dev/zone=b"]).await;
    let ask = |t: Option<csi::Topology>| csi::GetCapacityRequest {
        accessible_topology: t,
        ..Default::default()
    };
    let in_b = a
        .controller
        .get_capacity(ask(Some(zone("b"))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(in_b.available_capacity, 8 << 20);
    assert_eq!(in_b.maximum_volume_size, Some(8 << 20));
    let in_a = a
        .controller
        .get_capacity(ask(Some(zone("a"))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(in_a.available_capacity, pool);
    let whole = a
        .controller
        .get_capacity(ask(None))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(whole.available_capacity, pool);
}
