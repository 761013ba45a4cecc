//! CreateSnapshot (or GetSnapshot once it is cut) and DeleteSnapshot: a volume's snapshot;
//! ListSnapshots of one snapshot being adopted.

use csivol_api::{ControllerOpKind, Report};
use csivol_csi::convert::timestamp_ms;
use csivol_csi::csi::v1 as csi;

use super::super::{CallError, wire_map};
use super::Call;

pub(super) async fn create(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::CreateSnapshot {
        snapshot,
        source_volume_id,
        snapshot_id,
        parameters,
        secrets,
    } = &c.op.kind
    else {
        unreachable!("the table sends snapshot creations only")
    };
    // Once the snapshot is cut, a plugin with GET_SNAPSHOT is asked about that one snapshot
    // (GetSnapshot: "Snapshots which were recently created and not yet ready to use must be
    // retrievable with this RPC"); a plugin without it is asked CreateSnapshot again, as the
    // spec advises ("calling CreateSnapshot repeatedly is the preferred way to check if the
    // processing is complete").
    let (call, s) = if !snapshot_id.is_empty() && c.capabilities().get_snapshot {
        let req = csi::GetSnapshotRequest {
            snapshot_id: snapshot_id.clone(),
            secrets: wire_map(secrets),
        };
        let r = c
            .client()
            .get_snapshot(c.request(req))
            .await
            .map_err(|s| CallError::new("GetSnapshot", s))?;
        ("GetSnapshot", r.into_inner().snapshot)
    } else {
        let req = csi::CreateSnapshotRequest {
            source_volume_id: source_volume_id.clone(),
            name: snapshot.clone(),
            secrets: wire_map(secrets),
            parameters: wire_map(parameters),
        };
        let r = c
            .client()
            .create_snapshot(c.request(req))
            .await
            .map_err(|s| CallError::new("CreateSnapshot", s))?;
        ("CreateSnapshot", r.into_inner().snapshot)
    };
    let s = s.ok_or_else(|| CallError::invalid_response(call, "`snapshot` is missing"))?;
    if s.snapshot_id.is_empty() {
        return Err(CallError::invalid_response(
            call,
            "`snapshot.snapshot_id` is empty",
        ));
    }
    Ok(Report::SnapshotCreated {
        op: c.op.id,
        attempt: c.op.attempt,
        snapshot_id: s.snapshot_id,
        // The spec: 0 means the size is unknown.
        size_bytes: u64::try_from(s.size_bytes).unwrap_or(0),
        ready_to_use: s.ready_to_use,
        creation_time_ms: timestamp_ms(s.creation_time.as_ref()),
    })
}

pub(super) async fn delete(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::DeleteSnapshot {
        snapshot_id,
        secrets,
        ..
    } = &c.op.kind
    else {
        unreachable!("the table sends snapshot deletions only")
    };
    let req = csi::DeleteSnapshotRequest {
        snapshot_id: snapshot_id.clone(),
        secrets: wire_map(secrets),
    };
    c.client()
        .delete_snapshot(c.request(req))
        .await
        .map_err(|s| CallError::new("DeleteSnapshot", s))?;
    Ok(Report::SnapshotDeleted {
        op: c.op.id,
        attempt: c.op.attempt,
    })
}

/// ListSnapshots filtered by the snapshot's id (spec.md, ListSnapshotsRequest's
/// `snapshot_id`: "It can be used to list only a specific snapshot. ListSnapshots will
/// return with current snapshot information"; the plugin "SHALL return the information
/// about all snapshots on the storage system within the given parameters"): no entry with
/// that id is a snapshot that does not exist.
pub(super) async fn find(c: &Call<'_>) -> Result<Report, CallError> {
    let ControllerOpKind::FindSnapshot { snapshot_id, .. } = &c.op.kind else {
        unreachable!("the table sends snapshot look-ups only")
    };
    let req = csi::ListSnapshotsRequest {
        snapshot_id: snapshot_id.clone(),
        ..Default::default()
    };
    let r = c
        .client()
        .list_snapshots(c.request(req))
        .await
        .map_err(|s| CallError::new("ListSnapshots", s))?
        .into_inner();
    // Only the entry with the id asked for counts: a plugin that ignored the filter is
    // not taken to have found another snapshot.
    let snapshot = r
        .entries
        .iter()
        .filter_map(|e| e.snapshot.as_ref())
        .find(|s| &s.snapshot_id == snapshot_id)
        .map(csivol_api::ListedSnapshot::from);
    Ok(Report::SnapshotFound {
        op: c.op.id,
        attempt: c.op.attempt,
        snapshot,
    })
}
