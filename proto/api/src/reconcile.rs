//! Controller-side reconciliation: what a controller host lists from its plugin
//! (ListVolumes with LIST_VOLUMES_PUBLISHED_NODES), and what the server finds when it
//! compares that with its attachments. Findings are shown, never fixed silently.

use serde::{Deserialize, Serialize};

/// One volume as the plugin's ListVolumes lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedVolume {
    pub external_id: String,
    /// The plugin's node ids (NodeGetInfo's `node_id`) the volume is published to.
    #[serde(default)]
    pub published_node_ids: Vec<String>,
    /// The plugin's VOLUME_CONDITION message, when it says the volume is abnormal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abnormal: Option<String>,
    /// The volume's size, where the plugin says it (0: unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub capacity_bytes: u64,
    /// The volume's `volume_context`, which NodeStageVolume and NodePublishVolume are sent.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub context: std::collections::BTreeMap<String, String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `GET /v1/plugins/{id}/volumes`: what the plugin's last ListVolumes held, beside
/// csivol's records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginVolumes {
    pub plugin: String,
    /// Whether a controller of the plugin reports LIST_VOLUMES; without it nothing is listed.
    pub lists_volumes: bool,
    /// LIST_VOLUMES_PUBLISHED_NODES: the listing says where each volume is published.
    pub published_nodes: bool,
    /// VOLUME_CONDITION: the listing says which volumes are abnormal.
    pub condition: bool,
    /// How long ago this server heard the listing, in ms; absent: not listed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    pub volumes: Vec<StorageVolume>,
}

/// `POST /v1/volumes/{name}/adopt`: register a volume the plugin's storage holds and csivol
/// does not know, checked against the plugin's last listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdoptRequest {
    /// The volume as `volume register` takes it; an empty `context` takes the listing's.
    pub spec: crate::VolumeSpec,
    /// The nodes (csivol names or the plugin's node ids) the listing has the volume
    /// published to that the operator takes responsibility for: without them, a volume
    /// published anywhere is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub published_to: Vec<String>,
    /// Registers it without ValidateVolumeCapabilities, which only a plugin without a
    /// Controller service may ask for: it has nothing to answer the call with.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_validation: bool,
}

/// One snapshot as the plugin's ListSnapshots lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedSnapshot {
    pub snapshot_id: String,
    /// The plugin's id of the volume it was cut from (empty: the plugin does not say).
    #[serde(default)]
    pub source_volume_id: String,
    /// Its size (0: unknown, as the spec has it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size_bytes: u64,
    /// When it was cut, Unix ms, where the plugin says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time_ms: Option<u64>,
    pub ready_to_use: bool,
}

/// `GET /v1/plugins/{id}/snapshots`: what the plugin's last ListSnapshots held, beside
/// csivol's snapshot records.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginSnapshots {
    pub plugin: String,
    /// Whether a controller of the plugin reports LIST_SNAPSHOTS; without it nothing is
    /// listed.
    pub lists_snapshots: bool,
    /// How long ago this server heard the listing, in ms; absent: not listed yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    pub snapshots: Vec<StorageSnapshot>,
}

/// One snapshot of the plugin's listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageSnapshot {
    #[serde(flatten)]
    pub listed: ListedSnapshot,
    /// The csivol snapshot recorded with this snapshot id; absent: unknown to csivol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// The csivol volume recorded with the source volume id, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

/// `POST /v1/snapshots/{name}/adopt`: register a snapshot the plugin's storage holds and
/// csivol does not know, found with ListSnapshots by its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotAdoptRequest {
    pub plugin: String,
    pub snapshot_id: String,
}

/// One volume of the plugin's listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageVolume {
    #[serde(flatten)]
    pub listed: ListedVolume,
    /// The csivol volume recorded with this external id; absent: unknown to csivol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
}

/// What a comparison found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// The storage system has the volume published to a node where csivol has no
    /// attachment of it.
    Leaked,
    /// csivol has the volume attached to a node where the storage system does not have it
    /// published.
    Missing,
    /// The plugin says the volume is abnormal (VOLUME_CONDITION).
    Abnormal,
}

impl FindingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Leaked => "leaked",
            Self::Missing => "missing",
            Self::Abnormal => "abnormal",
        }
    }
}

/// A difference between the storage system and csivol, as `GET /v1/controller-findings`
/// and `csivol status` show it. Part of the JSON contract.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerFinding {
    pub plugin: String,
    pub kind: FindingKind,
    /// The csivol volume, when the plugin's volume id is one csivol knows.
    pub volume: Option<String>,
    /// The plugin's volume id.
    pub external_id: String,
    /// The csivol node, when the plugin's node id is one a node registered.
    pub node: Option<String>,
    /// The plugin's node id (none for `abnormal`).
    pub node_id: Option<String>,
    pub message: String,
    /// When the finding was first seen (RFC 3339).
    pub since: String,
}
