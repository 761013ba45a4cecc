//! DeleteVolume: the volume deleted by the plugin.

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::Delete {
        external_id,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends deletions only")
    };
    let req = csi::DeleteVolumeRequest {
        volume_id: external_id.clone(),
        secrets: wire_map(secrets),
    };
    c.client()
        .delete_volume(c.request(req))
        .await
        .map_err(|s| CallError::new("DeleteVolume", s))?;
    Ok(Report::Deleted {
        op: c.op.id,
        attempt: c.op.attempt,
    })
}
