//! The command-line interface: every command, flag and help text. The doc comments are the
//! help text, and the completions and man pages are generated from these definitions.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::builder::TypedValueParser;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use csivol_api::{AllocName, ClaimState, NodeName, PluginName, Role, VolumeName, VolumeState};

use crate::env;
use crate::failure::EXIT_CODES;

mod claim;
mod namespace;
mod node;
mod operator;
mod pool;
mod snapshot;
mod token;
mod volume;

pub use claim::*;
pub use namespace::*;
pub use node::*;
pub use operator::*;
pub use pool::*;
pub use snapshot::*;
pub use token::*;
pub use volume::*;

/// Attach and detach CSI volumes across a cluster: the client of a csivol server.
///
/// Operators and CI pipelines claim a volume for an alloc (a workload) on a node; csivol
/// attaches and mounts it there and says when it is ready. A volume whose node was lost stays
/// blocked until the node comes back or an operator runs `csivol unblock`.
///
/// Tables and JSON go to stdout, progress and hints to stderr.
#[derive(Debug, Parser)]
#[command(
    name = "csivol",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_long_help = after_long_help()
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The help heading of the options every command takes.
const GLOBAL: &str = "Global options";

#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Server address; several servers of one cluster comma-separated or repeated, tried
    /// in turn when one cannot be reached. The token goes over plain http:// only to a
    /// loopback address (127.0.0.0/8, ::1, localhost); without a scheme, https:// when a CA
    /// is given (--ca-cert, CSIVOL_CACERT or the default CA file), else http:// on loopback
    /// only [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when
    /// $XDG_CONFIG_HOME/csivol/ca.pem exists]
    #[arg(long, global = true, value_name = "URL", value_delimiter = ',', help_heading = GLOBAL)]
    pub addr: Vec<String>,

    /// CA certificate (PEM) the server's certificate must chain to [env: CSIVOL_CACERT, then
    /// $XDG_CONFIG_HOME/csivol/ca.pem, then the system's roots]
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    pub ca_cert: Option<PathBuf>,

    /// API token [env: CSIVOL_TOKEN, then the file named by CSIVOL_TOKEN_FILE, then
    /// $XDG_CONFIG_HOME/csivol/token or ~/.config/csivol/token]
    #[arg(long, global = true, value_name = "TOKEN", help_heading = GLOBAL)]
    pub token: Option<String>,

    /// Output format: `table` for people (fitted to the terminal: the least important
    /// columns are cut with `…`), `wide` (a table with nothing cut), `json` for scripts
    /// (stable field names)
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Table, help_heading = GLOBAL)]
    pub output: Format,

    /// Turn colour off (so does a non-empty NO_COLOR)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub no_color: bool,

    /// Print only data and errors: no progress, notes or hints on stderr
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,

    /// Allow possibly stale reads: with several servers over etcd, the server answers from
    /// its own copy of the state without first catching up with the writes the others
    /// acknowledged last (cheaper; reads are consistent by default)
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub stale: bool,

    /// The namespace of the volumes, claims and events a command names or lists (`csivol
    /// namespace list`); with `token create`, a namespace the new token is narrowed to
    /// (repeatable; `*` every namespace) [env: CSIVOL_NAMESPACE] [default: default]
    #[arg(short = 'n', long, global = true, value_name = "NS", value_parser = namespace_name, action = clap::ArgAction::Append, help_heading = GLOBAL)]
    pub namespace: Vec<String>,

    /// List what every namespace holds, with a NAMESPACE column (listings only)
    #[arg(short = 'A', long, global = true, conflicts_with = "namespace", help_heading = GLOBAL)]
    pub all_namespaces: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table fitted to the terminal
    Table,
    /// A table with nothing cut and times in full
    Wide,
    /// JSON, the API's types (stable field names)
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Register, create, list, show and deregister volumes
    #[command(subcommand)]
    Volume(VolumeCommand),

    /// Snapshot volumes; list, show and delete snapshots
    #[command(subcommand)]
    Snapshot(SnapshotCommand),

    /// Claim a volume for an alloc on a node; renew a claim's lease; list claims
    ///
    /// The claim is recorded at once (or refused, with the reason and exit code); with
    /// --wait, csivol follows it until the volume is mounted on the node and prints the claim
    /// with its target path. Interrupted (SIGINT, SIGTERM) while waiting, it releases the
    /// claim it made and exits 130 or 143. `claim renew` and `claim list` are subcommands
    /// (a volume named `renew` or `list` is claimed with `csivol claim -- renew ...`).
    Claim(ClaimArgs),

    /// Claim volumes, run a command with them mounted, release them: a CI job in one line
    ///
    /// Claims every VOLUME (write, or read with `:ro`), waits until all are ready, runs
    /// COMMAND with CSIVOL_PATH (one volume) and CSIVOL_PATH_<NAME> (each volume, upper-case,
    /// `-` and `.` as `_`) set to the target paths, renews the claims' leases while it runs,
    /// forwards SIGINT, SIGTERM and SIGHUP to it, then releases every claim and waits for
    /// the release. Exits with COMMAND's status, or with csivol's own code when COMMAND never
    /// ran. If the job dies, the leases run out and the server releases the claims.
    Run(RunArgs),

    /// Release an alloc's claim on a volume
    ///
    /// The node unmounts it; once the last claim on a node is gone, the volume is unstaged
    /// and detached from the node.
    Release(ReleaseArgs),

    /// Show the cluster at a glance, one volume in detail, or the blocked volumes
    ///
    /// Without arguments: volumes by state, nodes by status, blocked volumes with the command
    /// to unblock each, what controller-side reconciliation found (attachments the storage
    /// system has and csivol does not, the reverse, abnormal volumes), then the volumes.
    /// With VOLUME: its spec (secrets redacted),
    /// attachments and claims. With --blocked: only blocked volumes; the exit code is 0 when
    /// none are blocked and 6 when some are, so a pipeline can gate on it.
    Status(StatusArgs),

    /// Free volumes held by a lost node: force-release its claims and force-detach
    ///
    /// Only do this when the node is really gone or fenced: csivol cannot prove the node
    /// stopped writing. Shows what will happen and asks on a terminal; elsewhere it needs
    /// --yes.
    #[command(group(ArgGroup::new("target").required(true).multiple(true).args(["volume", "node"])))]
    Unblock(UnblockArgs),

    /// Power a lost node off through its fence method, then unblock its volumes with the
    /// proof
    ///
    /// Runs the fence method the server's config gives the node (a command such as
    /// fence_ipmilan that exits 0 only once the node is confirmed off), records the evidence
    /// (method, command, exit status, output, duration, who and why) in the event log, marks
    /// the node `fenced`, then force-releases its claims and force-detaches its volumes as
    /// `unblock --node` does. A fence that fails or times out changes nothing and says why
    /// (exit 1). Only for a lost node; a ready one needs --force and a second confirmation.
    /// Shows what will happen and asks on a terminal; elsewhere it needs --yes.
    Fence(FenceArgs),

    /// Take a volume off a node: release every claim it has there
    ///
    /// On a ready node the claims are released through the node. On a lost node, --force
    /// releases them without it (an unblock). Where csivol has nothing of the volume on the
    /// node but the plugin has it published there (a `leaked` finding in `csivol status`),
    /// it is unpublished (ControllerUnpublishVolume). Shows what will happen and asks on a
    /// terminal; elsewhere it needs --yes.
    Detach(DetachArgs),

    /// Create, list, show and delete pools: volumes chosen by their labels, any free one
    /// claimed at a time (`csivol claim --pool`, `csivol run --pool`)
    #[command(subcommand)]
    Pool(PoolCommand),

    /// Create, list, show and delete namespaces: teams' volumes, claims and events apart
    #[command(subcommand)]
    Namespace(NamespaceCommand),

    /// List nodes, or show one
    #[command(subcommand)]
    Node(NodeCommand),

    /// List plugins, or show one
    #[command(subcommand)]
    Plugin(PluginCommand),

    /// Show the audit trail, or follow it
    Events(EventsArgs),

    /// Create, list and revoke API tokens
    #[command(subcommand)]
    Token(TokenCommand),

    /// Print a shell completion script
    ///
    /// bash: `csivol completions bash > /etc/bash_completion.d/csivol`;
    /// zsh: `csivol completions zsh > "${fpath[1]}/_csivol"`;
    /// fish: `csivol completions fish > ~/.config/fish/completions/csivol.fish`.
    Completions(CompletionsArgs),
}

