//! Every conversion between csivol's own types for what it needs from CSI (plain data in
//! `csivol_api::domain`) and the generated wire types. Nothing outside
//! this module and the gRPC edges (agent plugin calls, the reference plugin's handlers)
//! should name a `csi::v1` type.

use csivol_api::TopologyRequest;
use csivol_api::domain::{
    AccessMode, AccessType, ControllerCapabilities, ErrorClass, GroupControllerCapabilities,
    NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo, Topology, VolumeCapability,
    VolumeExpansion,
};

use crate::csi::v1 as csi;

/// A conversion from a wire type failed: a required field is missing or a value is unknown.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConversionError {
    #[error("`{0}` is required")]
    Missing(&'static str),
    #[error("unknown access mode {0}")]
    UnknownAccessMode(i32),
}

/// The access mode of a wire `access_mode.mode` value.
pub fn access_mode(value: i32) -> Result<AccessMode, ConversionError> {
    use csi::volume_capability::access_mode::Mode;
    Ok(match Mode::try_from(value) {
        Ok(Mode::SingleNodeWriter) => AccessMode::SingleNodeWriter,
        Ok(Mode::SingleNodeReaderOnly) => AccessMode::SingleNodeReaderOnly,
        Ok(Mode::MultiNodeReaderOnly) => AccessMode::MultiNodeReaderOnly,
        Ok(Mode::MultiNodeSingleWriter) => AccessMode::MultiNodeSingleWriter,
        Ok(Mode::MultiNodeMultiWriter) => AccessMode::MultiNodeMultiWriter,
        Ok(Mode::SingleNodeSingleWriter) => AccessMode::SingleNodeSingleWriter,
        Ok(Mode::SingleNodeMultiWriter) => AccessMode::SingleNodeMultiWriter,
        Ok(Mode::Unknown) | Err(_) => return Err(ConversionError::UnknownAccessMode(value)),
    })
}

impl From<AccessMode> for csi::volume_capability::access_mode::Mode {
    fn from(mode: AccessMode) -> Self {
        match mode {
            AccessMode::SingleNodeReaderOnly => Self::SingleNodeReaderOnly,
            AccessMode::SingleNodeWriter => Self::SingleNodeWriter,
            AccessMode::SingleNodeSingleWriter => Self::SingleNodeSingleWriter,
            AccessMode::SingleNodeMultiWriter => Self::SingleNodeMultiWriter,
            AccessMode::MultiNodeReaderOnly => Self::MultiNodeReaderOnly,
            AccessMode::MultiNodeSingleWriter => Self::MultiNodeSingleWriter,
            AccessMode::MultiNodeMultiWriter => Self::MultiNodeMultiWriter,
        }
    }
}

impl TryFrom<&csi::VolumeCapability> for VolumeCapability {
    type Error = ConversionError;

    fn try_from(cap: &csi::VolumeCapability) -> Result<Self, Self::Error> {
        use csi::volume_capability::AccessType as Wire;
        let access_type = match &cap.access_type {
            Some(Wire::Mount(m)) => AccessType::FileSystem {
                fs_type: m.fs_type.clone(),
                mount_flags: m.mount_flags.clone(),
            },
            Some(Wire::Block(_)) => AccessType::BlockDevice,
            None => return Err(ConversionError::Missing("volume_capability.access_type")),
        };
        let mode = cap
            .access_mode
            .as_ref()
            .ok_or(ConversionError::Missing("volume_capability.access_mode"))?;
        Ok(Self {
            access_type,
            access_mode: access_mode(mode.mode)?,
        })
    }
}

impl From<&VolumeCapability> for csi::VolumeCapability {
    fn from(cap: &VolumeCapability) -> Self {
        use csi::volume_capability::{AccessType as Wire, BlockVolume, MountVolume};
        let access_type = match &cap.access_type {
            AccessType::FileSystem {
                fs_type,
                mount_flags,
            } => Wire::Mount(MountVolume {
                fs_type: fs_type.clone(),
                mount_flags: mount_flags.clone(),
                ..Default::default()
            }),
            AccessType::BlockDevice => Wire::Block(BlockVolume {}),
        };
        let mode = csi::volume_capability::access_mode::Mode::from(cap.access_mode);
        Self {
            access_type: Some(access_type),
            access_mode: Some(csi::volume_capability::AccessMode { mode: mode.into() }),
        }
    }
}

