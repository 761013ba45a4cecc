//! `csivol run`: a CI job's volumes for the length of one command. Claims every volume
//! with a lease, waits until all are ready, runs the command with their target paths in
//! its environment, renews the leases while it runs, forwards the signals a CI runner stops
//! jobs with, then releases every claim. A job killed outright leaves leases that run out:
//! the server then releases its claims.

use std::process::ExitStatus;
use std::time::Duration;

use anyhow::Context;
use csivol_api::{Claim, ClaimMode, RenewRequest};
use csivol_client::Method;
use tokio::process::Command;

use super::claim::{NewClaim, PoolAsk, release_after, release_from_pool};
use crate::args::RunArgs;
use crate::client::{Answer, Cursor};
use crate::ctx::Ctx;
use crate::env;
use crate::failure::{Exit, Failure};
use crate::output::given_duration;
use crate::signals::{Signals, Stop};
use crate::wait::{self, ClaimGoal, Deadline};

pub async fn run(ctx: &Ctx, args: RunArgs) -> anyhow::Result<Exit> {
    let alloc = match &args.alloc {
        Some(a) => a.clone(),
        None => default_alloc(),
    };
    ctx.out.note(format!("alloc: {alloc}"));
    // From here on a signal releases what was claimed instead of killing csivol.
    let mut signals = Signals::new().context("failed to set up signal handlers")?;
    let claims = match claim_all(ctx, &args, &alloc, &mut signals).await {
        Ok(c) => c,
        Err(Aborted::Signal(s, made)) => {
            release_all(ctx, &made, &alloc, &args, None).await?;
            ctx.out
                .note(format!("interrupted ({}): released every claim", s.name()));
            return Ok(Exit::Signal(s.number()));
        }
        Err(Aborted::TimedOut(t, made)) => {
            release_all(ctx, &made, &alloc, &args, None).await?;
            let look = match t.in_line() {
                Some(_) => t.look(),
                None => format!(
                    "`csivol status {}` shows what holds the volume up",
                    t.claim.volume
                ),
            };
            return Err(t
                .released(
                    "released every claim made: the command did not run",
                    format!(
                        "run it again with a longer --timeout{}; {look}",
                        if args.queue {
                            " (it includes the wait in line)"
                        } else {
                            ""
                        }
                    ),
                )
                .into());
        }
        Err(Aborted::Error(e, made)) => {
            release_all(ctx, &made, &alloc, &args, None).await?;
            if !made.is_empty() {
                ctx.out
                    .note("released the claims already made: the job did not run");
            }
            return Err(e);
        }
    };

    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    // The claims are made in this order: the named volumes, a member of each pool, then the
    // per-job volumes; the job knows a pool's member and a per-job volume by the name it
    // gave them.
    let names = args
        .volumes
        .iter()
        .map(|(v, _)| v.as_str())
        .chain(args.pools.iter().map(|(short, _)| short.as_str()))
        .chain(args.fresh.iter().map(|f| f.name.as_str()));
    for (c, name) in claims.iter().zip(names) {
        let path = c.target_path.as_deref().unwrap_or_default();
        cmd.env(path_var(name), path);
        cmd.env(volume_var(name), &c.volume);
        if claims.len() == 1 {
            cmd.env(env::CSIVOL_PATH, path);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            release_all(ctx, &claims, &alloc, &args, None).await?;
            return Err(Failure::usage(format!(
                "failed to start `{}`: {e}; the claims were released",
                args.command[0]
            ))
            .into());
        }
    };
    let pid = child.id();
    let renew_every = (args.ttl / 3).max(Duration::from_secs(1));
    let mut renewals =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    let mut forwarded: Option<Stop> = None;
    let status: ExitStatus = loop {
        tokio::select! {
            status = child.wait() => break status.context("failed to wait for the command")?,
            s = signals.next() => {
                ctx.out.note(format!("{}: passing it on to the command", s.name()));
                forwarded = Some(s);
                if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                    let _ = rustix::process::kill_process(pid, signal_of(s));
                }
            }
            _ = renewals.tick() => renew_all(ctx, &claims, args.ttl).await,
        }
    };
    // A failed job's per-job volumes are kept for inspection when it asked.
    let keep = args.keep_on_failure.filter(|_| !status.success());
    if let Some(keep) = keep {
        let fresh = &claims[args.volumes.len() + args.pools.len()..];
        for c in fresh {
            // When the server would not keep it, the plain release below still ends the
            // claim: a volume not kept is deleted, never left claimed by a finished job.
            if let Err(e) = super::fresh::release_kept(ctx, &c.volume, &alloc, keep).await {
                ctx.out
                    .warn(format!("{e:#}; releasing it without keeping it"));
            }
        }
    }
    // Only a job that succeeded records its cache key as its pool members'.
    let succeeded = status.success() && forwarded.is_none();
    release_all_after(ctx, &claims, &alloc, &args, Some(&mut signals), succeeded).await?;
    Ok(exit_of(status, forwarded))
}

