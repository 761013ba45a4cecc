//! Recovery at start: every record of `agent.db` checked against the mount table before the
//! agent registers (the repairs are `verify`'s); what was in flight finished or undone.

use std::collections::HashSet;
use std::path::PathBuf;

use csivol_rules::agent::verify;
use tokio::sync::watch;

use crate::mounts::{self};

use super::Shared;
use super::steps::{StepError, unpublish, unstage};

/// How many times recovery tries to undo one in-flight step before leaving it to the loop.
const RECOVERY_ATTEMPTS: u32 = 5;

/// Finishes or undoes what was in flight when the agent stopped, before it registers: the
/// records checked against one snapshot of the mount table (`verify::decide`), then the
/// repairs carried out. What cannot be undone now stays recorded as uncertain; the loop retries it.
/// A stop asked meanwhile (`stop` true) is taken between steps, never inside one: `false`
/// then, with every step taken recorded, and the rest left to the next start.
pub(super) async fn recover(shared: &Shared, rebooted: bool, stop: &watch::Receiver<bool>) -> bool {
    let stopping = || {
        let asked = *stop.borrow();
        if asked {
            tracing::info!(
                "recovery: asked to stop; every step taken is recorded in agent.db, and the next start finishes the rest"
            );
        }
        asked
    };
    let store = &shared.store;
    if rebooted {
        tracing::info!("the machine rebooted since the last run: undoing every recorded mount");
    }
    let checker = shared
        .checker()
        .inspect_err(|e| tracing::warn!("recovery: {e}; treating every record as unverified"))
        .ok();
    let repairs = verify::decide(
        &shared.judge(checker.as_ref()),
        &verify::Input {
            when: verify::When::Start { rebooted },
            stagings: &store.stagings(),
            publications: &store.publications(),
            wanted: None,
        },
    );
    for s in &repairs.observed_stagings {
        tracing::info!(
            volume = s.volume,
            path = %s.path.display(),
            "recovery: recording what the plugin made at the staging path, recorded by an older agent"
        );
        if let Err(e) = store.put_staging(s, None).await {
            tracing::error!(volume = s.volume, "recovery: {e:#}");
        }
    }
    for p in &repairs.observed_publications {
        if let Err(e) = store.put_publication(p, None).await {
            tracing::error!(volume = p.volume, alloc = p.alloc, "recovery: {e:#}");
        }
    }
    for (s, why) in &repairs.restage {
        tracing::warn!(
            volume = s.volume,
            path = %s.path.display(),
            "recovery: {why}; it will be staged again before any publish"
        );
        if let Err(e) = store.put_staging(s, Some(why.clone())).await {
            tracing::error!(volume = s.volume, "recovery: {e:#}");
        }
    }
    for r in &repairs.republish {
        let p = &r.record;
        tracing::warn!(
            volume = p.volume,
            alloc = p.alloc,
            target = %p.target.display(),
            "recovery: {}; it will be published again while its claim is wanted",
            r.why
        );
        if let Err(e) = store.put_publication(p, Some(r.why.clone())).await {
            tracing::error!(volume = p.volume, alloc = p.alloc, "recovery: {e:#}");
        }
    }
    for p in &repairs.take_down {
        if stopping() {
            return false;
        }
        tracing::info!(
            volume = p.volume,
            alloc = p.alloc,
            target = %p.target.display(),
            state = p.state.as_str(),
            "recovery: taking down a publication that may be incomplete"
        );
        retry_recovery(shared, "unpublish", stop, || unpublish(shared, p)).await;
    }
    for s in &repairs.unstage {
        if stopping() {
            return false;
        }
        if store.staging_in_use(&s.path) {
            // A take-down above failed: the loop retries it, then unstages.
            continue;
        }
        tracing::info!(
            volume = s.volume,
            path = %s.path.display(),
            state = s.state.as_str(),
            "recovery: unstaging a staging that may be incomplete"
        );
        retry_recovery(shared, "unstage", stop, || unstage(shared, s)).await;
    }
    warn_unknown_mounts(shared);
    !*stop.borrow()
}

/// Tries `step` a few times; a stop asked meanwhile ends the retries (the step stays
/// recorded as uncertain for the next start).
async fn retry_recovery<F, Fut>(
    shared: &Shared,
    what: &str,
    stop: &watch::Receiver<bool>,
    mut step: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), StepError>>,
{
    for attempt in 1..=RECOVERY_ATTEMPTS {
        match step().await {
            Ok(()) => return,
            Err(e) if attempt == RECOVERY_ATTEMPTS || *stop.borrow() => {
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