/// The first word of `csivol __complete volumes|nodes|pools|namespaces`, which the completion
/// scripts run.
pub const COMPLETE: &str = "__complete";

/// Names for shell completion, one per line: what the completion scripts ask for. Parsed
/// apart from [`Cli`], so that neither the completions nor the help list it.
#[derive(Debug, Parser)]
#[command(name = "csivol __complete")]
pub struct CompleteArgs {
    #[command(flatten)]
    pub global: GlobalArgs,

    /// `volumes`, `nodes`, `pools` or `namespaces`
    #[arg(value_parser = ["volumes", "nodes", "pools", "namespaces"])]
    pub what: String,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// Wait until it is done, showing progress on a terminal
    #[arg(long)]
    pub wait: bool,

    /// How long --wait waits before giving up with exit code 5
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct ConfirmArgs {
    /// Do it without asking
    #[arg(short, long)]
    pub yes: bool,

    /// Only show what would happen
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// clap's error for a command line, with the fix where clap's own would mislead: `csivol
/// run VOLUME --node N sh -c "..."` stops at `-c`, and clap's tip "use '-- -c'" would pass
/// `-c` alone; a command left without `--` is taken for volumes. Either way the fix is the
/// same: the command goes after `--`. A node missing from `claim` or `run` is named with
/// both ways to give it, and an empty `CSIVOL_NODE` is named as the variable it is.
pub fn usage_error(e: clap::Error) -> clap::Error {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let rendered = e.render().to_string();
    // clap names the command in its usage line, which an invalid value's error lacks: then
    // the first word of the command line that names one of them.
    let command = ["run", "claim"]
        .into_iter()
        .find(|c| rendered.contains(&format!("Usage: csivol {c} ")))
        .or_else(|| {
            let words: Vec<String> = std::env::args().skip(1).collect();
            words.into_iter().find_map(|w| match w.as_str() {
                "run" => Some("run"),
                "claim" => Some("claim"),
                _ => None,
            })
        });
    let Some(command) = command else {
        return e;
    };
    let missing: Vec<String> = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(args)) if e.kind() == ErrorKind::MissingRequiredArgument => {
            args.clone()
        }
        _ => Vec::new(),
    };
    let node_arg = |v: Option<&ContextValue>| matches!(v, Some(ContextValue::String(a)) if a.starts_with("--node "));
    let empty_env_node = matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) && node_arg(e.get(ContextKind::InvalidArg))
        && matches!(e.get(ContextKind::InvalidValue), Some(ContextValue::String(v)) if v.is_empty())
        && std::env::var_os(env::CSIVOL_NODE).is_some_and(|v| v.is_empty())
        && !std::env::args_os().any(|a| a.to_string_lossy().starts_with("--node"));
    let no_node = missing.iter().any(|a| a.starts_with("--node "));
    let no_command = missing.iter().any(|a| a.contains("<COMMAND>"));
    let no_dashes = match e.kind() {
        // A misspelt flag of csivol's own gets clap's suggestion of the right one.
        ErrorKind::UnknownArgument => e.get(ContextKind::SuggestedArg).is_none(),
        _ => no_command,
    };
    let mut cli = Cli::command();
    cli.build();
    let mut sub = cli.find_subcommand(command).expect("the command").clone();
    let usage = sub.render_usage();
    let example = match command {
        "run" => "csivol run VOLUME --node NODE -- sh -c \"make test\"",
        _ => "csivol claim VOLUME --node NODE --alloc ALLOC",
    };
    let message = if empty_env_node {
        format!(
            "{} is set but empty, so no node is given: set it to the node this runs on, or pass \
             --node NODE, as in\n  {example}",
            env::CSIVOL_NODE
        )
    } else if no_node {
        let and_dashes = if command == "run" && no_dashes {
            "; and put the command after `--`"
        } else {
            ""
        };
        format!(
            "no node given: pass --node NODE (the node the alloc runs on) or set {} (a CI \
             runner sets it once for its jobs){and_dashes}, as in\n  {example}",
            env::CSIVOL_NODE
        )
    } else if command == "run" && no_dashes {
        format!(
            "put the command after `--`: every word before it is a volume or a flag of csivol's, \
             as in\n  {example}"
        )
    } else {
        return e;
    };
    clap::Error::raw(
        e.kind(),
        format!("{message}\n\n{usage}\n\nFor more information, try '--help'.\n"),
    )
}

