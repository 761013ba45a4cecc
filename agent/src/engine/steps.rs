//! The node steps, each recorded in `agent.db` before its plugin call: stage, publish (with
//! the readiness wait), unpublish, unstage.

use std::path::Path;
use std::time::{Duration, Instant};

use csivol_api::domain::ErrorClass;
use csivol_api::{DesiredPublish, DesiredState, GroupBy, PluginError, Report};
use csivol_rules::agent::job::{Job, PublishStep, StageStep};
use csivol_rules::agent::observed::Observation;
use csivol_rules::agent::records::{
    PublicationRecord, PublishState, StageState, StagedMount, StagingRecord,
};
use tonic::Code;

use crate::config::ReadyCheck;
use crate::mounts;
use crate::plugin::CallError;
use crate::store::{StoreError, now_ms};

use super::Shared;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum StepError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("failed to record the step in agent.db: {0:#}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Local(String),
    #[error("plugin `{0}` is not served by this node's agent; start it with --plugin {0}=ENDPOINT")]
    UnknownPlugin(String),
    #[error("{target} is not ready after {}: {why}", humantime::format_duration(*waited))]
    NotReady {
        target: String,
        waited: Duration,
        why: String,
    },
    /// The claim is no longer wanted (released, unblocked): its readiness wait stopped.
    #[error("the claim is no longer wanted")]
    Interrupted,
    /// The claim disagrees with what its volume's staging on the node was made with (the
    /// group the plugin applies, the SELinux context): a retry meets the same staging, so
    /// the claim fails with the reason.
    #[error("{0}")]
    Disagrees(String),
}

impl StepError {
    /// Whether a retry can help, for bring-up steps. Teardown is always retried.
    pub(super) fn is_final(&self) -> bool {
        match self {
            Self::Call(e) => e.class() != ErrorClass::Retry,
            Self::Store(_) | Self::Local(_) => false,
            Self::UnknownPlugin(_)
            | Self::NotReady { .. }
            | Self::Interrupted
            | Self::Disagrees(_) => true,
        }
    }

    pub(super) fn to_plugin_error(
        &self,
        is_final: bool,
        next_retry_at_ms: Option<u64>,
    ) -> PluginError {
        match self {
            Self::Call(e) => e.to_plugin_error(is_final, next_retry_at_ms),
            other => PluginError {
                code: match other {
                    Self::UnknownPlugin(_) | Self::Disagrees(_) => "FAILED_PRECONDITION",
                    Self::NotReady { .. } => "TIMEOUT",
                    _ => "INTERNAL",
                }
                .to_owned(),
                message: other.to_string(),
                is_final,
                next_retry_at_ms,
            },
        }
    }
}

pub(super) fn local(what: &str, path: &Path, e: std::io::Error) -> StepError {
    StepError::Local(format!("failed to {what} {}: {e}", path.display()))
}

/// NodeUnpublishVolume, then forget the publication. The target directory is removed if the
/// plugin left it (the spec asks the plugin to), but only when nothing is mounted there.
pub(super) async fn unpublish(shared: &Shared, rec: &PublicationRecord) -> Result<(), StepError> {
    let plugin = shared.node_plugin(&rec.plugin)?;
    let mut rec = rec.clone();
    rec.state = PublishState::Unpublishing;
    shared.store.put_publication(&rec, None).await?;
    match plugin.unpublish(&rec.external_id, &rec.target).await {
        Ok(()) => {}
        // The plugin does not know the volume (deleted behind csivol's back); if nothing is
        // mounted at the target either, there is nothing left to take down.
        Err(e)
            if e.code == Code::NotFound && !mounts::is_mount_point(&rec.target).unwrap_or(true) =>
        {
            tracing::warn!(
                volume = rec.volume,
                alloc = rec.alloc,
                "{e}; nothing is mounted at {}, so the publication is gone",
                rec.target.display()
            );
        }
        Err(e) => {
            let _ = shared
                .store
                .put_publication(&rec, Some(e.to_string()))
                .await;
            return Err(e.into());
        }
    }
    if rec.block {
        remove_empty_file(&rec.target);
    } else {
        remove_empty_dir(&rec.target);
    }
    if let Some(parent) = rec.target.parent() {
        remove_empty_dir(parent);
    }
    shared
        .store
        .delete_publication(&rec.volume, &rec.alloc)
        .await?;
    Ok(())
}

