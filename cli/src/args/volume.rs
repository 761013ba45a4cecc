//! `csivol volume`: register, create, list, show, deregister, expand, modify.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use csivol_api::VolumeState;

use super::{WaitArgs, node_name, plugin_name, volume_name, volume_state};

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Register an existing volume from a TOML or JSON spec
    ///
    /// The spec has `name`, `plugin` (a plugin id a node registered: `csivol plugin list`),
    /// `external_id` (the plugin's id for the volume), `access_mode`, `attachment` and
    /// optionally `fs_type`, `mount_flags`, `context`, `parameters`, `secrets` and
    /// `topology` (the segments the volume is accessible from, e.g. `topology = [{ zone =
    /// "a" }]`: claims on nodes outside them are refused). Registering the same spec again
    /// changes nothing.
    ///
    /// `labels` are an operator's `key = "value"` pairs (e.g. `labels = { pool =
    /// "build-cache" }`), by which a pool chooses its members (`csivol pool create`); a spec
    /// without labels leaves the ones set with `csivol volume label`.
    ///
    /// A file-system volume may also set `claim_mount_flags` (the flags a claim may add for
    /// its own mount, `csivol claim --mount-flag`), `selinux_context` (the context its
    /// claims mount it with when they name none) and `ownership` (`never`,
    /// `on-root-mismatch` or `recursive`: whether csivol gives the volume a claim's group
    /// itself where the node plugin has no VOLUME_MOUNT_GROUP; overrides the plugin's
    /// `ownership` in the server's config, for the gids of its `ownership_gids`).
    ///
    /// `access_mode` is one of single-node-writer, single-node-reader-only,
    /// single-node-single-writer, single-node-multi-writer, multi-node-reader-only,
    /// multi-node-single-writer, multi-node-multi-writer; `attachment` is file-system or
    /// block-device.
    #[command(after_long_help = REGISTER_EXAMPLE)]
    Register(SpecArgs),

    /// Register a volume the plugin's storage holds and csivol does not know
    ///
    /// The volume must be in the plugin's last listing (`csivol plugin volumes PLUGIN`;
    /// a plugin without LIST_VOLUMES is not listed, and its volume is checked by the
    /// plugin alone), and is registered as `volume register` would, with the listing's
    /// volume context. Refused when csivol knows the volume under another name, and while
    /// the listing has it published to a node, unless each such node is named with
    /// --published-to: the operator then takes responsibility for what uses it there.
    ///
    /// Then a controller host asks the plugin (ValidateVolumeCapabilities) whether the
    /// volume supports the access mode, attachment and file system given, with its
    /// context: the volume is `creating` (no claim is taken on it) until the plugin
    /// confirmed all of it, and `failed`, naming what the plugin did not confirm and its
    /// message, when it did not or has no such volume (adopting again replaces a failed
    /// record). A plugin without a Controller service cannot be asked: its volume is
    /// adopted only with --skip-validation.
    Adopt(AdoptArgs),

    /// Read another orchestrator's volumes and write them as csivol register specs
    ///
    /// `nomad`: the output of `nomad volume status -type csi -json` (every CSI volume) or
    /// `nomad volume status -json ID` (one), in a file. Each volume's csivol name is its
    /// Nomad ID; its plugin, external id, access and attachment mode, mount options,
    /// topology, context and parameters are carried over; secrets are not (Nomad redacts
    /// them). A dry run by default: the specs are printed (or written with --out);
    /// --apply registers them as `volume register` would.
    Import(ImportArgs),

    /// Create a volume through its plugin's controller (CreateVolume), then register it
    ///
    /// The spec has `name`, `plugin` (a plugin id a node registered: `csivol plugin list`;
    /// another is refused), `access_mode`, `attachment` and optionally `capacity` (a size
    /// with a unit, `"10GiB"` or `"500M"`, or bytes; `capacity_bytes` takes either too),
    /// `fs_type`, `mount_flags`, `parameters`, `secrets`, `mutable_parameters` (parameters
    /// `volume modify` can change later; the plugin must report MODIFY_VOLUME) and
    /// `topology_request` with `required` and `preferred` segments (e.g.
    /// `required = [{ zone = "a" }]`), passed to CreateVolume; the volume records the
    /// topology the plugin returns. With --from-snapshot or --from-volume the new volume
    /// starts with that snapshot's or volume's data (the plugin must report
    /// CREATE_DELETE_SNAPSHOT or CLONE_VOLUME).
    ///
    /// A file-system volume may also set `claim_mount_flags` (the flags a claim may add for
    /// its own mount, `csivol claim --mount-flag`), `selinux_context` (the context its
    /// claims mount it with when they name none) and `ownership` (`never`,
    /// `on-root-mismatch` or `recursive`: whether csivol gives the volume a claim's group
    /// itself where the node plugin has no VOLUME_MOUNT_GROUP; overrides the plugin's
    /// `ownership` in the server's config, for the gids of its `ownership_gids`).
    ///
    /// `access_mode` is one of single-node-writer, single-node-reader-only,
    /// single-node-single-writer, single-node-multi-writer, multi-node-reader-only,
    /// multi-node-single-writer, multi-node-multi-writer; `attachment` is file-system or
    /// block-device.
    ///
    /// A creation that cannot run (no agent hosts the plugin's controller) or keeps failing
    /// is cancelled with `csivol volume deregister NAME`.
    #[command(after_long_help = CREATE_EXAMPLE)]
    Create(CreateArgs),

    /// List volumes
    List(VolumeListArgs),

    /// Show a volume with its claims and attachments
    Show(VolumeArg),

    /// Forget a volume (its storage is kept), or with --delete destroy it
    ///
    /// Refused while the volume is claimed or attached. Asks on a terminal; elsewhere it
    /// needs --yes.
    Deregister(DeregisterArgs),

    /// Grow a volume through its plugin (ControllerExpandVolume, then NodeExpandVolume)
    ///
    /// Where the plugin expands online, a claimed volume grows under its workload; where it
    /// expands offline, release the claims first. The nodes where the volume is staged or
    /// published grow it too when the plugin asks for it. Shrinking is refused. An
    /// expansion the plugin refused, or whose ControllerExpandVolume fails and waits for its
    /// retry, may be lowered (a smaller --capacity, never below what the volume has) or
    /// cancelled (--cancel, or the capacity the volume has).
    Expand(ExpandArgs),

    /// Whether a volume takes new claims (claims it has are not touched; its queued claims
    /// wait until it takes claims again, then are granted in their order)
    Eligibility(VolumeEligibilityArgs),

    /// Set or remove an operator's labels on a volume, by which pools choose their members
    ///
    /// `KEY=VALUE` sets a label, `KEY-` removes it. A volume belongs to one pool at most: a
    /// change that would put it in two pools is refused. Each change is an event with who
    /// made it, and the pool the volume joined or left.
    Label(VolumeLabelArgs),

    /// Take a volume out of service: no new claims, then (with --wait) wait until its
    /// holders release it
    ///
    /// Nothing is force-released: the owners release their claims; queued claims wait.
    /// `csivol volume eligibility VOLUME --enable` puts it back in service.
    Drain(VolumeDrainArgs),

    /// Change a volume's mutable parameters through its plugin (ControllerModifyVolume)
    ///
    /// The plugin must report MODIFY_VOLUME. Only the parameters whose value changes are
    /// sent; the others keep theirs. A plugin that answers INVALID_ARGUMENT cannot apply
    /// the values and changed nothing: the modification is shown as infeasible and not
    /// retried; ask for other values (or the ones the volume has, to withdraw it).
    Modify(ModifyArgs),
}

