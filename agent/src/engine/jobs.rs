//! Volume workers (one job per volume at a time), volume-condition checks and controller
//! operations, each reporting what happened.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use csivol_api::domain::ErrorClass;
use csivol_api::{
    ClaimRef, ControllerOp, ControllerOpKind, CreatedFor, DesiredExpand, PluginError, Report,
    UsageSample,
};
use csivol_rules::agent::job::Job;
use csivol_rules::agent::records::{PublicationRecord, PublishState, StageState};

use crate::plugin::NodePlugin;
use crate::store::now_ms;

use super::Shared;
use super::steps::{StepError, publish, stage, unpublish, unstage, vanished_staging};

/// What a volume worker tells the loop when it is done.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    pub(super) volume: String,
    pub(super) memo_published: Vec<String>,
    pub(super) memo_unpublished: Vec<String>,
    pub(super) memo_unstaged: bool,
    /// Claims now ready.
    pub(super) ready: Vec<String>,
    /// Claims failed for good.
    pub(super) failed: Vec<String>,
    /// The last error of claims still being tried.
    pub(super) errors: Vec<(String, String)>,
    /// When to run the volume again after an error.
    pub(super) retry_at: Option<Instant>,
}

/// What the loop hands a volume worker along with the job.
#[derive(Debug)]
pub(super) struct JobContext {
    pub(super) attempt: u32,
    /// Each pending claim's readiness deadline.
    pub(super) deadlines: HashMap<String, Instant>,
    pub(super) last_errors: HashMap<String, String>,
}

/// Runs one volume's job, step by step; stops at the first error.
pub(super) async fn run_job(shared: Arc<Shared>, job: Job, ctx: JobContext) -> Outcome {
    let lock = shared.volume_lock(&job.volume);
    let _calls = lock.lock().await;
    let mut run = Run {
        shared: &shared,
        job: &job,
        ctx: &ctx,
        vol: &job.volume,
        out: Outcome {
            volume: job.volume.clone(),
            ..Outcome::default()
        },
    };
    run.refuse();
    // Each phase stops the job at its first error, its outcome saying when to come back.
    let _: Result<(), Stopped> = async {
        run.keep_what_the_node_shows().await?;
        run.take_down().await?;
        run.bring_up().await
    }
    .await;
    drop(_calls);
    if !run.out.ready.is_empty() {
        // Off the claim's way: the claims were reported ready already.
        let (volume, allocs) = (run.out.volume.clone(), run.out.ready.clone());
        tokio::spawn(check_published(Arc::clone(&shared), volume, allocs));
    }
    run.out
}

/// One run of a volume's job: what it works with, and what it found so far.
struct Run<'a> {
    shared: &'a Shared,
    job: &'a Job,
    ctx: &'a JobContext,
    vol: &'a str,
    out: Outcome,
}

/// The job stopped at a step (failed, or no longer wanted); [`Run::out`] says the rest.
struct Stopped;

