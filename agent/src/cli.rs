//! `csivol-agent`'s command line: the program's `main` parses it, and its man pages are
//! generated from it.

use clap::{Parser, Subcommand};

/// csivol's node agent: drives this node's CSI plugins toward the server's desired state.
#[derive(Debug, Parser)]
#[command(name = "csivol-agent", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node agent: drive this node's CSI plugins toward the server's desired state.
    Run(crate::NodeArgs),
    /// Check a CSI plugin before trusting it: one safe round trip on a scratch volume the
    /// check creates and deletes (CreateVolume where offered, ControllerPublishVolume,
    /// NodeStageVolume, NodePublishVolume, a write and a read through the target, and back;
    /// each call twice), run on the node as root. It prints the plugin's capabilities and
    /// node info, the shape it stages and publishes in, which readiness check applies and
    /// whether it passes, the time per call and every departure from the spec it met, and
    /// exits 1 when one would hurt csivol.
    Check(crate::check::CheckArgs),
    /// The old spelling of `run`, accepted with a notice until the next release.
    #[command(hide = true)]
    Node(crate::NodeArgs),
    /// Moved: the server is `csivol-server serve` (and its maintenance commands).
    #[command(hide = true, disable_help_flag = true)]
    Server(Moved),
    /// Moved: dev mode is `csivol-server dev`.
    #[command(hide = true, disable_help_flag = true)]
    Dev(Moved),
    /// Moved: `csivol-server tls init`.
    #[command(hide = true, disable_help_flag = true)]
    Tls(Moved),
    /// Moved: the reference plugin is the `csivol-hostpath` program.
    #[command(hide = true, disable_help_flag = true)]
    Hostpath(Moved),
}

/// Whatever followed a command that moved to another program, to say how to run it there.
#[derive(Debug, clap::Args)]
pub struct Moved {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}
