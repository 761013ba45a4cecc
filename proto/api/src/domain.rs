//! csivol's own types for what it needs from CSI: access modes and types, capabilities,
//! what a plugin says about itself and its node, and what a failed plugin call means. The
//! CSI crate converts them to and from the generated wire types (`csivol_csi::convert`);
//! here they are plain data, serialised in the HTTP API.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Key/value pairs a controller returns from ControllerPublishVolume and the node plugin
/// receives with NodeStage/NodePublish.
pub type PublishContext = BTreeMap<String, String>;

/// Topology segments (e.g. `zone` → `z1`).
pub type Topology = BTreeMap<String, String>;

/// How a volume may be shared, the CSI access modes under csivol's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AccessMode {
    SingleNodeReaderOnly,
    SingleNodeWriter,
    SingleNodeSingleWriter,
    SingleNodeMultiWriter,
    MultiNodeReaderOnly,
    MultiNodeSingleWriter,
    MultiNodeMultiWriter,
}

impl AccessMode {
    pub const ALL: [AccessMode; 7] = [
        Self::SingleNodeReaderOnly,
        Self::SingleNodeWriter,
        Self::SingleNodeSingleWriter,
        Self::SingleNodeMultiWriter,
        Self::MultiNodeReaderOnly,
        Self::MultiNodeSingleWriter,
        Self::MultiNodeMultiWriter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SingleNodeReaderOnly => "single-node-reader-only",
            Self::SingleNodeWriter => "single-node-writer",
            Self::SingleNodeSingleWriter => "single-node-single-writer",
            Self::SingleNodeMultiWriter => "single-node-multi-writer",
            Self::MultiNodeReaderOnly => "multi-node-reader-only",
            Self::MultiNodeSingleWriter => "multi-node-single-writer",
            Self::MultiNodeMultiWriter => "multi-node-multi-writer",
        }
    }

    /// Whether every claim must be on one node at a time.
    pub fn is_single_node(self) -> bool {
        matches!(
            self,
            Self::SingleNodeReaderOnly
                | Self::SingleNodeWriter
                | Self::SingleNodeSingleWriter
                | Self::SingleNodeMultiWriter
        )
    }

    /// How many write claims may exist at once; `None` means no limit.
    pub fn max_writers(self) -> Option<usize> {
        match self {
            Self::SingleNodeReaderOnly | Self::MultiNodeReaderOnly => Some(0),
            Self::SingleNodeWriter | Self::SingleNodeSingleWriter | Self::MultiNodeSingleWriter => {
                Some(1)
            }
            Self::SingleNodeMultiWriter | Self::MultiNodeMultiWriter => None,
        }
    }

    /// How many claims of any kind may exist at once; `None` means no limit.
    pub fn max_claims(self) -> Option<usize> {
        match self {
            Self::SingleNodeSingleWriter => Some(1),
            _ => None,
        }
    }
}

impl fmt::Display for AccessMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AccessMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|m| m.as_str()).collect();
                format!(
                    "unknown access mode `{s}`, expected one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// Whether a volume is used as a mounted file system or as a raw block device.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "attachment")]
pub enum AccessType {
    FileSystem {
        #[serde(default, skip_serializing_if = "String::is_empty")]
        fs_type: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        mount_flags: Vec<String>,
    },
    BlockDevice,
}

impl AccessType {
    pub fn is_block(&self) -> bool {
        matches!(self, Self::BlockDevice)
    }
}

/// One capability a volume is used with: how it is accessed and how it is shared.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VolumeCapability {
    #[serde(flatten)]
    pub access_type: AccessType,
    pub access_mode: AccessMode,
}

/// What a plugin says it is, from GetPluginInfo.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginInfo {
    pub name: String,
    pub vendor_version: String,
}

/// Plugin-wide capabilities, from GetPluginCapabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginCapabilities {
    pub controller_service: bool,
    pub volume_accessibility_constraints: bool,
    /// The VolumeExpansion capability: whether a volume may grow while in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_expansion: Option<VolumeExpansion>,
    /// GROUP_CONTROLLER_SERVICE: the plugin serves the GroupController service.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub group_controller_service: bool,
}

/// The plugin's VolumeExpansion capability.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VolumeExpansion {
    /// A volume may be expanded while published on a node.
    Online,
    /// A volume may be expanded only while published nowhere.
    Offline,
}

