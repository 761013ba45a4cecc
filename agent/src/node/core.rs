//! The reconcile core: recovery at start, then a loop that makes the node follow the
//! desired state it is given, one worker per volume, and runs the controller operations
//! assigned to this agent. It knows nothing of HTTP: the desired state comes in through
//! [`Core::set_desired`] and the reports it would send come out of a channel, so tests
//! drive it directly.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_proto::api::{
    ClaimRef, ControllerOp, DesiredState, PluginError, RegisterRequest, Report,
};
use csivol_proto::domain::ErrorClass;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tonic::Code;

use super::config::{CoreConfig, ReadyCheck};
use super::mounts::{self, Checker};
use super::plan::{self, Job, Memo, PublishStep, StageStep, VolumeDesired};
use super::plugin::{CallError, ConnectError, NodePlugin, Plugins};
use super::store::{
    Fence, PublicationRecord, PublishState, StageState, StagingRecord, Store, StoreError, now_ms,
};

/// How many times recovery tries to undo one in-flight step before leaving it to the loop.
const RECOVERY_ATTEMPTS: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("failed to create the data dir {}", path.display())]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the data dir {} must be a UTF-8 path: plugins receive it as a string", .0.display())]
    NonUtf8(PathBuf),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
}

/// State shared by the loop and its workers.
#[derive(Debug)]
struct Shared {
    cfg: CoreConfig,
    data_dir: PathBuf,
    plugins: Plugins,
    store: Store,
    staging_plugins: HashSet<String>,
    reports: mpsc::UnboundedSender<Report>,
    /// The latest desired state, for workers: a readiness wait ends when its claim is
    /// no longer wanted.
    desired: watch::Receiver<Arc<DesiredState>>,
    /// The last volume condition reported per published claim.
    conditions: std::sync::Mutex<HashMap<ClaimRef, bool>>,
}

impl Shared {
    /// One snapshot of the mount table, to check records against.
    fn checker(&self) -> Result<Checker<'_>, StepError> {
        Checker::read(&self.data_dir)
            .map_err(|e| local("read the mount table for", &self.data_dir, e))
    }

    /// Whether a publication's target is mounted from its volume; why not otherwise.
    fn check_publication(&self, c: &Checker<'_>, r: &PublicationRecord) -> Result<(), String> {
        c.target(
            self.cfg.ready_check_of(&r.plugin),
            &r.volume,
            &r.target,
            r.staging.as_deref(),
            r.block,
        )
    }

    /// Whether a staging holds its volume; why not otherwise.
    fn check_staging(&self, c: &Checker<'_>, s: &StagingRecord) -> Result<(), String> {
        let block = self
            .store
            .publications_of(&s.volume)
            .iter()
            .any(|p| p.block);
        c.staging(
            self.cfg.ready_check_of(&s.plugin),
            &s.volume,
            &s.path,
            block,
        )
    }

    fn report(&self, r: Report) {
        // Nobody listening means the agent is stopping; the report is rebuilt from actual
        // state at the next start.
        let _ = self.reports.send(r);
    }

    fn node_plugin(&self, id: &str) -> Result<&NodePlugin, StepError> {
        self.plugins
            .node
            .get(id)
            .ok_or_else(|| StepError::UnknownPlugin(id.to_owned()))
    }
}

#[derive(Debug)]
enum Control {
    Fence(Fence),
    Unfence,
    Resync,
    Idle(tokio::sync::oneshot::Sender<()>),
    TakeDown(tokio::sync::oneshot::Sender<()>),
}