/// Why claiming stopped before the command ran, with the claims already made.
enum Aborted {
    Signal(Stop, Vec<Claim>),
    /// `--timeout` ran out: said once the claims are released.
    TimedOut(wait::ClaimTimedOut, Vec<Claim>),
    Error(anyhow::Error, Vec<Claim>),
}

/// Claims every volume, then waits until all are ready (renewing leases meanwhile: a
/// queue may take longer than a lease).
async fn claim_all(
    ctx: &Ctx,
    args: &RunArgs,
    alloc: &str,
    signals: &mut Signals,
) -> Result<Vec<Claim>, Aborted> {
    let mut made: Vec<(Claim, Cursor)> = Vec::new();
    let mount = args
        .mount
        .for_run()
        .map_err(|e| Aborted::Error(e, Vec::new()))?;
    let ask = PoolAsk {
        cache_key: args.cache_key.as_deref(),
        restore_keys: &args.restore_keys,
    };
    let wanted = args
        .volumes
        .iter()
        .map(|(v, ro)| (v, *ro, None))
        .chain(args.pools.iter().map(|(_, pool)| (pool, false, Some(ask))));
    for (volume, read_only, pool) in wanted {
        let claim = NewClaim {
            volume,
            alloc,
            node: &args.node,
            mode: if read_only {
                ClaimMode::Read
            } else {
                ClaimMode::Write
            },
            ttl: Some(args.ttl),
            queue: args.queue,
            labels: &args.labels,
            // `run` waits for every claim to be ready before the command starts.
            waits: true,
            mount: mount.clone(),
            pool,
        };
        match claim.record(ctx, None).await {
            Ok(a) => {
                if let (Some(gid), Some(why)) = (mount.gid, &a.body.mount.not_applied) {
                    ctx.out.note(format!(
                        "volume {volume} is mounted without group {gid}, the caller's own: {why}"
                    ));
                }
                let cursor = a.cursor(a.body.index);
                made.push((a.body, cursor));
            }
            Err(e) => return Err(Aborted::Error(e, made.into_iter().map(|m| m.0).collect())),
        }
    }
    for fresh in &args.fresh {
        let claim = NewClaim {
            volume: &fresh.name,
            alloc,
            node: &args.node,
            mode: ClaimMode::Write,
            ttl: Some(args.ttl),
            queue: false,
            labels: &args.labels,
            waits: true,
            mount: mount.clone(),
            pool: None,
        };
        match super::fresh::record(ctx, fresh, claim.request(false)).await {
            Ok(a) => {
                let cursor = a.cursor(a.body.index);
                made.push((a.body, cursor));
            }
            Err(e) => return Err(Aborted::Error(e, made.into_iter().map(|m| m.0).collect())),
        }
    }
    let deadline = Deadline::after(args.timeout);
    let mut ready = Vec::new();
    let all: Vec<Claim> = made.iter().map(|m| m.0.clone()).collect();
    let renew_every = (args.ttl / 3).max(Duration::from_secs(1));
    let mut renewals =
        tokio::time::interval_at(tokio::time::Instant::now() + renew_every, renew_every);
    for (claim, cursor) in made {
        let waited = loop {
            tokio::select! {
                w = wait::claim_until(ctx, claim.clone(), cursor.clone(), ClaimGoal::Ready, deadline) => break w,
                s = signals.next() => return Err(Aborted::Signal(s, all)),
                _ = renewals.tick() => renew_all(ctx, &all, args.ttl).await,
            }
        };
        match waited {
            Ok(Ok(c)) => ready.push(c.expect("a ready claim")),
            Ok(Err(t)) => return Err(Aborted::TimedOut(t, all)),
            Err(e) => return Err(Aborted::Error(e, all)),
        }
    }
    Ok(ready)
}

/// Renews every lease; a failure is said and retried at the next tick (the lease is three
/// ticks long).
async fn renew_all(ctx: &Ctx, claims: &[Claim], ttl: Duration) {
    for c in claims {
        // A claim in a pool's line is renewed there (and on its member, once granted).
        let path = format!("{}/renew", wait::claim_path(c));
        let req = RenewRequest {
            ttl_ms: Some(ttl.as_millis() as u64),
        };
        let renewed: anyhow::Result<Answer<Claim>> =
            ctx.client.call(Method::POST, &path, Some(&req)).await;
        if let Err(e) = renewed {
            ctx.out.warn(format!(
                "failed to renew the lease of volume {}: {e:#}; retrying",
                c.volume
            ));
        }
    }
}

