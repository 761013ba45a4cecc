//! `csivol volume register|create|list|show|deregister` (`expand` is in `expand.rs`,
//! `modify` in `modify.rs`).

use anyhow::Context;
use csivol_api::{ContentSource, Snapshot, Volume, VolumeState};
use csivol_client::{Method, StatusCode};
use serde_json::json;

use crate::args::{
    AdoptArgs, CreateArgs, DeregisterArgs, SpecArgs, VolumeArg, VolumeCommand, VolumeListArgs,
};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::render;
use crate::spec;
use crate::wait::{self, Step};

pub async fn run(ctx: &Ctx, cmd: VolumeCommand) -> anyhow::Result<Exit> {
    match cmd {
        VolumeCommand::Register(args) => register(ctx, args).await,
        VolumeCommand::Adopt(args) => adopt(ctx, args).await,
        VolumeCommand::Import(args) => super::import::run(ctx, args).await,
        VolumeCommand::Create(args) => create(ctx, args).await,
        VolumeCommand::List(args) => list(ctx, args).await,
        VolumeCommand::Show(args) => show(ctx, args).await,
        VolumeCommand::Deregister(args) => deregister(ctx, args).await,
        VolumeCommand::Expand(args) => super::expand::run(ctx, args).await,
        VolumeCommand::Modify(args) => super::modify::run(ctx, args).await,
        VolumeCommand::Eligibility(args) => super::availability::eligibility(ctx, args).await,
        VolumeCommand::Drain(args) => super::availability::drain(ctx, args).await,
        VolumeCommand::Label(args) => super::pool::label(ctx, args).await,
    }
}

async fn register(ctx: &Ctx, args: SpecArgs) -> anyhow::Result<Exit> {
    let (name, spec) = spec::read_register(&args.file)?;
    let a: Answer<Volume> = ctx
        .client
        .call(Method::PUT, &format!("/v1/volumes/{name}"), Some(&spec))
        .await
        .with_context(|| format!("failed to register volume `{name}`"))?;
    if a.status == StatusCode::CREATED {
        ctx.out.note(format!("registered volume {name}"));
    } else {
        ctx.out.note(format!(
            "volume {name} is already registered with this spec; nothing changed"
        ));
    }
    render::print_volume(&ctx.out, &a.body)?;
    Ok(Exit::Ok)
}

async fn adopt(ctx: &Ctx, args: AdoptArgs) -> anyhow::Result<Exit> {
    let name = args.name.clone();
    let req = csivol_api::AdoptRequest {
        spec: csivol_api::VolumeSpec {
            plugin: args.plugin.clone(),
            external_id: args.external_id.clone(),
            access_mode: args.access_mode,
            attachment: args.attachment,
            fs_type: args.fs_type,
            mount_flags: Vec::new(),
            context: Default::default(),
            parameters: Default::default(),
            secrets: Default::default(),
            topology: Vec::new(),
            claim_mount_flags: Vec::new(),
            selinux_context: None,
            ownership: None,
            labels: Default::default(),
        },
        published_to: args.published_to,
        skip_validation: args.skip_validation,
    };
    let a: Answer<Volume> = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/volumes/{name}/adopt"),
            Some(&req),
        )
        .await
        .with_context(|| {
            format!(
                "failed to adopt volume `{}` of plugin `{}` as `{name}`",
                args.external_id, args.plugin
            )
        })?;
    let mut v = a.body;
    if v.state == VolumeState::Creating {
        if a.status == StatusCode::ACCEPTED {
            ctx.out.note(format!(
                "checking volume {} with plugin {} (ValidateVolumeCapabilities)",
                args.external_id, args.plugin
            ));
        }
        let done = wait::volume(
            ctx,
            &name,
            "to be confirmed by its plugin",
            wait::Deadline::after(args.timeout),
            |v| match v {
                None => Step::Fail(Failure::new(
                    Exit::Error,
                    format!("volume {name} disappeared while it was being adopted"),
                )),
                Some(v) if v.state == VolumeState::Creating => Step::Waiting(
                    v.error
                        .clone()
                        .unwrap_or_else(|| "waiting for ValidateVolumeCapabilities".to_owned()),
                ),
                Some(v) if v.state == VolumeState::Failed => Step::Fail(
                    Failure::new(
                        Exit::Conflict,
                        format!(
                            "volume {name} was not adopted: {}",
                            v.error.as_deref().unwrap_or("no reason given")
                        ),
                    )
                    .hint(format!(
                        "adopt it again with what the plugin supports (the failed record is \
                         replaced), or `csivol volume deregister {name}`"
                    )),
                ),
                Some(_) => Step::Done,
            },
        )
        .await?;
        v = done.expect("done means it exists");
        ctx.out.note(format!(
            "adopted volume {} of plugin {} as {name}",
            args.external_id, args.plugin
        ));
    } else if a.status == StatusCode::CREATED {
        ctx.out.note(format!(
            "adopted volume {} of plugin {} as {name}, without ValidateVolumeCapabilities",
            args.external_id, args.plugin
        ));
    } else {
        ctx.out.note(format!(
            "volume {name} is already registered with this spec; nothing changed"
        ));
    }
    render::print_volume(&ctx.out, &v)?;
    Ok(Exit::Ok)
}

