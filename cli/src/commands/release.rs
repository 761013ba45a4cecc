//! `csivol release`: release an alloc's claim; `--wait` follows it until it is gone.

use anyhow::Context;
use csivol_api::{Claim, Volume};
use csivol_client::Method;
use serde_json::json;

use crate::args::ReleaseArgs;
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure, classify};
use crate::render;
use crate::wait::{self, ClaimGoal};

pub async fn run(ctx: &Ctx, args: ReleaseArgs) -> anyhow::Result<Exit> {
    let volume = match (&args.volume, &args.pool) {
        (Some(v), _) => v.clone(),
        (None, Some(pool)) => match from_pool(ctx, pool, &args).await? {
            Some(member) => member,
            None => return Ok(Exit::Ok),
        },
        (None, None) => unreachable!("clap requires VOLUME or --pool"),
    };
    let args = ReleaseArgs {
        volume: Some(volume),
        ..args
    };
    let volume = args.volume.as_deref().expect("set above");
    let mut path = format!("/v1/volumes/{volume}/claims/{}", args.alloc);
    if args.succeeded {
        path.push_str("?succeeded=true");
    }
    let failed = || {
        format!(
            "failed to release the claim of alloc `{}` on volume `{}`",
            args.alloc, volume
        )
    };
    let deadline = wait::Deadline::after(args.wait.timeout);
    // Off a terminal, the server holds the answer until the claim is gone (204) or moved
    // on: a CI job's release takes one request. On a terminal every step shows.
    let answer = if args.wait.wait && !ctx.out.live_progress() {
        let hold = args.wait.timeout.min(crate::client::MAX_HOLD);
        let sep = if path.contains('?') { '&' } else { '?' };
        let held = format!("{path}{sep}wait={}ms", hold.as_millis());
        ctx.client
            .call_running::<(), Option<Claim>>(Method::DELETE, &held, None, hold)
            .await
    } else {
        ctx.client
            .call::<(), Option<Claim>>(Method::DELETE, &path, None)
            .await
    };
    let a: Answer<Option<Claim>> = match answer {
        Ok(a) => a,
        Err(e) if args.ignore_missing && classify(&e).0 == Exit::NotFound => {
            // The claim is gone; the volume must still exist (a typo stays an error).
            let _: Volume = ctx
                .client
                .get(&format!("/v1/volumes/{volume}"))
                .await
                .with_context(failed)?;
            ctx.out.done(
                format!(
                    "alloc {} holds no claim on volume {} (already released)",
                    args.alloc, volume
                ),
                json!({"outcome": "already-released", "volume": volume, "alloc": args.alloc}),
            )?;
            return Ok(Exit::Ok);
        }
        Err(e) => return Err(with_ignore_missing(e).context(failed())),
    };
    let released = || {
        ctx.out.done(
            format!(
                "released the claim of alloc {} on volume {}",
                args.alloc, volume
            ),
            json!({"outcome": "released", "volume": volume, "alloc": args.alloc}),
        )
    };
    let cursor = a.cursor(a.body.as_ref().map_or(0, |c| c.index));
    let Some(claim) = a.body else {
        released()?;
        return Ok(Exit::Ok);
    };
    if !args.wait.wait {
        ctx.out.note(format!(
            "releasing the claim of alloc {} on volume {}: node {} unmounts it",
            claim.alloc, claim.volume, claim.node
        ));
        if ctx.out.json_mode() {
            ctx.out.json(&claim)?;
        } else {
            render::claim(&ctx.out, &claim)?;
        }
        return Ok(Exit::Ok);
    }
    wait::claim(ctx, claim, cursor, ClaimGoal::Gone, deadline).await?;
    released()?;
    Ok(Exit::Ok)
}

/// The member the alloc's claim from `pool` holds (`None`: the claim still waited in the
/// pool's line, and has left it).
async fn from_pool(ctx: &Ctx, pool: &str, args: &ReleaseArgs) -> anyhow::Result<Option<String>> {
    let path = format!("/v1/pools/{pool}/claims/{}", args.alloc);
    let failed = || {
        format!(
            "failed to release the claim of alloc `{}` from pool `{pool}`",
            args.alloc
        )
    };
    let c: Claim = match ctx.client.get(&path).await {
        Ok(c) => c,
        Err(e) if args.ignore_missing && classify(&e).0 == Exit::NotFound => {
            ctx.out.done(
                format!(
                    "alloc {} holds no claim from pool {pool} (already released)",
                    args.alloc
                ),
                json!({"outcome": "already-released", "pool": pool, "alloc": args.alloc}),
            )?;
            return Ok(None);
        }
        Err(e) => return Err(e.context(failed())),
    };
    if !c.volume.is_empty() {
        return Ok(Some(c.volume));
    }
    ctx.client
        .call::<(), Option<Claim>>(Method::DELETE, &path, None)
        .await
        .with_context(failed)?;
    ctx.out.done(
        format!("alloc {} left pool {pool}'s line", args.alloc),
        json!({"outcome": "left-the-line", "pool": pool, "alloc": args.alloc}),
    )?;
    Ok(None)
}

/// A claim that is not there may be one released before (a script releasing twice): say
/// how to take that as done.
fn with_ignore_missing(e: anyhow::Error) -> anyhow::Error {
    match e.downcast::<Failure>() {
        Ok(f) if f.exit == Exit::NotFound && f.message.contains("holds no claim") => {
            let hint = match &f.hint {
                Some(h) => format!("{h}; --ignore-missing takes a claim already gone as released"),
                None => "--ignore-missing takes a claim already gone as released".to_owned(),
            };
            f.hint(hint).into()
        }
        Ok(f) => f.into(),
        Err(e) => e,
    }
}