/// A running core. Dropping it stops the loop and every worker at once, as a crash would:
/// what they were doing is in `agent.db`, and the next start recovers it.
#[derive(Debug)]
pub struct Core {
    shared: Arc<Shared>,
    desired: watch::Sender<Arc<DesiredState>>,
    control: mpsc::UnboundedSender<Control>,
    fenced: watch::Receiver<FenceState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Core {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether the core is fenced, and whether the teardown is complete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum FenceState {
    #[default]
    No,
    TearingDown(Fence),
    Complete(Fence),
}

impl Core {
    /// Opens `agent.db`, connects every plugin (waiting for Probe), finishes or undoes what
    /// was in flight when the agent last stopped, and starts the loop. The loop does nothing
    /// until the first [`Core::set_desired`] (except finishing a self-fence it recorded).
    pub async fn start(
        cfg: CoreConfig,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Report>), StartError> {
        let data_dir = prepare_data_dir(&cfg.data_dir)?;
        let (store, rebooted) = Store::open(&data_dir).await?;
        let plugins = Plugins::connect(&cfg).await?;
        let staging_plugins = plugins
            .node
            .values()
            .filter(|p| p.stages())
            .map(|p| p.id.clone())
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let (desired_tx, desired_rx) = watch::channel(Arc::new(DesiredState::default()));
        let shared = Arc::new(Shared {
            cfg,
            data_dir,
            plugins,
            store,
            staging_plugins,
            reports: tx,
            desired: desired_rx.clone(),
            conditions: std::sync::Mutex::default(),
        });
        recover(&shared, rebooted).await;
        let fence = shared.store.open_fence().await?;
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let initial = match fence {
            Some(f) if f.completed_ms.is_some() => FenceState::Complete(f),
            Some(f) => FenceState::TearingDown(f),
            None => FenceState::No,
        };
        if initial != FenceState::No {
            tracing::warn!(
                "the agent fenced itself before it stopped; it keeps everything down until the server has heard of it"
            );
        }
        let (fence_tx, fence_rx) = watch::channel(initial.clone());
        let reconciler = Reconciler::new(
            Arc::clone(&shared),
            desired_rx,
            control_rx,
            fence_tx,
            initial,
        );
        let task = tokio::spawn(reconciler.run());
        Ok((
            Self {
                shared,
                desired: desired_tx,
                control: control_tx,
                fenced: fence_rx,
                task,
            },
            rx,
        ))
    }

    /// The data dir, canonical: targets and stagings live below it.
    pub fn data_dir(&self) -> &Path {
        &self.shared.data_dir
    }

    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// What the server is told at registration: the plugins and what is published and
    /// staged now, checked against the mount table (never from the records alone: a lost
    /// node's claims are resumed on the strength of this answer).
    pub fn registration(&self, fence_after: Option<Duration>) -> RegisterRequest {
        let shared = &self.shared;
        let store = &shared.store;
        let checker = shared
            .checker()
            .inspect_err(|e| tracing::warn!("registering as holding nothing: {e}"))
            .ok();
        let Some(c) = checker else {
            return RegisterRequest {
                plugins: shared.plugins.registrations(),
                fence_after_ms: fence_after.map(|d| d.as_millis() as u64),
                published: Vec::new(),
                staged: Vec::new(),
                labels: shared.cfg.labels.clone(),
            };
        };
        RegisterRequest {
            plugins: shared.plugins.registrations(),
            fence_after_ms: fence_after.map(|d| d.as_millis() as u64),
            published: store
                .publications()
                .into_iter()
                .filter(|p| {
                    p.state == PublishState::Published && shared.check_publication(&c, p).is_ok()
                })
                .map(|p| ClaimRef {
                    volume: p.volume,
                    alloc: p.alloc,
                })
                .collect(),
            staged: store
                .stagings()
                .into_iter()
                .filter(|s| s.state == StageState::Staged && shared.check_staging(&c, s).is_ok())
                .map(|s| s.volume)
                .collect(),
            labels: shared.cfg.labels.clone(),
        }
    }

    /// Gives the loop the server's latest desired state.
    pub fn set_desired(&self, desired: DesiredState) {
        self.desired.send_replace(Arc::new(desired));
    }

    /// Re-checks everything now, as the periodic resync does.
    pub fn resync(&self) {
        let _ = self.control.send(Control::Resync);
    }

    /// Waits until the loop has looked at the latest desired state and no volume worker
    /// runs (retries may be pending). Lets tests check that something did not happen.
    pub async fn idle(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.control.send(Control::Idle(tx));
        let _ = rx.await;
    }

    /// Takes down everything published or staged on this node through its plugins,
    /// recording each step, whatever the desired state says: for an agent asked to leave
    /// its node clean when it stops (dev mode). Returns once nothing is left, or when
    /// `within` has passed (what is left is recorded, and recovered at the next start).
    pub async fn take_down(&self, within: Duration) -> bool {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _ = self.control.send(Control::TakeDown(tx));
        tokio::time::timeout(within, rx)
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Self-fencing: records the fence, then takes down everything published or staged,
    /// whatever the desired state says, until [`Core::fence_reported`].
    pub async fn fence(&self) -> Result<Fence, StoreError> {
        match &*self.fenced.borrow() {
            FenceState::TearingDown(f) | FenceState::Complete(f) => return Ok(f.clone()),
            FenceState::No => {}
        }
        let volumes: Vec<String> = self.shared.store.volumes().into_iter().collect();
        let fence = self.shared.store.record_fence(now_ms(), volumes).await?;
        tracing::warn!(
            volumes = ?fence.volumes,
            "self-fencing: the server was not reachable for the fence time; taking down every volume on this node"
        );
        let _ = self.control.send(Control::Fence(fence.clone()));
        Ok(fence)
    }

    /// Where fencing stands; a receiver sees changes as they happen.
    pub fn fence_state(&self) -> watch::Receiver<FenceState> {
        self.fenced.clone()
    }

    /// The server has heard of the fence: record it, and follow the next desired state
    /// given (not an older one).
    pub async fn fence_reported(&self, id: i64) -> Result<(), StoreError> {
        self.shared.store.fence_reported(id).await?;
        let _ = self.control.send(Control::Unfence);
        Ok(())
    }
}

fn prepare_data_dir(dir: &Path) -> Result<PathBuf, StartError> {
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| StartError::DataDir { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    // Canonical, so that targets compare equal to what the mount table shows.
    let dir = dir.canonicalize().map_err(io_err(dir))?;
    if dir.to_str().is_none() {
        return Err(StartError::NonUtf8(dir));
    }
    for sub in ["staging", "targets"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(io_err(&dir.join(sub)))?;
    }
    Ok(dir)
}

/// Finishes or undoes what was in flight when the agent stopped, before it registers. The
/// records say only what the agent may have done; the mount table says what is. So every
/// record is checked against it: a staging recorded staged but not mounted from its volume
/// is marked uncertain (to be staged again before any publish, or unstaged when unused);
/// a publication recorded published but not mounted from its volume is marked uncertain
/// (to be published again while wanted, or taken down); a publication the agent was not
/// sure of is taken down (the calls are idempotent). After a reboot nothing is mounted any
/// more, so every record is undone at the plugin. What cannot be undone now stays recorded
/// as uncertain; the loop retries it.
async fn recover(shared: &Shared, rebooted: bool) {
    let store = &shared.store;
    if rebooted {
        tracing::info!("the machine rebooted since the last run: undoing every recorded mount");
    }
    let checker = match shared.checker() {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!("recovery: {e}; treating every record as unverified");
            None
        }
    };
    let verdict = |check: Result<(), String>| match &checker {
        Some(_) => check,
        None => Err("the mount table could not be read".to_owned()),
    };
    if !rebooted {
        for mut s in store.stagings() {
            if s.state != StageState::Staged {
                continue;
            }
            let check = checker
                .as_ref()
                .map_or(Ok(()), |c| shared.check_staging(c, &s));
            if let Err(why) = verdict(check) {
                tracing::warn!(
                    volume = s.volume,
                    path = %s.path.display(),
                    "recovery: {why}; it will be staged again before any publish"
                );
                s.state = StageState::Staging;
                if let Err(e) = store.put_staging(&s, Some(why)).await {
                    tracing::error!(volume = s.volume, "recovery: {e:#}");
                }
            }
        }
    }
    for mut p in store.publications() {
        if !rebooted && p.state == PublishState::Published {
            let check = checker
                .as_ref()
                .map_or(Ok(()), |c| shared.check_publication(c, &p));
            let Err(why) = verdict(check) else {
                continue;
            };
            tracing::warn!(
                volume = p.volume,
                alloc = p.alloc,
                target = %p.target.display(),
                "recovery: {why}; it will be published again while its claim is wanted"
            );
            p.state = PublishState::Publishing;
            if let Err(e) = store.put_publication(&p, Some(why)).await {
                tracing::error!(volume = p.volume, alloc = p.alloc, "recovery: {e:#}");
            }
            continue;
        }
        tracing::info!(
            volume = p.volume,
            alloc = p.alloc,
            target = %p.target.display(),
            state = p.state.as_str(),
            "recovery: taking down a publication that may be incomplete"
        );
        retry_recovery(shared, "unpublish", || unpublish(shared, &p)).await;
    }
    for s in store.stagings() {
        if !rebooted && s.state == StageState::Staged {
            continue;
        }
        if store.staging_in_use(&s.path) {
            continue;
        }
        tracing::info!(
            volume = s.volume,
            path = %s.path.display(),
            state = s.state.as_str(),
            "recovery: unstaging a staging that may be incomplete"
        );
        retry_recovery(shared, "unstage", || unstage(shared, &s)).await;
    }
    warn_unknown_mounts(shared);
}

async fn retry_recovery<F, Fut>(shared: &Shared, what: &str, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StepError>>,
{
    for attempt in 1..=RECOVERY_ATTEMPTS {
        match step().await {
            Ok(()) => return,
            Err(e) if attempt == RECOVERY_ATTEMPTS => {
                tracing::warn!("recovery: failed to {what}, will keep retrying: {e}");
            }
            Err(e) => {
                tracing::info!("recovery: failed to {what}, retrying: {e}");
                tokio::time::sleep(shared.cfg.retry.delay(attempt)).await;
            }
        }
    }
}

/// Mounts under the data dir that `agent.db` does not explain were not made through this
/// agent (or its database was lost): say so, since only an operator can tell what they are.
fn warn_unknown_mounts(shared: &Shared) {
    let Ok(points) = mounts::mount_points() else {
        return;
    };
    let known: HashSet<PathBuf> = shared
        .store
        .publications()
        .into_iter()
        .map(|p| p.target)
        .chain(shared.store.stagings().into_iter().map(|s| s.path))
        .collect();
    for sub in ["staging", "targets"] {
        let root = shared.data_dir.join(sub);
        for p in points.iter().filter(|p| p.starts_with(&root)) {
            if !known.iter().any(|k| p.starts_with(k)) {
                tracing::warn!(
                    mount = %p.display(),
                    "a mount under the data dir is not recorded in agent.db; it was not made by this agent: check and unmount it by hand"
                );
            }
        }
    }
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
enum StepError {
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
}

impl StepError {
    /// Whether a retry can help, for bring-up steps. Teardown is always retried.
    fn is_final(&self) -> bool {
        match self {
            Self::Call(e) => e.class() != ErrorClass::Retry,
            Self::Store(_) | Self::Local(_) => false,
            Self::UnknownPlugin(_) | Self::NotReady { .. } | Self::Interrupted => true,
        }
    }

    fn to_plugin_error(&self, is_final: bool, next_retry_at_ms: Option<u64>) -> PluginError {
        match self {
            Self::Call(e) => e.to_plugin_error(is_final, next_retry_at_ms),
            other => PluginError {
                code: match other {
                    Self::UnknownPlugin(_) => "FAILED_PRECONDITION",
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

fn local(what: &str, path: &Path, e: std::io::Error) -> StepError {
    StepError::Local(format!("failed to {what} {}: {e}", path.display()))
}

/// NodeUnpublishVolume, then forget the publication. The target directory is removed if the
/// plugin left it (the spec asks the plugin to), but only when nothing is mounted there.
async fn unpublish(shared: &Shared, rec: &PublicationRecord) -> Result<(), StepError> {
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
    remove_empty_dir(&rec.target);
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
async fn unstage(shared: &Shared, rec: &StagingRecord) -> Result<(), StepError> {
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
fn remove_empty_dir(path: &Path) {
    if mounts::is_mount_point(path).unwrap_or(true) {
        return;
    }
    match std::fs::remove_dir(path) {
        Ok(()) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::DirectoryNotEmpty
            ) => {}
        Err(e) => tracing::debug!(path = %path.display(), "failed to remove: {e}"),
    }
}

async fn stage(shared: &Shared, step: &StageStep) -> Result<(), StepError> {
    let v = &step.desired.volume;
    let plugin = shared.node_plugin(&v.plugin)?;
    let mut rec = StagingRecord {
        volume: v.volume.clone(),
        plugin: v.plugin.clone(),
        external_id: v.external_id.clone(),
        path: step.path.clone(),
        state: StageState::Staging,
    };
    shared.store.put_staging(&rec, None).await?;
    // The CO creates the staging directory; the plugin mounts on it.
    std::fs::create_dir_all(&step.path).map_err(|e| local("create", &step.path, e))?;
    if let Err(e) = plugin.stage(v, &step.path).await {
        let _ = shared.store.put_staging(&rec, Some(e.to_string())).await;
        return Err(e.into());
    }
    rec.state = StageState::Staged;
    shared.store.put_staging(&rec, None).await?;
    Ok(())
}

async fn publish(shared: &Shared, step: &PublishStep, deadline: Instant) -> Result<(), StepError> {
    let d = &step.desired;
    let plugin = shared.node_plugin(&d.volume.plugin)?;
    let mut rec = PublicationRecord {
        volume: d.volume.volume.clone(),
        alloc: d.alloc.clone(),
        plugin: d.volume.plugin.clone(),
        external_id: d.volume.external_id.clone(),
        target: step.target.clone(),
        staging: step.staging.clone(),
        block: d.volume.capability.access_type.is_block(),
        state: PublishState::Publishing,
    };
    shared.store.put_publication(&rec, None).await?;
    // The CO creates the parent; the plugin creates the target itself.
    let parent = step
        .target
        .parent()
        .expect("targets are below the data dir");
    std::fs::create_dir_all(parent).map_err(|e| local("create", parent, e))?;
    // A target still holding a mount that is not the volume's (say, a bind of the
    // unmounted staging directory) is taken down first: a plugin that finds something
    // mounted there would keep it.
    if shared.cfg.ready_check_of(&rec.plugin) == ReadyCheck::Mount && !rec.block {
        let c = shared.checker()?;
        if c.is_mount_point(&rec.target)
            && let Err(why) = shared.check_publication(&c, &rec)
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
    wait_ready(shared, &rec, deadline).await?;
    rec.state = PublishState::Published;
    shared.store.put_publication(&rec, None).await?;
    Ok(())
}

/// How long a readiness wait goes unremarked before the claim's status says what it waits
/// for.
const WAITING_NOTICE: Duration = Duration::from_secs(1);

/// Polls the readiness check until it passes or the claim's deadline comes. Past a moment,
/// the claim's status says what it waits for (and again when that changes); a claim that
/// stops being wanted (released, unblocked) ends the wait at once.
async fn wait_ready(
    shared: &Shared,
    rec: &PublicationRecord,
    deadline: Instant,
) -> Result<(), StepError> {
    let started = Instant::now();
    let timeout = shared.cfg.volume_ready_timeout;
    // The claim's wait started when it was first wanted: its deadline less the timeout.
    let since_ms = now_ms().saturating_sub(
        timeout
            .saturating_sub(deadline.saturating_duration_since(started))
            .as_millis() as u64,
    );
    let mut desired = shared.desired.clone();
    desired.borrow_and_update();
    let mut pause = Duration::from_millis(5);
    let mut said: Option<String> = None;
    loop {
        let why = match shared.check_publication(&shared.checker()?, rec) {
            Ok(()) => return Ok(()),
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
                reason: format!(
                    "published; waiting for the target to be mounted from the volume: {why}"
                ),
                since_ms,
                timeout_ms: timeout.as_millis() as u64,
            });
            said = Some(why);
        }
        tokio::select! {
            () = tokio::time::sleep(pause.min(deadline - now)) => {}
            changed = desired.changed() => {
                let wanted = changed.is_ok() && {
                    let d = desired.borrow_and_update();
                    d.publish.iter().any(|p| p.volume.volume == rec.volume && p.alloc == rec.alloc)
                        && !d.unpublish.iter().any(|u| u.volume == rec.volume && u.alloc == rec.alloc)
                };
                if !wanted {
                    return Err(StepError::Interrupted);
                }
            }
        }
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// The staging step a job needs although its plan saw a staged record: the staging its
/// publications would be made from is not there any more.
fn vanished_staging(shared: &Shared, job: &Job) -> Result<Option<StageStep>, StepError> {
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

/// What a volume worker tells the loop when it is done.
#[derive(Debug, Default)]
struct Outcome {
    volume: String,
    memo_published: Vec<String>,
    memo_unpublished: Vec<String>,
    memo_unstaged: bool,
    /// Claims now ready.
    ready: Vec<String>,
    /// Claims failed for good.
    failed: Vec<String>,
    /// The last error of claims still being tried.
    errors: Vec<(String, String)>,
    /// When to run the volume again after an error.
    retry_at: Option<Instant>,
}

/// What the loop hands a volume worker along with the job.
#[derive(Debug)]
struct JobContext {
    attempt: u32,
    /// Each pending claim's readiness deadline.
    deadlines: HashMap<String, Instant>,
    last_errors: HashMap<String, String>,
}

/// Runs one volume's job, step by step; stops at the first error.
async fn run_job(shared: Arc<Shared>, job: Job, ctx: JobContext) -> Outcome {
    let vol = job.volume.clone();
    let mut out = Outcome {
        volume: vol.clone(),
        ..Outcome::default()
    };
    let timeout = shared.cfg.volume_ready_timeout;
    let claim_error = |alloc: &str, error: PluginError| Report::ClaimError {
        volume: vol.clone(),
        alloc: alloc.to_owned(),
        error,
    };
    // Retryable errors: report when the next try comes, for each claim concerned.
    let retry = |out: &mut Outcome, allocs: &[&str], e: &StepError| {
        let mut delay = shared.cfg.retry.delay(ctx.attempt + 1);
        let now = Instant::now();
        if let Some(first) = allocs.iter().filter_map(|a| ctx.deadlines.get(*a)).min() {
            // Come back at the deadline at the latest, to fail the claim on time.
            delay = delay.min(first.saturating_duration_since(now));
        }
        let at_ms = now_ms() + delay.as_millis() as u64;
        for a in allocs {
            shared.report(claim_error(a, e.to_plugin_error(false, Some(at_ms))));
            out.errors.push(((*a).to_owned(), e.to_string()));
        }
        out.retry_at = Some(now + delay);
    };

    for (alloc, message) in &job.invalid {
        tracing::warn!(volume = vol, alloc, "refusing claim: {message}");
        let error = PluginError {
            code: "INVALID_ARGUMENT".into(),
            message: message.clone(),
            is_final: true,
            next_retry_at_ms: None,
        };
        shared.report(claim_error(alloc, error));
        out.failed.push(alloc.clone());
    }
    for alloc in &job.timed_out {
        let mut message = format!(
            "volume `{vol}` was not ready within {}",
            humantime::format_duration(timeout)
        );
        if let Some(last) = ctx.last_errors.get(alloc) {
            message.push_str(&format!("; last error: {last}"));
        }
        tracing::warn!(volume = vol, alloc, "claim failed: {message}");
        let error = PluginError {
            code: "TIMEOUT".into(),
            message,
            is_final: true,
            next_retry_at_ms: None,
        };
        shared.report(claim_error(alloc, error));
        out.failed.push(alloc.clone());
    }
    if let Some((rec, why)) = &job.demote_staging {
        tracing::warn!(volume = vol, path = %rec.path.display(), "drift: {why}; staging it again");
        if let Err(e) = shared.store.put_staging(rec, Some(why.clone())).await {
            retry(&mut out, &[], &e.into());
            return out;
        }
    }
    for (rec, why) in &job.demote {
        tracing::warn!(volume = vol, alloc = rec.alloc, target = %rec.target.display(), "drift: {why}; publishing it again");
        if let Err(e) = shared.store.put_publication(rec, Some(why.clone())).await {
            retry(&mut out, &[&rec.alloc], &e.into());
            return out;
        }
        shared.report(Report::Drift {
            volume: vol.clone(),
            alloc: rec.alloc.clone(),
            reason: why.clone(),
        });
    }
    for t in &job.unpublish {
        let r = &t.record;
        match unpublish(&shared, r).await {
            Ok(()) => {
                tracing::info!(volume = vol, alloc = r.alloc, target = %r.target.display(), "unpublished");
                if let Some(why) = &job.taken_down_because {
                    shared.report(Report::Drift {
                        volume: vol.clone(),
                        alloc: r.alloc.clone(),
                        reason: why.clone(),
                    });
                }
                if t.report {
                    shared.report(Report::Unpublished {
                        volume: vol.clone(),
                        alloc: r.alloc.clone(),
                    });
                    if job.listed_unpublish.contains(&r.alloc) {
                        out.memo_unpublished.push(r.alloc.clone());
                    }
                }
            }
            Err(e) => {
                tracing::warn!(volume = vol, alloc = r.alloc, "failed to unpublish: {e}");
                retry(&mut out, &[&r.alloc], &e);
                return out;
            }
        }
    }
    for alloc in &job.report_unpublished {
        shared.report(Report::Unpublished {
            volume: vol.clone(),
            alloc: alloc.clone(),
        });
        out.memo_unpublished.push(alloc.clone());
    }
    if let Some(s) = &job.unstage {
        match unstage(&shared, s).await {
            Ok(()) => tracing::info!(volume = vol, path = %s.path.display(), "unstaged"),
            Err(e) => {
                tracing::warn!(volume = vol, path = %s.path.display(), "failed to unstage: {e}");
                retry(&mut out, &[], &e);
                // Operators see it on the volume's attachment to this node.
                let at_ms = out.retry_at.map(|t| {
                    now_ms() + t.saturating_duration_since(Instant::now()).as_millis() as u64
                });
                shared.report(Report::VolumeError {
                    volume: vol.clone(),
                    error: e.to_plugin_error(false, at_ms),
                });
                return out;
            }
        }
    }
    if job.report_unstaged {
        shared.report(Report::Unstaged {
            volume: vol.clone(),
        });
        out.memo_unstaged = job.listed_unstage;
    }
    let pending: Vec<&str> = job
        .publish
        .iter()
        .map(|p| p.desired.alloc.as_str())
        .collect();
    let fail = |out: &mut Outcome, allocs: &[&str], e: &StepError| {
        for a in allocs {
            tracing::warn!(volume = vol, alloc = a, "claim failed: {e}");
            shared.report(claim_error(a, e.to_plugin_error(true, None)));
            out.failed.push((*a).to_owned());
        }
    };
    // Before publishing, a recorded staging is checked: one that vanished since the last
    // resync is staged again (NodeStageVolume is idempotent) rather than published from.
    let stage_step = match &job.stage {
        Some(step) => Some(step.clone()),
        None => match vanished_staging(&shared, &job) {
            Ok(step) => step,
            Err(e) => {
                retry(&mut out, &pending, &e);
                return out;
            }
        },
    };
    if let Some(step) = &stage_step {
        match stage(&shared, step).await {
            Ok(()) => tracing::info!(volume = vol, path = %step.path.display(), "staged"),
            Err(e) if e.is_final() => {
                fail(&mut out, &pending, &e);
                return out;
            }
            Err(e) => {
                tracing::info!(volume = vol, "failed to stage, will retry: {e}");
                retry(&mut out, &pending, &e);
                return out;
            }
        }
    }
    for step in &job.publish {
        let alloc = step.desired.alloc.as_str();
        let deadline = ctx
            .deadlines
            .get(alloc)
            .copied()
            .unwrap_or_else(|| Instant::now() + timeout);
        match publish(&shared, step, deadline).await {
            Err(StepError::Interrupted) => {
                tracing::info!(
                    volume = vol,
                    alloc,
                    "stopped waiting for the target: the claim is no longer wanted"
                );
                return out;
            }
            Ok(()) => {
                tracing::info!(volume = vol, alloc, target = %step.target.display(), "published and ready");
                shared.report(Report::Published {
                    volume: vol.clone(),
                    alloc: alloc.to_owned(),
                    target_path: step.target.display().to_string(),
                });
                out.memo_published.push(alloc.to_owned());
                out.ready.push(alloc.to_owned());
            }
            Err(e) if e.is_final() => {
                fail(&mut out, &[alloc], &e);
                return out;
            }
            Err(e) => {
                tracing::info!(volume = vol, alloc, "failed to publish, will retry: {e}");
                retry(&mut out, &[alloc], &e);
                return out;
            }
        }
    }
    for (alloc, target) in &job.report_published {
        shared.report(Report::Published {
            volume: vol.clone(),
            alloc: alloc.clone(),
            target_path: target.display().to_string(),
        });
        out.memo_published.push(alloc.clone());
    }
    out
}

/// Asks the plugins that report VOLUME_CONDITION how each published volume is, and reports
/// a claim's condition when it changed (and once after a start, so that the server forgets
/// an abnormal condition that passed while the agent was away).
async fn check_conditions(shared: Arc<Shared>) {
    let published: Vec<PublicationRecord> = shared
        .store
        .publications()
        .into_iter()
        .filter(|p| p.state == PublishState::Published)
        .collect();
    let mut seen = HashSet::new();
    for r in published {
        let Ok(plugin) = shared.node_plugin(&r.plugin) else {
            continue;
        };
        if !plugin.reports_condition() {
            continue;
        }
        let claim = ClaimRef {
            volume: r.volume.clone(),
            alloc: r.alloc.clone(),
        };
        seen.insert(claim.clone());
        match plugin
            .condition(&r.external_id, &r.target, r.staging.as_deref())
            .await
        {
            Ok(Some((abnormal, message))) => {
                let before = shared
                    .conditions
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(claim, abnormal);
                if before != Some(abnormal) {
                    if abnormal {
                        tracing::warn!(
                            volume = r.volume,
                            alloc = r.alloc,
                            "the plugin reports the volume abnormal: {message}"
                        );
                    }
                    shared.report(Report::Condition {
                        volume: r.volume,
                        alloc: r.alloc,
                        abnormal,
                        message,
                    });
                }
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(volume = r.volume, alloc = r.alloc, "{e}"),
        }
    }
    shared
        .conditions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|c, _| seen.contains(c));
}

/// Runs one controller operation and reports its result; the server schedules retries.
async fn run_op(shared: Arc<Shared>, op: ControllerOp) {
    let report = match shared.plugins.controller.get(&op.plugin) {
        None => Report::OpError {
            op: op.id,
            attempt: op.attempt,
            error: PluginError {
                code: "FAILED_PRECONDITION".into(),
                message: format!(
                    "this agent does not host the controller of plugin `{}`; start it with --controller {}=ENDPOINT",
                    op.plugin, op.plugin
                ),
                is_final: true,
                next_retry_at_ms: None,
            },
        },
        Some(plugin) => match plugin.run(&op).await {
            Ok(report) => {
                tracing::info!(
                    op = op.id,
                    attempt = op.attempt,
                    plugin = op.plugin,
                    "controller operation done"
                );
                report
            }
            Err(e) => {
                tracing::warn!(
                    op = op.id,
                    attempt = op.attempt,
                    plugin = op.plugin,
                    "controller operation failed: {e}"
                );
                Report::OpError {
                    op: op.id,
                    attempt: op.attempt,
                    error: e.to_plugin_error(e.class() != ErrorClass::Retry, None),
                }
            }
        },
    };
    shared.report(report);
}

#[derive(Debug)]
struct Backoff {
    attempt: u32,
    at: Instant,
}

/// The loop's state: the latest desired state, what runs, and what was already said.
struct Reconciler {
    shared: Arc<Shared>,
    desired_rx: watch::Receiver<Arc<DesiredState>>,
    control_rx: mpsc::UnboundedReceiver<Control>,
    fence_tx: watch::Sender<FenceState>,
    desired: Arc<DesiredState>,
    fence: FenceState,
    workers: JoinSet<Outcome>,
    running: HashMap<tokio::task::Id, String>,
    busy: HashSet<String>,
    backoff: HashMap<String, Backoff>,
    memo: Memo,
    failed: HashSet<ClaimRef>,
    /// When each pending claim was first wanted, for its readiness deadline.
    since: HashMap<ClaimRef, Instant>,
    last_errors: HashMap<ClaimRef, String>,
    ops: JoinSet<()>,
    ops_started: HashSet<(u64, u32)>,
    /// Set by a resync: check that published volumes are still ready.
    verify: bool,
    idle_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Set by [`Core::take_down`]: follow an empty desired state, and say when done.
    taking_down: bool,
    down_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The volume-condition check a resync started, while it runs.
    conditions: Option<tokio::task::JoinHandle<()>>,
}

impl Reconciler {
    fn new(
        shared: Arc<Shared>,
        desired_rx: watch::Receiver<Arc<DesiredState>>,
        control_rx: mpsc::UnboundedReceiver<Control>,
        fence_tx: watch::Sender<FenceState>,
        fence: FenceState,
    ) -> Self {
        let desired = Arc::clone(&desired_rx.borrow());
        Self {
            shared,
            desired,
            desired_rx,
            control_rx,
            fence_tx,
            fence,
            workers: JoinSet::new(),
            running: HashMap::new(),
            busy: HashSet::new(),
            backoff: HashMap::new(),
            memo: Memo::default(),
            failed: HashSet::new(),
            since: HashMap::new(),
            last_errors: HashMap::new(),
            ops: JoinSet::new(),
            ops_started: HashSet::new(),
            verify: false,
            idle_waiters: Vec::new(),
            taking_down: false,
            down_waiters: Vec::new(),
            conditions: None,
        }
    }

    async fn run(mut self) {
        let mut resync = tokio::time::interval(self.shared.cfg.resync_interval);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.tick().await;
        // Nothing is done before the first desired state arrives, except a self-fence that
        // was under way when the agent stopped.
        let mut started = self.fence != FenceState::No;
        loop {
            let wake = if started {
                self.scan();
                self.check_fence().await;
                if self.busy.is_empty() {
                    for tx in self.idle_waiters.drain(..) {
                        let _ = tx.send(());
                    }
                    if self.taking_down && self.shared.store.is_empty() {
                        for tx in self.down_waiters.drain(..) {
                            let _ = tx.send(());
                        }
                    }
                }
                self.next_wake()
            } else {
                None
            };
            let sleep = async {
                match wake {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = self.desired_rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.desired = Arc::clone(&self.desired_rx.borrow_and_update());
                    started = true;
                }
                Some(done) = self.workers.join_next_with_id() => self.finished(done),
                Some(_) = self.ops.join_next() => {}
                control = self.control_rx.recv() => match control {
                    None => return,
                    Some(Control::Fence(f)) => {
                        self.fence = FenceState::TearingDown(f);
                        self.fence_tx.send_replace(self.fence.clone());
                        started = true;
                    }
                    Some(Control::Unfence) => {
                        tracing::info!("the server has heard of the self-fence; following its desired state again");
                        self.fence = FenceState::No;
                        self.fence_tx.send_replace(FenceState::No);
                        // A desired state from before the fence may be stale: the server
                        // may have given the volumes to another node since. Wait for one
                        // fetched after the server heard of the fence.
                        self.desired_rx.borrow_and_update();
                        self.desired = Arc::new(DesiredState::default());
                        started = false;
                    }
                    Some(Control::Resync) => self.resync(),
                    Some(Control::TakeDown(tx)) => {
                        tracing::info!("taking down every volume on this node before stopping");
                        self.taking_down = true;
                        self.down_waiters.push(tx);
                        started = true;
                    }
                    Some(Control::Idle(tx)) => {
                        // A desired state sent before this request counts as seen.
                        if self.desired_rx.has_changed().unwrap_or(false) {
                            self.desired = Arc::clone(&self.desired_rx.borrow_and_update());
                            started = true;
                        }
                        if started {
                            self.idle_waiters.push(tx);
                        } else {
                            let _ = tx.send(());
                        }
                    }
                },
                _ = resync.tick() => self.resync(),
                () = sleep => {}
            }
        }
    }

    /// Forgets what was said about transient entries, so that anything the server still
    /// lists is answered again, and checks published volumes.
    fn resync(&mut self) {
        self.memo.unpublished.clear();
        self.memo.unstaged.clear();
        self.verify = true;
        if self.conditions.as_ref().is_none_or(|t| t.is_finished()) {
            self.conditions = Some(tokio::spawn(check_conditions(Arc::clone(&self.shared))));
        }
    }

    fn finished(&mut self, done: Result<(tokio::task::Id, Outcome), tokio::task::JoinError>) {
        let (id, out) = match done {
            Ok((id, out)) => (id, out),
            Err(e) => {
                let volume = self.running.remove(&e.id()).unwrap_or_default();
                tracing::error!(volume, "volume worker failed: {e}");
                self.busy.remove(&volume);
                self.backoff.insert(
                    volume,
                    Backoff {
                        attempt: 1,
                        at: Instant::now() + self.shared.cfg.retry.max,
                    },
                );
                return;
            }
        };
        self.running.remove(&id);
        self.busy.remove(&out.volume);
        let claim = |alloc: &str| ClaimRef {
            volume: out.volume.clone(),
            alloc: alloc.to_owned(),
        };
        for a in &out.memo_published {
            self.memo.published.insert(claim(a));
        }
        for a in &out.memo_unpublished {
            self.memo.unpublished.insert(claim(a));
        }
        if out.memo_unstaged {
            self.memo.unstaged.insert(out.volume.clone());
        }
        for a in &out.ready {
            self.since.remove(&claim(a));
            self.last_errors.remove(&claim(a));
        }
        for a in &out.failed {
            self.failed.insert(claim(a));
            self.since.remove(&claim(a));
        }
        for (a, e) in out.errors {
            self.last_errors.insert(claim(&a), e);
        }
        match out.retry_at {
            Some(at) => {
                let attempt = self.backoff.get(&out.volume).map_or(0, |b| b.attempt) + 1;
                self.backoff.insert(out.volume, Backoff { attempt, at });
            }
            None => {
                self.backoff.remove(&out.volume);
            }
        }
    }

    /// Starts a worker for every volume whose actual state differs from the desired one
    /// and that is neither busy nor waiting for a retry; starts due controller operations.
    fn scan(&mut self) {
        let now = Instant::now();
        let none = DesiredState::default();
        let fenced = self.fence != FenceState::No || self.taking_down;
        let latest = Arc::clone(&self.desired);
        let desired = if fenced { &none } else { &*latest };
        let mut by_volume: BTreeMap<&str, VolumeDesired<'_>> = BTreeMap::new();
        for p in &desired.publish {
            by_volume
                .entry(&p.volume.volume)
                .or_default()
                .publish
                .push(p);
        }
        for u in &desired.unpublish {
            by_volume.entry(&u.volume).or_default().unpublish.push(u);
        }
        for s in &desired.unstage {
            by_volume.entry(&s.volume).or_default().unstage = true;
        }

        // Forget what concerns entries the server no longer lists.
        let listed: HashSet<ClaimRef> = desired
            .publish
            .iter()
            .map(|p| ClaimRef {
                volume: p.volume.volume.clone(),
                alloc: p.alloc.clone(),
            })
            .collect();
        self.memo.published.retain(|c| listed.contains(c));
        self.failed.retain(|c| listed.contains(c));
        self.since.retain(|c, _| listed.contains(c));
        self.last_errors.retain(|c, _| listed.contains(c));
        self.memo.unpublished.retain(|c| {
            desired
                .unpublish
                .iter()
                .any(|u| u.volume == c.volume && u.alloc == c.alloc)
        });
        self.memo
            .unstaged
            .retain(|v| desired.unstage.iter().any(|u| &u.volume == v));

        let shared = Arc::clone(&self.shared);
        let store = &shared.store;
        let mut volumes: BTreeSet<String> = store.volumes();
        volumes.extend(by_volume.keys().map(|v| (*v).to_owned()));
        let busy = &self.busy;
        self.backoff
            .retain(|v, _| volumes.contains(v) || busy.contains(v));
        // A resync checks every record against the mount table (node truth).
        let checker = if std::mem::take(&mut self.verify) {
            shared
                .checker()
                .inspect_err(|e| tracing::warn!("resync: {e}"))
                .ok()
        } else {
            None
        };
        let empty = VolumeDesired::default();
        let timeout = self.shared.cfg.volume_ready_timeout;
        for vol in volumes {
            if self.busy.contains(&vol) || self.backoff.get(&vol).is_some_and(|b| b.at > now) {
                continue;
            }
            let vd = by_volume.get(vol.as_str()).unwrap_or(&empty);
            let mut staging = store.staging(&vol);
            let mut publications = store.publications_of(&vol);
            let (demote_staging, demote) = match &checker {
                Some(c) => self.drift(c, staging.as_mut(), &mut publications),
                None => (None, Vec::new()),
            };
            let mut deadlines = HashMap::new();
            let mut timed_out = HashSet::new();
            for p in &vd.publish {
                let c = ClaimRef {
                    volume: vol.clone(),
                    alloc: p.alloc.clone(),
                };
                let ready = publications
                    .iter()
                    .any(|r| r.alloc == p.alloc && r.state == PublishState::Published);
                if ready {
                    self.since.remove(&c);
                    continue;
                }
                let deadline = *self.since.entry(c.clone()).or_insert(now) + timeout;
                if deadline <= now {
                    timed_out.insert(c);
                }
                deadlines.insert(p.alloc.clone(), deadline);
            }
            let mut job = plan::plan(&plan::Input {
                data_dir: &self.shared.data_dir,
                volume: &vol,
                desired: vd,
                staging: staging.as_ref(),
                publications: &publications,
                memo: &self.memo,
                failed: &self.failed,
                timed_out: &timed_out,
                staging_plugins: &self.shared.staging_plugins,
            });
            job.demote = demote;
            job.demote_staging = demote_staging;
            if self.taking_down {
                job.taken_down_because =
                    Some("the node's agent took it down as it stopped".to_owned());
            }
            if job.is_empty() {
                // Nothing to retry any more: the desired state moved on.
                self.backoff.remove(&vol);
                continue;
            }
            let ctx = JobContext {
                attempt: self.backoff.get(&vol).map_or(0, |b| b.attempt),
                deadlines,
                last_errors: self
                    .last_errors
                    .iter()
                    .filter(|(c, _)| c.volume == vol)
                    .map(|(c, e)| (c.alloc.clone(), e.clone()))
                    .collect(),
            };
            let handle = self
                .workers
                .spawn(run_job(Arc::clone(&self.shared), job, ctx));
            self.running.insert(handle.id(), vol.clone());
            self.busy.insert(vol);
        }

        if fenced {
            return;
        }
        let desired = Arc::clone(&self.desired);
        self.ops_started
            .retain(|(id, _)| desired.controller_ops.iter().any(|o| o.id == *id));
        let now_ms = now_ms();
        for op in &desired.controller_ops {
            if op.not_before_ms > now_ms || self.ops_started.contains(&(op.id, op.attempt)) {
                continue;
            }
            self.ops_started.insert((op.id, op.attempt));
            self.ops.spawn(run_op(Arc::clone(&self.shared), op.clone()));
        }
    }

    /// Finds what drifted under the records of one volume: a staging recorded staged but not
    /// mounted from the volume, publications recorded published but not mounted from it. They
    /// are marked uncertain here (so the plan stages and publishes them again) and returned
    /// with why, for the job to record and report first.
    #[allow(clippy::type_complexity)] // reason: a pair of what drifted, used once by `scan`
    fn drift(
        &mut self,
        c: &Checker<'_>,
        staging: Option<&mut StagingRecord>,
        publications: &mut [PublicationRecord],
    ) -> (
        Option<(StagingRecord, String)>,
        Vec<(PublicationRecord, String)>,
    ) {
        let mut demote_staging = None;
        if let Some(s) = staging
            && s.state == StageState::Staged
            && let Err(why) = self.shared.check_staging(c, s)
        {
            s.state = StageState::Staging;
            demote_staging = Some((s.clone(), why));
        }
        let mut demote = Vec::new();
        for r in publications
            .iter_mut()
            .filter(|r| r.state == PublishState::Published)
        {
            if let Err(why) = self.shared.check_publication(c, r) {
                r.state = PublishState::Publishing;
                self.memo.published.remove(&ClaimRef {
                    volume: r.volume.clone(),
                    alloc: r.alloc.clone(),
                });
                demote.push((r.clone(), why));
            }
        }
        (demote_staging, demote)
    }

    /// The earliest retry or not-yet-due controller operation.
    fn next_wake(&self) -> Option<Instant> {
        let now = Instant::now();
        let retries = self
            .backoff
            .iter()
            .filter(|(v, b)| !self.busy.contains(*v) && b.at > now)
            .map(|(_, b)| b.at);
        let now_ms = now_ms();
        let ops = if self.fence == FenceState::No {
            self.desired
                .controller_ops
                .iter()
                .filter(|o| !self.ops_started.contains(&(o.id, o.attempt)))
                .map(|o| now + Duration::from_millis(o.not_before_ms.saturating_sub(now_ms)))
                .collect()
        } else {
            Vec::new()
        };
        retries.chain(ops).min()
    }

    /// A fence is complete once nothing is left on the node and nothing is running.
    async fn check_fence(&mut self) {
        let FenceState::TearingDown(f) = &self.fence else {
            return;
        };
        if !self.busy.is_empty() || !self.shared.store.is_empty() {
            return;
        }
        if let Err(e) = self.shared.store.complete_fence(f.id).await {
            tracing::error!("failed to record the completed self-fence: {e:#}");
            return;
        }
        let mut f = f.clone();
        f.completed_ms = Some(now_ms());
        tracing::warn!(volumes = ?f.volumes, "self-fence complete: nothing is published or staged on this node");
        self.fence = FenceState::Complete(f);
        self.fence_tx.send_replace(self.fence.clone());
    }
}