/// Controller capabilities csivol acts on, from ControllerGetCapabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerCapabilities {
    pub create_delete_volume: bool,
    pub publish_unpublish_volume: bool,
    pub list_volumes: bool,
    pub list_volumes_published_nodes: bool,
    /// VOLUME_CONDITION: ListVolumes and ControllerGetVolume say when a volume is abnormal.
    #[serde(default)]
    pub volume_condition: bool,
    pub publish_readonly: bool,
    pub single_node_multi_writer: bool,
    /// EXPAND_VOLUME: ControllerExpandVolume.
    #[serde(default)]
    pub expand_volume: bool,
    #[serde(default)]
    pub create_delete_snapshot: bool,
    #[serde(default)]
    pub list_snapshots: bool,
    #[serde(default)]
    pub clone_volume: bool,
    /// MODIFY_VOLUME: ControllerModifyVolume changes a volume's mutable parameters.
    #[serde(default)]
    pub modify_volume: bool,
    /// GET_SNAPSHOT: GetSnapshot answers for one snapshot.
    #[serde(default)]
    pub get_snapshot: bool,
    /// GET_CAPACITY: GetCapacity answers how much the storage has left.
    #[serde(default)]
    pub get_capacity: bool,
    /// CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT of the GroupController service, from
    /// GroupControllerGetCapabilities (asked only of a plugin whose GetPluginCapabilities
    /// lists GROUP_CONTROLLER_SERVICE): `snapshot create --group`.
    #[serde(default)]
    pub group_snapshots: bool,
}

/// Group controller capabilities csivol acts on, from GroupControllerGetCapabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupControllerCapabilities {
    /// CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT: CreateVolumeGroupSnapshot,
    /// DeleteVolumeGroupSnapshot and GetVolumeGroupSnapshot.
    #[serde(default)]
    pub create_delete_get_volume_group_snapshot: bool,
}

/// Node capabilities csivol acts on, from NodeGetCapabilities.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapabilities {
    pub stage_unstage_volume: bool,
    pub get_volume_stats: bool,
    pub volume_condition: bool,
    pub single_node_multi_writer: bool,
    /// EXPAND_VOLUME: NodeExpandVolume.
    #[serde(default)]
    pub expand_volume: bool,
    /// VOLUME_MOUNT_GROUP: the plugin passes `MountVolume.volume_mount_group` to its mount.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub volume_mount_group: bool,
}

/// What a node plugin says about its node, from NodeGetInfo.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node_id: String,
    /// 0 means no limit.
    pub max_volumes_per_node: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accessible_topology: Option<Topology>,
}

/// What a failed plugin call means for the caller, following the spec's error tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorClass {
    /// The call may succeed later (the plugin is busy, unreachable or the call timed out and
    /// may have happened): retry with backoff until there is a definite answer.
    Retry,
    /// The volume is in a state that conflicts with the call; retrying the same call will
    /// not help until something else changes.
    Conflict,
    /// The request itself is wrong or names something that does not exist.
    Final,
}

impl ErrorClass {
    /// The class of a failed plugin call by the canonical name of its gRPC status code
    /// (`UNAVAILABLE`), as the spec's error tables give it; reports carry codes by name.
    /// Names that are not gRPC codes (such as csivol's own `TIMEOUT`) are final.
    pub fn of_name(name: &str) -> Self {
        match name {
            "UNAVAILABLE" | "DEADLINE_EXCEEDED" | "ABORTED" | "RESOURCE_EXHAUSTED"
            // Not in the spec's tables: a plugin that crashed or was cancelled mid-call may
            // or may not have acted, so the call is retried to a definite answer.
            | "CANCELLED" | "UNKNOWN" | "INTERNAL" => Self::Retry,
            "FAILED_PRECONDITION" | "ALREADY_EXISTS" | "OUT_OF_RANGE" => Self::Conflict,
            _ => Self::Final,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_modes_round_trip_through_text() {
        for mode in AccessMode::ALL {
            assert_eq!(mode.as_str().parse::<AccessMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            assert_eq!(serde_json::from_str::<AccessMode>(&json).unwrap(), mode);
        }
        let err = "rw".parse::<AccessMode>().unwrap_err();
        assert!(err.contains("single-node-writer"), "{err}");
    }

    #[test]
    fn access_mode_rules() {
        use AccessMode::*;
        assert!(SingleNodeWriter.is_single_node());
        assert!(!MultiNodeSingleWriter.is_single_node());
        assert_eq!(SingleNodeReaderOnly.max_writers(), Some(0));
        assert_eq!(MultiNodeSingleWriter.max_writers(), Some(1));
        assert_eq!(MultiNodeMultiWriter.max_writers(), None);
        assert_eq!(SingleNodeSingleWriter.max_claims(), Some(1));
        assert_eq!(SingleNodeWriter.max_claims(), None);
    }

    #[test]
    fn error_classes_by_code_name() {
        for (name, class) in [
            ("UNAVAILABLE", ErrorClass::Retry),
            ("ABORTED", ErrorClass::Retry),
            ("RESOURCE_EXHAUSTED", ErrorClass::Retry),
            ("DEADLINE_EXCEEDED", ErrorClass::Retry),
            ("INTERNAL", ErrorClass::Retry),
            ("FAILED_PRECONDITION", ErrorClass::Conflict),
            ("ALREADY_EXISTS", ErrorClass::Conflict),
            ("NOT_FOUND", ErrorClass::Final),
            ("INVALID_ARGUMENT", ErrorClass::Final),
            ("TIMEOUT", ErrorClass::Final),
        ] {
            assert_eq!(ErrorClass::of_name(name), class, "{name}");
        }
    }
}