fn after_long_help() -> String {
    let mut s = String::from("Exit codes:\n");
    for (exit, meaning) in EXIT_CODES {
        s.push_str(&format!("  {}  {meaning}\n", exit.code()));
    }
    s.push_str(&format!(
        "\nAddress: --addr, else {}, else {}.\nToken: --token, else {}, else the file named by {}, \
         else $XDG_CONFIG_HOME/{tf} (~/.config/{tf}).",
        env::CSIVOL_ADDR,
        env::DEFAULT_ADDR,
        env::CSIVOL_TOKEN,
        env::CSIVOL_TOKEN_FILE,
        tf = env::DEFAULT_TOKEN_FILE,
    ));
    s
}

/// Every duration flag: humantime's forms, at most csivol's longest duration (100 years),
/// so that no lease, token or wait wraps a clock.
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (use e.g. 90s, 2m, 1h)"))?;
    if d > csivol_api::limits::MAX_DURATION {
        return Err(format!(
            "`{s}` is longer than 100 years, the longest duration csivol takes"
        ));
    }
    Ok(d)
}

fn namespace_name(s: &str) -> Result<String, String> {
    if s == csivol_api::ALL_NAMESPACES {
        return Ok(s.to_owned());
    }
    csivol_api::validate_namespace(s)
        .map(|()| s.to_owned())
        .map_err(|e| format!("{e} (`csivol namespace list` lists them)"))
}