impl TryFrom<csi::GetPluginInfoResponse> for PluginInfo {
    type Error = ConversionError;

    fn try_from(r: csi::GetPluginInfoResponse) -> Result<Self, Self::Error> {
        if r.name.is_empty() {
            return Err(ConversionError::Missing("name"));
        }
        Ok(Self {
            name: r.name,
            vendor_version: r.vendor_version,
        })
    }
}

impl From<&csi::GetPluginCapabilitiesResponse> for PluginCapabilities {
    fn from(r: &csi::GetPluginCapabilitiesResponse) -> Self {
        use csi::plugin_capability::service::Type;
        let mut caps = Self::default();
        for cap in &r.capabilities {
            if let Some(csi::plugin_capability::Type::Service(s)) = &cap.r#type {
                match Type::try_from(s.r#type) {
                    Ok(Type::ControllerService) => caps.controller_service = true,
                    Ok(Type::VolumeAccessibilityConstraints) => {
                        caps.volume_accessibility_constraints = true;
                    }
                    Ok(Type::GroupControllerService) => caps.group_controller_service = true,
                    // Capabilities csivol does not use are ignored, as the spec asks of a CO.
                    _ => {}
                }
            }
            if let Some(csi::plugin_capability::Type::VolumeExpansion(e)) = &cap.r#type {
                use csi::plugin_capability::volume_expansion::Type as E;
                caps.volume_expansion = match E::try_from(e.r#type) {
                    Ok(E::Online) => Some(VolumeExpansion::Online),
                    Ok(E::Offline) => Some(VolumeExpansion::Offline),
                    _ => caps.volume_expansion,
                };
            }
        }
        caps
    }
}

impl From<PluginCapabilities> for csi::GetPluginCapabilitiesResponse {
    fn from(caps: PluginCapabilities) -> Self {
        use csi::plugin_capability::{Service, Type, service::Type as S};
        let service = |t: S| csi::PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t.into() })),
        };
        let mut capabilities = Vec::new();
        if caps.controller_service {
            capabilities.push(service(S::ControllerService));
        }
        if caps.volume_accessibility_constraints {
            capabilities.push(service(S::VolumeAccessibilityConstraints));
        }
        if caps.group_controller_service {
            capabilities.push(service(S::GroupControllerService));
        }
        if let Some(e) = caps.volume_expansion {
            use csi::plugin_capability::{VolumeExpansion as V, volume_expansion::Type as E};
            let t = match e {
                VolumeExpansion::Online => E::Online,
                VolumeExpansion::Offline => E::Offline,
            };
            capabilities.push(csi::PluginCapability {
                r#type: Some(Type::VolumeExpansion(V { r#type: t.into() })),
            });
        }
        Self { capabilities }
    }
}

impl From<&csi::ControllerGetCapabilitiesResponse> for ControllerCapabilities {
    fn from(r: &csi::ControllerGetCapabilitiesResponse) -> Self {
        use csi::controller_service_capability::{Type, rpc::Type as R};
        let mut caps = Self::default();
        for cap in &r.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            match R::try_from(rpc.r#type) {
                Ok(R::CreateDeleteVolume) => caps.create_delete_volume = true,
                Ok(R::PublishUnpublishVolume) => caps.publish_unpublish_volume = true,
                Ok(R::ListVolumes) => caps.list_volumes = true,
                Ok(R::ListVolumesPublishedNodes) => caps.list_volumes_published_nodes = true,
                Ok(R::VolumeCondition) => caps.volume_condition = true,
                Ok(R::PublishReadonly) => caps.publish_readonly = true,
                Ok(R::SingleNodeMultiWriter) => caps.single_node_multi_writer = true,
                Ok(R::ExpandVolume) => caps.expand_volume = true,
                Ok(R::CreateDeleteSnapshot) => caps.create_delete_snapshot = true,
                Ok(R::ListSnapshots) => caps.list_snapshots = true,
                Ok(R::CloneVolume) => caps.clone_volume = true,
                Ok(R::ModifyVolume) => caps.modify_volume = true,
                Ok(R::GetSnapshot) => caps.get_snapshot = true,
                Ok(R::GetCapacity) => caps.get_capacity = true,
                _ => {}
            }
        }
        caps
    }
}

