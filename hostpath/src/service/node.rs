//! The Node service: stage, publish, unpublish, unstage, volume stats, capabilities and
//! node info, each checked against the real mount table.

use std::io;
use std::path::Path;

use csivol_api::domain::{NodeCapabilities, NodeInfo};
use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;
use crate::store::{NodeState, Publication, Staging, VolumeRecord};

use super::{Plugin, Service, capability, check_volume_context, internal, require, require_path};

#[tonic::async_trait]
impl csi::node_server::Node for Service {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeStageVolume, req.volume_id.clone(), move |p| {
                p.node_stage(req)
            })
            .await
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeUnstageVolume, req.volume_id.clone(), move |p| {
                p.node_unstage(req)
            })
            .await
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodePublishVolume, req.volume_id.clone(), move |p| {
                p.node_publish(req)
            })
            .await
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeUnpublishVolume, req.volume_id.clone(), move |p| {
                p.node_unpublish(req)
            })
            .await
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        self.0
            .call(Rpc::NodeGetVolumeStats, req.volume_id.clone(), move |p| {
                p.node_stats(req)
            })
            .await
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::NodeGetCapabilities, String::new(), |p| {
                Ok(NodeCapabilities {
                    stage_unstage_volume: p.cfg.stage,
                    get_volume_stats: true,
                    volume_condition: true,
                    single_node_multi_writer: true,
                }
                .into())
            })
            .await
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        self.0
            .call(Rpc::NodeGetInfo, String::new(), |p| {
                Ok(NodeInfo {
                    node_id: p.cfg.node_id.clone(),
                    max_volumes_per_node: p.cfg.max_volumes_per_node,
                    accessible_topology: None,
                }
                .into())
            })
            .await
    }
}

impl Plugin {
    /// The volume's record in the backend, or, for a volume deleted behind our back, proof
    /// that this node still holds something of it (so it can still be taken down).
    fn known_volume(&self, id: &str, state: &NodeState) -> Result<Option<VolumeRecord>, Status> {
        match self
            .backend
            .volume(id)
            .map_err(|e| internal(e, "read volume"))?
        {
            Some(v) => Ok(Some(v)),
            None if state.stagings.contains_key(id) || !state.published_targets(id).is_empty() => {
                Ok(None)
            }
            None => Err(Status::not_found(format!("volume `{id}` does not exist"))),
        }
    }