/// NodeUnstageVolume, then forget the staging; never while a publication made from it is
/// recorded.
pub(super) async fn unstage(shared: &Shared, rec: &StagingRecord) -> Result<(), StepError> {
    if shared.store.staging_in_use(&rec.path) {
        return Err(StepError::Local(format!(
            "refusing to unstage volume `{}`: a publication made from {} is still recorded",
            rec.volume,
            rec.path.display()
        )));
    }
    let plugin = shared.node_plugin(&rec.plugin)?;
    let mut rec = rec.clone();
    rec.state = StageState::Unstaging;
    shared.store.put_staging(&rec, None).await?;
    match plugin.unstage(&rec.external_id, &rec.path).await {
        Ok(()) => {}
        Err(e)
            if e.code == Code::NotFound && !mounts::is_mount_point(&rec.path).unwrap_or(true) =>
        {
            tracing::warn!(
                volume = rec.volume,
                "{e}; nothing is mounted at {}, so the staging is gone",
                rec.path.display()
            );
        }
        Err(e) => {
            let _ = shared.store.put_staging(&rec, Some(e.to_string())).await;
            return Err(e.into());
        }
    }
    remove_empty_dir(&rec.path);
    shared.store.delete_staging(&rec.volume).await?;
    Ok(())
}

/// Removes a directory the agent created, if it is empty and not a mount point. Never
/// recursive: below a target or staging path may be a volume's data.
///
/// No mount table is read for it: Linux refuses to remove a mount point (`EBUSY`), which
/// is the same answer `/proc/self/mountinfo` would give, for one syscall instead of reading
/// and parsing the whole table per directory.
fn remove_empty_dir(path: &Path) {
    match std::fs::remove_dir(path) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::DirectoryNotEmpty
                    | std::io::ErrorKind::ResourceBusy
            ) => {}
        Err(e) => tracing::debug!(path = %path.display(), "failed to remove: {e}"),
    }
}

/// Removes the empty file the agent created as a block volume's target, if the plugin left
/// it and nothing is mounted on it. A file with content is not the agent's to remove.
fn remove_empty_file(path: &Path) {
    if mounts::is_mount_point(path).unwrap_or(true) {
        return;
    }
    match path.symlink_metadata() {
        Ok(m) if m.is_file() && m.len() == 0 => {
            if let Err(e) = std::fs::remove_file(path) {
                tracing::debug!(path = %path.display(), "failed to remove: {e}");
            }
        }
        _ => {}
    }
}

pub(super) async fn stage(shared: &Shared, step: &StageStep) -> Result<(), StepError> {
    let v = &step.desired.volume;
    let plugin = shared.node_plugin(&v.plugin)?;
    let mut rec = StagingRecord {
        volume: v.volume.clone(),
        plugin: v.plugin.clone(),
        external_id: v.external_id.clone(),
        path: step.path.clone(),
        state: StageState::Staging,
        block: v.capability.access_type.is_block(),
        observed: None,
    };
    // A staging left on the node (its unstage has not succeeded yet, or a stage was cut
    // short) keeps what it was made with for its whole file system: a claim that disagrees
    // is refused before anything is recorded over it or asked of the plugin, which would
    // answer ALREADY_EXISTS (spec.md, NodeStageVolume errors, "Volume published but is
    // incompatible").
    let wanted = StagedMount::of(&step.desired.mount);
    if shared.store.staging(&v.volume).is_some()
        && let Some(staged) = shared.store.staging_mount(&v.volume).await?
    {
        staged.admits(&wanted).map_err(StepError::Disagrees)?;
    }
    shared.store.put_staging(&rec, None).await?;
    shared.store.put_staging_mount(&v.volume, &wanted).await?;
    // The CO creates the staging directory; the plugin mounts on it.
    std::fs::create_dir_all(&step.path).map_err(|e| local("create", &step.path, e))?;
    if let Err(e) = plugin.stage(v, &step.desired.mount, &step.path).await {
        let _ = shared.store.put_staging(&rec, Some(e.to_string())).await;
        if e.code == Code::ResourceExhausted {
            // The node holds fewer volumes than it said: read its limit again.
            tracing::info!(
                volume = v.volume,
                "{}: reading the attach limits again",
                super::limits::AFTER_STAGE
            );
            shared.limits_wake.notify_one();
        }
        return Err(e.into());
    }
    // What the plugin made at the staging path is what later checks hold it to: the spec
    // says the volume "MAY be staged" there (NodeStageVolumeRequest.staging_target_path),
    // so nothing at all is a staging too.
    rec.observed = Some(shared.checker()?.observe(&step.path, true));
    rec.state = StageState::Staged;
    shared.store.put_staging(&rec, None).await?;
    Ok(())
}

