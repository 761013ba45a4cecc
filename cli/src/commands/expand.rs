//! `csivol volume expand NAME --capacity SIZE [--wait]`.

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
    let size = format_size(args.capacity);
    let a: Answer<Volume> = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/volumes/{name}/expand"),
            Some(&ExpandRequest {
                capacity_bytes: args.capacity,
            }),
        )
        .await
        .with_context(|| format!("failed to expand volume `{name}` to {size}"))?;
    let mut v = a.body;
    if a.status == StatusCode::ACCEPTED {
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
                            "fix the cause, then run `csivol volume expand {name} --capacity {}` again",
                            args.capacity
                        )),
                    ),
                    Some(e) => Step::Waiting(match &e.error {
                        Some(err) => format!("{}; last error: {err}", e.progress()),
                        None => e.progress(),
                    }),
                },
            },
        )
        .await?;
        v = done.expect("done means it exists");
        let has = format_size(v.capacity_bytes.unwrap_or(args.capacity));
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
