//! `csivol volume modify NAME --param KEY=VALUE... [--wait]`.

use anyhow::Context;
use csivol_api::{Modification, ModificationState, ModifyRequest, Volume};
use csivol_client::{Method, StatusCode};

use crate::args::ModifyArgs;
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::render;
use crate::wait::{self, Step};

pub async fn run(ctx: &Ctx, args: ModifyArgs) -> anyhow::Result<Exit> {
    let name = &args.volume;
    let parameters = args.parameters.iter().cloned().collect();
    let asked = Modification::describe(&parameters);
    // With --wait, a modification asked for while the volume is being released is sent
    // once the release has finished.
    let client = if args.wait.wait {
        ctx.client.waiting_for_release()
    } else {
        ctx.client.clone()
    };
    let a: Answer<Volume> = client
        .call(
            Method::POST,
            &format!("/v1/volumes/{name}/modify"),
            Some(&ModifyRequest { parameters }),
        )
        .await
        .with_context(|| format!("failed to modify volume `{name}` to {asked}"))?;
    let mut v = a.body;
    match &v.modification {
        Some(m) if a.status == StatusCode::ACCEPTED && m.after_release => ctx.out.note(format!(
            "modifying volume {name} through plugin {} once its release has finished: \
             ControllerModifyVolume with {}",
            v.plugin,
            Modification::describe(&m.parameters)
        )),
        Some(m) if a.status == StatusCode::ACCEPTED => ctx.out.note(format!(
            "modifying volume {name} through plugin {}: ControllerModifyVolume with {}",
            v.plugin,
            Modification::describe(&m.parameters)
        )),
        Some(_) => ctx.out.note(format!(
            "volume {name} is already being modified to {asked}"
        )),
        None => ctx.out.note(format!(
            "volume {name} already has {asked}; nothing changed"
        )),
    }
    if args.wait.wait && v.modification.is_some() {
        let done = wait::volume(
            ctx,
            name,
            &format!("to be modified to {asked}"),
            wait::Deadline::after(args.wait.timeout),
            |v| match v {
                None => Step::Fail(Failure::new(
                    Exit::Error,
                    format!("volume {name} disappeared while it was being modified"),
                )),
                Some(v) => match &v.modification {
                    None => Step::Done,
                    Some(m) if m.state == ModificationState::Infeasible => Step::Fail(
                        Failure::new(
                            Exit::Error,
                            format!(
                                "volume {name} cannot be modified to {}: the plugin finds it infeasible and changed nothing: {}",
                                Modification::describe(&m.parameters),
                                m.error.as_deref().unwrap_or("no reason given")
                            ),
                        )
                        .hint(format!(
                            "ask for values the plugin accepts with `csivol volume modify {name} --param KEY=VALUE`"
                        )),
                    ),
                    Some(m) if m.state == ModificationState::Failed => Step::Fail(
                        Failure::new(
                            Exit::Error,
                            format!(
                                "volume {name} could not be modified to {}: {}",
                                Modification::describe(&m.parameters),
                                m.error.as_deref().unwrap_or("no reason given")
                            ),
                        )
                        .hint(format!(
                            "fix the cause, then run `csivol volume modify {name}` with the same parameters again"
                        )),
                    ),
                    Some(m) if m.after_release => {
                        Step::Waiting(format!("{}; {}", m.progress(), wait::release_progress(v)))
                    }
                    Some(m) => Step::Waiting(match &m.error {
                        Some(err) => format!("{}; last error: {err}", m.progress()),
                        None => m.progress(),
                    }),
                },
            },
        )
        .await?;
        v = done.expect("done means it exists");
        ctx.out.note(format!(
            "modified volume {name}: {}",
            Modification::describe(&v.mutable_parameters)
        ));
    }
    render::print_volume(&ctx.out, &v)?;
    Ok(Exit::Ok)
}