pub(super) async fn publish(
    shared: &Shared,
    step: &PublishStep,
    deadline: Instant,
) -> Result<(), StepError> {
    let d = &step.desired;
    let plugin = shared.node_plugin(&d.volume.plugin)?;
    // What the plugin made at the target last time, if anything: a target still holding
    // it is judged by it below, not as a first publication is.
    let before = shared
        .store
        .publications_of(&d.volume.volume)
        .into_iter()
        .find(|p| p.alloc == d.alloc && p.target == step.target)
        .and_then(|p| p.observed);
    let mut rec = PublicationRecord {
        volume: d.volume.volume.clone(),
        alloc: d.alloc.clone(),
        plugin: d.volume.plugin.clone(),
        external_id: d.volume.external_id.clone(),
        target: step.target.clone(),
        staging: step.staging.clone(),
        block: d.volume.capability.access_type.is_block(),
        state: PublishState::Publishing,
        observed: None,
    };
    // A publication from a staging agrees with what the staging was made with (the
    // server refuses claims that would not; this holds the node to it whatever came).
    if step.staging.is_some()
        && let Some(staged) = shared.store.staging_mount(&d.volume.volume).await?
    {
        staged
            .admits(&StagedMount::of(&d.mount))
            .map_err(StepError::Disagrees)?;
    }
    shared.store.put_publication(&rec, None).await?;
    // The CO creates the parent; the plugin creates the target itself.
    let parent = step
        .target
        .parent()
        .expect("targets are below the data dir");
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(super::TARGETS_MODE)
            .create(parent)
            .map_err(|e| local("create", parent, e))?;
    }
    // A block volume's target is a file, not a directory: the device node is placed on
    // it. The agent creates it empty (a plugin that creates it itself finds it there),
    // except where readiness is mere existence: there only the plugin may create it.
    if rec.block && shared.cfg.ready_check_of(&rec.plugin) == ReadyCheck::Mount {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&step.target)
        {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(local("create", &step.target, e)),
        }
    }
    // A target still holding a mount that is not the volume's (say, a bind of the
    // unmounted staging directory, of a block device that lost what was behind it, or of
    // a device number another device has taken since the plugin placed it there) is taken
    // down first: a plugin that finds something mounted there would keep it.
    if shared.cfg.ready_check_of(&rec.plugin) == ReadyCheck::Mount {
        let c = shared.checker()?;
        let held = PublicationRecord {
            observed: before,
            ..rec.clone()
        };
        if c.is_mount_point(&rec.target)
            && let Err(why) = shared.check_publication(&c, &held)
        {
            tracing::warn!(
                volume = rec.volume,
                alloc = rec.alloc,
                "{why}; unpublishing it before publishing again"
            );
            plugin.unpublish(&rec.external_id, &rec.target).await?;
        }
    }
    if let Err(e) = plugin
        .publish(d, step.staging.as_deref(), &step.target)
        .await
    {
        let _ = shared
            .store
            .put_publication(&rec, Some(e.to_string()))
            .await;
        return Err(e.into());
    }
    rec.observed = Some(wait_ready(shared, &rec, deadline).await?);
    give_group(shared, d, &step.target).await?;
    rec.state = PublishState::Published;
    shared.store.put_publication(&rec, None).await?;
    Ok(())
}

/// Where the server allowed csivol to apply the claim's group itself (the plugin has no
/// VOLUME_MOUNT_GROUP), gives the target's root the group, once: what was done is
/// recorded in agent.db, so a restart neither does it again nor forgets it.
async fn give_group(shared: &Shared, d: &DesiredPublish, target: &Path) -> Result<(), StepError> {
    let (Some(gid), Some(by)) = (d.mount.gid, d.mount.group_by) else {
        return Ok(());
    };
    let recursive = match by {
        GroupBy::Plugin => return Ok(()),
        GroupBy::OnRootMismatch => false,
        GroupBy::Recursive => true,
    };
    if d.read_only || d.volume.capability.access_type.is_block() {
        return Ok(());
    }
    // Done before and still so: not again (a recursive change may be long). A root that
    // lost the group since (changed behind csivol) is given it again.
    let recorded = shared
        .store
        .ownership(&d.volume.volume, &d.alloc)
        .await?
        .is_some_and(|(g, _)| g == gid);
    if recorded && super::ownership::root_has(target, gid) {
        return Ok(());
    }
    let changed = super::ownership::apply(target, gid, recursive)
        .map_err(|e| local("give group to", target, e))?;
    // The claim is ready only once its root shows the group csivol gave it: a file
    // system that does not keep ownership (or maps it) would leave the workload unable
    // to write.
    if !super::ownership::root_has(target, gid) {
        return Err(StepError::Local(format!(
            "gave group {gid} to {} but its root does not show it: the file system does not \
             keep a group csivol sets; use a plugin with VOLUME_MOUNT_GROUP",
            target.display()
        )));
    }
    if changed.bounded {
        tracing::warn!(
            volume = d.volume.volume,
            alloc = d.alloc,
            "gave group {gid} to the first {} entries of {} and stopped there: csivol \
             changes at most that many",
            changed.entries,
            target.display()
        );
    } else if changed.entries > 0 {
        tracing::info!(
            volume = d.volume.volume,
            alloc = d.alloc,
            "gave group {gid} to {} entries of {}",
            changed.entries,
            target.display()
        );
    }
    shared
        .store
        .record_ownership(&d.volume.volume, &d.alloc, gid, changed)
        .await?;
    Ok(())
}

