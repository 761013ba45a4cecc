//! The node agent. Being built.

/// `csivol-agent node` flags.
#[derive(Debug, clap::Args)]
pub struct NodeArgs {}

pub async fn run(_args: NodeArgs) -> anyhow::Result<()> {
    anyhow::bail!("the node agent is not built yet")
}
