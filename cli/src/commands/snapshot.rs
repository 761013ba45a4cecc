//! `csivol snapshot create|list|show|delete`.

use anyhow::Context;
use csivol_api::{Snapshot, SnapshotRequest, SnapshotState};
use csivol_client::{Method, StatusCode};

use crate::args::{
    SnapshotArg, SnapshotCommand, SnapshotCreateArgs, SnapshotDeleteArgs, SnapshotListArgs,
};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::{Exit, Failure};
use crate::output::{Out, age, bytes, or_dash, when};
use crate::render::record;
use crate::wait::{Deadline, Step};

pub async fn run(ctx: &Ctx, cmd: SnapshotCommand) -> anyhow::Result<Exit> {
    match cmd {
        SnapshotCommand::Create(args) => create(ctx, args).await,
        SnapshotCommand::List(args) => list(ctx, args).await,
        SnapshotCommand::Show(args) => show(ctx, args).await,
        SnapshotCommand::Delete(args) => delete(ctx, args).await,
    }
}

async fn create(ctx: &Ctx, args: SnapshotCreateArgs) -> anyhow::Result<Exit> {
    let name = &args.name;
    let req = SnapshotRequest {
        volume: args.volume.clone(),
        parameters: args.parameters.into_iter().collect(),
    };
    let a: Answer<Snapshot> = ctx
        .client
        .call(Method::PUT, &format!("/v1/snapshots/{name}"), Some(&req))
        .await
        .with_context(|| format!("failed to snapshot volume `{}`", args.volume))?;
    let mut s = a.body;
    if a.status == StatusCode::ACCEPTED {
        ctx.out.note(format!(
            "creating snapshot {name} of volume {} through plugin {}",
            s.volume, s.plugin
        ));
    } else {
        ctx.out.note(format!(
            "snapshot {name} of volume {} already exists ({})",
            s.volume, s.state
        ));
    }
    if args.wait.wait {
        let done = follow(
            ctx,
            name,
            "to be ready",
            Deadline::after(args.wait.timeout),
            |s| match s {
                None => Step::Fail(Failure::new(
                    Exit::Error,
                    format!("snapshot {name} disappeared while it was being created"),
                )),
                Some(s) if s.state == SnapshotState::Failed => Step::Fail(
                    Failure::new(
                        Exit::Error,
                        format!(
                            "snapshot {name} could not be created: {}",
                            s.error.as_deref().unwrap_or("no reason given")
                        ),
                    )
                    .hint(format!(
                        "fix the cause, then create it again (the failed record is replaced), or \
                         `csivol snapshot delete {name}`"
                    )),
                ),
                Some(s) if s.state == SnapshotState::Ready => Step::Done,
                Some(s) => Step::Waiting(describe(s)),
            },
        )
        .await?;
        s = done.expect("done means it exists");
        ctx.out.note(format!("snapshot {name} is ready to use"));
    }
    print(&ctx.out, &s)?;
    Ok(Exit::Ok)
}

async fn list(ctx: &Ctx, args: SnapshotListArgs) -> anyhow::Result<Exit> {
    let path = match &args.volume {
        Some(v) => format!("/v1/snapshots?volume={v}"),
        None => "/v1/snapshots".to_owned(),
    };
    let ss: Vec<Snapshot> = ctx.client.get(&path).await?;
    if ctx.out.json_mode() {
        ctx.out.json(&ss)?;
        return Ok(Exit::Ok);
    }
    if ss.is_empty() {
        ctx.out.note("no snapshots");
        return Ok(Exit::Ok);
    }
    table(&ctx.out, &ss)?;
    Ok(Exit::Ok)
}

/// Snapshots as a table (`snapshot list`, and under `volume show`).
pub(crate) fn table(out: &Out, ss: &[Snapshot]) -> anyhow::Result<()> {
    let mut t = out.table(&["NAME", "VOLUME", "PLUGIN", "STATE", "SIZE", "AGE"]);
    for s in ss {
        t.add_row(vec![
            s.name.clone(),
            s.volume.clone(),
            s.plugin.clone(),
            s.state.to_string(),
            size(s.size_bytes),
            age(&s.created_at),
        ]);
    }
    out.print_table(t)
}

async fn show(ctx: &Ctx, args: SnapshotArg) -> anyhow::Result<Exit> {
    let s: Snapshot = ctx
        .client
        .get(&format!("/v1/snapshots/{}", args.name))
        .await?;
    print(&ctx.out, &s)?;
    Ok(Exit::Ok)
}