fn volume_name(s: &str) -> Result<String, String> {
    VolumeName::new(s).map(String::from)
}

fn node_name(s: &str) -> Result<String, String> {
    NodeName::new(s).map(String::from)
}

fn pool_name(s: &str) -> Result<String, String> {
    // Pools are named by the volumes' rule.
    VolumeName::new(s)
        .map(String::from)
        .map_err(|e| e.replace("volume", "pool"))
}

/// `SHORT=POOL`, `run --pool`'s: the job's name for the member, and the pool.
fn run_pool(s: &str) -> Result<(String, String), String> {
    let (short, pool) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=POOL, e.g. cache=build-cache"))?;
    let short = VolumeName::new(short)
        .map_err(|e| format!("`{short}` (the job's name for the member): {e}"))?;
    Ok((short.into_string(), pool_name(pool)?))
}

fn alloc_name(s: &str) -> Result<String, String> {
    AllocName::new(s).map(String::from)
}

fn plugin_name(s: &str) -> Result<String, String> {
    PluginName::new(s).map(String::from)
}

fn reason(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("say why: the reason goes into the event log".into());
    }
    Ok(s.to_owned())
}

fn volume_state() -> impl TypedValueParser<Value = VolumeState> {
    PossibleValuesParser::new(VolumeState::ALL.map(|s| s.as_str()))
        .map(|s| s.parse().expect("a possible value"))
}

fn role() -> impl TypedValueParser<Value = Role> {
    PossibleValuesParser::new(["operator", "reader", "claimer", "node"])
        .map(|s| s.parse().expect("a role"))
}

fn capability() -> impl TypedValueParser<Value = csivol_api::Capability> {
    PossibleValuesParser::new(csivol_api::Capability::ALL.map(|c| c.as_str()))
        .map(|s| s.parse().expect("a capability"))
}

fn volume_pattern(s: &str) -> Result<String, String> {
    csivol_api::validate_pattern(s)?;
    Ok(s.to_owned())
}

