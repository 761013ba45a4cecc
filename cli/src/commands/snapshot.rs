//! `csivol snapshot create|list|show|delete`, of snapshots and of group snapshots.

use anyhow::Context;
use csivol_api::{GroupSnapshot, GroupSnapshotRequest, Snapshot, SnapshotRequest, SnapshotState};
use csivol_client::{Method, StatusCode};
use serde_json::json;

use crate::args::{
    SnapshotAdoptArgs, SnapshotArg, SnapshotCommand, SnapshotCreateArgs, SnapshotDeleteArgs,
    SnapshotListArgs,
};
use crate::client::{Answer, Cursor};
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
        SnapshotCommand::Adopt(args) => adopt(ctx, args).await,
    }
}

/// Registers a snapshot the storage holds, then follows it until the plugin listed it
/// (ready, or cut and not ready yet) or it was not found.
async fn adopt(ctx: &Ctx, args: SnapshotAdoptArgs) -> anyhow::Result<Exit> {
    let name = args.name.clone();
    let req = csivol_api::SnapshotAdoptRequest {
        plugin: args.plugin.clone(),
        snapshot_id: args.snapshot_id.clone(),
    };
    let a: Answer<Snapshot> = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/snapshots/{name}/adopt"),
            Some(&req),
        )
        .await
        .with_context(|| {
            format!(
                "failed to adopt snapshot `{}` of plugin `{}` as `{name}`",
                args.snapshot_id, args.plugin
            )
        })?;
    if a.status == StatusCode::ACCEPTED {
        ctx.out.note(format!(
            "adopting snapshot {} of plugin {} as {name}: ListSnapshots requested",
            args.snapshot_id, args.plugin
        ));
    }
    let done = follow(
        ctx,
        &name,
        "to be found by its plugin",
        Deadline::after(args.timeout),
        |s| match s {
            None => Step::Fail(Failure::new(
                Exit::Error,
                format!("snapshot {name} disappeared while it was being adopted"),
            )),
            Some(s) if s.state == SnapshotState::Failed => Step::Fail(
                Failure::new(
                    Exit::Conflict,
                    format!(
                        "snapshot {name} was not adopted: {}",
                        s.error.as_deref().unwrap_or("no reason given")
                    ),
                )
                .hint(format!(
                    "`csivol plugin snapshots {}` lists what the plugin holds; adopt it again \
                     (the failed record is replaced), or `csivol snapshot delete {name}`",
                    args.plugin
                )),
            ),
            Some(s) if s.state == SnapshotState::Creating => Step::Waiting(
                s.error
                    .clone()
                    .unwrap_or_else(|| "waiting for ListSnapshots".to_owned()),
            ),
            Some(_) => Step::Done,
        },
    )
    .await?;
    let s = done.expect("done means it exists");
    ctx.out.note(format!(
        "adopted snapshot {} of plugin {} as {name}",
        args.snapshot_id, args.plugin
    ));
    print(&ctx.out, &s)?;
    Ok(Exit::Ok)
}