#[derive(Debug, Args)]
pub struct ModifyArgs {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// A mutable parameter to set, KEY=VALUE (repeatable)
    #[arg(
        long = "param",
        visible_alias = "parameter",
        value_name = "KEY=VALUE",
        value_parser = super::snapshot::key_value,
        required = true
    )]
    pub parameters: Vec<(String, String)>,

    #[command(flatten)]
    pub wait: WaitArgs,
}

pub(crate) const REGISTER_EXAMPLE: &str = "Example spec (data.toml):
  name = \"data\"
  plugin = \"ebs\"
  external_id = \"vol-0a1b2c3d\"
  access_mode = \"single-node-writer\"
  attachment = \"file-system\"
  fs_type = \"ext4\"";

pub(crate) const CREATE_EXAMPLE: &str = "Example spec (cache.toml):
  name = \"cache\"
  plugin = \"hostpath\"
  access_mode = \"single-node-writer\"
  attachment = \"file-system\"
  capacity = \"1GiB\"";

#[derive(Debug, Args)]
pub struct ExpandArgs {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// The capacity to reach: bytes, or a size with a unit (`20GiB`, `500M`, `1.5T`;
    /// K/M/G/T are powers of 1000, KiB/MiB/GiB/TiB powers of 1024)
    #[arg(long, value_name = "SIZE", value_parser = capacity, required_unless_present = "cancel")]
    pub capacity: Option<u64>,

