//! `csivol claim`: record a claim, or only check it with `--dry-run`; `--wait` follows it
//! until it is ready.

use anyhow::Context;
use csivol_proto::api::{Claim, ClaimDryRun, ClaimMode, ClaimRequest};
use reqwest::{Method, StatusCode};

use super::Ctx;
use crate::args::ClaimArgs;
use crate::client::Answer;
use crate::failure::Exit;
use crate::render;
use crate::wait::{self, ClaimGoal};

pub async fn run(ctx: &Ctx, args: ClaimArgs) -> anyhow::Result<Exit> {
    let mode = if args.read_only {
        ClaimMode::Read
    } else {
        ClaimMode::Write
    };
    let req = ClaimRequest {
        alloc: args.alloc.clone(),
        node: args.node.clone(),
        mode,
        dry_run: args.dry_run,
    };
    let path = format!("/v1/volumes/{}/claims", args.volume);
    let what = || {
        format!(
            "failed to claim volume `{}` for alloc `{}` on node `{}`",
            args.volume, args.alloc, args.node
        )
    };
    if args.dry_run {
        let a: Answer<ClaimDryRun> = ctx
            .client
            .call(Method::POST, &path, Some(&req))
            .await
            .with_context(what)?;
        return dry_run(ctx, &args, mode, &a.body);
    }
    let a: Answer<Claim> = ctx
        .client
        .call(Method::POST, &path, Some(&req))
        .await
        .with_context(what)?;
    let mut claim = a.body;
    if a.status == StatusCode::CREATED {
        ctx.out.note(format!(
            "claimed volume {} for alloc {} on node {} ({mode}): {}",
            claim.volume, claim.alloc, claim.node, claim.state
        ));
    } else {
        ctx.out.note(format!(
            "alloc {} already holds this claim on volume {} ({})",
            claim.alloc, claim.volume, claim.state
        ));
    }
    if args.wait.wait {
        let index = a.index.unwrap_or(claim.index);
        claim = wait::claim(
            ctx,
            claim,
            index,
            ClaimGoal::Ready,
            wait::Deadline::after(args.wait.timeout),
        )
        .await?
        .expect("a ready claim");
    }
    if ctx.out.json_mode() {
        ctx.out.json(&claim)?;
    } else {
        render::claim(&ctx.out, &claim)?;
    }
    Ok(Exit::Ok)
}

/// The answer of a dry run: exit 0 when the claim would be accepted, else the exit code of
/// the error the real claim would get.
fn dry_run(ctx: &Ctx, args: &ClaimArgs, mode: ClaimMode, d: &ClaimDryRun) -> anyhow::Result<Exit> {
    if ctx.out.json_mode() {
        ctx.out.json(d)?;
    } else if d.accepted {
        let already = match d.state {
            Some(s) if d.existing => format!("; it already holds this claim ({s})"),
            Some(s) => format!("; it would start {s}"),
            None => String::new(),
        };
        ctx.out.line(format!(
            "accepted: alloc {} may claim volume {} on node {} ({mode}){already}",
            args.alloc, args.volume, args.node
        ))?;
    } else if let Some(e) = &d.error {
        ctx.out.line(format!("refused: {}", e.message))?;
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
