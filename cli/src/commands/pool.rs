//! `csivol pool`: create, list, show and delete pools; `csivol volume label`, by which a
//! pool chooses its members.

use anyhow::Context;
use csivol_api::{Pool, PoolSpec, Volume, VolumeLabelRequest};
use csivol_client::{Method, StatusCode};
use serde_json::json;

use crate::args::{LabelChange, PoolCommand, PoolCreateArgs, VolumeLabelArgs};
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;

pub async fn run(ctx: &Ctx, cmd: PoolCommand) -> anyhow::Result<Exit> {
    match cmd {
        PoolCommand::Create(args) => create(ctx, args).await?,
        PoolCommand::List => {
            let pools: Vec<Pool> = ctx
                .client
                .get("/v1/pools")
                .await
                .context("failed to list pools")?;
            if ctx.out.json_mode() {
                ctx.out.json(&pools)?;
            } else {
                render::pools::pools(&ctx.out, &pools)?;
            }
        }
        PoolCommand::Show(args) => {
            let p: Pool = ctx
                .client
                .get(&format!("/v1/pools/{}", args.pool))
                .await
                .with_context(|| format!("failed to read pool `{}`", args.pool))?;
            if ctx.out.json_mode() {
                ctx.out.json(&p)?;
            } else {
                render::pools::pool(&ctx.out, &p)?;
            }
        }
        PoolCommand::Delete(args) => {
            ctx.client
                .call_empty(Method::DELETE, &format!("/v1/pools/{}", args.pool))
                .await
                .with_context(|| format!("failed to delete pool `{}`", args.pool))?;
            ctx.out.done(
                format!("deleted pool {}; its members keep their labels", args.pool),
                json!({"outcome": "deleted", "pool": args.pool}),
            )?;
        }
    }
    Ok(Exit::Ok)
}

async fn create(ctx: &Ctx, args: PoolCreateArgs) -> anyhow::Result<()> {
    let spec = PoolSpec {
        selector: args.selector.into_iter().collect(),
        linger_ms: args.linger.map(|l| l.as_millis() as u64),
    };
    let a: Answer<Pool> = ctx
        .client
        .call(
            Method::PUT,
            &format!("/v1/pools/{}", args.name),
            Some(&spec),
        )
        .await
        .with_context(|| format!("failed to create pool `{}`", args.name))?;
    let p = a.body;
    if a.status == StatusCode::CREATED {
        ctx.out.note(format!(
            "created pool {} with {} member(s)",
            p.name,
            p.members.len()
        ));
    } else {
        ctx.out.note(format!(
            "pool {} exists with this spec: nothing changed",
            p.name
        ));
    }
    if ctx.out.json_mode() {
        ctx.out.json(&p)
    } else {
        render::pools::pool(&ctx.out, &p)
    }
}

/// `csivol volume label VOLUME KEY=VALUE KEY-`.
pub async fn label(ctx: &Ctx, args: VolumeLabelArgs) -> anyhow::Result<Exit> {
    let mut req = VolumeLabelRequest::default();
    for c in args.changes {
        match c {
            LabelChange::Set(k, v) => {
                req.set.insert(k, v);
            }
            LabelChange::Remove(k) => req.remove.push(k),
        }
    }
    let v: Volume = ctx
        .client
        .call(
            Method::POST,
            &format!("/v1/volumes/{}/labels", args.volume),
            Some(&req),
        )
        .await
        .with_context(|| format!("failed to label volume `{}`", args.volume))?
        .body;
    if ctx.out.json_mode() {
        ctx.out.json(&v)?;
    } else {
        ctx.out.line(format!(
            "labels of volume {}: {}",
            v.name,
            render::nodes::labels_of(&v.labels)
        ))?;
    }
    Ok(Exit::Ok)
}
