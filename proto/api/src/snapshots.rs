//! Snapshots: `PUT /v1/snapshots/{name}`, `GET /v1/snapshots[?volume=V]`,
//! `GET /v1/snapshots/{name}`, `DELETE /v1/snapshots/{name}`; group snapshots under
//! `/v1/group-snapshots` alike; and the content source a volume is created from
//! (`volume create --from-snapshot` / `--from-volume`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `PUT /v1/snapshots/{name}`: snapshot a volume through its plugin's controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// The volume to snapshot (a csivol volume name, of the snapshot's namespace).
    pub volume: String,
    /// Plugin-specific CreateSnapshot parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// Where a snapshot stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SnapshotState {
    /// CreateSnapshot is queued or under way.
    Creating,
    /// The plugin cut the snapshot but it is not ready to use yet (`ready_to_use` false):
    /// CreateSnapshot is repeated until it is.
    Pending,
    /// Ready to use as a volume's content source.
    Ready,
    /// DeleteSnapshot is under way.
    Deleting,
    /// CreateSnapshot failed; `error` says why.
    Failed,
}

impl SnapshotState {
    pub const ALL: &[Self] = &[
        Self::Creating,
        Self::Pending,
        Self::Ready,
        Self::Deleting,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Creating => "creating",
            Self::Pending => "pending",
            Self::Ready => "ready",
            Self::Deleting => "deleting",
            Self::Failed => "failed",
        }
    }
}

/// A snapshot as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Its name within its namespace, its volume's.
    pub name: String,
    #[serde(default = "crate::default_namespace")]
    pub namespace: String,
    /// The csivol volume it was taken of (which may since have been deleted), by its name
    /// within the namespace.
    pub volume: String,
    pub plugin: String,
    /// The plugin's snapshot id; empty until CreateSnapshot answered.
    pub snapshot_id: String,
    pub state: SnapshotState,
    pub ready_to_use: bool,
    /// 0 means unknown (the spec's convention).
    pub size_bytes: u64,
    /// When the storage system cut the snapshot (RFC 3339), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// The last error of its CreateSnapshot or DeleteSnapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The group snapshot it was cut in (`snapshot create --group`): it is deleted with
    /// its group, never alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub index: u64,
    /// Asked for with `--wait` while its volume was being released: CreateSnapshot is sent
    /// once the release has finished, so it cuts what the node left when it unstaged it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_release: bool,
}

/// `PUT /v1/group-snapshots/{name}`: snapshot several volumes of one plugin together
/// (CreateVolumeGroupSnapshot), write-order consistent across them by the plugin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSnapshotRequest {
    /// The volumes to snapshot together (csivol volume names, of the group's namespace), at
    /// least one.
    pub volumes: Vec<String>,
    /// Plugin-specific CreateVolumeGroupSnapshot parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// A group snapshot as the API shows it: the group and its member snapshots, each an
/// ordinary snapshot (`GET /v1/snapshots/{member}`) a volume can be created from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    /// Its name within its namespace, its volumes'.
    pub name: String,
    #[serde(default = "crate::default_namespace")]
    pub namespace: String,
    pub plugin: String,
    /// The csivol volumes it was taken of, in the order asked, by their names within the
    /// namespace.
    pub volumes: Vec<String>,
    /// The plugin's group snapshot id; empty until CreateVolumeGroupSnapshot answered.
    pub group_snapshot_id: String,
    /// `creating`, `pending` (cut, not every member ready to use), `ready`, `deleting`
    /// or `failed`, as for a snapshot.
    pub state: SnapshotState,
    pub ready_to_use: bool,
    /// When the storage system cut the group (RFC 3339), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
    /// Its member snapshots, one per volume, once the plugin cut them.
    #[serde(default)]
    pub members: Vec<Snapshot>,
    /// The last error of its CreateVolumeGroupSnapshot, GetVolumeGroupSnapshot or
    /// DeleteVolumeGroupSnapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub index: u64,
}

/// What a new volume's data comes from (CreateVolume's `volume_content_source`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ContentSource {
    /// A csivol snapshot's name: needs CREATE_DELETE_SNAPSHOT.
    Snapshot(String),
    /// A csivol volume's name (a clone): needs CLONE_VOLUME.
    Volume(String),
}

/// The content source as the controller host passes it on: the plugin's own ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum WireContentSource {
    SnapshotId(String),
    VolumeId(String),
}