impl From<ControllerCapabilities> for csi::ControllerGetCapabilitiesResponse {
    fn from(caps: ControllerCapabilities) -> Self {
        use csi::controller_service_capability::{Rpc, Type, rpc::Type as R};
        let flags = [
            (caps.create_delete_volume, R::CreateDeleteVolume),
            (caps.publish_unpublish_volume, R::PublishUnpublishVolume),
            (caps.list_volumes, R::ListVolumes),
            (
                caps.list_volumes_published_nodes,
                R::ListVolumesPublishedNodes,
            ),
            (caps.publish_readonly, R::PublishReadonly),
            (caps.volume_condition, R::VolumeCondition),
            (caps.single_node_multi_writer, R::SingleNodeMultiWriter),
            (caps.expand_volume, R::ExpandVolume),
            (caps.create_delete_snapshot, R::CreateDeleteSnapshot),
            (caps.list_snapshots, R::ListSnapshots),
            (caps.clone_volume, R::CloneVolume),
            (caps.modify_volume, R::ModifyVolume),
            (caps.get_snapshot, R::GetSnapshot),
            (caps.get_capacity, R::GetCapacity),
        ];
        let capabilities = flags
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, t)| csi::ControllerServiceCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: t.into() })),
            })
            .collect();
        Self { capabilities }
    }
}

impl From<&csi::GroupControllerGetCapabilitiesResponse> for GroupControllerCapabilities {
    fn from(r: &csi::GroupControllerGetCapabilitiesResponse) -> Self {
        use csi::group_controller_service_capability::{Type, rpc::Type as R};
        let mut caps = Self::default();
        for cap in &r.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            if R::try_from(rpc.r#type) == Ok(R::CreateDeleteGetVolumeGroupSnapshot) {
                caps.create_delete_get_volume_group_snapshot = true;
            }
        }
        caps
    }
}

impl From<GroupControllerCapabilities> for csi::GroupControllerGetCapabilitiesResponse {
    fn from(caps: GroupControllerCapabilities) -> Self {
        use csi::group_controller_service_capability::{Rpc, Type, rpc::Type as R};
        let capabilities = caps
            .create_delete_get_volume_group_snapshot
            .then(|| csi::GroupControllerServiceCapability {
                r#type: Some(Type::Rpc(Rpc {
                    r#type: R::CreateDeleteGetVolumeGroupSnapshot.into(),
                })),
            })
            .into_iter()
            .collect();
        Self { capabilities }
    }
}

impl From<&csi::NodeGetCapabilitiesResponse> for NodeCapabilities {
    fn from(r: &csi::NodeGetCapabilitiesResponse) -> Self {
        use csi::node_service_capability::{Type, rpc::Type as R};
        let mut caps = Self::default();
        for cap in &r.capabilities {
            let Some(Type::Rpc(rpc)) = &cap.r#type else {
                continue;
            };
            match R::try_from(rpc.r#type) {
                Ok(R::StageUnstageVolume) => caps.stage_unstage_volume = true,
                Ok(R::GetVolumeStats) => caps.get_volume_stats = true,
                Ok(R::VolumeCondition) => caps.volume_condition = true,
                Ok(R::SingleNodeMultiWriter) => caps.single_node_multi_writer = true,
                Ok(R::ExpandVolume) => caps.expand_volume = true,
                Ok(R::VolumeMountGroup) => caps.volume_mount_group = true,
                _ => {}
            }
        }
        caps
    }
}