async fn delete(ctx: &Ctx, args: SnapshotDeleteArgs) -> anyhow::Result<Exit> {
    let name = &args.name;
    let path = format!("/v1/snapshots/{name}");
    let s: Snapshot = ctx.client.get(&path).await?;
    if !args.yes {
        ctx.out.note(format!(
            "This deletes snapshot {name} of volume {} and its data: DeleteSnapshot through plugin {}.",
            s.volume, s.plugin
        ));
    }
    let what = format!("delete snapshot {name}");
    ctx.out.confirm(&what, args.yes, false)?;
    let status = ctx
        .client
        .call_empty(Method::DELETE, &path)
        .await
        .with_context(|| format!("failed to {what}"))?;
    if status == StatusCode::NO_CONTENT {
        ctx.out.note(format!("removed snapshot {name}"));
        return Ok(Exit::Ok);
    }
    if !args.wait.wait {
        ctx.out.note(format!(
            "deleting snapshot {name} through plugin {}; `csivol snapshot show {name}` follows it",
            s.plugin
        ));
        // It may be gone already: then there is nothing left to print.
        if let Some(a) = ctx
            .client
            .watch::<Snapshot>(&path, 0, Default::default())
            .await?
        {
            print(&ctx.out, &a.body)?;
        }
        return Ok(Exit::Ok);
    }
    follow(
        ctx,
        name,
        "to be deleted",
        Deadline::after(args.wait.timeout),
        |s| match s {
            None => Step::Done,
            Some(s) if s.state == SnapshotState::Deleting => Step::Waiting(describe(s)),
            Some(s) => Step::Fail(
                Failure::new(
                    Exit::Error,
                    format!(
                        "snapshot {name} could not be deleted: {}",
                        s.error.as_deref().unwrap_or("no reason given")
                    ),
                )
                .hint(format!(
                    "fix the cause, then `csivol snapshot delete {name}` again"
                )),
            ),
        },
    )
    .await?;
    ctx.out.note(format!("deleted snapshot {name}"));
    Ok(Exit::Ok)
}

/// Where a snapshot stands, for the progress line and a timeout message.
fn describe(s: &Snapshot) -> String {
    let what = match s.state {
        SnapshotState::Creating => "creating: waiting for CreateSnapshot",
        SnapshotState::Pending => "pending: cut, not ready to use yet",
        SnapshotState::Deleting => "deleting: waiting for DeleteSnapshot",
        SnapshotState::Ready => "ready",
        SnapshotState::Failed => "failed",
    };
    match &s.error {
        Some(e) => format!("{what} (last error: {e})"),
        None => what.to_owned(),
    }
}

fn size(n: u64) -> String {
    if n == 0 { "-".to_owned() } else { bytes(n) }
}

/// Prints a snapshot: JSON, or the detailed view.
fn print(out: &Out, s: &Snapshot) -> anyhow::Result<()> {
    if out.json_mode() {
        return out.json(s);
    }
    let mut rows = vec![
        ("state", s.state.to_string()),
        ("volume", s.volume.clone()),
        ("plugin", s.plugin.clone()),
        ("snapshot id", or_dash(Some(&s.snapshot_id))),
        (
            "ready to use",
            if s.ready_to_use { "yes" } else { "no" }.to_owned(),
        ),
        ("size", size(s.size_bytes)),
    ];
    if let Some(t) = &s.creation_time {
        rows.push(("cut at", when(t)));
    }
    if !s.parameters.is_empty() {
        let p: Vec<_> = s
            .parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        rows.push(("parameters", p.join(", ")));
    }
    if let Some(e) = &s.error {
        rows.push(("error", e.clone()));
    }
    rows.push(("created", when(&s.created_at)));
    record(out, &format!("snapshot {}", s.name), &rows)
}

/// Follows a snapshot with blocking queries until `check` is done or fails, or the
/// deadline passes (exit 5).
async fn follow(
    ctx: &Ctx,
    name: &str,
    goal: &str,
    deadline: Deadline,
    check: impl Fn(Option<&Snapshot>) -> Step,
) -> anyhow::Result<Option<Snapshot>> {
    let followed = crate::wait::Followed {
        what: "snapshot",
        name,
        path: format!("/v1/snapshots/{name}"),
        show: format!("csivol snapshot show {name}"),
    };
    crate::wait::follow(ctx, &followed, goal, deadline, check, |s: &Snapshot| {
        s.index
    })
    .await
}
