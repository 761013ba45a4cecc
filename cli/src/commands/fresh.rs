//! Per-job volumes (`--fresh NAME=SOURCE`): asked of the server in one request that makes
//! the volume and its claim, for `claim --fresh` and `run --fresh`. The server names the
//! volume; the job knows it by the name it gave.

use anyhow::Context;
use csivol_api::{Claim, ClaimDryRun, ClaimRequest, FreshClaimRequest, FreshSource};
use csivol_client::{Method, StatusCode};

use super::claim::{NewClaim, release};
use crate::args::{ClaimArgs, Fresh, FreshFrom};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;
use crate::wait::{self, ClaimGoal};

/// The request for `fresh` with `claim`, its spec file read when it names one.
pub fn request(fresh: &Fresh, claim: ClaimRequest) -> anyhow::Result<FreshClaimRequest> {
    let source = match &fresh.source {
        FreshFrom::Snapshot(s) => FreshSource::Snapshot(s.clone()),
        FreshFrom::Volume(v) => FreshSource::Volume(v.clone()),
        // The file's own `name` is a `volume create`'s; the server names a per-job volume.
        FreshFrom::Spec(path) => FreshSource::Spec(Box::new(crate::spec::read_create(path)?.1)),
    };
    Ok(FreshClaimRequest {
        name: fresh.name.clone(),
        source,
        claim,
    })
}

fn failed(fresh: &Fresh, claim: &ClaimRequest) -> String {
    format!(
        "failed to make per-job volume `{}` for alloc `{}` on node `{}`",
        fresh.name, claim.alloc, claim.node
    )
}

/// Makes the volume and its claim; says which volume the job got, or that a retried
/// request found the one it made.
pub async fn record(
    ctx: &Ctx,
    fresh: &Fresh,
    claim: ClaimRequest,
) -> anyhow::Result<Answer<Claim>> {
    let req = request(fresh, claim)?;
    let a: Answer<Claim> = ctx
        .client
        .call(Method::POST, "/v1/fresh-claims", Some(&req))
        .await
        .with_context(|| failed(fresh, &req.claim))?;
    let c = &a.body;
    if a.status == StatusCode::CREATED {
        ctx.out.note(format!(
            "per-job volume {}: volume {} for alloc {} on node {}, being created",
            fresh.name, c.volume, c.alloc, c.node
        ));
    } else {
        ctx.out.note(format!(
            "per-job volume {}: alloc {} already holds volume {} ({})",
            fresh.name, c.alloc, c.volume, c.state
        ));
    }
    Ok(a)
}

/// `csivol claim --fresh NAME=SOURCE`.
pub async fn claim(
    ctx: &Ctx,
    args: &ClaimArgs,
    fresh: &Fresh,
    new: &NewClaim<'_>,
) -> anyhow::Result<Exit> {
    if args.dry_run {
        let req = request(fresh, new.request(true))?;
        let a: Answer<ClaimDryRun> = ctx
            .client
            .call(Method::POST, "/v1/fresh-claims", Some(&req))
            .await
            .with_context(|| failed(fresh, &req.claim))?;
        return dry_run(ctx, fresh, new, &a.body);
    }
    let deadline = wait::Deadline::after(args.wait.timeout);
    let a = record(ctx, fresh, new.request(false)).await?;
    let cursor = a.cursor(a.body.index);
    let mut result = a.body;
    if args.wait.wait {
        let volume = result.volume.clone();
        let waited = tokio::select! {
            w = wait::claim_until(ctx, result, cursor, ClaimGoal::Ready, deadline) => w?,
            signal = crate::signals::terminated() => {
                release(ctx, &volume, new.alloc).await?;
                ctx.out.note(format!(
                    "interrupted ({}): released the claim of alloc {} on per-job volume {volume}; \
                     the server deletes it",
                    signal.name(), new.alloc
                ));
                return Ok(Exit::Signal(signal.number()));
            }
        };
        result = match waited {
            Ok(c) => c.expect("a ready claim"),
            Err(timed_out) if args.release_on_timeout => {
                release(ctx, &volume, new.alloc).await?;
                return Err(timed_out
                    .released(
                        "released the claim (--release-on-timeout); the server deletes the volume",
                        format!(
                            "claim again with a longer --timeout; `csivol status {volume}` shows \
                             what holds the volume up"
                        ),
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

/// The answer of a dry run: exit 0 when the plugin can make the volume on the node, else
/// the exit code of the error the real request would get.
fn dry_run(ctx: &Ctx, fresh: &Fresh, new: &NewClaim<'_>, d: &ClaimDryRun) -> anyhow::Result<Exit> {
    if ctx.out.json_mode() {
        ctx.out.json(d)?;
    } else if d.accepted && d.existing {
        ctx.out.line(format!(
            "accepted: alloc {} already holds per-job volume {} ({})",
            new.alloc,
            fresh.name,
            d.state.map(|s| s.to_string()).unwrap_or_default()
        ))?;
    } else if d.accepted {
        ctx.out.line(format!(
            "accepted: per-job volume {} can be made for alloc {} on node {} ({})",
            fresh.name, new.alloc, new.node, new.mode
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

/// Releases a failed job's claim on its per-job volume, asking the server to keep the
/// volume `keep` longer for inspection.
pub async fn release_kept(
    ctx: &Ctx,
    volume: &str,
    alloc: &str,
    keep: std::time::Duration,
) -> anyhow::Result<()> {
    let path = format!(
        "/v1/volumes/{volume}/claims/{alloc}?keep_ms={}",
        keep.as_millis()
    );
    ctx.client
        .call::<(), Claim>(Method::DELETE, &path, None)
        .await
        .with_context(|| {
            format!("failed to release the claim of alloc `{alloc}` on volume `{volume}`")
        })?;
    ctx.out.note(format!(
        "the command failed: per-job volume {volume} is kept for {} (--keep-on-failure), then \
         deleted",
        crate::output::given_duration(keep)
    ));
    Ok(())
}