impl Run<'_> {
    fn claim_error(&self, alloc: &str, error: PluginError) -> Report {
        Report::ClaimError {
            volume: self.vol.to_owned(),
            alloc: alloc.to_owned(),
            error,
        }
    }

    /// A retryable error: reports when the next try comes, for each claim concerned.
    fn retry(&mut self, allocs: &[&str], e: &StepError) -> Stopped {
        let mut delay = self.shared.cfg.retry.delay(self.ctx.attempt + 1);
        let now = Instant::now();
        if let Some(first) = allocs
            .iter()
            .filter_map(|a| self.ctx.deadlines.get(*a))
            .min()
        {
            // Come back at the deadline at the latest, to fail the claim on time.
            delay = delay.min(first.saturating_duration_since(now));
        }
        let at_ms = now_ms() + delay.as_millis() as u64;
        for a in allocs {
            self.shared
                .report(self.claim_error(a, e.to_plugin_error(false, Some(at_ms))));
            self.out.errors.push(((*a).to_owned(), e.to_string()));
        }
        self.out.retry_at = Some(now + delay);
        Stopped
    }

    /// A final error: the claims concerned fail.
    fn fail(&mut self, allocs: &[&str], e: &StepError) -> Stopped {
        for a in allocs {
            tracing::warn!(volume = self.vol, alloc = a, "claim failed: {e}");
            self.shared
                .report(self.claim_error(a, e.to_plugin_error(true, None)));
            self.out.failed.push((*a).to_owned());
        }
        Stopped
    }

    /// Refuses the claims the plan found invalid, and fails those past their deadline.
    fn refuse(&mut self) {
        let (vol, job) = (self.vol, self.job);
        for (alloc, message) in &job.invalid {
            tracing::warn!(volume = vol, alloc, "refusing claim: {message}");
            let error = PluginError {
                code: "INVALID_ARGUMENT".into(),
                message: message.clone(),
                is_final: true,
                next_retry_at_ms: None,
            };
            self.shared.report(self.claim_error(alloc, error));
            self.out.failed.push(alloc.clone());
        }
        let timeout = self.shared.cfg.volume_ready_timeout;
        for alloc in &job.timed_out {
            let mut message = format!(
                "volume `{vol}` was not ready within {}",
                humantime::format_duration(timeout)
            );
            if let Some(last) = self.ctx.last_errors.get(alloc) {
                message.push_str(&format!("; last error: {last}"));
            }
            tracing::warn!(volume = vol, alloc, "claim failed: {message}");
            let error = PluginError {
                code: "TIMEOUT".into(),
                message,
                is_final: true,
                next_retry_at_ms: None,
            };
            self.shared.report(self.claim_error(alloc, error));
            self.out.failed.push(alloc.clone());
        }
    }

    /// Records what the node's mounts showed (stagings and publications the records
    /// lacked), and what drifted and is to be staged or published again.
    async fn keep_what_the_node_shows(&mut self) -> Result<(), Stopped> {
        let (shared, vol) = (self.shared, self.vol);
        let v = &self.job.verified;
        for s in &v.observed_stagings {
            if let Err(e) = shared.store.put_staging(s, None).await {
                return Err(self.retry(&[], &e.into()));
            }
        }
        for p in &v.observed_publications {
            if let Err(e) = shared.store.put_publication(p, None).await {
                return Err(self.retry(&[&p.alloc], &e.into()));
            }
        }
        for (rec, why) in &v.restage {
            tracing::warn!(volume = vol, path = %rec.path.display(), "drift: {why}; staging it again");
            if let Err(e) = shared.store.put_staging(rec, Some(why.clone())).await {
                return Err(self.retry(&[], &e.into()));
            }
        }
        for r in &v.republish {
            let rec = &r.record;
            tracing::warn!(volume = vol, alloc = rec.alloc, target = %rec.target.display(), "drift: {}; publishing it again", r.why);
            if let Err(e) = shared.store.put_publication(rec, Some(r.why.clone())).await {
                return Err(self.retry(&[&rec.alloc], &e.into()));
            }
            if r.report {
                shared.report(Report::Drift {
                    volume: vol.to_owned(),
                    alloc: rec.alloc.clone(),
                    reason: r.why.clone(),
                });
            }
        }
        Ok(())
    }

    /// Unpublishes what is no longer wanted, then unstages, reporting each.
    async fn take_down(&mut self) -> Result<(), Stopped> {
        let (shared, job, vol) = (self.shared, self.job, self.vol);
        for t in &job.unpublish {
            let r = &t.record;
            match unpublish(shared, r).await {
                Ok(()) => {
                    tracing::info!(volume = vol, alloc = r.alloc, target = %r.target.display(), "unpublished");
                    if let Some(why) = &job.taken_down_because {
                        shared.report(Report::Drift {
                            volume: vol.to_owned(),
                            alloc: r.alloc.clone(),
                            reason: why.clone(),
                        });
                    }
                    if t.report {
                        shared.report(Report::Unpublished {
                            volume: vol.to_owned(),
                            alloc: r.alloc.clone(),
                        });
                        if job.listed_unpublish.contains(&r.alloc) {
                            self.out.memo_unpublished.push(r.alloc.clone());
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(volume = vol, alloc = r.alloc, "failed to unpublish: {e}");
                    return Err(self.retry(&[&r.alloc], &e));
                }
            }
        }
        for alloc in &job.report_unpublished {
            shared.report(Report::Unpublished {
                volume: vol.to_owned(),
                alloc: alloc.clone(),
            });
            self.out.memo_unpublished.push(alloc.clone());
        }
        if let Some(s) = &job.unstage {
            match unstage(shared, s).await {
                Ok(()) => tracing::info!(volume = vol, path = %s.path.display(), "unstaged"),
                Err(e) => {
                    tracing::warn!(volume = vol, path = %s.path.display(), "failed to unstage: {e}");
                    let stopped = self.retry(&[], &e);
                    // Operators see it on the volume's attachment to this node.
                    let at_ms = self.out.retry_at.map(|t| {
                        now_ms() + t.saturating_duration_since(Instant::now()).as_millis() as u64
                    });
                    shared.report(Report::VolumeError {
                        volume: vol.to_owned(),
                        error: e.to_plugin_error(false, at_ms),
                    });
                    return Err(stopped);
                }
            }
        }
        if job.report_unstaged {
            shared.report(Report::Unstaged {
                volume: vol.to_owned(),
            });
            self.out.memo_unstaged = job.listed_unstage;
        }
        Ok(())
    }

    /// Stages (again, where a recorded staging vanished) and publishes each claim wanted
    /// here, waiting for each target to be ready, reporting each.
    async fn bring_up(&mut self) -> Result<(), Stopped> {
        let (shared, job, vol) = (self.shared, self.job, self.vol);
        let pending: Vec<&str> = job
            .publish
            .iter()
            .map(|p| p.desired.alloc.as_str())
            .collect();
        // Before publishing, a recorded staging is checked: one that vanished since the last
        // resync is staged again (NodeStageVolume is idempotent) rather than published from.
        let stage_step = match &job.stage {
            Some(step) => Some(step.clone()),
            None => match vanished_staging(shared, job) {
                Ok(step) => step,
                Err(e) => return Err(self.retry(&pending, &e)),
            },
        };
        if let Some(step) = &stage_step {
            match stage(shared, step).await {
                Ok(()) => tracing::info!(volume = vol, path = %step.path.display(), "staged"),
                Err(e) if e.is_final() => return Err(self.fail(&pending, &e)),
                Err(e) => {
                    tracing::info!(volume = vol, "failed to stage, will retry: {e}");
                    return Err(self.retry(&pending, &e));
                }
            }
        }
        let timeout = shared.cfg.volume_ready_timeout;
        for step in &job.publish {
            let alloc = step.desired.alloc.as_str();
            let deadline = self
                .ctx
                .deadlines
                .get(alloc)
                .copied()
                .unwrap_or_else(|| Instant::now() + timeout);
            match publish(shared, step, deadline).await {
                Err(StepError::Interrupted) => {
                    tracing::info!(
                        volume = vol,
                        alloc,
                        "stopped waiting for the target: the claim is no longer wanted"
                    );
                    return Err(Stopped);
                }
                Ok(()) => {
                    tracing::info!(volume = vol, alloc, target = %step.target.display(), "published and ready");
                    // A new mount: the server forgets the condition reported for the old one, so
                    // the next check reports whatever the plugin says of this one.
                    shared
                        .conditions
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&ClaimRef {
                            volume: vol.to_owned(),
                            alloc: alloc.to_owned(),
                        });
                    shared.report(Report::Published {
                        volume: vol.to_owned(),
                        alloc: alloc.to_owned(),
                        target_path: step.target.display().to_string(),
                        observed: shared.shape(vol, alloc),
                        ownership: shared.ownership_change(vol, alloc).await,
                    });
                    self.out.memo_published.push(alloc.to_owned());
                    self.out.ready.push(alloc.to_owned());
                }
                Err(e) if e.is_final() => return Err(self.fail(&[alloc], &e)),
                Err(e) => {
                    tracing::info!(volume = vol, alloc, "failed to publish, will retry: {e}");
                    return Err(self.retry(&[alloc], &e));
                }
            }
        }
        for (alloc, target) in &job.report_published {
            shared.report(Report::Published {
                volume: vol.to_owned(),
                alloc: alloc.clone(),
                target_path: target.display().to_string(),
                observed: shared.shape(vol, alloc),
                ownership: shared.ownership_change(vol, alloc).await,
            });
            self.out.memo_published.push(alloc.clone());
        }
        Ok(())
    }
}

