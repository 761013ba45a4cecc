//! The engine's loop: the latest desired state, what runs, retries and deadlines, drift
//! found at each resync, the fence and the take-down at stop.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_api::{ClaimRef, DesiredState};
use csivol_rules::agent::job::{self, Memo, VolumeDesired};
use csivol_rules::agent::records::{PublicationRecord, PublishState, StagingRecord};
use csivol_rules::agent::verify;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::mounts::Checker;
use crate::store::now_ms;

use super::contact::{Heard, may_start_ops};
use super::jobs::{JobContext, Outcome, check_volumes, run_expand, run_job, run_op};
use super::{Changed, Control, FenceState, Shared};

#[derive(Debug)]
struct Backoff {
    attempt: u32,
    at: Instant,
}

/// The loop's state: the latest desired state, what runs, and what was already said.
pub(super) struct Driver {
    shared: Arc<Shared>,
    /// The latest desired state, read in place (not held: the session applies the
    /// server's changes to it without a copy while nobody holds it).
    desired_rx: watch::Receiver<Arc<DesiredState>>,
    control_rx: mpsc::UnboundedReceiver<Control>,
    fence_tx: watch::Sender<FenceState>,
    /// Set when the desired state at hand must not be followed (after a self-fence, until
    /// a fresh one arrives): an empty one is followed instead.
    blank: bool,
    fence: FenceState,
    workers: JoinSet<Outcome>,
    running: HashMap<tokio::task::Id, String>,
    busy: HashSet<String>,
    backoff: HashMap<String, Backoff>,
    memo: Memo,
    failed: BTreeSet<ClaimRef>,
    /// When each pending claim was first wanted, for its readiness deadline.
    since: BTreeMap<ClaimRef, Instant>,
    last_errors: BTreeMap<ClaimRef, String>,
    ops: JoinSet<()>,
    ops_started: HashSet<(u64, u32)>,
    /// The server's last answer to a heartbeat or registration (`contact`).
    heard: watch::Receiver<Option<Heard>>,
    /// Set by a registration until the desired state fetched after it is taken: the one
    /// at hand may list operations the server gave to another host meanwhile.
    registered_since_desired: bool,
    /// Set while controller operations wait for the server's next answer.
    ops_wait_contact: bool,
    /// Node expansions started: volume, attempt and capacity.
    expands_started: HashSet<(String, u32, u64)>,
    /// Set by a resync: check that published volumes are still ready.
    verify: bool,
    idle_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Set by [`Core::take_down`]: follow an empty desired state, and say when done.
    taking_down: bool,
    down_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The volume-condition check a resync started, while it runs.
    conditions: Option<tokio::task::JoinHandle<()>>,
    /// The volumes the next scan looks at: those whose desired entries changed or whose
    /// worker finished (or all), besides those whose retry is due.
    dirty: Changed,
}

impl Driver {
    pub(super) fn new(
        shared: Arc<Shared>,
        desired_rx: watch::Receiver<Arc<DesiredState>>,
        control_rx: mpsc::UnboundedReceiver<Control>,
        fence_tx: watch::Sender<FenceState>,
        fence: FenceState,
        heard: watch::Receiver<Option<Heard>>,
    ) -> Self {
        Self {
            shared,
            blank: false,
            desired_rx,
            control_rx,
            fence_tx,
            fence,
            workers: JoinSet::new(),
            running: HashMap::new(),
            busy: HashSet::new(),
            backoff: HashMap::new(),
            memo: Memo::default(),
            failed: BTreeSet::new(),
            since: BTreeMap::new(),
            last_errors: BTreeMap::new(),
            ops: JoinSet::new(),
            ops_started: HashSet::new(),
            heard,
            registered_since_desired: false,
            ops_wait_contact: false,
            expands_started: HashSet::new(),
            verify: false,
            idle_waiters: Vec::new(),
            taking_down: false,
            down_waiters: Vec::new(),
            conditions: None,
            dirty: Changed::everything(),
        }
    }

