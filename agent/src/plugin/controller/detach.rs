//! ControllerUnpublishVolume: the volume detached from a node.

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::Unpublish {
        external_id,
        node_id,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends unpublishes only")
    };
    let req = csi::ControllerUnpublishVolumeRequest {
        volume_id: external_id.clone(),
        node_id: node_id.clone(),
        secrets: wire_map(secrets),
    };
    c.client()
        .controller_unpublish_volume(c.request(req))
        .await
        .map_err(|s| CallError::new("ControllerUnpublishVolume", s))?;
    Ok(Report::ControllerUnpublished {
        op: c.op.id,
        attempt: c.op.attempt,
    })
}
