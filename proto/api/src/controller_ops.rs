//! The controller operations the server hands to a node agent that hosts a plugin's
//! controller: one kind per CSI controller call (or pair of calls) the agent makes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::VolumeCapability;

/// A controller operation assigned to this agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerOp {
    pub id: u64,
    /// Bumped on every retry; a report names the attempt it answers.
    pub attempt: u32,
    pub plugin: String,
    /// Do not start before this time (unix ms): the server's backoff after an error.
    pub not_before_ms: u64,
    #[serde(flatten)]
    pub kind: ControllerOpKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ControllerOpKind {
    Publish {
        volume: String,
        external_id: String,
        /// The plugin's id for the target node (from its NodeGetInfo).
        node_id: String,
        capability: VolumeCapability,
        readonly: bool,
        #[serde(default)]
        context: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    Unpublish {
        volume: String,
        external_id: String,
        node_id: String,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    Create {
        volume: String,
        capability: VolumeCapability,
        capacity_bytes: u64,
        #[serde(default)]
        parameters: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
        /// CreateVolume's `accessibility_requirements`, when the volume asked for some.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        topology_request: Option<crate::TopologyRequest>,
        /// The content source, as the plugin's ids.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<crate::WireContentSource>,
        /// CreateVolume's `mutable_parameters`.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        mutable_parameters: BTreeMap<String, String>,
        /// CreateVolume's `name`, the storage's idempotency key: one per creation, recorded
        /// with the operation (absent from an older server: the volume's name is sent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        csi_name: Option<String>,
    },
    Delete {
        volume: String,
        external_id: String,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// ControllerExpandVolume to at least `capacity_bytes`.
    Expand {
        volume: String,
        external_id: String,
        capacity_bytes: u64,
        capability: VolumeCapability,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// ControllerModifyVolume with only the mutable parameters that change.
    Modify {
        volume: String,
        external_id: String,
        parameters: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// CreateSnapshot; repeated (it is idempotent by name) until `ready_to_use`, or, once
    /// the snapshot is cut (`snapshot_id` known) and the plugin has GET_SNAPSHOT,
    /// GetSnapshot in its place.
    CreateSnapshot {
        snapshot: String,
        /// The plugin's id of the source volume.
        source_volume_id: String,
        /// The plugin's id of the snapshot once CreateSnapshot answered (empty before).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        snapshot_id: String,
        #[serde(default)]
        parameters: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    DeleteSnapshot {
        snapshot: String,
        snapshot_id: String,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// CreateVolumeGroupSnapshot; repeated (it is idempotent by name) until the group is
    /// cut, then GetVolumeGroupSnapshot of the group until it is `ready_to_use`.
    CreateGroupSnapshot {
        group: String,
        /// The plugin's ids of the source volumes.
        source_volume_ids: Vec<String>,
        /// The plugin's id of the group once it answered (empty before).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        group_snapshot_id: String,
        /// The plugin's ids of the members once it answered, for GetVolumeGroupSnapshot.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        snapshot_ids: Vec<String>,
        #[serde(default)]
        parameters: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// DeleteVolumeGroupSnapshot of the group with every member's id.
    DeleteGroupSnapshot {
        group: String,
        group_snapshot_id: String,
        snapshot_ids: Vec<String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// ValidateVolumeCapabilities of a volume being adopted, with what it will be
    /// registered with.
    ValidateVolume {
        volume: String,
        external_id: String,
        capability: VolumeCapability,
        #[serde(default)]
        context: BTreeMap<String, String>,
        #[serde(default)]
        parameters: BTreeMap<String, String>,
        #[serde(default)]
        secrets: BTreeMap<String, String>,
    },
    /// ListSnapshots of the one snapshot being adopted (its `snapshot_id` filter).
    FindSnapshot {
        snapshot: String,
        snapshot_id: String,
    },
}

/// One member snapshot of a group snapshot as the plugin described it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupMember {
    pub snapshot_id: String,
    /// The plugin's id of the volume it was cut from.
    pub source_volume_id: String,
    pub size_bytes: u64,
    pub ready_to_use: bool,
    #[serde(default)]
    pub creation_time_ms: Option<u64>,
}
