//! The server. Being built.

/// `csivol-agent server` flags.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {}

pub async fn run(_args: ServerArgs) -> anyhow::Result<()> {
    anyhow::bail!("the server is not built yet")
}