/// Asks the node plugins with GET_VOLUME_STATS how each published volume is, once per
/// volume: its condition, reported when it changed (and once after a start, so that the
/// server forgets an abnormal condition that passed while the agent was away), where the
/// plugin reports VOLUME_CONDITION; its usage, kept for the node channel, unless
/// `volume_stats` is off. A claim of a plugin without GET_VOLUME_STATS is sampled as one
/// that does not report usage. Runs beside the volume workers, never before a claim is
/// ready.
pub(super) async fn check_volumes(shared: Arc<Shared>) {
    let published: Vec<PublicationRecord> = shared
        .store
        .publications()
        .into_iter()
        .filter(|p| p.state == PublishState::Published)
        .collect();
    let mut seen = HashSet::new();
    for r in &published {
        let Ok(plugin) = shared.node_plugin(&r.plugin) else {
            continue;
        };
        let claim = ClaimRef {
            volume: r.volume.clone(),
            alloc: r.alloc.clone(),
        };
        if plugin.reports_condition() {
            seen.insert(claim.clone());
        }
        sample_volume(&shared, plugin, r, claim, false).await;
    }
    shared
        .conditions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|c, _| seen.contains(c));
    let published: HashSet<_> = published.into_iter().map(|r| (r.volume, r.alloc)).collect();
    shared.outbox.retain(&published);
    shared.outbox.ready();
}