impl From<NodeCapabilities> for csi::NodeGetCapabilitiesResponse {
    fn from(caps: NodeCapabilities) -> Self {
        use csi::node_service_capability::{Rpc, Type, rpc::Type as R};
        let flags = [
            (caps.stage_unstage_volume, R::StageUnstageVolume),
            (caps.get_volume_stats, R::GetVolumeStats),
            (caps.volume_condition, R::VolumeCondition),
            (caps.single_node_multi_writer, R::SingleNodeMultiWriter),
            (caps.expand_volume, R::ExpandVolume),
            (caps.volume_mount_group, R::VolumeMountGroup),
        ];
        let capabilities = flags
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, t)| csi::NodeServiceCapability {
                r#type: Some(Type::Rpc(Rpc { r#type: t.into() })),
            })
            .collect();
        Self { capabilities }
    }
}

impl TryFrom<csi::NodeGetInfoResponse> for NodeInfo {
    type Error = ConversionError;

    fn try_from(r: csi::NodeGetInfoResponse) -> Result<Self, Self::Error> {
        if r.node_id.is_empty() {
            return Err(ConversionError::Missing("node_id"));
        }
        Ok(Self {
            node_id: r.node_id,
            // The spec forbids negative values; treat one as "no limit" rather than fail.
            max_volumes_per_node: u32::try_from(r.max_volumes_per_node).unwrap_or(0),
            accessible_topology: r
                .accessible_topology
                .map(|t| t.segments.into_iter().collect()),
        })
    }
}

impl From<NodeInfo> for csi::NodeGetInfoResponse {
    fn from(info: NodeInfo) -> Self {
        Self {
            node_id: info.node_id,
            max_volumes_per_node: i64::from(info.max_volumes_per_node),
            accessible_topology: info.accessible_topology.map(|segments| csi::Topology {
                segments: segments.into_iter().collect(),
            }),
        }
    }
}

impl From<&Topology> for csi::Topology {
    fn from(segments: &Topology) -> Self {
        Self {
            segments: segments.clone().into_iter().collect(),
        }
    }
}

impl From<csi::Topology> for Topology {
    fn from(t: csi::Topology) -> Self {
        t.segments.into_iter().collect()
    }
}

/// csivol's `required` segments are CSI's `requisite` ones.
impl From<&TopologyRequest> for csi::TopologyRequirement {
    fn from(r: &TopologyRequest) -> Self {
        Self {
            requisite: r.required.iter().map(csi::Topology::from).collect(),
            preferred: r.preferred.iter().map(csi::Topology::from).collect(),
        }
    }
}

/// gRPC status codes by their canonical names (`UNAVAILABLE`), as reports and logs carry them.
const CODE_NAMES: [(tonic::Code, &str); 17] = [
    (tonic::Code::Ok, "OK"),
    (tonic::Code::Cancelled, "CANCELLED"),
    (tonic::Code::Unknown, "UNKNOWN"),
    (tonic::Code::InvalidArgument, "INVALID_ARGUMENT"),
    (tonic::Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
    (tonic::Code::NotFound, "NOT_FOUND"),
    (tonic::Code::AlreadyExists, "ALREADY_EXISTS"),
    (tonic::Code::PermissionDenied, "PERMISSION_DENIED"),
    (tonic::Code::ResourceExhausted, "RESOURCE_EXHAUSTED"),
    (tonic::Code::FailedPrecondition, "FAILED_PRECONDITION"),
    (tonic::Code::Aborted, "ABORTED"),
    (tonic::Code::OutOfRange, "OUT_OF_RANGE"),
    (tonic::Code::Unimplemented, "UNIMPLEMENTED"),
    (tonic::Code::Internal, "INTERNAL"),
    (tonic::Code::Unavailable, "UNAVAILABLE"),
    (tonic::Code::DataLoss, "DATA_LOSS"),
    (tonic::Code::Unauthenticated, "UNAUTHENTICATED"),
];

impl From<&csivol_api::WireContentSource> for csi::VolumeContentSource {
    fn from(source: &csivol_api::WireContentSource) -> Self {
        use csi::volume_content_source::{SnapshotSource, Type, VolumeSource};
        use csivol_api::WireContentSource as W;
        let t = match source {
            W::SnapshotId(id) => Type::Snapshot(SnapshotSource {
                snapshot_id: id.clone(),
            }),
            W::VolumeId(id) => Type::Volume(VolumeSource {
                volume_id: id.clone(),
            }),
        };
        Self { r#type: Some(t) }
    }
}

/// A CSI timestamp as unix milliseconds (`None` when absent, before 1970 or after 9999).
pub fn timestamp_ms(t: Option<&prost_types::Timestamp>) -> Option<u64> {
    let t = t?;
    let ms = t
        .seconds
        .checked_mul(1000)?
        .checked_add(i64::from(t.nanos) / 1_000_000)?;
    // A time no RFC 3339 timestamp can write (before 1970, after the year 9999) is no
    // time csivol can record: unknown, as if the plugin had not said.
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms <= csivol_api::limits::MAX_TIME_MS)
}

/// The canonical name of a gRPC status code (`UNAVAILABLE`).
pub fn code_name(code: tonic::Code) -> &'static str {
    CODE_NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map_or("UNKNOWN", |(_, n)| n)
}