    fn node_stage(
        &self,
        req: csi::NodeStageVolumeRequest,
    ) -> Result<csi::NodeStageVolumeResponse, Status> {
        if !self.cfg.stage {
            return Err(Status::unimplemented(
                "this plugin does not advertise STAGE_UNSTAGE_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let path = require_path(&req.staging_target_path, "staging_target_path")?;
        let cap = capability(req.volume_capability.as_ref(), "volume_capability")?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
        self.check_controller_published(&volume.id, &req.publish_context)?;
        if !path.is_dir() {
            return Err(Status::invalid_argument(format!(
                "`staging_target_path` {} is not a directory; the CO must create it",
                path.display()
            )));
        }
        let mut state = self.node_state();
        if let Some(existing) = state.stagings.get(&volume.id) {
            if existing.path != path {
                return Err(Status::failed_precondition(format!(
                    "volume `{}` is already staged at {}",
                    volume.id,
                    existing.path.display()
                )));
            }
            if existing.capability != cap {
                return Err(Status::already_exists(format!(
                    "volume `{}` is staged at {} with a different capability",
                    volume.id,
                    path.display()
                )));
            }
        }
        // Attach unless already attached: after a crash between the mount and the state
        // write, the mount is there but the record is not.
        if !self
            .cfg
            .mount
            .is_attached(&path)
            .map_err(|e| internal(e, "read the mount table"))?
        {
            self.cfg
                .mount
                .attach(&self.backend.data_dir(&volume.id), &path, &volume.id, false)
                .map_err(|e| internal(e, &format!("mount {}", path.display())))?;
        }
        state.stagings.insert(
            volume.id.clone(),
            Staging {
                path,
                capability: cap,
            },
        );
        self.save_node(&state)?;
        Ok(csi::NodeStageVolumeResponse {})
    }

    fn node_unstage(
        &self,
        req: csi::NodeUnstageVolumeRequest,
    ) -> Result<csi::NodeUnstageVolumeResponse, Status> {
        if !self.cfg.stage {
            return Err(Status::unimplemented(
                "this plugin does not advertise STAGE_UNSTAGE_VOLUME",
            ));
        }
        require(&req.volume_id, "volume_id")?;
        let path = require_path(&req.staging_target_path, "staging_target_path")?;
        let mut state = self.node_state();
        self.known_volume(&req.volume_id, &state)?;
        let targets = state.published_targets(&req.volume_id);
        if let Some(target) = targets.first() {
            return Err(Status::failed_precondition(format!(
                "volume `{}` is still published at {}; call NodeUnpublishVolume first",
                req.volume_id,
                target.display()
            )));
        }
        if let Some(existing) = state.stagings.get(&req.volume_id)
            && existing.path != path
        {
            return Err(Status::failed_precondition(format!(
                "volume `{}` is staged at {}, not at {}",
                req.volume_id,
                existing.path.display(),
                path.display()
            )));
        }
        self.cfg
            .mount
            .detach(&path)
            .map_err(|e| internal(e, &format!("unmount {}", path.display())))?;
        if state.stagings.remove(&req.volume_id).is_some() {
            self.save_node(&state)?;
        }
        Ok(csi::NodeUnstageVolumeResponse {})
    }

    fn node_publish(
        &self,
        req: csi::NodePublishVolumeRequest,
    ) -> Result<csi::NodePublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let cap = capability(req.volume_capability.as_ref(), "volume_capability")?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
        let attachment = self.check_controller_published(&volume.id, &req.publish_context)?;
        let mut state = self.node_state();
        let source = if self.cfg.stage {
            let staging = require_path(&req.staging_target_path, "staging_target_path")?;
            match state.stagings.get(&volume.id) {
                // A staging unmounted behind the plugin's back (a crash, an operator's
                // umount) must not be bound to the target: that would publish an empty
                // local directory instead of the volume.
                Some(s)
                    if s.path == staging
                        && !self
                            .cfg
                            .mount
                            .is_attached(&staging)
                            .map_err(|e| internal(e, "read the mount table"))? =>
                {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is recorded as staged at {}, but nothing is mounted there; \
                         call NodeStageVolume again",
                        volume.id,
                        staging.display()
                    )));
                }
                Some(s) if s.path == staging => staging,
                Some(s) => {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is staged at {}, not at {}",
                        volume.id,
                        s.path.display(),
                        staging.display()
                    )));
                }
                None => {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is not staged on this node; call NodeStageVolume first",
                        volume.id
                    )));
                }
            }
        } else {
            self.backend.data_dir(&volume.id)
        };
        let readonly = req.readonly
            || cap.access_mode.max_writers() == Some(0)
            || attachment.is_some_and(|a| a.readonly);
        let wanted = Publication {
            volume_id: volume.id.clone(),
            readonly,
            capability: cap.clone(),
            staging_path: self.cfg.stage.then(|| source.clone()),
        };
        if let Some(existing) = state.publications.get(&target) {
            if *existing != wanted {
                return Err(Status::already_exists(format!(
                    "{} is already published for volume `{}` with other options",
                    target.display(),
                    existing.volume_id
                )));
            }
        } else if cap.access_mode == csivol_api::domain::AccessMode::SingleNodeSingleWriter
            && let Some(other) = state.published_targets(&volume.id).first()
        {
            return Err(Status::failed_precondition(format!(
                "volume `{}` is single-node-single-writer and already published at {}",
                volume.id,
                other.display()
            )));
        }
        if self.cfg.publish_without_mount {
            return Ok(csi::NodePublishVolumeResponse {});
        }
        let parent = target.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(Status::invalid_argument(format!(
                "the parent of `target_path`, {}, does not exist; the CO must create it",
                parent.display()
            )));
        }
        match std::fs::create_dir(&target) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(internal(e, &format!("create {}", target.display())));
            }
            _ => {}
        }
        if !self
            .cfg
            .mount
            .is_attached(&target)
            .map_err(|e| internal(e, "read the mount table"))?
        {
            self.cfg
                .mount
                .attach(&source, &target, &volume.id, readonly)
                .map_err(|e| internal(e, &format!("mount {}", target.display())))?;
        }
        state.publications.insert(target, wanted);
        self.save_node(&state)?;
        Ok(csi::NodePublishVolumeResponse {})
    }

    fn node_unpublish(
        &self,
        req: csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let mut state = self.node_state();
        self.known_volume(&req.volume_id, &state)?;
        if let Some(existing) = state.publications.get(&target)
            && existing.volume_id != req.volume_id
        {
            return Err(Status::failed_precondition(format!(
                "{} is published for volume `{}`, not `{}`",
                target.display(),
                existing.volume_id,
                req.volume_id
            )));
        }
        self.cfg
            .mount
            .detach(&target)
            .map_err(|e| internal(e, &format!("unmount {}", target.display())))?;
        match std::fs::remove_dir(&target) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(internal(e, &format!("remove {}", target.display())));
            }
            _ => {}
        }
        if state.publications.remove(&target).is_some() {
            self.save_node(&state)?;
        }
        Ok(csi::NodeUnpublishVolumeResponse {})
    }

    fn node_stats(
        &self,
        req: csi::NodeGetVolumeStatsRequest,
    ) -> Result<csi::NodeGetVolumeStatsResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let path = require_path(&req.volume_path, "volume_path")?;
        let state = self.node_state();
        self.known_volume(&req.volume_id, &state)?;
        let ours = state
            .publications
            .get(&path)
            .is_some_and(|p| p.volume_id == req.volume_id)
            || state
                .stagings
                .get(&req.volume_id)
                .is_some_and(|s| s.path == path);
        if !ours {
            return Err(Status::not_found(format!(
                "volume `{}` is not published or staged at {}",
                req.volume_id,
                path.display()
            )));
        }
        let attached = self
            .cfg
            .mount
            .is_attached(&path)
            .map_err(|e| internal(e, "read the mount table"))?;
        let fs = rustix::fs::statvfs(&path)
            .map_err(|e| internal(e.into(), &format!("statvfs {}", path.display())))?;
        let frsize = fs.f_frsize as i64;
        let usage =
            |unit: csi::volume_usage::Unit, scale: i64, total: u64, free: u64| csi::VolumeUsage {
                available: free as i64 * scale,
                total: total as i64 * scale,
                used: total.saturating_sub(free) as i64 * scale,
                unit: unit.into(),
            };
        Ok(csi::NodeGetVolumeStatsResponse {
            usage: vec![
                usage(
                    csi::volume_usage::Unit::Bytes,
                    frsize,
                    fs.f_blocks,
                    fs.f_bavail,
                ),
                usage(csi::volume_usage::Unit::Inodes, 1, fs.f_files, fs.f_favail),
            ],
            volume_condition: Some(
                match std::fs::read_to_string(self.abnormal_dir.join(&req.volume_id)) {
                    Ok(injected) => csi::VolumeCondition {
                        abnormal: true,
                        message: injected.trim().to_owned(),
                    },
                    Err(_) if !attached => csi::VolumeCondition {
                        abnormal: true,
                        message: format!("{} is not mounted", path.display()),
                    },
                    Err(_) => csi::VolumeCondition {
                        abnormal: false,
                        message: "mounted".into(),
                    },
                },
            ),
        })
    }
}
