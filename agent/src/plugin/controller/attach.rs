//! ControllerPublishVolume: the volume attached to the claim's node.

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::Publish {
        external_id,
        node_id,
        capability,
        readonly,
        context,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends publishes only")
    };
    let req = csi::ControllerPublishVolumeRequest {
        volume_id: external_id.clone(),
        node_id: node_id.clone(),
        volume_capability: Some(csi::VolumeCapability::from(capability)),
        readonly: *readonly,
        secrets: wire_map(secrets),
        volume_context: wire_map(context),
    };
    let r = c
        .client()
        .controller_publish_volume(c.request(req))
        .await
        .map_err(|s| CallError::new("ControllerPublishVolume", s))?;
    Ok(Report::ControllerPublished {
        op: c.op.id,
        attempt: c.op.attempt,
        publish_context: r.into_inner().publish_context.into_iter().collect(),
    })
}
