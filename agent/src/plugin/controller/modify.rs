//! ControllerModifyVolume: the volume's mutable parameters changed, only the keys that
//! change sent.

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::Modify {
        external_id,
        parameters,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends modifications only")
    };
    let req = csi::ControllerModifyVolumeRequest {
        volume_id: external_id.clone(),
        secrets: wire_map(secrets),
        mutable_parameters: wire_map(parameters),
    };
    c.client()
        .controller_modify_volume(c.request(req))
        .await
        .map_err(|s| CallError::new("ControllerModifyVolume", s))?;
    Ok(Report::Modified {
        op: c.op.id,
        attempt: c.op.attempt,
    })
}
