//! ControllerModifyVolume and CreateVolume's `mutable_parameters`, with the spec's error
//! table: a parameter the plugin cannot apply is INVALID_ARGUMENT with nothing changed, an
//! unknown volume NOT_FOUND, a missing field INVALID_ARGUMENT; only the keys named change.

use std::collections::{BTreeMap, HashMap};

use csivol_api::domain::AccessMode;
use csivol_csi::csi::v1 as csi;
use csivol_tests::TestDir;
use tonic::Code;

use crate::support::*;

use csi::controller_service_capability::rpc::Type as C;

fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn modify(v: &csi::Volume, pairs: &[(&str, &str)]) -> csi::ControllerModifyVolumeRequest {
    csi::ControllerModifyVolumeRequest {
        volume_id: v.volume_id.clone(),
        secrets: HashMap::new(),
        mutable_parameters: params(pairs),
    }
}

/// The mutable parameters the backend records for a volume: what the storage system has.
fn recorded(dir: &TestDir, v: &csi::Volume) -> BTreeMap<String, String> {
    let path = dir
        .join("backend/volumes")
        .join(format!("{}.json", v.volume_id));
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    serde_json::from_value(record["mutable_parameters"].clone()).unwrap_or_default()
}

#[tokio::test]
async fn modify_changes_only_the_keys_named() {
    let dir = TestDir::new("hostpath-modify");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    assert!(controller_caps(&mut p).await.contains(&C::ModifyVolume));
    let mut req = create_req("v", mount_cap(AccessMode::SingleNodeWriter), 1 << 20);
    req.mutable_parameters = params(&[("iops", "100"), ("tier", "standard")]);
    let v = create_with(&mut p, req.clone()).await;
    assert_eq!(
        recorded(&dir, &v),
        BTreeMap::from([
            ("iops".into(), "100".into()),
            ("tier".into(), "standard".into())
        ])
    );

    p.controller
        .controller_modify_volume(modify(&v, &[("iops", "3000")]))
        .await
        .unwrap();
    // The spec: SPs MUST NOT modify volumes based on the absence of keys.
    assert_eq!(
        recorded(&dir, &v),
        BTreeMap::from([
            ("iops".into(), "3000".into()),
            ("tier".into(), "standard".into())
        ])
    );
    // Idempotent: the same call again succeeds and changes nothing.
    p.controller
        .controller_modify_volume(modify(&v, &[("iops", "3000")]))
        .await
        .unwrap();
    assert_eq!(recorded(&dir, &v)["iops"], "3000");
    // A CreateVolume retried after the modification is still the same volume.
    let again = create_with(&mut p, req).await;
    assert_eq!(again.volume_id, v.volume_id);
    // A published volume is modified in place.
    let cap = mount_cap(AccessMode::SingleNodeWriter);
    let (staging, target) = bring_up(&mut p, &dir, &v, &cap, "v").await;
    p.controller
        .controller_modify_volume(modify(&v, &[("tier", "premium")]))
        .await
        .unwrap();
    assert_eq!(recorded(&dir, &v)["tier"], "premium");
    take_down(&mut p, &v, &staging, &target).await;
}

/// The spec's ControllerModifyVolume errors, with the required fields.
#[tokio::test]
async fn modify_error_table() {
    let dir = TestDir::new("hostpath-modify-errors");
    let mut p = Plugin::start(&dir, "node-1", &[]).await;
    let mut req = create_req("v", mount_cap(AccessMode::SingleNodeWriter), 1 << 20);
    req.mutable_parameters = params(&[("iops", "100")]);
    let v = create_with(&mut p, req).await;
    let c = &mut p.controller;
    // Missing required fields: the volume id, and a map with at least one element.
    let no_id = csi::ControllerModifyVolumeRequest {
        mutable_parameters: params(&[("iops", "1")]),
        ..Default::default()
    };
    assert_eq!(
        code(c.controller_modify_volume(no_id).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.controller_modify_volume(modify(&v, &[])).await),
        Code::InvalidArgument
    );
    // Volume does not exist: NOT_FOUND.
    let mut unknown = modify(&v, &[("iops", "1")]);
    unknown.volume_id = "hostpath-999999".into();
    assert_eq!(
        code(c.controller_modify_volume(unknown).await),
        Code::NotFound
    );
    // Parameters not supported: INVALID_ARGUMENT, and (spec v1.12) nothing was changed,
    // not even the valid keys of the same request.
    for bad in [
        &[("colour", "red")][..],
        &[("iops", "zero")],
        &[("tier", "gold")],
        &[("iops", "500"), ("colour", "red")],
    ] {
        let err = c
            .controller_modify_volume(modify(&v, bad))
            .await
            .expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{bad:?}");
        assert!(
            err.message().contains("nothing was changed"),
            "{}",
            err.message()
        );
    }
    assert_eq!(
        recorded(&dir, &v),
        BTreeMap::from([("iops".into(), "100".into())])
    );
    // CreateVolume checks its mutable parameters the same way.
    let mut bad_create = create_req("w", mount_cap(AccessMode::SingleNodeWriter), 1 << 20);
    bad_create.mutable_parameters = params(&[("colour", "red")]);
    assert_eq!(
        code(c.create_volume(bad_create).await),
        Code::InvalidArgument
    );
}

/// Without MODIFY_VOLUME the call is UNIMPLEMENTED and CreateVolume refuses mutable
/// parameters (the spec: the field SHALL NOT be given unless the SP has the capability).
#[tokio::test]
async fn without_modify_volume() {
    let dir = TestDir::new("hostpath-nomodify");
    let mut p = Plugin::start(&dir, "node-1", &["--disable=modify-volume"]).await;
    assert!(!controller_caps(&mut p).await.contains(&C::ModifyVolume));
    let v = create(&mut p, "v", AccessMode::SingleNodeWriter).await;
    let c = &mut p.controller;
    assert_eq!(
        code(
            c.controller_modify_volume(modify(&v, &[("iops", "1")]))
                .await
        ),
        Code::Unimplemented
    );
    let mut req = create_req("w", mount_cap(AccessMode::SingleNodeWriter), 1 << 20);
    req.mutable_parameters = params(&[("iops", "1")]);
    let err = c.create_volume(req).await.expect_err("refused");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("MODIFY_VOLUME"), "{}", err.message());
}
