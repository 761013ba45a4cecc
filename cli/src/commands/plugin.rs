//! `csivol plugin list|show`.

use csivol_proto::api::Plugin;

use super::Ctx;
use crate::args::PluginCommand;
use crate::failure::Exit;
use crate::render;

pub async fn run(ctx: &Ctx, cmd: PluginCommand) -> anyhow::Result<Exit> {
    match cmd {
        PluginCommand::List => {
            let plugins: Vec<Plugin> = ctx.client.get("/v1/plugins").await?;
            if ctx.out.json_mode() {
                ctx.out.json(&plugins)?;
            } else {
                render::plugins(&ctx.out, &plugins)?;
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
                render::plugin(&ctx.out, &plugin)?;
            }
        }
    }
    Ok(Exit::Ok)
}