    /// Takes the latest desired state with the volumes changed in it, together.
    fn take_desired(&mut self) {
        let mut changed = self
            .shared
            .changed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.desired_rx.mark_unchanged();
        self.blank = false;
        self.registered_since_desired = false;
        self.dirty.merge(std::mem::take(&mut *changed));
    }

    pub(super) async fn run(mut self) {
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
                    self.take_desired();
                    started = true;
                }
                Some(done) = self.workers.join_next_with_id() => self.finished(done),
                Some(_) = self.ops.join_next() => {}
                Ok(()) = self.heard.changed(), if self.ops_wait_contact => {}
                control = self.control_rx.recv() => match control {
                    None => return,
                    Some(Control::Fence(f)) => {
                        self.dirty = Changed::everything();
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
                        self.take_desired();
                        self.blank = true;
                        self.dirty = Changed::everything();
                        started = false;
                    }
                    Some(Control::Resync) => self.resync(),
                    Some(Control::Registered) => {
                        self.registered_since_desired = true;
                        self.memo.published.clear();
                        self.resync();
                    }
                    Some(Control::TakeDown(tx)) => {
                        tracing::info!("taking down every volume on this node before stopping");
                        self.taking_down = true;
                        self.dirty = Changed::everything();
                        self.down_waiters.push(tx);
                        started = true;
                    }
                    Some(Control::Idle(tx)) => {
                        // A desired state sent before this request counts as seen.
                        if self.desired_rx.has_changed().unwrap_or(false) {
                            self.take_desired();
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
        self.dirty = Changed::everything();
        if self.conditions.as_ref().is_none_or(|t| t.is_finished()) {
            self.conditions = Some(tokio::spawn(check_volumes(Arc::clone(&self.shared))));
        }
    }

    fn finished(&mut self, done: Result<(tokio::task::Id, Outcome), tokio::task::JoinError>) {
        let (id, out) = match done {
            Ok((id, out)) => (id, out),
            Err(e) => {
                let volume = self.running.remove(&e.id()).unwrap_or_default();
                tracing::error!(volume, "volume worker failed: {e}");
                self.busy.remove(&volume);
                self.dirty.volumes.insert(volume.clone());
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
        self.dirty.volumes.insert(out.volume.clone());
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
        let rx = self.desired_rx.clone();
        let latest = rx.borrow();
        let desired = if fenced || self.blank {
            &none
        } else {
            &**latest
        };
        let shared = Arc::clone(&self.shared);
        let store = &shared.store;
        // Only volumes whose desired entries or records may have changed, or whose retry
        // is due, can need a job: a wake-up costs what changed, not what the node holds.
        let dirty = std::mem::take(&mut self.dirty);
        let volumes: BTreeSet<String> = if dirty.all {
            self.forget_unlisted(desired);
            let mut all = store.volumes();
            all.extend(desired.publish.iter().map(|p| p.volume.volume.clone()));
            all.extend(desired.unpublish.iter().map(|u| u.volume.clone()));
            all.extend(desired.unstage.iter().map(|u| u.volume.clone()));
            let busy = &self.busy;
            self.backoff
                .retain(|v, _| all.contains(v) || busy.contains(v));
            all
        } else {
            // Entries change only with the volumes they are named under: the other
            // volumes' entries, and what was said about them, are as they were.
            for vol in &dirty.volumes {
                self.forget_unlisted_of(desired, vol);
            }
            let due = self.backoff.iter().filter(|(_, b)| b.at <= now);
            let mut some = dirty.volumes;
            some.extend(due.map(|(v, _)| v.clone()));
            some
        };
        // A resync checks every record against the mount table (node truth).
        let checker = if std::mem::take(&mut self.verify) {
            shared
                .checker()
                .inspect_err(|e| tracing::warn!("resync: {e}"))
                .ok()
        } else {
            None
        };
        let timeout = self.shared.cfg.volume_ready_timeout;
        for vol in volumes {
            if self.busy.contains(&vol) || self.backoff.get(&vol).is_some_and(|b| b.at > now) {
                continue;
            }
            let (publish, unpublish, unstage) = desired.entries_of(&vol);
            let vd = &VolumeDesired {
                publish: publish.iter().collect(),
                unpublish: unpublish.iter().collect(),
                unstage,
                keep_staged: desired.kept_staging(&vol),
            };
            let mut staging = store.staging(&vol);
            let mut publications = store.publications_of(&vol);
            let verified = match &checker {
                Some(c) => self.drift(c, publish, staging.as_mut(), &mut publications),
                None => verify::Repairs::default(),
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
            let mut job = job::decide(&job::Input {
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
            job.verified = verified;
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
                last_errors: of_volume(&self.last_errors, &vol)
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
        self.ops_started
            .retain(|(id, _)| desired.controller_ops.iter().any(|o| o.id == *id));
        let now_ms = now_ms();
        // Not from a desired state the server may have overtaken (`contact`).
        self.ops_wait_contact =
            self.registered_since_desired || !may_start_ops(*self.heard.borrow(), now);
        if self.ops_wait_contact && !desired.controller_ops.is_empty() {
            tracing::debug!(
                "controller operations wait for the server's next answer: the desired state at hand may be stale"
            );
        }
        for op in &desired.controller_ops {
            if self.ops_wait_contact {
                break;
            }
            if op.not_before_ms > now_ms || self.ops_started.contains(&(op.id, op.attempt)) {
                continue;
            }
            self.ops_started.insert((op.id, op.attempt));
            self.ops.spawn(run_op(
                Arc::clone(&self.shared),
                op.clone(),
                desired.generation.clone(),
            ));
        }
        let key = |e: &csivol_api::DesiredExpand| (e.volume.clone(), e.attempt, e.capacity_bytes);
        self.expands_started
            .retain(|k| desired.expand.iter().any(|e| key(e) == *k));
        for e in &desired.expand {
            if e.not_before_ms > now_ms || !self.expands_started.insert(key(e)) {
                continue;
            }
            self.ops
                .spawn(run_expand(Arc::clone(&self.shared), e.clone()));
        }
    }

    /// Finds what drifted under the records of one volume (`verify::decide` at a resync): a
    /// staging that no longer shows what the plugin made there, publications whose target
    /// fails its check. They are marked uncertain in the records given (so that the job
    /// stages and publishes them again) and returned, for the job to record and report
    /// first.
    fn drift(
        &mut self,
        c: &Checker<'_>,
        listed: &[csivol_api::DesiredPublish],
        staging: Option<&mut StagingRecord>,
        publications: &mut [PublicationRecord],
    ) -> verify::Repairs {
        let wanted: HashSet<ClaimRef> = publications
            .iter()
            .filter(|p| listed.iter().any(|d| d.alloc == p.alloc))
            .map(|p| ClaimRef {
                volume: p.volume.clone(),
                alloc: p.alloc.clone(),
            })
            .collect();
        let stagings: Vec<StagingRecord> = staging.iter().map(|s| (**s).clone()).collect();
        let found = verify::decide(
            &self.shared.judge(Some(c)),
            &verify::Input {
                when: verify::When::Resync,
                stagings: &stagings,
                publications,
                wanted: Some(&wanted),
            },
        );
        if let (Some(s), Some((demoted, _))) = (staging, found.restage.first()) {
            *s = demoted.clone();
        }
        for r in &found.republish {
            if let Some(p) = publications.iter_mut().find(|p| p.alloc == r.record.alloc) {
                *p = r.record.clone();
            }
            self.memo.published.remove(&ClaimRef {
                volume: r.record.volume.clone(),
                alloc: r.record.alloc.clone(),
            });
        }
        found
    }

    /// Forgets what was said and known about claims the server no longer lists: every
    /// claim's, after a whole desired state.
    fn forget_unlisted(&mut self, desired: &DesiredState) {
        let listed: HashSet<(&str, &str)> = desired
            .publish
            .iter()
            .map(|p| (p.volume.volume.as_str(), p.alloc.as_str()))
            .collect();
        let is_listed = |c: &ClaimRef| listed.contains(&(c.volume.as_str(), c.alloc.as_str()));
        self.memo.published.retain(is_listed);
        self.failed.retain(is_listed);
        self.since.retain(|c, _| is_listed(c));
        self.last_errors.retain(|c, _| is_listed(c));
        let unpublish: HashSet<(&str, &str)> = desired
            .unpublish
            .iter()
            .map(|u| (u.volume.as_str(), u.alloc.as_str()))
            .collect();
        self.memo
            .unpublished
            .retain(|c| unpublish.contains(&(c.volume.as_str(), c.alloc.as_str())));
        self.memo
            .unstaged
            .retain(|v| desired.unstage.iter().any(|u| &u.volume == v));
    }

    /// [`Driver::forget_unlisted`] for the claims of one volume, whose entries changed.
    fn forget_unlisted_of(&mut self, desired: &DesiredState, volume: &str) {
        let (publish, unpublish, unstage) = desired.entries_of(volume);
        let listed = |c: &ClaimRef| publish.iter().any(|p| p.alloc == c.alloc);
        forget(&mut self.memo.published, volume, listed);
        forget(&mut self.failed, volume, listed);
        forget_in(&mut self.since, volume, listed);
        forget_in(&mut self.last_errors, volume, listed);
        forget(&mut self.memo.unpublished, volume, |c| {
            unpublish.iter().any(|u| u.alloc == c.alloc)
        });
        if !unstage {
            self.memo.unstaged.remove(volume);
        }
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
        let rx = self.desired_rx.clone();
        let latest = rx.borrow();
        let desired = if self.blank {
            &DesiredState::default()
        } else {
            &**latest
        };
        let ops = if self.fence == FenceState::No {
            let expands = desired
                .expand
                .iter()
                .filter(|e| {
                    !self
                        .expands_started
                        .contains(&(e.volume.clone(), e.attempt, e.capacity_bytes))
                })
                .map(|e| e.not_before_ms);
            desired
                .controller_ops
                .iter()
                .filter(|o| !self.ops_started.contains(&(o.id, o.attempt)))
                .map(|o| o.not_before_ms)
                .chain(expands)
                .map(|at| now + Duration::from_millis(at.saturating_sub(now_ms)))
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

/// The first claim of `volume` in volume order, from which its claims are ranged.
fn first_of(volume: &str) -> ClaimRef {
    ClaimRef {
        volume: volume.to_owned(),
        alloc: String::new(),
    }
}

/// The entries of `volume`'s claims in a map ordered by claim.
fn of_volume<'a, V>(
    map: &'a BTreeMap<ClaimRef, V>,
    volume: &'a str,
) -> impl Iterator<Item = (&'a ClaimRef, &'a V)> {
    map.range(first_of(volume)..)
        .take_while(move |(c, _)| c.volume == volume)
}

/// Removes from `set` the claims of `volume` that `keep` does not keep.
fn forget(set: &mut BTreeSet<ClaimRef>, volume: &str, keep: impl Fn(&ClaimRef) -> bool) {
    let gone: Vec<ClaimRef> = set
        .range(first_of(volume)..)
        .take_while(|c| c.volume == volume)
        .filter(|c| !keep(c))
        .cloned()
        .collect();
    for c in gone {
        set.remove(&c);
    }
}

/// [`forget`] for a map ordered by claim.
fn forget_in<V>(map: &mut BTreeMap<ClaimRef, V>, volume: &str, keep: impl Fn(&ClaimRef) -> bool) {
    let gone: Vec<ClaimRef> = of_volume(map, volume)
        .filter(|(c, _)| !keep(c))
        .map(|(c, _)| c.clone())
        .collect();
    for c in gone {
        map.remove(&c);
    }
}
