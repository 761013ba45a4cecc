//! CreateVolume: a volume made by the plugin, with its id, capacity, context and where it
//! is accessible from.

use csivol_api::domain::Topology;
use csivol_api::{ControllerOpKind, Report};
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn run(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::Create {
        volume,
        capability,
        capacity_bytes,
        parameters,
        secrets,
        topology_request,
        source,
        mutable_parameters,
        csi_name,
    } = &c.op.kind
    else {
        unreachable!("the table sends creations only")
    };
    let req = csi::CreateVolumeRequest {
        // The name the server recorded for this creation; a server of an earlier release
        // records none and the volume's own name is sent, as it then was.
        name: csi_name.clone().unwrap_or_else(|| volume.clone()),
        capacity_range: (*capacity_bytes > 0).then(|| csi::CapacityRange {
            required_bytes: i64::try_from(*capacity_bytes).unwrap_or(i64::MAX),
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability::from(capability)],
        parameters: wire_map(parameters),
        secrets: wire_map(secrets),
        accessibility_requirements: topology_request
            .as_ref()
            .map(csi::TopologyRequirement::from),
        volume_content_source: source.as_ref().map(csi::VolumeContentSource::from),
        mutable_parameters: wire_map(mutable_parameters),
    };
    let r = c
        .client()
        .create_volume(c.request(req))
        .await
        .map_err(|s| CallError::new("CreateVolume", s))?;
    let v = r
        .into_inner()
        .volume
        .ok_or_else(|| CallError::invalid_response("CreateVolume", "`volume` is missing"))?;
    if v.volume_id.is_empty() {
        return Err(CallError::invalid_response(
            "CreateVolume",
            "`volume.volume_id` is empty",
        ));
    }
    Ok(Report::Created {
        op: c.op.id,
        attempt: c.op.attempt,
        external_id: v.volume_id,
        // The spec: 0 means the capacity is unknown.
        capacity_bytes: u64::try_from(v.capacity_bytes).unwrap_or(0),
        context: v.volume_context.into_iter().collect(),
        accessible_topology: v
            .accessible_topology
            .into_iter()
            .map(Topology::from)
            .collect(),
        made_for: None,
    })
}