async fn create(ctx: &Ctx, args: SnapshotCreateArgs) -> anyhow::Result<Exit> {
    if let Some(group) = args.group.clone() {
        return group_create(ctx, group, args).await;
    }
    let name = args
        .name
        .as_deref()
        .expect("clap requires --name or --group");
    let [volume] = args.volumes.as_slice() else {
        return Err(Failure::new(
            Exit::Usage,
            format!(
                "`--name` snapshots one volume, and {} were named",
                args.volumes.len()
            ),
        )
        .hint(format!(
            "snapshot them together: `csivol snapshot create --group {name} {}`",
            args.volumes.join(" ")
        ))
        .into());
    };
    let req = SnapshotRequest {
        volume: volume.clone(),
        parameters: args.parameters.into_iter().collect(),
    };
    // With --wait, a snapshot asked for while its volume is being released is cut once
    // the release has finished.
    let client = if args.wait.wait {
        ctx.client.waiting_for_release()
    } else {
        ctx.client.clone()
    };
    let a: Answer<Snapshot> = client
        .call(Method::PUT, &format!("/v1/snapshots/{name}"), Some(&req))
        .await
        .with_context(|| format!("failed to snapshot volume `{volume}`"))?;
    let mut s = a.body;
    if a.status == StatusCode::ACCEPTED && s.after_release {
        ctx.out.note(format!(
            "creating snapshot {name} of volume {} through plugin {} once the volume's release \
             has finished",
            s.volume, s.plugin
        ));
    } else if a.status == StatusCode::ACCEPTED {
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
    if args.groups {
        return group_list(ctx).await;
    }
    let mut filters = Vec::new();
    if let Some(v) = &args.volume {
        filters.push(format!("volume={v}"));
    }
    if let Some(g) = &args.group {
        filters.push(format!("group={g}"));
    }
    let path = if filters.is_empty() {
        "/v1/snapshots".to_owned()
    } else {
        format!("/v1/snapshots?{}", filters.join("&"))
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
/// A GROUP column only where a member is listed, so that a listing without group
/// snapshots reads as it always has.
pub(crate) fn table(out: &Out, ss: &[Snapshot]) -> anyhow::Result<()> {
    let grouped = ss.iter().any(|s| s.group.is_some());
    // The namespace gets a column once a snapshot listed is not of `default`.
    let spaced = ss
        .iter()
        .any(|s| s.namespace != csivol_api::DEFAULT_NAMESPACE);
    let mut header = vec!["NAME", "VOLUME", "PLUGIN", "STATE", "SIZE", "AGE"];
    if spaced {
        header.insert(0, "NAMESPACE");
    }
    if grouped {
        header.push("GROUP");
    }
    let mut t = out.table(&header);
    for s in ss {
        let mut row = Vec::with_capacity(header.len());
        if spaced {
            row.push(s.namespace.clone());
        }
        row.extend([
            s.name.clone(),
            // An adopted snapshot whose source volume csivol does not record has none.
            or_dash(Some(&s.volume)),
            s.plugin.clone(),
            s.state.to_string(),
            size(s.size_bytes),
            age(&s.created_at),
        ]);
        if grouped {
            row.push(or_dash(s.group.as_deref()));
        }
        t.add_row(row);
    }
    out.print_table(t)
}

async fn show(ctx: &Ctx, args: SnapshotArg) -> anyhow::Result<Exit> {
    if let Some(g) = group(ctx, &args.name).await? {
        group_print(&ctx.out, &g)?;
        return Ok(Exit::Ok);
    }
    let s: Snapshot = ctx
        .client
        .get(&format!("/v1/snapshots/{}", args.name))
        .await?;
    print(&ctx.out, &s)?;
    Ok(Exit::Ok)
}

async fn delete(ctx: &Ctx, args: SnapshotDeleteArgs) -> anyhow::Result<Exit> {
    if let Some(g) = group(ctx, &args.name).await? {
        return group_delete(ctx, g, args).await;
    }
    let name = &args.name;
    let path = format!("/v1/snapshots/{name}");
    let s: Snapshot = ctx.client.get(&path).await?;
    if !args.yes {
        ctx.out.before_prompt(format!(
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
    let deleted = json!({"outcome": "deleted", "snapshot": name});
    if status == StatusCode::NO_CONTENT {
        ctx.out.done(format!("removed snapshot {name}"), deleted)?;
        return Ok(Exit::Ok);
    }
    if !args.wait.wait {
        ctx.out.note(format!(
            "deleting snapshot {name} through plugin {}; `csivol snapshot show {name}` follows it",
            s.plugin
        ));
        // It may be gone already: then it is deleted.
        match ctx
            .client
            .watch::<Snapshot>(&path, &Cursor::default(), Default::default())
            .await?
        {
            Some(a) => print(&ctx.out, &a.body)?,
            None => ctx.out.done(format!("deleted snapshot {name}"), deleted)?,
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
    ctx.out.done(format!("deleted snapshot {name}"), deleted)?;
    Ok(Exit::Ok)
}

/// Where a snapshot stands, for the progress line and a timeout message.
fn describe(s: &Snapshot) -> String {
    let what = match s.state {
        SnapshotState::Creating if s.after_release => {
            "creating: CreateSnapshot is sent once the volume's release has finished"
        }
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
    let mut rows = vec![("state", s.state.to_string())];
    if s.namespace != csivol_api::DEFAULT_NAMESPACE {
        rows.insert(0, ("namespace", s.namespace.clone()));
    }
    rows.extend([
        ("volume", or_dash(Some(&s.volume))),
        ("plugin", s.plugin.clone()),
        ("snapshot id", or_dash(Some(&s.snapshot_id))),
        (
            "ready to use",
            if s.ready_to_use { "yes" } else { "no" }.to_owned(),
        ),
        ("size", size(s.size_bytes)),
    ]);
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
    if let Some(g) = &s.group {
        rows.push(("group", g.clone()));
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

// ---- group snapshots ----

/// The group snapshot of that name, if there is one (groups and snapshots share names).
async fn group(ctx: &Ctx, name: &str) -> anyhow::Result<Option<GroupSnapshot>> {
    Ok(ctx
        .client
        .watch::<GroupSnapshot>(
            &format!("/v1/group-snapshots/{name}"),
            &Cursor::default(),
            Default::default(),
        )
        .await?
        .map(|a| a.body))
}

async fn group_create(ctx: &Ctx, name: String, args: SnapshotCreateArgs) -> anyhow::Result<Exit> {
    let req = GroupSnapshotRequest {
        volumes: args.volumes.clone(),
        parameters: args.parameters.into_iter().collect(),
    };
    let a: Answer<GroupSnapshot> = ctx
        .client
        .call(
            Method::PUT,
            &format!("/v1/group-snapshots/{name}"),
            Some(&req),
        )
        .await
        .with_context(|| {
            format!(
                "failed to snapshot volumes {} together",
                args.volumes.join(", ")
            )
        })?;
    let mut g = a.body;
    if a.status == StatusCode::ACCEPTED {
        ctx.out.note(format!(
            "creating group snapshot {name} of volumes {} through plugin {}",
            g.volumes.join(", "),
            g.plugin
        ));
    } else {
        ctx.out.note(format!(
            "group snapshot {name} of volumes {} already exists ({})",
            g.volumes.join(", "),
            g.state
        ));
    }
    if args.wait.wait {
        let done = group_follow(
            ctx,
            &name,
            "to be ready",
            Deadline::after(args.wait.timeout),
            |g| match g {
                None => Step::Fail(Failure::new(
                    Exit::Error,
                    format!("group snapshot {name} disappeared while it was being created"),
                )),
                Some(g) if g.state == SnapshotState::Failed => Step::Fail(
                    Failure::new(
                        Exit::Error,
                        format!(
                            "group snapshot {name} could not be created: {}",
                            g.error.as_deref().unwrap_or("no reason given")
                        ),
                    )
                    .hint(format!(
                        "fix the cause, then create it again (the failed record is replaced), or \
                         `csivol snapshot delete {name}`"
                    )),
                ),
                Some(g) if g.state == SnapshotState::Ready => Step::Done,
                Some(g) => Step::Waiting(group_describe(g)),
            },
        )
        .await?;
        g = done.expect("done means it exists");
        ctx.out
            .note(format!("group snapshot {name} is ready to use"));
    }
    group_print(&ctx.out, &g)?;
    Ok(Exit::Ok)
}

async fn group_list(ctx: &Ctx) -> anyhow::Result<Exit> {
    let gs: Vec<GroupSnapshot> = ctx.client.get("/v1/group-snapshots").await?;
    if ctx.out.json_mode() {
        ctx.out.json(&gs)?;
        return Ok(Exit::Ok);
    }
    if gs.is_empty() {
        ctx.out.note("no group snapshots");
        return Ok(Exit::Ok);
    }
    let mut t = ctx
        .out
        .table(&["NAME", "PLUGIN", "STATE", "VOLUMES", "MEMBERS", "AGE"]);
    for g in &gs {
        t.add_row(vec![
            g.name.clone(),
            g.plugin.clone(),
            g.state.to_string(),
            g.volumes.join(","),
            g.members.len().to_string(),
            age(&g.created_at),
        ]);
    }
    ctx.out.print_table(t)?;
    Ok(Exit::Ok)
}

async fn group_delete(
    ctx: &Ctx,
    g: GroupSnapshot,
    args: SnapshotDeleteArgs,
) -> anyhow::Result<Exit> {
    let name = &args.name;
    let path = format!("/v1/group-snapshots/{name}");
    if !args.yes {
        let members: Vec<_> = g.members.iter().map(|m| m.name.as_str()).collect();
        ctx.out.before_prompt(format!(
            "This deletes group snapshot {name} of volumes {} with its members ({}) and their \
             data: DeleteVolumeGroupSnapshot through plugin {}.",
            g.volumes.join(", "),
            if members.is_empty() {
                "none yet".to_owned()
            } else {
                members.join(", ")
            },
            g.plugin
        ));
    }
    let what = format!("delete group snapshot {name}");
    ctx.out.confirm(&what, args.yes, false)?;
    let status = ctx
        .client
        .call_empty(Method::DELETE, &path)
        .await
        .with_context(|| format!("failed to {what}"))?;
    let deleted = json!({"outcome": "deleted", "group_snapshot": name});
    if status == StatusCode::NO_CONTENT {
        ctx.out
            .done(format!("removed group snapshot {name}"), deleted)?;
        return Ok(Exit::Ok);
    }
    if !args.wait.wait {
        ctx.out.note(format!(
            "deleting group snapshot {name} through plugin {}; `csivol snapshot show {name}` follows it",
            g.plugin
        ));
        match ctx
            .client
            .watch::<GroupSnapshot>(&path, &Cursor::default(), Default::default())
            .await?
        {
            Some(a) => group_print(&ctx.out, &a.body)?,
            None => ctx
                .out
                .done(format!("deleted group snapshot {name}"), deleted)?,
        }
        return Ok(Exit::Ok);
    }
    group_follow(
        ctx,
        name,
        "to be deleted",
        Deadline::after(args.wait.timeout),
        |g| match g {
            None => Step::Done,
            Some(g) if g.state == SnapshotState::Deleting => Step::Waiting(group_describe(g)),
            Some(g) => Step::Fail(
                Failure::new(
                    Exit::Error,
                    format!(
                        "group snapshot {name} could not be deleted: {}",
                        g.error.as_deref().unwrap_or("no reason given")
                    ),
                )
                .hint(format!(
                    "fix the cause, then `csivol snapshot delete {name}` again"
                )),
            ),
        },
    )
    .await?;
    ctx.out.done(
        format!("deleted group snapshot {name} with its members"),
        deleted,
    )?;
    Ok(Exit::Ok)
}

/// Where a group snapshot stands, for the progress line and a timeout message.
fn group_describe(g: &GroupSnapshot) -> String {
    let what = match g.state {
        SnapshotState::Creating => "creating: waiting for CreateVolumeGroupSnapshot",
        SnapshotState::Pending => "pending: cut, not every member ready to use yet",
        SnapshotState::Deleting => "deleting: waiting for DeleteVolumeGroupSnapshot",
        SnapshotState::Ready => "ready",
        SnapshotState::Failed => "failed",
    };
    match &g.error {
        Some(e) => format!("{what} (last error: {e})"),
        None => what.to_owned(),
    }
}

/// Prints a group snapshot: JSON, or the detailed view with its members' table.
fn group_print(out: &Out, g: &GroupSnapshot) -> anyhow::Result<()> {
    if out.json_mode() {
        return out.json(g);
    }
    let mut rows = vec![
        ("state", g.state.to_string()),
        ("volumes", g.volumes.join(", ")),
        ("plugin", g.plugin.clone()),
        ("group snapshot id", or_dash(Some(&g.group_snapshot_id))),
        (
            "ready to use",
            if g.ready_to_use { "yes" } else { "no" }.to_owned(),
        ),
    ];
    if g.namespace != csivol_api::DEFAULT_NAMESPACE {
        rows.insert(0, ("namespace", g.namespace.clone()));
    }
    if let Some(t) = &g.creation_time {
        rows.push(("cut at", when(t)));
    }
    if !g.parameters.is_empty() {
        let p: Vec<_> = g
            .parameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        rows.push(("parameters", p.join(", ")));
    }
    if let Some(e) = &g.error {
        rows.push(("error", e.clone()));
    }
    rows.push(("created", when(&g.created_at)));
    record(out, &format!("group snapshot {}", g.name), &rows)?;
    if g.members.is_empty() {
        return Ok(());
    }
    out.line("")?;
    table(out, &g.members)
}

/// Follows a group snapshot like [`follow`] a snapshot.
async fn group_follow(
    ctx: &Ctx,
    name: &str,
    goal: &str,
    deadline: Deadline,
    check: impl Fn(Option<&GroupSnapshot>) -> Step,
) -> anyhow::Result<Option<GroupSnapshot>> {
    let followed = crate::wait::Followed {
        what: "group snapshot",
        name,
        path: format!("/v1/group-snapshots/{name}"),
        show: format!("csivol snapshot show {name}"),
    };
    crate::wait::follow(
        ctx,
        &followed,
        goal,
        deadline,
        check,
        |g: &GroupSnapshot| g.index,
    )
    .await
}
