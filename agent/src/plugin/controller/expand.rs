//! ControllerExpandVolume: the volume grown in its storage, and whether its nodes must
//! grow it too.

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::Expand {
        external_id,
        capacity_bytes,
        capability,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends expansions only")
    };
    let req = csi::ControllerExpandVolumeRequest {
        volume_id: external_id.clone(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: i64::try_from(*capacity_bytes).unwrap_or(i64::MAX),
            limit_bytes: 0,
        }),
        secrets: wire_map(secrets),
        volume_capability: Some(csi::VolumeCapability::from(capability)),
    };
    let r = c
        .client()
        .controller_expand_volume(c.request(req))
        .await
        .map_err(|s| CallError::new("ControllerExpandVolume", s))?
        .into_inner();
    Ok(Report::Expanded {
        op: c.op.id,
        attempt: c.op.attempt,
        capacity_bytes: u64::try_from(r.capacity_bytes).unwrap_or(0),
        node_expansion_required: r.node_expansion_required,
    })
}