fn claim_state() -> impl TypedValueParser<Value = ClaimState> {
    PossibleValuesParser::new(ClaimState::ALL.map(|s| s.as_str()))
        .map(|s| s.parse().expect("a possible value"))
}

fn label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected KEY=VALUE, e.g. job=https://ci.example/123"))?;
    if k.is_empty() || k.len() > 63 || k.contains(',') {
        return Err(format!(
            "`{k}`: a label key has 1 to 63 characters, without `,`"
        ));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// `NAME` or `NAME:ro`.
/// A per-job volume as `--fresh` names it: `NAME=snapshot:SNAP`, `NAME=volume:VOL` or
/// `NAME=spec:FILE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fresh {
    /// The job's name for it (`CSIVOL_PATH_<NAME>`).
    pub name: String,
    pub source: FreshFrom,
}

/// What a per-job volume is made from, as `--fresh` says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreshFrom {
    Snapshot(String),
    Volume(String),
    Spec(PathBuf),
}

fn fresh(s: &str) -> Result<Fresh, String> {
    let usage = "use NAME=snapshot:SNAP, NAME=volume:VOL or NAME=spec:FILE";
    let (name, from) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` names no source ({usage})"))?;
    let name = csivol_api::validate_name("volume", name).map(|()| name.to_owned())?;
    let source = match from.split_once(':') {
        Some(("snapshot", snap)) => FreshFrom::Snapshot(
            csivol_api::validate_name("snapshot", snap).map(|()| snap.to_owned())?,
        ),
        Some(("volume", vol)) => FreshFrom::Volume(VolumeName::new(vol)?.into_string()),
        Some(("spec", file)) if !file.is_empty() => FreshFrom::Spec(file.into()),
        _ => return Err(format!("`{from}` is not a source ({usage})")),
    };
    Ok(Fresh { name, source })
}

fn run_volume(s: &str) -> Result<(String, bool), String> {
    let (name, ro) = match s.strip_suffix(":ro") {
        Some(name) => (name, true),
        None => (s, false),
    };
    Ok((VolumeName::new(name)?.into_string(), ro))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn spec_help_lists_every_access_mode_and_attachment() {
        let cmd = Cli::command();
        let volume = cmd.find_subcommand("volume").unwrap();
        for verb in ["register", "create"] {
            let help = volume
                .find_subcommand(verb)
                .unwrap()
                .get_long_about()
                .unwrap()
                .to_string();
            for mode in csivol_api::domain::AccessMode::ALL {
                assert!(help.contains(mode.as_str()), "{verb}: {mode:?}");
            }
            for a in [
                csivol_api::Attachment::FileSystem,
                csivol_api::Attachment::BlockDevice,
            ] {
                assert!(help.contains(a.as_str()), "{verb}: {a:?}");
            }
            // What a file-system volume allows its claims' mounts, and every ownership.
            for field in ["claim_mount_flags", "selinux_context", "`ownership`"] {
                assert!(help.contains(field), "{verb}: {field}");
            }
            for o in [
                csivol_api::Ownership::Never,
                csivol_api::Ownership::OnRootMismatch,
                csivol_api::Ownership::Recursive,
            ] {
                assert!(help.contains(o.as_str()), "{verb}: {o:?}");
            }
        }
    }

    /// `claim` and `run` shape a claim's mount with the same flags, described alike.
    #[test]
    fn claim_and_run_describe_their_mount_flags_alike() {
        let cmd = Cli::command();
        let help = |verb: &str, arg: &str| {
            let sub = cmd.find_subcommand(verb).unwrap();
            let a = sub
                .get_arguments()
                .find(|a| a.get_id() == arg)
                .unwrap_or_else(|| panic!("{verb} has no {arg}"));
            (
                a.get_help().map(ToString::to_string),
                a.get_long_help().map(ToString::to_string),
                a.get_value_names().map(|v| v.to_vec()),
            )
        };
        for arg in ["gid", "group", "mount_flags", "selinux_context"] {
            assert_eq!(help("claim", arg), help("run", arg), "--{arg}");
        }
    }
}
