//! `csivol node list|show`.

use csivol_proto::api::Node;

use super::Ctx;
use crate::args::NodeCommand;
use crate::failure::Exit;
use crate::render;

pub async fn run(ctx: &Ctx, cmd: NodeCommand) -> anyhow::Result<Exit> {
    match cmd {
        NodeCommand::List => {
            let nodes: Vec<Node> = ctx.client.get("/v1/nodes").await?;
            if ctx.out.json_mode() {
                ctx.out.json(&nodes)?;
            } else {
                render::nodes(&ctx.out, &nodes)?;
            }
        }
        NodeCommand::Show(args) => {
            let node: Node = ctx.client.get(&format!("/v1/nodes/{}", args.node)).await?;
            if ctx.out.json_mode() {
                ctx.out.json(&node)?;
            } else {
                render::node(&ctx.out, &node)?;
            }
        }
    }
    Ok(Exit::Ok)
}