/// The gRPC status code with this canonical name.
pub fn code_from_name(name: &str) -> Option<tonic::Code> {
    CODE_NAMES.iter().find(|(_, n)| *n == name).map(|(c, _)| *c)
}

/// What a failed plugin call with this status code means for the caller (the spec's
/// error tables, kept by code name in [`ErrorClass::of_name`]).
pub fn error_class(code: tonic::Code) -> ErrorClass {
    ErrorClass::of_name(code_name(code))
}

/// One ListVolumes entry as csivol's reconciliation reads it: the volume id, the nodes it
/// is published to, and its condition when abnormal.
impl From<&csi::list_volumes_response::Entry> for csivol_api::ListedVolume {
    fn from(e: &csi::list_volumes_response::Entry) -> Self {
        let status = e.status.as_ref();
        Self {
            external_id: e
                .volume
                .as_ref()
                .map(|v| v.volume_id.clone())
                .unwrap_or_default(),
            published_node_ids: status
                .map(|s| s.published_node_ids.clone())
                .unwrap_or_default(),
            abnormal: status
                .and_then(|s| s.volume_condition.as_ref())
                .filter(|c| c.abnormal)
                .map(|c| c.message.clone()),
            capacity_bytes: e
                .volume
                .as_ref()
                .map_or(0, |v| u64::try_from(v.capacity_bytes).unwrap_or(0)),
            context: e
                .volume
                .as_ref()
                .map(|v| v.volume_context.clone().into_iter().collect())
                .unwrap_or_default(),
        }
    }
}

/// NodeGetVolumeStats' `usage` as csivol reads it: one entry per unit, the first of each.
/// csi.proto, `NodeGetVolumeStatsResponse`: `usage` "This field is OPTIONAL", so a plugin
/// may answer with none (both units absent). `VolumeUsage`: "The available capacity in
/// specified Unit. This field is OPTIONAL." and "The used capacity in specified Unit. This
/// field is OPTIONAL.": proto3 sends an absent number as 0, so a 0 `used` or `available`
/// is taken as not reported ([`csivol_api::UsageNumbers::used`] then works from the other
/// one); "The total capacity in specified Unit. This field is REQUIRED." and "Units by
/// which values are measured. This field is REQUIRED.": an entry of UNKNOWN unit says
/// nothing csivol can use and is skipped, as is one with a negative number, which no
/// count can be.
pub fn volume_usage(entries: &[csi::VolumeUsage]) -> csivol_api::VolumeUsage {
    {
        use csi::volume_usage::Unit;
        let numbers = |u: &csi::VolumeUsage| {
            let total = u64::try_from(u.total).ok()?;
            let given = |n: i64| u64::try_from(n).ok().filter(|n| *n > 0);
            if u.used < 0 || u.available < 0 {
                return None;
            }
            Some(csivol_api::UsageNumbers {
                used: given(u.used),
                available: given(u.available),
                total,
            })
        };
        let first = |unit: Unit| {
            entries
                .iter()
                .filter(|u| u.unit == unit as i32)
                .find_map(numbers)
        };
        csivol_api::VolumeUsage {
            bytes: first(Unit::Bytes),
            inodes: first(Unit::Inodes),
        }
    }
}

