//! `csivol volume eligibility|drain`: whether one volume takes new claims, in the node
//! commands' words. Nothing held is released: a drain waits for the owners.

use csivol_api::{ClaimState, Eligibility, Volume, VolumeEligibilityRequest};
use csivol_client::Method;

use crate::args::{VolumeDrainArgs, VolumeEligibilityArgs};
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::output::given_duration;

pub async fn eligibility(ctx: &Ctx, args: VolumeEligibilityArgs) -> anyhow::Result<Exit> {
    let wanted = if args.enable {
        Eligibility::Eligible
    } else {
        Eligibility::Ineligible
    };
    let v = set(ctx, &args.volume, wanted, args.reason).await?;
    if ctx.out.json_mode() {
        ctx.out.json(&v)?;
        return Ok(Exit::Ok);
    }
    ctx.out.line(match wanted {
        Eligibility::Eligible => format!("volume {} takes new claims", args.volume),
        _ => format!(
            "volume {} takes no new claims; its claims stay until their owners release them, its queued claims wait",
            args.volume
        ),
    })?;
    Ok(Exit::Ok)
}

pub async fn drain(ctx: &Ctx, args: VolumeDrainArgs) -> anyhow::Result<Exit> {
    let name = &args.volume;
    let v = set(ctx, name, Eligibility::Draining, args.reason).await?;
    if !args.wait {
        if ctx.out.json_mode() {
            ctx.out.json(&v)?;
        } else if holders(&v).is_empty() {
            ctx.out
                .line(format!("volume {name} is drained: no claim holds it"))?;
        } else {
            ctx.out.line(format!(
                "volume {name} is draining: no new claims; held by {} until their owners release them",
                holders(&v).join(", ")
            ))?;
            ctx.out.note(format!(
                "hint: csivol volume drain {name} --wait waits until no claim holds it"
            ));
        }
        return Ok(Exit::Ok);
    }
    let started = tokio::time::Instant::now();
    let deadline = started + args.deadline;
    let mut progress = ctx.out.progress();
    let filter = format!("&volume={name}");
    let mut cursor = crate::client::Cursor::default();
    loop {
        // Caught up with the volume's log first, then the look: a release after the look
        // is an event after the cursor, which ends the wait below.
        let (_, caught_up) = super::events::all_after(ctx, cursor.index, &filter).await?;
        cursor = caught_up;
        let v: Volume = ctx.client.get(&format!("/v1/volumes/{name}")).await?;
        let held = holders(&v);
        if held.is_empty() {
            progress.finish();
            if ctx.out.json_mode() {
                ctx.out.json(&v)?;
            } else {
                ctx.out
                    .line(format!("volume {name} is drained: no claim holds it"))?;
                ctx.out.note(format!(
                    "hint: csivol volume eligibility {name} --enable puts it back in service"
                ));
            }
            return Ok(Exit::Ok);
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            progress.finish();
            return Err(Failure::new(
                Exit::TimedOut,
                format!(
                    "timed out after {} waiting for volume {name} to be drained: still held by {}",
                    given_duration(args.deadline),
                    held.join(", ")
                ),
            )
            .hint(format!(
                "the volume stays draining (no new claims); ask the owners to release their \
                 claims (csivol volume show {name}), or wait longer with --deadline"
            ))
            .into());
        }
        progress.set(&format!(
            "draining volume {name}: still held by {}",
            held.join(", ")
        ));
        let left = crate::wait::Deadline::after(deadline - now);
        if let Some((_, next)) = super::events::next_within(ctx, &cursor, &filter, left).await? {
            cursor = next;
        }
    }
}

/// The claims that hold the volume (`alloc on node`): every claim but a queued one.
fn holders(v: &Volume) -> Vec<String> {
    v.claims
        .iter()
        .filter(|c| c.state != ClaimState::Queued)
        .map(|c| format!("{} on {}", c.alloc, c.node))
        .collect()
}

async fn set(
    ctx: &Ctx,
    volume: &str,
    eligibility: Eligibility,
    reason: Option<String>,
) -> anyhow::Result<Volume> {
    let answer = ctx
        .client
        .call::<_, Volume>(
            Method::POST,
            &format!("/v1/volumes/{volume}/eligibility"),
            Some(&VolumeEligibilityRequest {
                eligibility,
                reason,
            }),
        )
        .await?;
    Ok(answer.body)
}