async fn create(ctx: &Ctx, args: CreateArgs) -> anyhow::Result<Exit> {
    let (name, mut spec) = spec::read_create(&args.spec.file)?;
    spec.source = match (args.from_snapshot, args.from_volume) {
        (Some(s), _) => Some(ContentSource::Snapshot(s)),
        (None, Some(v)) => Some(ContentSource::Volume(v)),
        (None, None) => None,
    };
    let a: Answer<Volume> = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/volumes/{name}/create"),
            Some(&spec),
        )
        .await
        .with_context(|| format!("failed to create volume `{name}`"))?;
    let plugin = spec.plugin.clone();
    let mut v = a.body;
    let started = a.status == StatusCode::ACCEPTED;
    let was_creating = started || v.state == VolumeState::Creating;
    if started {
        ctx.out
            .note(format!("creating volume {name} through plugin {plugin}"));
    } else if v.state == VolumeState::Creating {
        ctx.out.note(format!(
            "volume {name} is already being created with this spec; nothing changed"
        ));
    } else {
        ctx.out.note(format!(
            "volume {name} already exists with this spec ({}); nothing changed",
            v.state
        ));
    }
    if args.wait.wait {
        let done = wait::volume(
            ctx,
            &name,
            "to be created",
            wait::Deadline::after(args.wait.timeout),
            |v| match v {
                None => Step::Fail(Failure::new(
                    Exit::Error,
                    format!("volume {name} disappeared while it was being created"),
                )),
                Some(v) if v.state == VolumeState::Creating => Step::Waiting(match &v.error {
                    Some(e) => format!("creating: {e}"),
                    None => format!("creating: waiting for CreateVolume through plugin {plugin}"),
                }),
                Some(v) if v.state == VolumeState::Failed => Step::Fail(
                    Failure::new(
                        Exit::Error,
                        format!(
                            "volume {name} could not be created: {}",
                            v.error.as_deref().unwrap_or("no reason given")
                        ),
                    )
                    .hint(format!(
                        "fix the cause, then create it again (the failed record is replaced), or \
                     `csivol volume deregister {name}`"
                    )),
                ),
                Some(_) => Step::Done,
            },
        )
        .await
        .map_err(|e| match e.downcast::<Failure>() {
            // A creation that cannot run (no controller host) or keeps failing is the
            // operator's to cancel.
            Ok(f) if f.exit == Exit::TimedOut => f
                .hint(format!(
                    "`csivol status {name}` shows where it stands; wait longer with --timeout, or \
                     cancel the creation with `csivol volume deregister {name}`"
                ))
                .into(),
            Ok(f) => f.into(),
            Err(e) => e,
        })?;
        v = done.expect("done means it exists");
        if was_creating {
            ctx.out.note(format!("created volume {name}"));
        }
    }
    render::print_volume(&ctx.out, &v)?;
    Ok(Exit::Ok)
}

async fn list(ctx: &Ctx, args: VolumeListArgs) -> anyhow::Result<Exit> {
    let mut query = Vec::new();
    if let Some(p) = &args.plugin {
        query.push(format!("plugin={p}"));
    }
    if let Some(s) = args.state {
        query.push(format!("state={s}"));
    }
    if let Some(n) = &args.node {
        query.push(format!("node={n}"));
    }
    let vs: Vec<Volume> = ctx.client.volumes(&query).await?;
    if ctx.out.json_mode() {
        ctx.out.json(&vs)?;
    } else {
        render::volumes(&ctx.out, &vs)?;
    }
    Ok(Exit::Ok)
}

async fn show(ctx: &Ctx, args: VolumeArg) -> anyhow::Result<Exit> {
    let v: Volume = ctx
        .client
        .get(&format!("/v1/volumes/{}", args.volume))
        .await?;
    render::print_volume(&ctx.out, &v)?;
    if !ctx.out.json_mode() {
        // Its snapshots too, where an operator deciding to delete or restore looks.
        let ss: Vec<Snapshot> = ctx
            .client
            .get(&format!("/v1/snapshots?volume={}", args.volume))
            .await?;
        ctx.out.line("")?;
        if ss.is_empty() {
            ctx.out.line("snapshots: none")?;
        } else {
            ctx.out.line("snapshots:")?;
            super::snapshot::table(&ctx.out, &ss)?;
        }
    }
    Ok(Exit::Ok)
}