    /// Cancel the expansion that failed or keeps failing; the volume keeps what it has
    #[arg(long, conflicts_with = "capacity")]
    pub cancel: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

fn capacity(s: &str) -> Result<u64, String> {
    csivol_api::parse_size(s).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct SpecArgs {
    /// The spec file, `.toml` or `.json` (detected from the content otherwise); `-` reads
    /// stdin
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Where the volumes come from
    #[arg(value_name = "FROM", value_enum)]
    pub from: ImportSource,
    /// The file with the orchestrator's output
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Write each spec to DIR/NAME.toml instead of printing it
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Register the volumes
    #[arg(long)]
    pub apply: bool,
    /// The access mode of the volumes the output gives none (Nomad records a volume's mode
    /// only while it is claimed); without it they are skipped
    #[arg(long, value_name = "MODE")]
    pub access_mode: Option<csivol_api::AccessMode>,
}

/// An orchestrator `volume import` reads.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum ImportSource {
    /// Nomad's `nomad volume status -json`
    Nomad,
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// csivol's plugin id
    #[arg(value_name = "PLUGIN", value_parser = plugin_name)]
    pub plugin: String,
    /// The plugin's id for the volume, as `csivol plugin volumes` lists it
    #[arg(value_name = "EXTERNAL_ID")]
    pub external_id: String,
    /// The volume's name in csivol
    #[arg(long, value_name = "NAME", value_parser = volume_name)]
    pub name: String,
    /// How it may be used: single-node-writer, single-node-reader-only,
    /// single-node-single-writer, single-node-multi-writer, multi-node-reader-only,
    /// multi-node-single-writer or multi-node-multi-writer
    #[arg(long, value_name = "MODE")]
    pub access_mode: csivol_api::AccessMode,
    /// file-system or block-device
    #[arg(long, value_name = "ATTACHMENT", default_value = "file-system", value_parser = attachment)]
    pub attachment: csivol_api::Attachment,
    /// The file system it is mounted with (file-system only; empty: the plugin's default)
    #[arg(long, value_name = "TYPE", default_value = "")]
    pub fs_type: String,
    /// A node the listing has the volume published to, which the operator takes
    /// responsibility for (a csivol node name or the plugin's node id; repeatable)
    #[arg(long, value_name = "NODE")]
    pub published_to: Vec<String>,
    /// Adopt it without ValidateVolumeCapabilities: only for a plugin without a Controller
    /// service, which has nothing to answer the call with; the operator vouches for the
    /// access mode and attachment given
    #[arg(long)]
    pub skip_validation: bool,
    /// How long to wait for the plugin's answer before giving up with exit code 5 (the
    /// check goes on: `csivol volume show NAME`)
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = super::parse_duration)]
    pub timeout: std::time::Duration,
}

fn attachment(s: &str) -> Result<csivol_api::Attachment, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| format!("`{s}`: expected file-system or block-device"))
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub spec: SpecArgs,

    /// Start with the data of this snapshot (CreateVolume's volume_content_source)
    #[arg(long, value_name = "SNAPSHOT", value_parser = super::snapshot::snapshot_name)]
    pub from_snapshot: Option<String>,

    /// Start with a copy of this volume's data: a clone (CreateVolume's
    /// volume_content_source)
    #[arg(long, value_name = "VOLUME", value_parser = volume_name, conflicts_with = "from_snapshot")]
    pub from_volume: Option<String>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct VolumeListArgs {
    /// Only volumes of this plugin
    #[arg(long, value_name = "PLUGIN", value_parser = plugin_name)]
    pub plugin: Option<String>,

    /// Only volumes in this state
    #[arg(long, value_name = "STATE", value_parser = volume_state())]
    pub state: Option<VolumeState>,

    /// Only volumes claimed or attached on this node
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node: Option<String>,
}

#[derive(Debug, Args)]
pub struct VolumeArg {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,
}

#[derive(Debug, Args)]
pub struct DeregisterArgs {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// Also destroy the volume and its data through the plugin (DeleteVolume)
    #[arg(long)]
    pub delete: bool,

    /// Do it without asking
    #[arg(short, long)]
    pub yes: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("choice").required(true)))]
pub struct VolumeEligibilityArgs {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// New claims may be made on the volume again (also ends a drain)
    #[arg(long, group = "choice")]
    pub enable: bool,

    /// No new claims on the volume
    #[arg(long, group = "choice")]
    pub disable: bool,

    /// Why, for the event log and for whoever's claim is refused
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct VolumeDrainArgs {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// Why, for the event log and for whoever's claim is refused
    #[arg(long)]
    pub reason: Option<String>,

    /// Wait until no claim holds the volume (queued claims do not hold it)
    #[arg(long)]
    pub wait: bool,

    /// How long --wait waits before giving up with exit code 5 (the volume stays draining)
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = super::parse_duration)]
    pub deadline: std::time::Duration,
}

#[derive(Debug, Args)]
pub struct VolumeLabelArgs {
    /// The volume's name
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// `KEY=VALUE` to set a label, `KEY-` to remove one
    #[arg(required = true, value_name = "KEY=VALUE|KEY-", value_parser = super::label_change)]
    pub changes: Vec<super::LabelChange>,
}