/// Releases every claim made of a job that did not run.
async fn release_all(
    ctx: &Ctx,
    claims: &[Claim],
    alloc: &str,
    args: &RunArgs,
    signals: Option<&mut Signals>,
) -> anyhow::Result<()> {
    release_all_after(ctx, claims, alloc, args, signals, false).await
}

/// Releases every claim made, saying whether the job `succeeded`, then (unless
/// `--no-wait-release`) waits until they are gone. A second signal while waiting stops the
/// wait, not the release.
async fn release_all_after(
    ctx: &Ctx,
    claims: &[Claim],
    alloc: &str,
    args: &RunArgs,
    signals: Option<&mut Signals>,
    succeeded: bool,
) -> anyhow::Result<()> {
    let mut releasing = Vec::new();
    for c in claims {
        // A claim still in a pool's line leaves it; one granted since is released.
        if let Some(p) = c.pool.as_ref().filter(|_| c.volume.is_empty()) {
            releasing.extend(release_from_pool(ctx, &p.pool, alloc, false).await?);
            continue;
        }
        // Said only of a claim made from a pool, the one kind that records a key: a server
        // of a release without pools refuses a query it does not know.
        release_after(ctx, &c.volume, alloc, succeeded && c.pool.is_some()).await?;
        releasing.push(c.clone());
    }
    if args.no_wait_release || releasing.is_empty() {
        return Ok(());
    }
    let deadline = Deadline::after(args.timeout);
    let wait_all = async {
        for c in &releasing {
            let path = format!("/v1/volumes/{}/claims/{alloc}", c.volume);
            // Where it stands now: a plain read, asked again while a busy server turns it
            // away, as the wait that follows is.
            let current: Option<Option<Answer<Claim>>> =
                wait::watch(ctx, &path, &Cursor::default(), Duration::ZERO, deadline).await?;
            let Some(current) = current else {
                return Err(Failure::new(
                    Exit::Unreachable,
                    format!(
                        "the server kept turning the wait for the release of volume {} away \
                         (too busy) for {}",
                        c.volume,
                        given_duration(args.timeout)
                    ),
                )
                .hint(format!(
                    "the release was asked for and the server completes it; `csivol status {}` \
                     shows where it stands",
                    c.volume
                ))
                .into());
            };
            if let Some(a) = current {
                let cursor = a.cursor(a.body.index);
                wait::claim(ctx, a.body, cursor, ClaimGoal::Gone, deadline).await?;
            }
        }
        anyhow::Ok(())
    };
    match signals {
        Some(signals) => tokio::select! {
            r = wait_all => r?,
            s = signals.next() => ctx.out.note(format!(
                "{}: not waiting for the release to finish; the server completes it", s.name()
            )),
        },
        None => wait_all.await?,
    }
    ctx.out
        .note(format!("released every claim of alloc {alloc}"));
    Ok(())
}

/// `CSIVOL_PATH_<NAME>`: the volume's name upper-cased, `-` and `.` as `_`.
pub fn path_var(volume: &str) -> String {
    let name: String = volume
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect();
    format!("{}_{name}", env::CSIVOL_PATH)
}

/// `CSIVOL_VOLUME_<NAME>`: the csivol name of the volume the job claims as `NAME` (a pool's
/// member, a per-job volume), named as [`path_var`] names.
pub fn volume_var(name: &str) -> String {
    path_var(name).replacen(env::CSIVOL_PATH, env::CSIVOL_VOLUME, 1)
}

/// An alloc id from the CI job running this (so a retried job step finds its claims), else
/// a random one.
fn default_alloc() -> String {
    for (prefix, vars) in env::CI_JOB_IDS {
        let parts: Vec<String> = vars.iter().filter_map(|v| env::var(v)).collect();
        if parts.len() == vars.len() {
            let id = format!("{prefix}-{}", parts.join("-"));
            let id: String = id
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '-'
                    }
                })
                .take(128)
                .collect();
            return id;
        }
    }
    format!("run-{:016x}", rand::random::<u64>())
}

fn signal_of(s: Stop) -> rustix::process::Signal {
    match s {
        Stop::Int => rustix::process::Signal::INT,
        Stop::Term => rustix::process::Signal::TERM,
        Stop::Hup => rustix::process::Signal::HUP,
    }
}

/// The command's exit status as csivol's: its code, or 128 + the signal that ended it.
fn exit_of(status: ExitStatus, forwarded: Option<Stop>) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Command(code as u8),
        (None, Some(sig)) => Exit::Signal(sig as u8),
        (None, None) => forwarded.map_or(Exit::Error, |s| Exit::Signal(s.number())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_variables_are_named_after_volumes() {
        assert_eq!(path_var("demo-data"), "CSIVOL_PATH_DEMO_DATA");
        assert_eq!(path_var("v1.cache_x"), "CSIVOL_PATH_V1_CACHE_X");
        assert_eq!(volume_var("db-copy"), "CSIVOL_VOLUME_DB_COPY");
    }
}
