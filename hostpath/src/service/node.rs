//! The Node service: stage, publish, unpublish, unstage, expand, volume stats,
//! capabilities and node info, each checked against the real mount table (and, for block
//! volumes, the kernel's loop devices).
//!
//! A file-system volume is its backend directory, bind-mounted at the staging path and
//! from there at each target. A block volume is its image file on a loop device: staging
//! attaches the device, publishing bind-mounts the device node onto the target (a file),
//! unstaging (or the last unpublish, without staging) detaches it. In `--mount none` mode
//! both are stood in for by marker files. `--node-shape` ([`NodeShape`]) makes the plugin
//! stage and publish as other real plugins do: nothing at the staging path, a directory
//! inside the staging published, a block device bound inside the staging directory.

use std::io;
use std::path::{Path, PathBuf};

use csivol_csi::csi::v1 as csi;
use tonic::{Request, Response, Status};

use crate::faults::Rpc;
use crate::loopdev;
use crate::mounts::{MountMode, binds_device, is_mount_point, unmount_if_mounted};
use crate::store::VolumeRecord;
use crate::store::node::{NodeState, Publication, Staging};

mod stats;

use super::{
    NodeShape, PUBLISH_SUBDIR, Plugin, STAGED_DEVICE, Service, check_volume_context, internal,
    kind_mismatch, require, require_path,
};

macro_rules! delegate {
    ($self:ident, $request:ident, $rpc:ident, $method:ident) => {{
        let req = $request.into_inner();
        $self
            .0
            .call(Rpc::$rpc, req.volume_id.clone(), move |p| p.$method(req))
            .await
    }};
    // A publication: the call log names its target path.
    ($self:ident, $request:ident, $rpc:ident, $method:ident, target) => {{
        let req = $request.into_inner();
        let (volume, target) = (req.volume_id.clone(), req.target_path.clone());
        $self
            .0
            .call_on(Rpc::$rpc, volume, Some(target), move |p| p.$method(req))
            .await
    }};
}

#[tonic::async_trait]
impl csi::node_server::Node for Service {
    async fn node_stage_volume(
        &self,
        request: Request<csi::NodeStageVolumeRequest>,
    ) -> Result<Response<csi::NodeStageVolumeResponse>, Status> {
        delegate!(self, request, NodeStageVolume, node_stage)
    }

    async fn node_unstage_volume(
        &self,
        request: Request<csi::NodeUnstageVolumeRequest>,
    ) -> Result<Response<csi::NodeUnstageVolumeResponse>, Status> {
        delegate!(self, request, NodeUnstageVolume, node_unstage)
    }

    async fn node_publish_volume(
        &self,
        request: Request<csi::NodePublishVolumeRequest>,
    ) -> Result<Response<csi::NodePublishVolumeResponse>, Status> {
        delegate!(self, request, NodePublishVolume, node_publish, target)
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<csi::NodeUnpublishVolumeRequest>,
    ) -> Result<Response<csi::NodeUnpublishVolumeResponse>, Status> {
        delegate!(self, request, NodeUnpublishVolume, node_unpublish, target)
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<csi::NodeGetVolumeStatsRequest>,
    ) -> Result<Response<csi::NodeGetVolumeStatsResponse>, Status> {
        delegate!(self, request, NodeGetVolumeStats, node_stats)
    }

    async fn node_expand_volume(
        &self,
        request: Request<csi::NodeExpandVolumeRequest>,
    ) -> Result<Response<csi::NodeExpandVolumeResponse>, Status> {
        delegate!(self, request, NodeExpandVolume, node_expand)
    }

