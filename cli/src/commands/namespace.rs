//! `csivol namespace`: create, list, show and delete namespaces.

use anyhow::Context;
use csivol_api::{Namespace, NamespaceSpec, Quota};
use csivol_client::{Method, StatusCode};
use serde_json::json;

use crate::args::NamespaceCommand;
use crate::client::Answer;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;

pub async fn run(ctx: &Ctx, cmd: NamespaceCommand) -> anyhow::Result<Exit> {
    match cmd {
        NamespaceCommand::Create(args) => {
            let a: Answer<Namespace> = ctx
                .client
                .call(
                    Method::PUT,
                    &format!("/v1/namespaces/{}", args.name),
                    Some(&NamespaceSpec::default()),
                )
                .await
                .with_context(|| format!("failed to create namespace `{}`", args.name))?;
            if a.status == StatusCode::CREATED {
                ctx.out.note(format!("created namespace {}", a.body.name));
            } else {
                ctx.out
                    .note(format!("namespace {} exists: nothing changed", a.body.name));
            }
            show(ctx, &a.body)?;
        }
        NamespaceCommand::List => {
            let all: Vec<Namespace> = ctx
                .client
                .get("/v1/namespaces")
                .await
                .context("failed to list namespaces")?;
            if ctx.out.json_mode() {
                ctx.out.json(&all)?;
            } else {
                render::namespaces::namespaces(&ctx.out, &all)?;
            }
        }
        NamespaceCommand::Show(args) => {
            let ns: Namespace = ctx
                .client
                .get(&format!("/v1/namespaces/{}", args.namespace))
                .await
                .with_context(|| format!("failed to read namespace `{}`", args.namespace))?;
            show(ctx, &ns)?;
        }
        NamespaceCommand::Quota(args) => {
            let path = format!("/v1/namespaces/{}", args.namespace);
            // Bounds not named keep what they are: read them first.
            let mut quota = if args.clear {
                Quota::default()
            } else {
                let ns: Namespace =
                    ctx.client.get(&path).await.with_context(|| {
                        format!("failed to read namespace `{}`", args.namespace)
                    })?;
                ns.quota.unwrap_or_default()
            };
            for (given, bound) in [
                (args.volumes, &mut quota.volumes),
                (args.capacity, &mut quota.capacity_bytes),
                (args.claims, &mut quota.claims),
                (args.fresh_volumes, &mut quota.fresh_volumes),
            ] {
                if let Some(b) = given {
                    *bound = b.0;
                }
            }
            let a: Answer<Namespace> = ctx
                .client
                .call(Method::PUT, &format!("{path}/quota"), Some(&quota))
                .await
                .with_context(|| {
                    format!("failed to set the quota of namespace `{}`", args.namespace)
                })?;
            ctx.out.note(if quota.is_empty() {
                format!("namespace {} has no quota", a.body.name)
            } else {
                format!("set the quota of namespace {}", a.body.name)
            });
            show(ctx, &a.body)?;
        }
        NamespaceCommand::Delete(args) => {
            ctx.client
                .call_empty(
                    Method::DELETE,
                    &format!("/v1/namespaces/{}", args.namespace),
                )
                .await
                .with_context(|| format!("failed to delete namespace `{}`", args.namespace))?;
            ctx.out.done(
                format!("deleted namespace {}", args.namespace),
                json!({"outcome": "deleted", "namespace": args.namespace}),
            )?;
        }
    }
    Ok(Exit::Ok)
}

fn show(ctx: &Ctx, ns: &Namespace) -> anyhow::Result<()> {
    if ctx.out.json_mode() {
        ctx.out.json(ns)
    } else {
        render::namespaces::namespace(&ctx.out, ns)
    }
}
