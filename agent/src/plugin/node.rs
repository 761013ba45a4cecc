//! The node calls: connecting a node plugin (NodeGetInfo, its capabilities) and every
//! Node service call the agent makes, each with a deadline and a permit.

use std::path::Path;

use csivol_api::domain::{NodeCapabilities, NodeInfo};
use csivol_api::{ClaimMount, DesiredExpand, DesiredPublish, GroupBy, NodeVolume};
use csivol_csi::csi::v1 as csi;
use csivol_csi::endpoint::with_deadline;
use tokio::sync::Semaphore;

use super::{
    CallError, ConnectError, NodePlugin, PROBE_DEADLINE, counted, identity, wire_map, wire_path,
};
use crate::config::{CoreConfig, PluginSpec};
use crate::stats::CallBook;

/// What NodeGetVolumeStats said of a published volume.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub usage: csivol_api::VolumeUsage,
    /// `(abnormal, message)`, when the plugin gave a condition.
    pub condition: Option<(bool, String)>,
}

impl NodePlugin {
    pub(super) async fn connect(
        spec: &PluginSpec,
        cfg: &CoreConfig,
        calls: Option<&std::sync::Arc<CallBook>>,
    ) -> Result<Self, ConnectError> {
        let conn = counted(spec.endpoint.connection(cfg.node_call_timeout), spec, calls);
        let identity = identity(spec, &conn, cfg.plugin_wait_timeout).await?;
        let mut client = csi::node_client::NodeClient::new(conn);
        let call_err = |source| ConnectError::Call {
            id: spec.id.clone(),
            endpoint: spec.endpoint.clone(),
            source,
        };
        let caps = client
            .node_get_capabilities(with_deadline(
                csi::NodeGetCapabilitiesRequest {},
                PROBE_DEADLINE,
            ))
            .await
            .map_err(|s| call_err(CallError::new("NodeGetCapabilities", s)))?;
        let info = client
            .node_get_info(with_deadline(csi::NodeGetInfoRequest {}, PROBE_DEADLINE))
            .await
            .map_err(|s| call_err(CallError::new("NodeGetInfo", s)))?
            .into_inner();
        let info = NodeInfo::try_from(info)
            .map_err(|e| call_err(CallError::invalid_response("NodeGetInfo", e)))?;
        Ok(Self {
            id: spec.id.clone(),
            endpoint: spec.endpoint.clone(),
            identity,
            limit: std::sync::atomic::AtomicU32::new(info.max_volumes_per_node),
            info,
            capabilities: NodeCapabilities::from(caps.get_ref()),
            client,
            permits: Semaphore::new(cfg.node_concurrency),
            timeout: cfg.node_call_timeout,
        })
    }

    pub fn stages(&self) -> bool {
        self.capabilities.stage_unstage_volume
    }

    /// The node's facts as NodeGetInfo last said them (the attach limit read again).
    pub fn node_info(&self) -> NodeInfo {
        NodeInfo {
            max_volumes_per_node: self.limit(),
            ..self.info.clone()
        }
    }