async fn deregister(ctx: &Ctx, args: DeregisterArgs) -> anyhow::Result<Exit> {
    let name = &args.volume;
    let v: Volume = ctx.client.get(&format!("/v1/volumes/{name}")).await?;
    if v.state == VolumeState::Creating {
        return cancel_create(ctx, &args, &v).await;
    }
    if !args.yes {
        let ext = if v.external_id.is_empty() {
            String::new()
        } else {
            format!(" (external id {})", v.external_id)
        };
        ctx.out.before_prompt(if args.delete {
            format!(
                "This destroys volume {name} and all its data: DeleteVolume through plugin {}{ext}.",
                v.plugin
            )
        } else {
            format!(
                "This deregisters volume {name}: csivol forgets it; the storage itself{ext} is kept \
                 in plugin {}.",
                v.plugin
            )
        });
    }
    let what = if args.delete {
        format!("delete volume {name}")
    } else {
        format!("deregister volume {name}")
    };
    ctx.out.confirm(&what, args.yes, false)?;
    let path = if args.delete {
        format!("/v1/volumes/{name}?delete=true")
    } else {
        format!("/v1/volumes/{name}")
    };
    let failed = || format!("failed to {what}");
    if !args.delete {
        ctx.client
            .call_empty(Method::DELETE, &path)
            .await
            .with_context(failed)?;
        ctx.out.done(
            format!("deregistered volume {name}"),
            json!({"outcome": "deregistered", "volume": name}),
        )?;
        return Ok(Exit::Ok);
    }
    // With --wait, a volume that only its release keeps attached is deleted once that
    // release has finished: DeleteVolume is held on the server until then.
    let client = if args.wait.wait {
        ctx.client.waiting_for_release()
    } else {
        ctx.client.clone()
    };
    let a: Answer<Volume> = client
        .call::<(), _>(Method::DELETE, &path, None)
        .await
        .with_context(failed)?;
    if !args.wait.wait {
        ctx.out.note(format!(
            "deleting volume {name} through plugin {}; `csivol volume show {name}` follows it",
            v.plugin
        ));
        render::print_volume(&ctx.out, &a.body)?;
        return Ok(Exit::Ok);
    }
    wait_deleted(ctx, name, &v.plugin, args.wait.timeout).await?;
    ctx.out.done(
        format!("deleted volume {name}"),
        json!({"outcome": "deleted", "volume": name}),
    )?;
    Ok(Exit::Ok)
}

/// `volume deregister` of a volume whose CreateVolume has not succeeded: the creation is
/// cancelled (with `--delete` too: nothing was made to delete). While a CreateVolume call
/// is out, its answer decides: a volume it made is deleted through the plugin.
async fn cancel_create(ctx: &Ctx, args: &DeregisterArgs, v: &Volume) -> anyhow::Result<Exit> {
    let name = &args.volume;
    if !args.yes {
        ctx.out.before_prompt(format!(
            "This cancels the creation of volume {name}: CreateVolume through plugin {} has not \
             succeeded, so csivol forgets the volume (a volume a call still running makes is \
             deleted).",
            v.plugin
        ));
    }
    let what = format!("cancel the creation of volume {name}");
    ctx.out.confirm(&what, args.yes, false)?;
    let status = ctx
        .client
        .call_empty(Method::DELETE, &format!("/v1/volumes/{name}"))
        .await
        .with_context(|| format!("failed to {what}"))?;
    let cancelled = json!({"outcome": "creation-cancelled", "volume": name});
    if status == StatusCode::NO_CONTENT {
        ctx.out.done(
            format!(
                "cancelled the creation of volume {name}; nothing was made in plugin {}, and the \
                 volume is deregistered",
                v.plugin
            ),
            cancelled,
        )?;
        return Ok(Exit::Ok);
    }
    if !args.wait.wait {
        ctx.out.done(
            format!(
                "cancelling the creation of volume {name}: a CreateVolume call is still running; \
                 if it makes the volume, DeleteVolume follows"
            ),
            json!({"outcome": "creation-cancelling", "volume": name}),
        )?;
        return Ok(Exit::Ok);
    }
    ctx.out.note(format!(
        "cancelling the creation of volume {name}: a CreateVolume call is still running; if it \
         makes the volume, DeleteVolume follows"
    ));
    wait_deleted(ctx, name, &v.plugin, args.wait.timeout).await?;
    ctx.out.done(
        format!("cancelled the creation of volume {name}"),
        cancelled,
    )?;
    Ok(Exit::Ok)
}

/// Follows a volume in `deleting` until it is gone.
async fn wait_deleted(
    ctx: &Ctx,
    name: &str,
    plugin: &str,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    wait::volume(
        ctx,
        name,
        "to be deleted",
        wait::Deadline::after(timeout),
        |v| match v {
            None => Step::Done,
            Some(v) if v.state == VolumeState::Deleting => Step::Waiting(match &v.error {
                Some(e) => format!("deleting: {e}"),
                // DeleteVolume is held until the release has finished.
                None if !v.claims.is_empty() || !v.attachments.is_empty() => format!(
                    "deleting once its release has finished; {}",
                    wait::release_progress(v)
                ),
                None => format!("deleting: waiting for DeleteVolume through plugin {plugin}"),
            }),
            Some(v) => Step::Fail(Failure::new(
                Exit::Error,
                format!(
                    "volume {name} could not be deleted: {}",
                    v.error.as_deref().unwrap_or("no reason given")
                ),
            )),
        },
    )
    .await?;
    Ok(())
}
