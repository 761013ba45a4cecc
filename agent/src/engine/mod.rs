//! The node engine: recovery at start, then a loop that makes the node follow the
//! desired state it is given, one worker per volume, and runs the controller operations
//! assigned to this agent. It knows nothing of HTTP: the desired state comes in through
//! [`Core::set_desired`] and the reports it would send come out of a channel, so tests
//! drive it directly.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use csivol_api::{
    ClaimRef, DesiredState, ObservedShape, OwnershipChange, RegisterRequest, Report, StaleChanges,
};
use csivol_rules::agent::observed::Observation;
use csivol_rules::agent::records::{PublicationRecord, PublishState, StageState, StagingRecord};
use csivol_rules::agent::verify::Checks as _;
use tokio::sync::{mpsc, watch};

mod capacity;
mod contact;
mod driver;
mod jobs;
mod limits;
mod listing;
mod ownership;
mod recovery;
mod steps;

pub use self::contact::Heard;
use self::driver::Driver;
use self::recovery::recover;
use self::steps::{StepError, local};
use crate::config::CoreConfig;
use crate::mounts::{Checker, Judge, MountWatch};
use crate::plugin::{ConnectError, NodePlugin, Plugins};
use crate::store::{Fence, Store, StoreError, now_ms};

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
    #[error("failed to open the mount table /proc/self/mountinfo")]
    MountTable {
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// Asked to stop while starting ([`Core::start_until`]): the step under way was
    /// finished and recorded in `agent.db`; the next start goes on from there.
    #[error("asked to stop while starting")]
    Stopped,
}

