//! `csivol volume expand NAME --capacity SIZE|--cancel [--wait]`.

use anyhow::Context;
use csivol_api::{ExpandRequest, ExpansionPhase, Volume, format_size};
use csivol_client::{Method, StatusCode};

use crate::args::ExpandArgs;
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::render;
use crate::wait::{self, Step};

pub async fn run(ctx: &Ctx, args: ExpandArgs) -> anyhow::Result<Exit> {
    let name = &args.volume;
    let Some(capacity) = args.capacity else {
        return cancel(ctx, name).await;
    };
    let size = format_size(capacity);
    // With --wait, an offline expansion that only the volume's release stands in the way
    // of is held on the server until that release has finished.
    let client = if args.wait.wait {
        ctx.client.waiting_for_release()
    } else {
        ctx.client.clone()
    };
    let a: Answer<Volume> = client
        .call(
            Method::POST,
            &format!("/v1/volumes/{name}/expand"),
            Some(&ExpandRequest {
                capacity_bytes: capacity,
                cancel: false,
            }),
        )
        .await
        .with_context(|| format!("failed to expand volume `{name}` to {size}"))?;
    let mut v = a.body;
    if v.expansion.is_none()
        && v.capacity_bytes.is_some_and(|c| c == capacity)
        && a.status == StatusCode::ACCEPTED
    {
        ctx.out.note(format!(
            "cancelled the expansion of volume {name}; it keeps {size}"
        ));
        render::print_volume(&ctx.out, &v)?;
        return Ok(Exit::Ok);
    }
    if a.status == StatusCode::ACCEPTED && v.expansion.as_ref().is_some_and(|e| e.after_release) {
        ctx.out.note(format!(
            "expanding volume {name} to {size} through plugin {} once its release has finished \
             (the plugin expands volumes only offline)",
            v.plugin
        ));
    } else if a.status == StatusCode::ACCEPTED {
        ctx.out.note(format!(
            "expanding volume {name} to {size} through plugin {}",
            v.plugin
        ));
    } else if v.expansion.is_some() {
        ctx.out
            .note(format!("volume {name} is already being expanded to {size}"));
    } else {
        ctx.out
            .note(format!("volume {name} already has {size}; nothing changed"));
    }
    if args.wait.wait && v.expansion.is_some() {
        let done = wait::volume(
            ctx,
            name,
            &format!("to be expanded to {size}"),
            wait::Deadline::after(args.wait.timeout),
            |v| match v {
                None => Step::Fail(Failure::new(
                    Exit::Error,
                    format!("volume {name} disappeared while it was being expanded"),
                )),
                Some(v) => match &v.expansion {
                    None => Step::Done,
                    // The storage has grown; the file system grows on the next node to
                    // stage the volume, which no wait here can bring about.
                    Some(e) if e.when_staged && e.nodes.is_empty() => Step::Done,
                    Some(e) if e.phase == ExpansionPhase::Failed => Step::Fail(
                        Failure::new(
                            Exit::Error,
                            format!(
                                "volume {name} could not be expanded to {size}: {}",
                                e.error.as_deref().unwrap_or("no reason given")
                            ),
                        )
                        .hint(format!(
                            "fix the cause, then run `csivol volume expand {name} --capacity {capacity}` again, \
                             ask for less, or cancel it with `csivol volume expand {name} --cancel`"
                        )),
                    ),
                    Some(e) if e.after_release => {
                        Step::Waiting(format!("{}; {}", e.progress(), wait::release_progress(v)))
                    }
                    Some(e) => Step::Waiting(match &e.error {
                        Some(err) => format!("{}; last error: {err}", e.progress()),
                        None => e.progress(),
                    }),
                },
            },
        )
        .await?;
        v = done.expect("done means it exists");
        let has = format_size(v.capacity_bytes.unwrap_or(capacity));
        ctx.out.note(if v.expansion.is_some() {
            format!(
                "expanded volume {name} to {has} in storage; the next node to stage it grows its file system"
            )
        } else {
            format!("expanded volume {name} to {has}")
        });
    }
    render::print_volume(&ctx.out, &v)?;
    Ok(Exit::Ok)
}

/// `--cancel`: drops the expansion that failed or keeps failing.
async fn cancel(ctx: &Ctx, name: &str) -> anyhow::Result<Exit> {
    let a: Answer<Volume> = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/volumes/{name}/expand"),
            Some(&ExpandRequest {
                capacity_bytes: 0,
                cancel: true,
            }),
        )
        .await
        .with_context(|| format!("failed to cancel the expansion of volume `{name}`"))?;
    let v = a.body;
    let keeps = v
        .capacity_bytes
        .map_or_else(|| "its capacity".to_owned(), format_size);
    ctx.out.note(format!(
        "cancelled the expansion of volume {name}; it keeps {keeps}"
    ));
    render::print_volume(&ctx.out, &v)?;
    Ok(Exit::Ok)
}
