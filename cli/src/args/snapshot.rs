//! `csivol snapshot`: create, list, show, delete.

use clap::{Args, Subcommand};

use super::{WaitArgs, volume_name};

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a volume through its plugin's controller (CreateSnapshot)
    ///
    /// The plugin must report CREATE_DELETE_SNAPSHOT. The snapshot is `creating` until the
    /// plugin answers, `pending` while the plugin says it is not ready to use yet, then
    /// `ready`; with --wait, csivol follows it until it is ready. Creating the same snapshot
    /// again changes nothing.
    Create(SnapshotCreateArgs),

    /// List snapshots, or those of one volume
    List(SnapshotListArgs),

    /// Show a snapshot
    Show(SnapshotArg),

    /// Delete a snapshot through its plugin's controller (DeleteSnapshot)
    ///
    /// Asks on a terminal; elsewhere it needs --yes.
    Delete(SnapshotDeleteArgs),
}

#[derive(Debug, Args)]
pub struct SnapshotCreateArgs {
    /// The volume to snapshot
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// The snapshot's name
    #[arg(long, value_name = "NAME", value_parser = snapshot_name)]
    pub name: String,

    /// A CreateSnapshot parameter for the plugin, KEY=VALUE (repeatable)
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = key_value)]
    pub parameters: Vec<(String, String)>,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct SnapshotListArgs {
    /// Only snapshots of this volume
    #[arg(long, value_name = "VOLUME", value_parser = volume_name)]
    pub volume: Option<String>,
}

#[derive(Debug, Args)]
pub struct SnapshotArg {
    /// The snapshot's name
    #[arg(value_parser = snapshot_name)]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct SnapshotDeleteArgs {
    /// The snapshot's name
    #[arg(value_parser = snapshot_name)]
    pub name: String,

    /// Do it without asking
    #[arg(short, long)]
    pub yes: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

pub(super) fn snapshot_name(s: &str) -> Result<String, String> {
    csivol_api::validate_name("snapshot", s).map(|()| s.to_owned())
}

pub(super) fn key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}
