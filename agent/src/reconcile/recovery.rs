//! Recovery at start: every record of `agent.db` checked against the mount table before the
//! agent registers; what was in flight finished or undone.

use std::collections::HashSet;
use std::path::PathBuf;

use crate::mounts::{self};
use crate::store::{PublishState, StageState};

use super::Shared;
use super::steps::{StepError, unpublish, unstage};

/// How many times recovery tries to undo one in-flight step before leaving it to the loop.
const RECOVERY_ATTEMPTS: u32 = 5;

/// Finishes or undoes what was in flight when the agent stopped, before it registers. The
/// records say only what the agent may have done; the mount table says what is. So every
/// record is checked against it: a staging recorded staged but not mounted from its volume
/// is marked uncertain (to be staged again before any publish, or unstaged when unused);
/// a publication recorded published but not mounted from its volume is marked uncertain
/// (to be published again while wanted, or taken down); a publication the agent was not
/// sure of is taken down (the calls are idempotent). After a reboot nothing is mounted any
/// more, so every record is undone at the plugin. What cannot be undone now stays recorded
/// as uncertain; the loop retries it.
pub(super) async fn recover(shared: &Shared, rebooted: bool) {
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
