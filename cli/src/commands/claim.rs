//! `csivol claim`: record a claim, or only check it with `--dry-run`; `--wait` follows it
//! until it is ready (and releases it when interrupted). `claim renew` extends a lease;
//! `claim list` lists claims across volumes, `claim show` shows one.

use std::time::Duration;

use anyhow::Context;
use csivol_api::{
    Claim, ClaimDryRun, ClaimMode, ClaimRequest, ClaimState, MountRequest, PoolClaimRequest,
    RenewRequest,
};
use csivol_client::{Method, StatusCode};

use crate::args::{ClaimArgs, ClaimCommand, ClaimListArgs, ClaimShowArgs, RenewArgs};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;
use crate::wait::{self, ClaimGoal};

/// What `claim` and `run` ask the server for.
pub struct NewClaim<'a> {
    pub volume: &'a str,
    pub alloc: &'a str,
    pub node: &'a str,
    pub mode: ClaimMode,
    pub ttl: Option<Duration>,
    pub queue: bool,
    pub labels: &'a [(String, String)],
    /// The command follows the claim until it is ready: where only claims being released
    /// stand in the way, it waits in the volume's queue for them instead of being refused.
    pub waits: bool,
    /// The group the workload writes as (`--gid`, `--group`, `run`'s caller's own).
    pub mount: MountRequest,
    /// Any free member of a pool instead of `volume` (which then names the pool).
    pub pool: Option<PoolAsk<'a>>,
}

/// A claim of any free member of a pool, the warmest for the job's cache key.
#[derive(Clone, Copy, Debug)]
pub struct PoolAsk<'a> {
    pub cache_key: Option<&'a str>,
    pub restore_keys: &'a [String],
}

impl NewClaim<'_> {
    pub(super) fn request(&self, dry_run: bool) -> ClaimRequest {
        ClaimRequest {
            alloc: self.alloc.to_owned(),
            node: self.node.to_owned(),
            mode: self.mode,
            dry_run,
            ttl_ms: self.ttl.map(|t| t.as_millis() as u64),
            queue: self.queue,
            labels: self.labels.iter().cloned().collect(),
            mount: self.mount.clone(),
        }
    }

    fn failed(&self) -> String {
        let what = match self.pool {
            Some(_) => format!("a member of pool `{}`", self.volume),
            None => format!("volume `{}`", self.volume),
        };
        format!(
            "failed to claim {what} for alloc `{}` on node `{}`",
            self.alloc, self.node
        )
    }

    /// Where the claim is posted, and its body.
    fn post(&self) -> (String, serde_json::Value) {
        let claim = self.request(false);
        match self.pool {
            None => (
                format!("/v1/volumes/{}/claims", self.volume),
                serde_json::to_value(claim).expect("a claim serialises"),
            ),
            Some(p) => (
                format!("/v1/pools/{}/claims", self.volume),
                serde_json::to_value(PoolClaimRequest {
                    claim,
                    cache_key: p.cache_key.map(str::to_owned),
                    restore_keys: p.restore_keys.to_vec(),
                })
                .expect("a pool claim serialises"),
            ),
        }
    }

    /// Records the claim; says whether it is new or already held. With `hold`, the server
    /// holds its answer until the claim changes again, for at most that long (`?wait=`).
    pub async fn record(&self, ctx: &Ctx, hold: Option<Duration>) -> anyhow::Result<Answer<Claim>> {
        let (path, req) = self.post();
        let client = if self.waits {
            ctx.client.waiting_for_release()
        } else {
            ctx.client.clone()
        };
        let a: Answer<Claim> = match hold {
            None => client.call(Method::POST, &path, Some(&req)).await,
            Some(h) => {
                let path = format!("{path}?wait={}ms", h.as_millis());
                client
                    .call_running(Method::POST, &path, Some(&req), h)
                    .await
            }
        }
        .with_context(|| self.failed())?;
        let c = &a.body;
        if let Some(p) = c.pool.as_ref().filter(|_| !c.volume.is_empty()) {
            ctx.out
                .note(format!("pool {}: member {} ({})", p.pool, c.volume, p.why));
        }
        if let Some(p) = c.pool.as_ref().filter(|_| c.volume.is_empty()) {
            // No member free: the claim waits in the pool's line.
            let already = if a.status == StatusCode::CREATED {
                ""
            } else {
                " already"
            };
            ctx.out.note(format!(
                "alloc {} on node {}{already} waits in pool {}'s line ({}): number {}",
                c.alloc,
                c.node,
                p.pool,
                self.mode,
                c.queue_position.unwrap_or(0)
            ));
        } else if a.status == StatusCode::CREATED && hold.is_some() {
            // Where a held claim stands when its answer came depends on timing; the wait's
            // progress says it next.
            ctx.out.note(format!(
                "claimed volume {} for alloc {} on node {} ({})",
                c.volume, c.alloc, c.node, self.mode
            ));
        } else if a.status == StatusCode::CREATED {
            let state = if c.state == ClaimState::Queued {
                wait::describe_claim(c)
            } else {
                c.state.to_string()
            };
            ctx.out.note(format!(
                "claimed volume {} for alloc {} on node {} ({}): {state}",
                c.volume, c.alloc, c.node, self.mode
            ));
        } else {
            ctx.out.note(format!(
                "alloc {} already holds this claim on volume {} ({})",
                c.alloc, c.volume, c.state
            ));
        }
        Ok(a)
    }
}

