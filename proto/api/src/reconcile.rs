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