/// Samples the claims of `volume` just published (`allocs`), once their worker let go of
/// the volume: their usage reaches the server without waiting for the next resync, and
/// the claims were reported ready before.
pub(super) async fn check_published(shared: Arc<Shared>, volume: String, allocs: Vec<String>) {
    let records = shared.store.publications_of(&volume);
    for r in records
        .iter()
        .filter(|r| allocs.contains(&r.alloc))
        .filter(|r| r.state == PublishState::Published)
    {
        let Ok(plugin) = shared.node_plugin(&r.plugin) else {
            continue;
        };
        let claim = ClaimRef {
            volume: r.volume.clone(),
            alloc: r.alloc.clone(),
        };
        sample_volume(&shared, plugin, r, claim, true).await;
    }
    shared.outbox.ready();
}

/// One published claim's NodeGetVolumeStats, where it is asked for: its condition
/// reported when it changed, its usage kept for the node channel. `wait`: wait for the
/// volume's worker to finish (after a publish) rather than leave the volume to the next
/// check (a resync).
async fn sample_volume(
    shared: &Shared,
    plugin: &NodePlugin,
    r: &PublicationRecord,
    claim: ClaimRef,
    wait: bool,
) {
    let usage = shared.cfg.volume_stats;
    if usage && !plugin.reports_usage() {
        shared.outbox.usage(UsageSample {
            volume: r.volume.clone(),
            alloc: r.alloc.clone(),
            plugin: r.plugin.clone(),
            usage: None,
        });
    }
    if !(plugin.reports_condition() || usage && plugin.reports_usage()) {
        return;
    }
    // Not while the volume's worker makes its calls (spec.md, "Concurrency": one call in
    // flight per volume): a resync leaves this volume to the next check.
    let lock = shared.volume_lock(&r.volume);
    let _calls = if wait {
        lock.lock().await
    } else {
        let Ok(calls) = lock.try_lock() else {
            return;
        };
        calls
    };
    let stats = match plugin
        .volume_stats(&r.external_id, &r.target, r.staging.as_deref())
        .await
    {
        Ok(stats) => stats,
        Err(e) => {
            tracing::debug!(volume = r.volume, alloc = r.alloc, "{e}");
            return;
        }
    };
    if usage {
        shared.outbox.usage(UsageSample {
            volume: r.volume.clone(),
            alloc: r.alloc.clone(),
            plugin: r.plugin.clone(),
            usage: Some(stats.usage),
        });
    }
    let Some((abnormal, message)) = stats.condition.filter(|_| plugin.reports_condition()) else {
        return;
    };
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
            volume: r.volume.clone(),
            alloc: r.alloc.clone(),
            abnormal,
            message,
        });
    }
}