/// Starts releasing a claim (idempotent); used when a wait is given up.
pub async fn release(ctx: &Ctx, volume: &str, alloc: &str) -> anyhow::Result<()> {
    release_after(ctx, volume, alloc, false).await
}

/// Releases the alloc's claim from `pool`: it leaves the pool's line if it still waits
/// there (`None`), else its member's claim starts its release (that claim).
pub async fn release_from_pool(
    ctx: &Ctx,
    pool: &str,
    alloc: &str,
    succeeded: bool,
) -> anyhow::Result<Option<Claim>> {
    let mut path = format!("/v1/pools/{pool}/claims/{alloc}");
    if succeeded {
        path.push_str("?succeeded=true");
    }
    match ctx
        .client
        .call::<(), Option<Claim>>(Method::DELETE, &path, None)
        .await
    {
        Ok(a) => Ok(a.body),
        Err(e) if crate::failure::classify(&e).0 == Exit::NotFound => Ok(None),
        Err(e) => Err(e.context(format!(
            "failed to release the claim of alloc `{alloc}` from pool `{pool}`"
        ))),
    }
}

/// Starts releasing a claim (idempotent), saying whether its job `succeeded`: a claim made
/// from a pool then records its cache key as the member's.
pub async fn release_after(
    ctx: &Ctx,
    volume: &str,
    alloc: &str,
    succeeded: bool,
) -> anyhow::Result<()> {
    let mut path = format!("/v1/volumes/{volume}/claims/{alloc}");
    if succeeded {
        path.push_str("?succeeded=true");
    }
    match ctx
        .client
        .call::<(), Claim>(Method::DELETE, &path, None)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if crate::failure::classify(&e).0 == Exit::NotFound => Ok(()),
        Err(e) => Err(e.context(format!(
            "failed to release the claim of alloc `{alloc}` on volume `{volume}`"
        ))),
    }
}

