//! CreateVolumeGroupSnapshot (or GetVolumeGroupSnapshot once it is cut) and
//! DeleteVolumeGroupSnapshot, through the plugin's GroupController service.

use csivol_api::{ControllerOpKind, GroupMember, Report};
use csivol_csi::convert::timestamp_ms;
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn create(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::CreateGroupSnapshot {
        group,
        source_volume_ids,
        group_snapshot_id,
        snapshot_ids,
        parameters,
        secrets,
    } = &c.op.kind
    else {
        unreachable!("the table sends group snapshot creations only")
    };
    let mut client = c.group_client("CreateVolumeGroupSnapshot")?;
    // Once the group is cut, GetVolumeGroupSnapshot tells where it stands (the spec: "This
    // optional RPC MAY be called by the CO to fetch current information about a volume
    // group snapshot", implemented by every plugin with the capability); before,
    // CreateVolumeGroupSnapshot is asked again ("The CO SHOULD issue the
    // CreateVolumeGroupSnapshotRequest RPC with the same arguments again periodically
    // until the ready_to_use field has a value of true").
    let (call, g) = if group_snapshot_id.is_empty() {
        let req = csi::CreateVolumeGroupSnapshotRequest {
            name: group.clone(),
            source_volume_ids: source_volume_ids.clone(),
            secrets: wire_map(secrets),
            parameters: wire_map(parameters),
        };
        let r = client
            .create_volume_group_snapshot(c.request(req))
            .await
            .map_err(|s| CallError::new("CreateVolumeGroupSnapshot", s))?;
        ("CreateVolumeGroupSnapshot", r.into_inner().group_snapshot)
    } else {
        let req = csi::GetVolumeGroupSnapshotRequest {
            group_snapshot_id: group_snapshot_id.clone(),
            snapshot_ids: snapshot_ids.clone(),
            secrets: wire_map(secrets),
        };
        let r = client
            .get_volume_group_snapshot(c.request(req))
            .await
            .map_err(|s| CallError::new("GetVolumeGroupSnapshot", s))?;
        ("GetVolumeGroupSnapshot", r.into_inner().group_snapshot)
    };
    // "In the VolumeGroupSnapshot message, both snapshots and group_snapshot_id are
    // required fields."
    let g = g.ok_or_else(|| CallError::invalid_response(call, "`group_snapshot` is missing"))?;
    if g.group_snapshot_id.is_empty() {
        return Err(CallError::invalid_response(
            call,
            "`group_snapshot.group_snapshot_id` is empty",
        ));
    }
    if g.snapshots.is_empty() || g.snapshots.iter().any(|s| s.snapshot_id.is_empty()) {
        return Err(CallError::invalid_response(
            call,
            "`group_snapshot.snapshots` is empty or names a snapshot without an id",
        ));
    }
    Ok(Report::GroupSnapshotCreated {
        op: c.op.id,
        attempt: c.op.attempt,
        group_snapshot_id: g.group_snapshot_id,
        ready_to_use: g.ready_to_use,
        creation_time_ms: timestamp_ms(g.creation_time.as_ref()),
        snapshots: g
            .snapshots
            .into_iter()
            .map(|s| GroupMember {
                snapshot_id: s.snapshot_id,
                source_volume_id: s.source_volume_id,
                // The spec: 0 means the size is unknown.
                size_bytes: u64::try_from(s.size_bytes).unwrap_or(0),
                ready_to_use: s.ready_to_use,
                creation_time_ms: timestamp_ms(s.creation_time.as_ref()),
            })
            .collect(),
    })
}

pub(super) async fn delete(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::DeleteGroupSnapshot {
        group_snapshot_id,
        snapshot_ids,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends group snapshot deletions only")
    };
    let req = csi::DeleteVolumeGroupSnapshotRequest {
        group_snapshot_id: group_snapshot_id.clone(),
        snapshot_ids: snapshot_ids.clone(),
        secrets: wire_map(secrets),
    };
    c.group_client("DeleteVolumeGroupSnapshot")?
        .delete_volume_group_snapshot(c.request(req))
        .await
        .map_err(|s| CallError::new("DeleteVolumeGroupSnapshot", s))?;
    Ok(Report::GroupSnapshotDeleted {
        op: c.op.id,
        attempt: c.op.attempt,
    })
}