/// Runs one controller operation and reports its result; the server schedules retries.
pub(super) async fn run_op(shared: Arc<Shared>, op: ControllerOp, generation: Option<String>) {
    let mut report = match shared.plugins.controller.get(&op.plugin) {
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
                // What the storage has left changed: its capacity is read again.
                if matches!(report, Report::Created { .. } | Report::Deleted { .. }) {
                    shared.capacity_wake.notify_one();
                }
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
    // A CreateVolume answer says what it was asked for: if it reaches the server after
    // the operation went to another host or finished, the server still knows that it made
    // a volume, and deletes what nothing records.
    if let (Report::Created { made_for, .. }, ControllerOpKind::Create { volume, .. }) =
        (&mut report, &op.kind)
    {
        *made_for = Some(CreatedFor {
            plugin: op.plugin.clone(),
            volume: volume.clone(),
            generation,
        });
    }
    shared.report(report);
}

/// Grows a volume on this node (NodeExpandVolume) after its controller grew it, at a target
/// where it is published (or its staging when none is), and reports the outcome. A volume
/// with nothing on the node any more has nothing to grow: reported done.
pub(super) async fn run_expand(shared: Arc<Shared>, e: DesiredExpand) {
    let failed = |code: &str, message: String, is_final: bool| Report::NodeExpandError {
        volume: e.volume.clone(),
        attempt: e.attempt,
        error: PluginError {
            code: code.into(),
            message,
            is_final,
            next_retry_at_ms: None,
        },
    };
    let report = match shared.node_plugin(&e.plugin) {
        Err(err) => failed("FAILED_PRECONDITION", err.to_string(), true),
        Ok(plugin) if !plugin.capabilities.expand_volume => failed(
            "FAILED_PRECONDITION",
            format!(
                "plugin `{}` on this node does not report the node's EXPAND_VOLUME",
                e.plugin
            ),
            true,
        ),
        Ok(plugin) => {
            let staging = shared
                .store
                .staging(&e.volume)
                .filter(|s| s.state == StageState::Staged)
                .map(|s| s.path);
            let target = shared
                .store
                .publications_of(&e.volume)
                .into_iter()
                .find(|p| p.state == PublishState::Published)
                .map(|p| p.target);
            match target.as_ref().or(staging.as_ref()) {
                None => Report::NodeExpanded {
                    volume: e.volume.clone(),
                    attempt: e.attempt,
                    capacity_bytes: 0,
                },
                Some(path) => match plugin.expand(&e, path, staging.as_deref()).await {
                    Ok(capacity_bytes) => {
                        tracing::info!(volume = e.volume, capacity_bytes, "expanded on the node");
                        Report::NodeExpanded {
                            volume: e.volume.clone(),
                            attempt: e.attempt,
                            capacity_bytes,
                        }
                    }
                    Err(err) => {
                        tracing::warn!(volume = e.volume, "failed to expand on the node: {err}");
                        Report::NodeExpandError {
                            volume: e.volume.clone(),
                            attempt: e.attempt,
                            error: err.to_plugin_error(err.class() != ErrorClass::Retry, None),
                        }
                    }
                },
            }
        }
    };
    shared.report(report);
}