pub async fn run(ctx: &Ctx, args: ClaimArgs) -> anyhow::Result<Exit> {
    match args.command {
        Some(ClaimCommand::Renew(r)) => return renew(ctx, r).await,
        Some(ClaimCommand::List(l)) => return list(ctx, l).await,
        Some(ClaimCommand::Show(s)) => return show(ctx, s).await,
        None => {}
    }
    let (Some(node), Some(alloc)) = (&args.node, &args.alloc) else {
        unreachable!("clap requires --node and --alloc without a subcommand");
    };
    let volume = match (&args.volume, &args.fresh, &args.pool) {
        (Some(v), _, _) => v,
        (None, Some(f), _) => &f.name,
        (None, None, Some(p)) => p,
        (None, None, None) => unreachable!("clap requires VOLUME, --fresh or --pool"),
    };
    let claim = NewClaim {
        volume,
        alloc,
        node,
        mode: if args.read_only {
            ClaimMode::Read
        } else {
            ClaimMode::Write
        },
        ttl: args.ttl,
        queue: args.queue,
        labels: &args.labels,
        waits: args.wait.wait,
        mount: args.mount.for_claim()?,
        pool: args.pool.as_ref().map(|_| PoolAsk {
            cache_key: args.cache_key.as_deref(),
            restore_keys: &args.restore_keys,
        }),
    };
    if let Some(f) = &args.fresh {
        return super::fresh::claim(ctx, &args, f, &claim).await;
    }
    if args.dry_run {
        let path = format!("/v1/volumes/{volume}/claims");
        let a: Answer<ClaimDryRun> = ctx
            .client
            .call(Method::POST, &path, Some(&claim.request(true)))
            .await
            .with_context(|| claim.failed())?;
        return dry_run(ctx, &claim, &a.body);
    }
    let deadline = wait::Deadline::after(args.wait.timeout);
    // Off a terminal, the server holds the answer until the claim moves on: a CI job's
    // claim takes one request less. On a terminal every step shows as it happens.
    let hold = (args.wait.wait && !ctx.out.live_progress())
        .then(|| args.wait.timeout.min(crate::client::MAX_HOLD));
    let a = match hold {
        None => claim.record(ctx, None).await?,
        Some(_) => tokio::select! {
            a = claim.record(ctx, hold) => a?,
            signal = crate::signals::terminated() => {
                if args.pool.is_some() {
                    // Recorded or not (the answer never came), in the pool's line or on a
                    // member, the claim is released through its pool, as `run` does.
                    release_from_pool(ctx, volume, alloc, false).await?;
                    ctx.out.note(format!(
                        "interrupted ({}): released the claim of alloc {alloc} from pool {volume}",
                        signal.name()
                    ));
                    return Ok(Exit::Signal(signal.number()));
                }
                return interrupted(ctx, volume, alloc, signal).await;
            }
        },
    };
    let cursor = a.cursor(a.body.index);
    // From here on the volume is the claim's own (a pool's member, with --pool; none yet
    // while the claim waits in the pool's line).
    let member = a.body.volume.clone();
    let volume = &member;
    let mut result = a.body;
    if args.wait.wait {
        let waited = tokio::select! {
            w = wait::claim_until(ctx, result, cursor, ClaimGoal::Ready, deadline) => w?,
            signal = crate::signals::terminated() => {
                if let Some(pool) = args.pool.as_deref().filter(|_| volume.is_empty()) {
                    release_from_pool(ctx, pool, alloc, false).await?;
                    ctx.out.note(format!(
                        "interrupted ({}): released the claim of alloc {alloc} from pool {pool}",
                        signal.name()
                    ));
                    return Ok(Exit::Signal(signal.number()));
                }
                return interrupted(ctx, volume, alloc, signal).await;
            }
        };
        result = match waited {
            Ok(c) => c.expect("a ready claim"),
            Err(timed_out) if args.release_on_timeout => {
                match args
                    .pool
                    .as_deref()
                    .filter(|_| timed_out.claim.volume.is_empty())
                {
                    Some(pool) => drop(release_from_pool(ctx, pool, alloc, false).await?),
                    None => release(ctx, &timed_out.claim.volume, alloc).await?,
                }
                let look = match timed_out.in_line() {
                    Some(_) => timed_out.look(),
                    None => format!("`csivol status {volume}` shows what holds the volume up"),
                };
                return Err(timed_out
                    .released(
                        "released the claim (--release-on-timeout)",
                        format!("claim again with a longer --timeout; {look}"),
                    )
                    .into());
            }
            Err(timed_out) => return Err(timed_out.kept().into()),
        };
    }
    if ctx.out.json_mode() {
        ctx.out.json(&result)?;
    } else {
        render::claim(&ctx.out, &result)?;
    }
    Ok(Exit::Ok)
}

/// A wait stopped by `signal`: the claim is released (it may be recorded even when its
/// answer never came), and the exit says which signal.
async fn interrupted(
    ctx: &Ctx,
    volume: &str,
    alloc: &str,
    signal: crate::signals::Stop,
) -> anyhow::Result<Exit> {
    release(ctx, volume, alloc).await?;
    ctx.out.note(format!(
        "interrupted ({}): released the claim of alloc {alloc} on volume {volume}",
        signal.name()
    ));
    Ok(Exit::Signal(signal.number()))
}

