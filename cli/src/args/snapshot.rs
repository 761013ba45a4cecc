//! `csivol snapshot`: create, list, show, delete.

use clap::{ArgGroup, Args, Subcommand};

use super::{WaitArgs, volume_name};

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Snapshot a volume (CreateSnapshot), or several together (--group)
    ///
    /// With --name, one volume through its plugin's controller, which must report
    /// CREATE_DELETE_SNAPSHOT. With --group, every volume named, all of one plugin, in one
    /// group snapshot cut by the plugin's GroupController (CreateVolumeGroupSnapshot), which
    /// must report CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT: write-order consistent across
    /// the volumes, as the spec requires of the plugin. Each member is a snapshot named
    /// GROUP.VOLUME that a volume can be created from. A snapshot is `creating` until the
    /// plugin answers, `pending` while the plugin says it is not ready to use yet, then
    /// `ready`; with --wait, csivol follows it until it is ready. Creating the same snapshot
    /// again changes nothing.
    Create(SnapshotCreateArgs),

    /// List snapshots (group members among them), or the group snapshots (--groups)
    List(SnapshotListArgs),

    /// Show a snapshot, or a group snapshot with its members
    Show(SnapshotArg),

    /// Delete a snapshot (DeleteSnapshot), or a group snapshot with its members
    /// (DeleteVolumeGroupSnapshot)
    ///
    /// A member of a group snapshot is deleted with its group, never alone. Asks on a
    /// terminal; elsewhere it needs --yes.
    Delete(SnapshotDeleteArgs),

    /// Register a snapshot the plugin's storage holds and csivol does not know
    ///
    /// A controller host lists the snapshot with ListSnapshots by its id (the plugin must
    /// report LIST_SNAPSHOTS: `csivol plugin snapshots PLUGIN` lists them); found, it is
    /// recorded with the plugin's size, time and readiness (`pending` until it is ready to
    /// use), and `csivol volume create --from-snapshot NAME` creates volumes from it. Not
    /// found, it is `failed` and refused; a snapshot csivol knows under another name is
    /// refused at once. Adopting the same snapshot again changes nothing.
    Adopt(SnapshotAdoptArgs),
}

#[derive(Debug, Args)]
pub struct SnapshotAdoptArgs {
    /// csivol's plugin id
    #[arg(value_name = "PLUGIN", value_parser = super::plugin_name)]
    pub plugin: String,
    /// The plugin's id for the snapshot, as `csivol plugin snapshots` lists it
    #[arg(value_name = "SNAPSHOT_ID")]
    pub snapshot_id: String,
    /// The snapshot's name in csivol
    #[arg(long, value_name = "NAME", value_parser = snapshot_name)]
    pub name: String,
    /// How long to wait for the plugin's answer before giving up with exit code 5 (the
    /// look-up goes on: `csivol snapshot show NAME`)
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = super::parse_duration)]
    pub timeout: std::time::Duration,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").required(true).args(["name", "group"])))]
pub struct SnapshotCreateArgs {
    /// The volume to snapshot; with --group, the volumes to snapshot together
    #[arg(value_name = "VOLUME", required = true, value_parser = volume_name)]
    pub volumes: Vec<String>,

    /// The snapshot's name (one volume)
    #[arg(long, value_name = "NAME", value_parser = snapshot_name)]
    pub name: Option<String>,

    /// The group snapshot's name: snapshot every VOLUME together
    #[arg(long, value_name = "NAME", value_parser = snapshot_name)]
    pub group: Option<String>,

    /// A CreateSnapshot (or CreateVolumeGroupSnapshot) parameter for the plugin, KEY=VALUE
    /// (repeatable)
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

    /// Only the members of this group snapshot
    #[arg(long, value_name = "GROUP", value_parser = snapshot_name, conflicts_with = "groups")]
    pub group: Option<String>,

    /// List the group snapshots instead, one line each
    #[arg(long, conflicts_with = "volume")]
    pub groups: bool,
}

#[derive(Debug, Args)]
pub struct SnapshotArg {
    /// The snapshot's or group snapshot's name
    #[arg(value_parser = snapshot_name)]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct SnapshotDeleteArgs {
    /// The snapshot's or group snapshot's name
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
