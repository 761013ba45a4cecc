//! `csivol plugin list|show|volumes|controllers`.

use anyhow::Context;
use csivol_api::{ControllerHosts, ControllerHostsChange, Plugin, PluginSnapshots, PluginVolumes};
use csivol_client::Method;

use crate::args::PluginCommand;
use crate::ctx::Ctx;
use crate::failure::Exit;
use crate::render;

pub async fn run(ctx: &Ctx, cmd: PluginCommand) -> anyhow::Result<Exit> {
    match cmd {
        PluginCommand::List => {
            let plugins: Vec<Plugin> = ctx.client.get("/v1/plugins").await?;
            if ctx.out.json_mode() {
                ctx.out.json(&plugins)?;
            } else {
                render::plugins::plugins(&ctx.out, &plugins)?;
            }
        }
        PluginCommand::Show(args) => {
            let plugin: Plugin = ctx
                .client
                .get(&format!("/v1/plugins/{}", args.plugin))
                .await?;
            if ctx.out.json_mode() {
                ctx.out.json(&plugin)?;
            } else {
                render::plugins::plugin(&ctx.out, &plugin)?;
            }
        }
        PluginCommand::Volumes(args) => {
            let listing: PluginVolumes = ctx
                .client
                .get(&format!("/v1/plugins/{}/volumes", args.plugin))
                .await?;
            if ctx.out.json_mode() {
                ctx.out.json(&listing)?;
            } else {
                render::plugins::storage_volumes(&ctx.out, &listing)?;
            }
        }
        PluginCommand::Snapshots(args) => {
            let listing: PluginSnapshots = ctx
                .client
                .get(&format!("/v1/plugins/{}/snapshots", args.plugin))
                .await?;
            if ctx.out.json_mode() {
                ctx.out.json(&listing)?;
            } else {
                render::plugins::storage_snapshots(&ctx.out, &listing)?;
            }
        }
        PluginCommand::Controllers(args) => {
            let path = format!("/v1/plugins/{}/controllers", args.plugin);
            let hosts: ControllerHosts = if args.allow.is_empty() && args.disallow.is_empty() {
                ctx.client.get(&path).await?
            } else {
                let req = ControllerHostsChange {
                    allow: args.allow.clone(),
                    disallow: args.disallow.clone(),
                };
                let a: crate::client::Answer<ControllerHosts> = ctx
                    .client
                    .call(Method::POST, &path, Some(&req))
                    .await
                    .with_context(|| {
                        format!(
                            "failed to change the controller hosts of plugin `{}`",
                            args.plugin
                        )
                    })?;
                for n in &args.allow {
                    ctx.out.note(format!(
                        "node {n} may host the controller of plugin {}",
                        args.plugin
                    ));
                }
                for n in &args.disallow {
                    ctx.out.note(format!(
                        "node {n} may no longer host the controller of plugin {} (from its next registration)",
                        args.plugin
                    ));
                }
                a.body
            };
            if ctx.out.json_mode() {
                ctx.out.json(&hosts)?;
            } else {
                render::plugins::controller_hosts(&ctx.out, &hosts)?;
            }
        }
    }
    Ok(Exit::Ok)
}