    /// The attach limit as NodeGetInfo last said it (0: no limit).
    pub fn limit(&self) -> u32 {
        self.limit.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads the attach limit again with NodeGetInfo; returns it (the node id and topology
    /// the spec has the plugin keep are not taken again).
    pub async fn refresh_limit(&self) -> Result<u32, CallError> {
        let info = self
            .client
            .clone()
            .node_get_info(with_deadline(csi::NodeGetInfoRequest {}, PROBE_DEADLINE))
            .await
            .map_err(|s| CallError::new("NodeGetInfo", s))?
            .into_inner();
        let info =
            NodeInfo::try_from(info).map_err(|e| CallError::invalid_response("NodeGetInfo", e))?;
        self.limit.store(
            info.max_volumes_per_node,
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(info.max_volumes_per_node)
    }

    /// The volume's capability on the wire for `rpc`, with what the claim asks of its
    /// mount:
    ///
    /// - its group in `MountVolume.volume_mount_group` where the plugin applies it. The
    ///   spec (csi.proto, `MountVolume.volume_mount_group`): "If SP has VOLUME_MOUNT_GROUP
    ///   node capability and CO provides this field then SP MUST ensure that the
    ///   volume_mount_group parameter is passed as the group identifier to the underlying
    ///   operating system mount system call"; a plugin without the capability is never
    ///   sent it, and a claim the server decided the plugin applies the group for is
    ///   refused here when the plugin no longer says it has it;
    /// - its SELinux context as a `context="..."` flag, to NodeStageVolume and
    ///   NodePublishVolume both (one file system is mounted with one context).
    ///
    /// [`NodePlugin::publish_capability`] adds the claim's own flags.
    fn stage_capability(
        &self,
        v: &NodeVolume,
        mount: &ClaimMount,
        rpc: &'static str,
    ) -> Result<csi::VolumeCapability, CallError> {
        let mut cap = csi::VolumeCapability::from(&v.capability);
        let Some(csi::volume_capability::AccessType::Mount(m)) = &mut cap.access_type else {
            return Ok(cap);
        };
        if let (Some(gid), Some(GroupBy::Plugin)) = (mount.gid, mount.group_by) {
            if !self.capabilities.volume_mount_group {
                return Err(CallError {
                    rpc,
                    code: tonic::Code::FailedPrecondition,
                    message: format!(
                        "group {gid} is to be applied by plugin `{}`, which no longer has \
                         VOLUME_MOUNT_GROUP; release the claim and claim again",
                        self.id
                    ),
                });
            }
            m.volume_mount_group = gid.to_string();
        }
        if let Some(flag) = mount.context_flag() {
            m.mount_flags.push(flag);
        }
        Ok(cap)
    }

    /// [`NodePlugin::stage_capability`] with the claim's own mount flags, which go to
    /// NodePublishVolume only: the staging is shared by the volume's claims on the node,
    /// and a NodeStageVolume with another capability is answered ALREADY_EXISTS (spec.md,
    /// NodeStageVolume errors, "Volume published but is incompatible").
    fn publish_capability(
        &self,
        v: &NodeVolume,
        mount: &ClaimMount,
    ) -> Result<csi::VolumeCapability, CallError> {
        let mut cap = self.stage_capability(v, mount, "NodePublishVolume")?;
        if let Some(csi::volume_capability::AccessType::Mount(m)) = &mut cap.access_type {
            m.mount_flags.extend(mount.mount_flags.iter().cloned());
        }
        Ok(cap)
    }

    pub async fn stage(
        &self,
        v: &NodeVolume,
        mount: &ClaimMount,
        staging: &Path,
    ) -> Result<(), CallError> {
        let req = csi::NodeStageVolumeRequest {
            volume_id: v.external_id.clone(),
            publish_context: wire_map(&v.publish_context),
            staging_target_path: wire_path(staging),
            volume_capability: Some(self.stage_capability(v, mount, "NodeStageVolume")?),
            secrets: wire_map(&v.secrets),
            volume_context: wire_map(&v.context),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_stage_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeStageVolume", s))?;
        Ok(())
    }

    pub async fn publish(
        &self,
        p: &DesiredPublish,
        staging: Option<&Path>,
        target: &Path,
    ) -> Result<(), CallError> {
        let v = &p.volume;
        let req = csi::NodePublishVolumeRequest {
            volume_id: v.external_id.clone(),
            publish_context: wire_map(&v.publish_context),
            staging_target_path: staging.map(wire_path).unwrap_or_default(),
            target_path: wire_path(target),
            volume_capability: Some(self.publish_capability(v, &p.mount)?),
            readonly: p.read_only,
            secrets: wire_map(&v.secrets),
            volume_context: wire_map(&v.context),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_publish_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodePublishVolume", s))?;
        Ok(())
    }

    pub async fn unpublish(&self, external_id: &str, target: &Path) -> Result<(), CallError> {
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id: external_id.to_owned(),
            target_path: wire_path(target),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_unpublish_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeUnpublishVolume", s))?;
        Ok(())
    }

    /// Whether the plugin can say how a published volume is (GET_VOLUME_STATS with
    /// VOLUME_CONDITION).
    pub fn reports_condition(&self) -> bool {
        self.capabilities.get_volume_stats && self.capabilities.volume_condition
    }

    /// Whether the plugin can say how full a published volume is (GET_VOLUME_STATS).
    pub fn reports_usage(&self) -> bool {
        self.capabilities.get_volume_stats
    }

    /// NodeGetVolumeStats of a published volume: its usage (the units the plugin
    /// reported), and its condition, `(abnormal, message)`, when the plugin gave one.
    pub async fn volume_stats(
        &self,
        external_id: &str,
        target: &Path,
        staging: Option<&Path>,
    ) -> Result<VolumeStats, CallError> {
        let req = csi::NodeGetVolumeStatsRequest {
            volume_id: external_id.to_owned(),
            volume_path: wire_path(target),
            staging_target_path: staging.map(wire_path).unwrap_or_default(),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        let resp = self
            .client
            .clone()
            .node_get_volume_stats(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeGetVolumeStats", s))?
            .into_inner();
        Ok(VolumeStats {
            usage: csivol_csi::convert::volume_usage(&resp.usage),
            condition: resp.volume_condition.map(|c| (c.abnormal, c.message)),
        })
    }

    /// NodeExpandVolume at `path` (a target, or the staging when nothing is published);
    /// returns the capacity the plugin reports (0: it did not say).
    pub async fn expand(
        &self,
        e: &DesiredExpand,
        path: &Path,
        staging: Option<&Path>,
    ) -> Result<u64, CallError> {
        let req = csi::NodeExpandVolumeRequest {
            volume_id: e.external_id.clone(),
            volume_path: wire_path(path),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: i64::try_from(e.capacity_bytes).unwrap_or(i64::MAX),
                limit_bytes: 0,
            }),
            staging_target_path: staging.map(wire_path).unwrap_or_default(),
            volume_capability: Some(csi::VolumeCapability::from(&e.capability)),
            secrets: wire_map(&e.secrets),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        let r = self
            .client
            .clone()
            .node_expand_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeExpandVolume", s))?;
        Ok(u64::try_from(r.into_inner().capacity_bytes).unwrap_or(0))
    }

    pub async fn unstage(&self, external_id: &str, staging: &Path) -> Result<(), CallError> {
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: external_id.to_owned(),
            staging_target_path: wire_path(staging),
        };
        let _permit = self.permits.acquire().await.expect("never closed");
        self.client
            .clone()
            .node_unstage_volume(with_deadline(req, self.timeout))
            .await
            .map_err(|s| CallError::new("NodeUnstageVolume", s))?;
        Ok(())
    }
}
