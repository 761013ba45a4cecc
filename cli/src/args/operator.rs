//! The operator's actions on blocked volumes and lost nodes: `unblock`, `fence`, `detach`.

use clap::Args;

use super::{ConfirmArgs, WaitArgs, node_name, reason, volume_name};

#[derive(Debug, Args)]
pub struct UnblockArgs {
    /// The blocked volume (with --node: only that node's hold on it)
    #[arg(value_parser = volume_name)]
    pub volume: Option<String>,

    /// The lost node: every volume it holds blocked
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node: Option<String>,

    /// Why, for the event log (e.g. "n2 powered off in rack 4"); not needed with --dry-run
    #[arg(long, value_name = "TEXT", value_parser = reason, required_unless_present = "dry_run")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct FenceArgs {
    /// The node to power off
    #[arg(value_parser = node_name)]
    pub node: String,

    /// Why, for the event log (e.g. "node-2 unreachable since 03:10, BMC answers")
    #[arg(long, value_name = "TEXT", value_parser = reason)]
    pub reason: String,

    /// The node is ready, not lost: power it off anyway (asks twice on a terminal)
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct DetachArgs {
    /// The volume
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// The node to detach it from
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node: String,

    /// Why, for the event log; not needed with --dry-run
    #[arg(long, value_name = "TEXT", value_parser = reason, required_unless_present = "dry_run")]
    pub reason: Option<String>,

    /// The node is lost: release its claims and detach without it
    #[arg(long)]
    pub force: bool,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub wait: WaitArgs,
}