    async fn node_get_capabilities(
        &self,
        _: Request<csi::NodeGetCapabilitiesRequest>,
    ) -> Result<Response<csi::NodeGetCapabilitiesResponse>, Status> {
        self.0
            .call(Rpc::NodeGetCapabilities, String::new(), |p| {
                use csi::node_service_capability::{Rpc as R, Type, rpc::Type as T};
                let f = p.cfg.features;
                let flags = [
                    (p.cfg.stage, T::StageUnstageVolume),
                    (f.volume_stats, T::GetVolumeStats),
                    (f.node_expand, T::ExpandVolume),
                    (f.volume_condition, T::VolumeCondition),
                    (true, T::SingleNodeMultiWriter),
                    (f.volume_mount_group, T::VolumeMountGroup),
                ];
                Ok(csi::NodeGetCapabilitiesResponse {
                    capabilities: flags
                        .into_iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, t)| csi::NodeServiceCapability {
                            r#type: Some(Type::Rpc(R { r#type: t.into() })),
                        })
                        .collect(),
                })
            })
            .await
    }

    async fn node_get_info(
        &self,
        _: Request<csi::NodeGetInfoRequest>,
    ) -> Result<Response<csi::NodeGetInfoResponse>, Status> {
        self.0
            .call(Rpc::NodeGetInfo, String::new(), |p| {
                Ok(csi::NodeGetInfoResponse {
                    node_id: p.cfg.node_id.clone(),
                    max_volumes_per_node: i64::from(p.node_limit()?),
                    accessible_topology: (!p.cfg.topology.is_empty()).then(|| csi::Topology {
                        segments: p.cfg.topology.clone().into_iter().collect(),
                    }),
                })
            })
            .await
    }
}

/// Creates the file a device node is bound onto (an existing one is kept).
fn create_file(path: &Path) -> Result<(), Status> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map(drop)
        .map_err(|e| internal(e, &format!("create {}", path.display())))
}