/// How long a readiness wait goes unremarked before the claim's status says what it waits
/// for.
const WAITING_NOTICE: Duration = Duration::from_secs(1);

/// Polls the readiness check until it passes or the claim's deadline comes, and returns
/// what the plugin made at the target. Past a moment, the claim's status says what it waits
/// for (and again when that changes); a claim that stops being wanted (released,
/// unblocked) ends the wait at once.
async fn wait_ready(
    shared: &Shared,
    rec: &PublicationRecord,
    deadline: Instant,
) -> Result<Observation, StepError> {
    let started = Instant::now();
    let timeout = shared.cfg.volume_ready_timeout;
    // The claim's wait started when it was first wanted: its deadline less the timeout.
    let since_ms = now_ms().saturating_sub(
        timeout
            .saturating_sub(deadline.saturating_duration_since(started))
            .as_millis() as u64,
    );
    // The job may have been planned from a desired state older than the latest: a claim
    // released since must not wait for the next change to be noticed.
    let mut desired = shared.desired.clone();
    let wanted = |d: &DesiredState| {
        d.publish
            .iter()
            .any(|p| p.volume.volume == rec.volume && p.alloc == rec.alloc)
            && !d
                .unpublish
                .iter()
                .any(|u| u.volume == rec.volume && u.alloc == rec.alloc)
    };
    if !wanted(&desired.borrow_and_update()) {
        return Err(StepError::Interrupted);
    }
    let mut pause = Duration::from_millis(5);
    let mut said: Option<String> = None;
    loop {
        let why = match shared.check_publication(&shared.checker()?, rec) {
            Ok(seen) => return Ok(seen),
            Err(why) => why,
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(StepError::NotReady {
                target: rec.target.display().to_string(),
                waited: Duration::from_millis(started.elapsed().as_millis() as u64),
                why,
            });
        }
        if now - started >= WAITING_NOTICE && said.as_ref() != Some(&why) {
            shared.report(Report::Waiting {
                volume: rec.volume.clone(),
                alloc: rec.alloc.clone(),
                reason: format!("published; waiting for the target to hold the volume: {why}"),
                since_ms,
                timeout_ms: timeout.as_millis() as u64,
            });
            said = Some(why);
        }
        tokio::select! {
            () = tokio::time::sleep(pause.min(deadline - now)) => {}
            changed = desired.changed() => {
                if changed.is_err() || !wanted(&desired.borrow_and_update()) {
                    return Err(StepError::Interrupted);
                }
            }
        }
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// The staging step a job needs although it was decided over a staged record: the staging its
/// publications would be made from is not there any more.
pub(super) fn vanished_staging(shared: &Shared, job: &Job) -> Result<Option<StageStep>, StepError> {
    let Some((first, path)) = job
        .publish
        .first()
        .and_then(|p| p.staging.as_ref().map(|s| (p, s)))
    else {
        return Ok(None);
    };
    let Some(rec) = shared
        .store
        .staging(&job.volume)
        .filter(|r| r.state == StageState::Staged)
    else {
        return Ok(None);
    };
    let Err(why) = shared.check_staging(&shared.checker()?, &rec) else {
        return Ok(None);
    };
    tracing::warn!(
        volume = job.volume,
        "drift: {why}; staging it again before publishing"
    );
    Ok(Some(StageStep {
        desired: first.desired.clone(),
        path: path.clone(),
    }))
}