/// The answer of a dry run: exit 0 when the claim would be accepted, else the exit code of
/// the error the real claim would get.
fn dry_run(ctx: &Ctx, claim: &NewClaim<'_>, d: &ClaimDryRun) -> anyhow::Result<Exit> {
    if ctx.out.json_mode() {
        ctx.out.json(d)?;
    } else if d.accepted {
        let already = match d.state {
            Some(s) if d.existing => format!("; it already holds this claim ({s})"),
            Some(s) => format!("; it would start {s}"),
            None => String::new(),
        };
        ctx.out.line(format!(
            "accepted: alloc {} may claim volume {} on node {} ({}){already}",
            claim.alloc, claim.volume, claim.node, claim.mode
        ))?;
    } else if let Some(e) = &d.error {
        ctx.out.one_line(format!("refused: {}", e.message))?;
        if let Some(h) = &e.hint {
            ctx.out.note(format!("hint: {h}"));
        }
    }
    Ok(match (&d.error, d.accepted) {
        (_, true) => Exit::Ok,
        (Some(e), false) => Exit::from_api(e.code),
        (None, false) => Exit::Error,
    })
}

async fn renew(ctx: &Ctx, args: RenewArgs) -> anyhow::Result<Exit> {
    let path = format!("/v1/volumes/{}/claims/{}/renew", args.volume, args.alloc);
    let req = RenewRequest {
        ttl_ms: args.ttl.map(|t| t.as_millis() as u64),
    };
    let a: Answer<Claim> = ctx
        .client
        .call(Method::POST, &path, Some(&req))
        .await
        .with_context(|| {
            format!(
                "failed to renew the claim of alloc `{}` on volume `{}`",
                args.alloc, args.volume
            )
        })?;
    let c = a.body;
    ctx.out.note(format!(
        "renewed the claim of alloc {} on volume {}: its lease runs until {}",
        c.alloc,
        c.volume,
        c.expires_at.as_deref().unwrap_or("-")
    ));
    if ctx.out.json_mode() {
        ctx.out.json(&c)?;
    } else {
        render::claim(&ctx.out, &c)?;
    }
    Ok(Exit::Ok)
}

async fn list(ctx: &Ctx, args: ClaimListArgs) -> anyhow::Result<Exit> {
    let claims: Vec<Claim> = ctx
        .client
        .get(&list_path(&args))
        .await
        .context("failed to list claims")?;
    if ctx.out.json_mode() {
        ctx.out.json(&claims)?;
    } else {
        render::claims(&ctx.out, &claims)?;
    }
    Ok(Exit::Ok)
}

async fn show(ctx: &Ctx, args: ClaimShowArgs) -> anyhow::Result<Exit> {
    // The server's refusal names a missing alloc, the closest of the volume's allocs and
    // where to list them.
    let path = format!("/v1/volumes/{}/claims/{}", args.volume, args.alloc);
    let c: Claim = ctx.client.get(&path).await.with_context(|| {
        format!(
            "failed to read the claim of alloc `{}` on volume `{}`",
            args.alloc, args.volume
        )
    })?;
    if ctx.out.json_mode() {
        ctx.out.json(&c)?;
    } else {
        render::claim(&ctx.out, &c)?;
    }
    Ok(Exit::Ok)
}

/// `/v1/claims` with the filters as an encoded query.
fn list_path(args: &ClaimListArgs) -> String {
    let mut url = csivol_client::Url::parse("http://csivol/v1/claims").expect("a valid URL");
    {
        let mut q = url.query_pairs_mut();
        if let Some(v) = &args.volume {
            q.append_pair("volume", v);
        }
        if let Some(n) = &args.node {
            q.append_pair("node", n);
        }
        if let Some(s) = args.state {
            q.append_pair("state", s.as_str());
        }
        if let Some(d) = args.older_than {
            q.append_pair("older_than_ms", &d.as_millis().to_string());
        }
        for (k, v) in &args.labels {
            q.append_pair("label", &format!("{k}={v}"));
        }
    }
    match url.query() {
        Some(q) if !q.is_empty() => format!("/v1/claims?{q}"),
        _ => "/v1/claims".to_owned(),
    }
}