/// One snapshot as ListSnapshots lists it: its id, the source volume's id, its size
/// (0: unknown, as the spec has it), when it was cut and whether it is ready to use.
impl From<&csi::Snapshot> for csivol_api::ListedSnapshot {
    fn from(s: &csi::Snapshot) -> Self {
        Self {
            snapshot_id: s.snapshot_id.clone(),
            source_volume_id: s.source_volume_id.clone(),
            size_bytes: u64::try_from(s.size_bytes).unwrap_or(0),
            creation_time_ms: timestamp_ms(s.creation_time.as_ref()),
            ready_to_use: s.ready_to_use,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_usage_takes_what_the_plugin_reported_of_each_unit() {
        use csi::volume_usage::Unit;
        let entry = |unit: Unit, used, available, total| csi::VolumeUsage {
            available,
            total,
            used,
            unit: unit as i32,
        };
        let numbers = |used, available, total| csivol_api::UsageNumbers {
            used,
            available,
            total,
        };
        for (entries, bytes, inodes) in [
            (vec![], None, None),
            (
                vec![
                    entry(Unit::Bytes, 10, 90, 100),
                    entry(Unit::Inodes, 1, 9, 10),
                ],
                Some(numbers(Some(10), Some(90), 100)),
                Some(numbers(Some(1), Some(9), 10)),
            ),
            // A block volume: only its size.
            (
                vec![entry(Unit::Bytes, 0, 0, 4096)],
                Some(numbers(None, None, 4096)),
                None,
            ),
            (vec![entry(Unit::Unknown, 1, 1, 2)], None, None),
            (vec![entry(Unit::Bytes, -1, 1, 2)], None, None),
            (
                vec![entry(Unit::Inodes, 0, 5, 10), entry(Unit::Inodes, 9, 1, 10)],
                None,
                Some(numbers(None, Some(5), 10)),
            ),
        ] {
            let got = volume_usage(&entries);
            assert_eq!((got.bytes, got.inodes), (bytes, inodes), "{entries:?}");
        }
    }

    #[test]
    fn access_modes_round_trip_through_wire() {
        for mode in AccessMode::ALL {
            let wire = csi::volume_capability::access_mode::Mode::from(mode) as i32;
            assert_eq!(access_mode(wire), Ok(mode));
        }
        assert_eq!(access_mode(0), Err(ConversionError::UnknownAccessMode(0)));
        assert_eq!(access_mode(99), Err(ConversionError::UnknownAccessMode(99)));
    }

    #[test]
    fn volume_capability_round_trips() {
        let cap = VolumeCapability {
            access_type: AccessType::FileSystem {
                fs_type: "ext4".into(),
                mount_flags: vec!["noatime".into()],
            },
            access_mode: AccessMode::MultiNodeSingleWriter,
        };
        let wire = csi::VolumeCapability::from(&cap);
        assert_eq!(VolumeCapability::try_from(&wire), Ok(cap));

        let block = VolumeCapability {
            access_type: AccessType::BlockDevice,
            access_mode: AccessMode::SingleNodeWriter,
        };
        assert_eq!(
            VolumeCapability::try_from(&csi::VolumeCapability::from(&block)),
            Ok(block)
        );

        let missing = csi::VolumeCapability {
            access_type: None,
            access_mode: None,
        };
        assert_eq!(
            VolumeCapability::try_from(&missing),
            Err(ConversionError::Missing("volume_capability.access_type"))
        );
    }

    #[test]
    fn content_sources_and_timestamps_convert() {
        let s = csi::VolumeContentSource::from(&csivol_api::WireContentSource::SnapshotId(
            "snap-1".into(),
        ));
        assert!(matches!(
            s.r#type,
            Some(csi::volume_content_source::Type::Snapshot(ref x)) if x.snapshot_id == "snap-1"
        ));
        let t = prost_types::Timestamp {
            seconds: 2,
            nanos: 5_000_000,
        };
        assert_eq!(timestamp_ms(Some(&t)), Some(2005));
        assert_eq!(timestamp_ms(None), None);
        let year_10000 = prost_types::Timestamp {
            seconds: 253_402_300_800,
            nanos: 0,
        };
        assert_eq!(timestamp_ms(Some(&year_10000)), None);
    }

    #[test]
    fn capabilities_round_trip() {
        let c = ControllerCapabilities {
            create_delete_volume: true,
            publish_unpublish_volume: true,
            publish_readonly: true,
            expand_volume: true,
            create_delete_snapshot: true,
            list_snapshots: true,
            clone_volume: true,
            modify_volume: true,
            get_snapshot: true,
            get_capacity: true,
            ..Default::default()
        };
        assert_eq!(ControllerCapabilities::from(&c.into()), c);
        for g in [true, false] {
            let caps = GroupControllerCapabilities {
                create_delete_get_volume_group_snapshot: g,
            };
            assert_eq!(GroupControllerCapabilities::from(&caps.into()), caps);
        }
        let n = NodeCapabilities {
            stage_unstage_volume: true,
            get_volume_stats: true,
            expand_volume: true,
            volume_mount_group: true,
            ..Default::default()
        };
        assert_eq!(NodeCapabilities::from(&n.into()), n);
        let p = PluginCapabilities {
            controller_service: true,
            volume_accessibility_constraints: false,
            volume_expansion: None,
            group_controller_service: true,
        };
        assert_eq!(PluginCapabilities::from(&p.into()), p);
        for e in [VolumeExpansion::Online, VolumeExpansion::Offline] {
            let p = PluginCapabilities {
                volume_expansion: Some(e),
                ..p
            };
            assert_eq!(PluginCapabilities::from(&p.into()), p);
        }
    }

    #[test]
    fn node_info_conversion() {
        let info = NodeInfo {
            node_id: "n1".into(),
            max_volumes_per_node: 3,
            accessible_topology: Some([("zone".into(), "a".into())].into()),
        };
        assert_eq!(
            NodeInfo::try_from(csi::NodeGetInfoResponse::from(info.clone())),
            Ok(info)
        );
        let empty = csi::NodeGetInfoResponse::default();
        assert_eq!(
            NodeInfo::try_from(empty),
            Err(ConversionError::Missing("node_id"))
        );
    }

    #[test]
    fn error_classes_follow_the_spec_tables() {
        use tonic::Code;
        assert_eq!(error_class(Code::Unavailable), ErrorClass::Retry);
        assert_eq!(error_class(Code::Aborted), ErrorClass::Retry);
        assert_eq!(error_class(Code::ResourceExhausted), ErrorClass::Retry);
        assert_eq!(error_class(Code::DeadlineExceeded), ErrorClass::Retry);
        assert_eq!(error_class(Code::FailedPrecondition), ErrorClass::Conflict);
        assert_eq!(error_class(Code::AlreadyExists), ErrorClass::Conflict);
        assert_eq!(error_class(Code::NotFound), ErrorClass::Final);
        assert_eq!(error_class(Code::InvalidArgument), ErrorClass::Final);
        assert_eq!(ErrorClass::of_name("UNAVAILABLE"), ErrorClass::Retry);
        assert_eq!(ErrorClass::of_name("TIMEOUT"), ErrorClass::Final);
        assert_eq!(code_name(Code::ResourceExhausted), "RESOURCE_EXHAUSTED");
        assert_eq!(code_from_name("ALREADY_EXISTS"), Some(Code::AlreadyExists));
    }
}