/// Completes once `stop` says to stop; never when its sender is gone without saying so.
async fn stop_asked(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// `step`, unless a stop is asked first: for the steps of a start that record nothing
/// (waiting for the data dir's lock, for the plugins to answer), which may be dropped.
async fn unless_stopped<T>(
    stop: &mut watch::Receiver<bool>,
    step: impl Future<Output = T>,
) -> Result<T, StartError> {
    tokio::select! {
        biased;
        () = stop_asked(stop) => Err(StartError::Stopped),
        out = step => Ok(out),
    }
}

/// State shared by the loop and its workers.
#[derive(Debug)]
struct Shared {
    cfg: CoreConfig,
    data_dir: PathBuf,
    plugins: Plugins,
    store: Store,
    /// The mount table, read again when the kernel says it changed: a claim's steps look
    /// at it several times, mostly with nothing mounted or unmounted in between.
    mounts: MountWatch,
    staging_plugins: HashSet<String>,
    reports: mpsc::UnboundedSender<Report>,
    /// The latest desired state, for workers: a readiness wait ends when its claim is
    /// no longer wanted.
    desired: watch::Receiver<Arc<DesiredState>>,
    /// The last volume condition reported per published claim.
    conditions: std::sync::Mutex<HashMap<ClaimRef, bool>>,
    /// Usage samples waiting for the node channel.
    outbox: Arc<crate::stats::Outbox>,
    /// Which volumes' desired entries changed since the loop last looked. Updated under
    /// its lock together with the desired state, so that the loop takes both or neither.
    changed: std::sync::Mutex<Changed>,
    /// Woken when a NodeStageVolume answered RESOURCE_EXHAUSTED: the attach limits are read
    /// again at once.
    limits_wake: tokio::sync::Notify,
    /// Woken after a CreateVolume or DeleteVolume succeeded: the plugin's capacity is read
    /// again at once.
    capacity_wake: tokio::sync::Notify,
    /// One lock per volume with node calls in flight, held by its worker and by the
    /// condition check: spec.md, "Concurrency": the CO is "responsible for ensuring that
    /// there is no more than one call 'in-flight' per volume at a given time".
    volume_locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Volumes whose desired entries or records changed: the ones a scan looks at.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Changed {
    /// Every volume (a whole desired state, a resync, a fence).
    pub all: bool,
    pub volumes: BTreeSet<String>,
}

impl Changed {
    pub fn everything() -> Self {
        Self {
            all: true,
            volumes: BTreeSet::new(),
        }
    }

    pub fn merge(&mut self, other: Changed) {
        self.all |= other.all;
        if !self.all {
            self.volumes.extend(other.volumes);
        }
    }
}

impl Shared {
    /// The lock of `volume`'s node calls (see `volume_locks`). Locks nobody holds or waits
    /// for are dropped here.
    fn volume_lock(&self, volume: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.volume_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        Arc::clone(locks.entry(volume.to_owned()).or_default())
    }

    /// One snapshot of the mount table, to check records against.
    fn checker(&self) -> Result<Checker<'_>, StepError> {
        let table = self
            .mounts
            .table()
            .map_err(|e| local("read the mount table for", &self.data_dir, e))?;
        Ok(Checker::new(table, &self.data_dir))
    }

    /// The checks of one snapshot, with this agent's readiness checks.
    fn judge<'c>(&'c self, c: Option<&'c Checker<'c>>) -> Judge<'c, 'c> {
        Judge {
            checker: c,
            default_check: self.cfg.ready_check,
            plugin_checks: &self.cfg.plugin_ready_checks,
        }
    }

    /// Whether a publication's target is ready, judged with its volume's other records;
    /// what is at the target if it is, why not otherwise.
    fn check_publication(
        &self,
        c: &Checker<'_>,
        r: &PublicationRecord,
    ) -> Result<Observation, String> {
        let staging = self.store.staging(&r.volume);
        let publications = self.store.publications_of(&r.volume);
        self.judge(Some(c))
            .publication(r, staging.as_ref(), &publications)
    }

    /// Whether a staging holds its volume; why not otherwise.
    fn check_staging(&self, c: &Checker<'_>, s: &StagingRecord) -> Result<(), String> {
        let publications = self.store.publications_of(&s.volume);
        self.judge(Some(c)).staging(s, &publications).map(|_| ())
    }

    /// What the plugin made for a claim, from its records: at the staging path and at the
    /// target (told the server with the claim's `published` report).
    fn shape(&self, volume: &str, alloc: &str) -> Option<ObservedShape> {
        let p = self
            .store
            .publications_of(volume)
            .into_iter()
            .find(|p| p.alloc == alloc)?;
        let staging = p.staging.as_ref().map(|path| {
            self.store
                .staging(volume)
                .filter(|s| s.path == *path)
                .and_then(|s| s.observed)
                .map_or("unknown", |o| o.kind())
                .to_owned()
        });
        Some(ObservedShape {
            staging,
            target: p.observed?.kind().to_owned(),
        })
    }

    /// What csivol's ownership change did to the claim's target, as agent.db records it
    /// (reported with every publication of the claim, so a restart neither repeats the
    /// change nor loses its count); none where csivol changed nothing, or the record
    /// cannot be read (the next report carries it).
    async fn ownership_change(&self, volume: &str, alloc: &str) -> Option<OwnershipChange> {
        match self.store.ownership(volume, alloc).await {
            Ok(found) => found.map(|(_, change)| change),
            Err(e) => {
                tracing::warn!(volume, alloc, "failed to read the ownership record: {e}");
                None
            }
        }
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
    Registered,
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
    /// The last answer of the server to a heartbeat or registration (`contact`).
    heard: watch::Sender<Option<Heard>>,
    task: tokio::task::JoinHandle<()>,
    /// The controller listings: stopped with the core, so that nothing holds the reports
    /// channel open once it is gone (a stopping agent waits for its last reports).
    listing: tokio::task::JoinHandle<()>,
    /// The attach limits read again while the node runs: stopped with the core likewise.
    limits: tokio::task::JoinHandle<()>,
    /// The capacity samples: stopped with the core likewise.
    capacity: tokio::task::JoinHandle<()>,
}

impl Drop for Core {
    fn drop(&mut self) {
        self.task.abort();
        self.listing.abort();
        self.limits.abort();
        self.capacity.abort();
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
        Self::start_until(cfg, watch::channel(false).1).await
    }

    /// [`Core::start`], stopped in order when `stop` turns true: waiting for the data
    /// dir's lock or for the plugins is given up at once (nothing is recorded then), and
    /// recovery stops after the step under way, which is recorded in `agent.db` as every
    /// step is; the next start finishes what is left. Then [`StartError::Stopped`].
    pub async fn start_until(
        cfg: CoreConfig,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(Self, mpsc::UnboundedReceiver<Report>), StartError> {
        let data_dir = prepare_data_dir(&cfg.data_dir)?;
        let (store, rebooted) = unless_stopped(&mut stop, Store::open(&data_dir)).await??;
        let mounts = MountWatch::open().map_err(|source| StartError::MountTable { source })?;
        let outbox = Arc::new(crate::stats::Outbox::default());
        let plugins =
            unless_stopped(&mut stop, Plugins::connect_counted(&cfg, &outbox.calls)).await??;
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
            mounts,
            staging_plugins,
            reports: tx,
            desired: desired_rx.clone(),
            conditions: std::sync::Mutex::default(),
            outbox,
            changed: std::sync::Mutex::default(),
            limits_wake: tokio::sync::Notify::new(),
            capacity_wake: tokio::sync::Notify::new(),
            volume_locks: Default::default(),
        });
        if !recover(&shared, rebooted, &stop).await {
            return Err(StartError::Stopped);
        }
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
        let (heard_tx, heard_rx) = watch::channel(None);
        let driver = Driver::new(
            Arc::clone(&shared),
            desired_rx,
            control_rx,
            fence_tx,
            initial,
            heard_rx,
        );
        let task = tokio::spawn(driver.run());
        let listing = tokio::spawn(listing::run(Arc::clone(&shared)));
        let limits = tokio::spawn(limits::run(Arc::clone(&shared)));
        let capacity = tokio::spawn(capacity::run(Arc::clone(&shared)));
        Ok((
            Self {
                shared,
                desired: desired_tx,
                control: control_tx,
                fenced: fence_rx,
                heard: heard_tx,
                task,
                listing,
                limits,
                capacity,
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
                plugins: shared
                    .plugins
                    .registrations(|p| shared.cfg.ready_check_of(p)),
                fence_after_ms: fence_after.map(|d| d.as_millis() as u64),
                published: Vec::new(),
                staged: Vec::new(),
                labels: shared.cfg.labels.clone(),
            };
        };
        RegisterRequest {
            plugins: shared
                .plugins
                .registrations(|p| shared.cfg.ready_check_of(p)),
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

    /// Gives the loop the server's latest desired state; every volume is looked at again.
    pub fn set_desired(&self, mut desired: DesiredState) {
        desired.changes = None;
        self.apply_desired(desired)
            .expect("a whole desired state always applies");
    }

    /// Follows the server's answer: a whole desired state replaces the one the loop has;
    /// changes are applied to it in place (`DesiredState::apply`), and the loop then looks
    /// only at the volumes they name. Changes counted from another index than the state's
    /// are refused, and nothing changes.
    pub fn apply_desired(&self, next: DesiredState) -> Result<(), StaleChanges> {
        let touched = match &next.changes {
            None => Changed::everything(),
            Some(c) => Changed {
                all: false,
                volumes: c.volumes.iter().cloned().collect(),
            },
        };
        let mut changed = self
            .shared
            .changed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut result = Ok(());
        // Nobody else holds the state (the loop and the workers read it in place), so
        // `make_mut` changes it without a copy.
        self.desired
            .send_if_modified(|d| match Arc::make_mut(d).apply(next) {
                Ok(()) => true,
                Err(e) => {
                    result = Err(e);
                    false
                }
            });
        if result.is_ok() {
            changed.merge(touched);
        }
        result
    }

    /// The usage samples waiting for the node channel.
    pub fn outbox(&self) -> Arc<crate::stats::Outbox> {
        Arc::clone(&self.shared.outbox)
    }

    /// Re-checks everything now, as the periodic resync does.
    pub fn resync(&self) {
        let _ = self.control.send(Control::Resync);
    }

    /// The server accepted a registration: re-checks everything as a resync does, and
    /// reports every claim still published once more. The server's state may not have
    /// heard the reports made before (it was restored from a backup taken while a claim
    /// was publishing, or replaced by another): such a claim would otherwise stay
    /// publishing while its volume is mounted and its workload runs.
    pub fn registered(&self) {
        let _ = self.control.send(Control::Registered);
    }

    /// The server answered a heartbeat or registration sent at `sent`, the node not lost,
    /// with its heartbeat TTL: controller operations of the desired state may start until
    /// a TTL after `sent` (`contact`).
    pub fn heard(&self, sent: std::time::Instant, ttl: Duration) {
        self.heard.send_replace(Some(Heard { sent, ttl }));
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

/// The mode of the agent's data dir, `targets/` and each volume's dir in it.
pub const TARGETS_MODE: u32 = csivol_daemon::modes::PASSABLE;

fn prepare_data_dir(dir: &Path) -> Result<PathBuf, StartError> {
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| StartError::DataDir { path, source }
    };
    // Workloads of other users reach their targets through the data dir and `targets/`,
    // so both are 0711: passable, not listable. Staging is the agent's and the plugin's
    // only (0700): a workload sees its volume through its target's bind mount, which needs
    // no access to the staging path. The agent's records (agent.db) are 0600.
    csivol_daemon::modes::dir_logged(dir, TARGETS_MODE, "agent data dir").map_err(io_err(dir))?;
    // Canonical, so that targets compare equal to what the mount table shows.
    let dir = dir.canonicalize().map_err(io_err(dir))?;
    if dir.to_str().is_none() {
        return Err(StartError::NonUtf8(dir));
    }
    for (sub, mode) in [("staging", 0o700), ("targets", TARGETS_MODE)] {
        csivol_daemon::modes::dir_logged(&dir.join(sub), mode, sub)
            .map_err(io_err(&dir.join(sub)))?;
    }
    csivol_daemon::modes::files_in(&dir).map_err(io_err(&dir))?;
    Ok(dir)
}