/// Removes what NodePublishVolume created at `target`: a directory, or a block volume's
/// file. Succeeds when there is nothing.
fn remove_target(target: &Path) -> io::Result<()> {
    let result = match std::fs::symlink_metadata(target) {
        Ok(m) if m.is_dir() => std::fs::remove_dir(target),
        Ok(_) => std::fs::remove_file(target),
        Err(e) => Err(e),
    };
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
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
            None if !state.holds_nothing(id) => Ok(None),
            None => Err(Status::not_found(format!("volume `{id}` does not exist"))),
        }
    }

    fn is_block(&self, volume: Option<&VolumeRecord>, state: &NodeState, id: &str) -> bool {
        volume.map_or_else(
            || {
                state
                    .stagings
                    .get(id)
                    .map(|s| s.capability.access_type.is_block())
                    .or_else(|| {
                        state
                            .publications
                            .values()
                            .find(|p| p.volume_id == id)
                            .map(|p| p.capability.access_type.is_block())
                    })
                    .unwrap_or(false)
            },
            |v| v.block,
        )
    }

    /// This node's loop device for a block volume, while the kernel says it still backs
    /// the volume's image.
    fn block_device(&self, state: &NodeState, volume_id: &str) -> Result<Option<PathBuf>, Status> {
        let Some(device) = state.devices.get(volume_id) else {
            return Ok(None);
        };
        let backing = loopdev::devices(&self.backend.image(volume_id))
            .map_err(|e| internal(e, "look up loop devices"))?;
        Ok(backing.contains(device).then(|| device.clone()))
    }

    /// This node's loop device for a block volume, attached if it has none. The device is
    /// recorded at once: one attached but not recorded would be left behind.
    fn attach_block_device(
        &self,
        state: &mut NodeState,
        volume_id: &str,
    ) -> Result<PathBuf, Status> {
        if let Some(device) = self.block_device(state, volume_id)? {
            return Ok(device);
        }
        let device = loopdev::attach(&self.backend.image(volume_id))
            .map_err(|e| internal(e, "attach a loop device"))?;
        state.devices.insert(volume_id.to_owned(), device.clone());
        self.save_node(state, volume_id)?;
        Ok(device)
    }

    /// Whether a staging is in place: mounted (file systems), or this node's loop device
    /// attached (block volumes; with `stage-device` also bound in the staging directory),
    /// or its marker written (`--mount none`). A plugin that stages nothing has nothing
    /// there to lose: its record is the staging.
    fn staging_in_place(
        &self,
        state: &NodeState,
        volume_id: &str,
        block: bool,
        path: &Path,
    ) -> Result<bool, Status> {
        let table = |e| internal(e, "read the mount table");
        if block && self.cfg.mount == MountMode::Bind {
            let device = self.block_device(state, volume_id)?;
            if self.cfg.shape == NodeShape::StageDevice {
                return match device {
                    Some(d) => binds_device(&path.join(STAGED_DEVICE), &d).map_err(table),
                    None => Ok(false),
                };
            }
            return Ok(device.is_some());
        }
        if self.cfg.shape == NodeShape::StageNothing && self.cfg.mount == MountMode::Bind {
            return Ok(true);
        }
        self.cfg.mount.is_attached(path).map_err(table)
    }

    /// Makes a staging at `path`, unless it is in place already: after a crash between
    /// the attach and the state write, the mount (or loop device) is there but the record
    /// is not.
    fn make_staging(
        &self,
        state: &mut NodeState,
        volume: &VolumeRecord,
        path: &Path,
    ) -> Result<(), Status> {
        if self.staging_in_place(state, &volume.id, volume.block, path)? {
            return Ok(());
        }
        let mount_err = |e| internal(e, &format!("mount {}", path.display()));
        if volume.block && self.cfg.mount == MountMode::Bind {
            let device = self.attach_block_device(state, &volume.id)?;
            if self.cfg.shape == NodeShape::StageDevice {
                let file = path.join(STAGED_DEVICE);
                create_file(&file)?;
                if !binds_device(&file, &device).map_err(|e| internal(e, "read the mount table"))? {
                    // A node bound there before is of a device that no longer backs the
                    // volume (its loop device detached, the number perhaps set up again
                    // on another file): the volume's device replaces it.
                    unmount_if_mounted(&file).map_err(mount_err)?;
                    self.cfg
                        .mount
                        .attach_block(&device, &file, &volume.id, false)
                        .map_err(mount_err)?;
                }
            }
            return Ok(());
        }
        self.cfg
            .mount
            .attach(&self.backend.data_dir(&volume.id), path, &volume.id, false)
            .map_err(mount_err)?;
        if self.cfg.shape == NodeShape::PublishSubdir {
            std::fs::create_dir_all(path.join(PUBLISH_SUBDIR))
                .map_err(|e| internal(e, "create the published directory"))?;
        }
        Ok(())
    }

    /// Detaches this node's loop device of a block volume, once it holds nothing of it.
    fn release_block(&self, state: &mut NodeState, volume_id: &str) -> Result<(), Status> {
        if let Some(device) = self.block_device(state, volume_id)? {
            loopdev::detach(&device).map_err(|e| internal(e, "detach the loop device"))?;
        }
        state.devices.remove(volume_id);
        Ok(())
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
        let cap = self.capability(req.volume_capability.as_ref(), "volume_capability")?;
        // Checked here; applied where the volume is published (see `mount_group`).
        self.mount_group(req.volume_capability.as_ref())?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
        if let Some(why) = kind_mismatch(&volume, &cap) {
            return Err(Status::failed_precondition(why));
        }
        self.check_controller_published(&volume.id, &req.publish_context)?;
        if !path.is_dir() {
            return Err(Status::invalid_argument(format!(
                "`staging_target_path` {} is not a directory; the CO must create it",
                path.display()
            )));
        }
        let mut state = self.node_state();
        if !self.cfg.controller_publish && !state.stagings.contains_key(&volume.id) {
            // Without ControllerPublishVolume the node is where the limit bites: a plugin
            // that attaches on the node refuses a volume beyond it.
            let limit = self.node_limit()?;
            if limit > 0 && state.stagings.len() >= limit as usize {
                return Err(Status::resource_exhausted(format!(
                    "node `{}` already has {} of at most {limit} volumes staged",
                    self.cfg.node_id,
                    state.stagings.len()
                )));
            }
        }
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
        self.make_staging(&mut state, &volume, &path)?;
        state.stagings.insert(
            volume.id.clone(),
            Staging {
                path,
                capability: cap,
            },
        );
        self.save_node(&state, &volume.id)?;
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
        let volume = self.known_volume(&req.volume_id, &state)?;
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
        if self.is_block(volume.as_ref(), &state, &req.volume_id) {
            let file = path.join(STAGED_DEVICE);
            if self.cfg.shape == NodeShape::StageDevice && self.cfg.mount == MountMode::Bind {
                unmount_if_mounted(&file)
                    .map_err(|e| internal(e, &format!("unmount {}", file.display())))?;
                remove_target(&file)
                    .map_err(|e| internal(e, &format!("remove {}", file.display())))?;
            }
            self.release_block(&mut state, &req.volume_id)?;
        }
        // Also for a block volume in `none` mode, whose staging holds a marker.
        self.cfg
            .mount
            .detach(&path)
            .map_err(|e| internal(e, &format!("unmount {}", path.display())))?;
        if state.stagings.remove(&req.volume_id).is_some() {
            self.save_node(&state, &req.volume_id)?;
        }
        Ok(csi::NodeUnstageVolumeResponse {})
    }

    fn node_publish(
        &self,
        req: csi::NodePublishVolumeRequest,
    ) -> Result<csi::NodePublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let cap = self.capability(req.volume_capability.as_ref(), "volume_capability")?;
        let group = self.mount_group(req.volume_capability.as_ref())?;
        let volume = self.volume(&req.volume_id)?;
        check_volume_context(&volume, &req.volume_context)?;
        if let Some(why) = kind_mismatch(&volume, &cap) {
            return Err(Status::failed_precondition(why));
        }
        let attachment = self.check_controller_published(&volume.id, &req.publish_context)?;
        let mut state = self.node_state();
        let staging_path = if self.cfg.stage {
            if req.staging_target_path.is_empty() {
                return Err(Status::failed_precondition(
                    "`staging_target_path` is not set, but this plugin has STAGE_UNSTAGE_VOLUME; \
                     call NodeStageVolume and pass its path",
                ));
            }
            let staging = require_path(&req.staging_target_path, "staging_target_path")?;
            match state.stagings.get(&volume.id) {
                // A staging unmounted behind the plugin's back (a crash, an operator's
                // umount, a detached loop device) must not be bound to the target: that
                // would publish an empty local directory instead of the volume.
                Some(s)
                    if s.path == staging
                        && !self.staging_in_place(
                            &state,
                            &volume.id,
                            volume.block,
                            &staging,
                        )? =>
                {
                    return Err(Status::failed_precondition(format!(
                        "volume `{}` is recorded as staged at {}, but it is not in place there; \
                         call NodeStageVolume again",
                        volume.id,
                        staging.display()
                    )));
                }
                Some(s) if s.path == staging => Some(staging),
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
            None
        };
        let readonly = req.readonly
            || cap.access_mode.max_writers() == Some(0)
            || attachment.is_some_and(|a| a.readonly);
        let wanted = Publication {
            volume_id: volume.id.clone(),
            readonly,
            capability: cap.clone(),
            staging_path: staging_path.clone(),
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
        if volume.block {
            self.publish_block(
                &mut state,
                &volume,
                staging_path.as_deref(),
                &target,
                readonly,
            )?;
        } else {
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
                let source = match (&staging_path, self.cfg.shape) {
                    (Some(s), NodeShape::StageMount | NodeShape::StageDevice) => s.clone(),
                    (Some(s), NodeShape::PublishSubdir) => s.join(PUBLISH_SUBDIR),
                    (Some(_), NodeShape::StageNothing) | (None, _) => {
                        self.backend.data_dir(&volume.id)
                    }
                };
                self.cfg
                    .mount
                    .attach(&source, &target, &volume.id, readonly)
                    .map_err(|e| internal(e, &format!("mount {}", target.display())))?;
            }
            if let Some(gid) = group
                && !readonly
            {
                super::mount_group::give_group(&target, gid)?;
            }
        }
        state.publications.insert(target, wanted);
        self.save_node(&state, &volume.id)?;
        Ok(csi::NodePublishVolumeResponse {})
    }

    /// Places a block volume at `target`: a file, onto which the loop device's node is
    /// bind-mounted (attached here when there is no staging), or with `stage-device` the
    /// device the staging holds.
    fn publish_block(
        &self,
        state: &mut NodeState,
        volume: &VolumeRecord,
        staging: Option<&Path>,
        target: &Path,
        readonly: bool,
    ) -> Result<(), Status> {
        create_file(target)?;
        let table = |e| internal(e, "read the mount table");
        let device = match (self.cfg.mount, self.cfg.shape, staging) {
            (MountMode::Bind, NodeShape::StageDevice, Some(s)) => s.join(STAGED_DEVICE),
            (MountMode::Bind, ..) => self.attach_block_device(state, &volume.id)?,
            (MountMode::None, ..) => {
                if self
                    .cfg
                    .mount
                    .is_block_attached(target, &volume.id)
                    .map_err(table)?
                {
                    return Ok(());
                }
                PathBuf::new()
            }
        };
        if self.cfg.mount == MountMode::Bind && is_mount_point(target).map_err(table)? {
            if binds_device(target, &device).map_err(table)? {
                return Ok(());
            }
            // spec.md (NodePublishVolume): "If the volume corresponding to the volume_id
            // has already been published at the specified target_path, and is compatible
            // [...], the Plugin MUST reply 0 OK". A node of a device that no longer backs
            // the volume (its loop device detached, the number perhaps set up again on
            // another file) is not the volume published there: the volume's device
            // replaces it.
            unmount_if_mounted(target)
                .map_err(|e| internal(e, &format!("unmount {}", target.display())))?;
        }
        self.cfg
            .mount
            .attach_block(&device, target, &volume.id, readonly)
            .map_err(|e| {
                internal(
                    e,
                    &format!("bind {} to {}", device.display(), target.display()),
                )
            })
    }

    fn node_unpublish(
        &self,
        req: csi::NodeUnpublishVolumeRequest,
    ) -> Result<csi::NodeUnpublishVolumeResponse, Status> {
        require(&req.volume_id, "volume_id")?;
        let target = require_path(&req.target_path, "target_path")?;
        let mut state = self.node_state();
        let volume = self.known_volume(&req.volume_id, &state)?;
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
        let block = self.is_block(volume.as_ref(), &state, &req.volume_id);
        if block || target.is_file() {
            if self.cfg.mount == MountMode::Bind {
                unmount_if_mounted(&target)
                    .map_err(|e| internal(e, &format!("unmount {}", target.display())))?;
            }
        } else {
            self.cfg
                .mount
                .detach(&target)
                .map_err(|e| internal(e, &format!("unmount {}", target.display())))?;
        }
        remove_target(&target).map_err(|e| internal(e, &format!("remove {}", target.display())))?;
        if state.publications.remove(&target).is_some() {
            if state.holds_nothing(&req.volume_id) && block && !self.cfg.stage {
                self.release_block(&mut state, &req.volume_id)?;
            }
            self.save_node(&state, &req.volume_id)?;
        }
        Ok(csi::NodeUnpublishVolumeResponse {})
    }

    /// Whether `path` is where this node staged or published the volume.
    fn holds_at(state: &NodeState, volume_id: &str, path: &Path) -> bool {
        state
            .publications
            .get(path)
            .is_some_and(|p| p.volume_id == volume_id)
            || state
                .stagings
                .get(volume_id)
                .is_some_and(|s| s.path == path)
    }
}
