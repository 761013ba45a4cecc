//! The command-line interface: every command, flag and help text. The doc comments are the
//! help text, and the completions and man pages are generated from these definitions.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::PossibleValuesParser;
use clap::builder::TypedValueParser;
use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use csivol_api::{ClaimState, Role, VolumeState, validate_name};

use crate::env;
use crate::failure::EXIT_CODES;

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
    /// Server address [env: CSIVOL_ADDR] [default: http://127.0.0.1:7420, https:// when
    /// $XDG_CONFIG_HOME/csivol/ca.pem exists]
    #[arg(long, global = true, value_name = "URL", help_heading = GLOBAL)]
    pub addr: Option<String>,

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
    /// to unblock each, then the volumes. With VOLUME: its spec (secrets redacted),
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
    /// releases them without it (an unblock). Shows what will happen and asks on a
    /// terminal; elsewhere it needs --yes.
    Detach(DetachArgs),

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

    /// Names for shell completion, one per line (used by the bash completion script)
    #[command(name = "__complete", hide = true)]
    Complete(CompleteArgs),
}

#[derive(Debug, Args)]
pub struct CompleteArgs {
    /// `volumes` or `nodes`
    #[arg(value_parser = ["volumes", "nodes"])]
    pub what: String,
}

#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Register an existing volume from a TOML or JSON spec
    ///
    /// The spec has `name`, `plugin`, `external_id` (the plugin's id for the volume),
    /// `access_mode`, `attachment` (`file-system` or `block-device`) and optionally
    /// `fs_type`, `mount_flags`, `context`, `parameters` and `secrets`. Registering the
    /// same spec again changes nothing.
    Register(SpecArgs),

    /// Create a volume through its plugin's controller (CreateVolume), then register it
    ///
    /// The spec has `name`, `plugin`, `access_mode`, `attachment` and optionally
    /// `capacity_bytes`, `fs_type`, `mount_flags`, `parameters` and `secrets`.
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
}

#[derive(Debug, Args)]
pub struct SpecArgs {
    /// The spec file, `.toml` or `.json` (detected from the content otherwise); `-` reads
    /// stdin
    #[arg(value_name = "FILE|-")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub spec: SpecArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
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
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ClaimArgs {
    #[command(subcommand)]
    pub command: Option<ClaimCommand>,

    /// The volume to claim
    #[arg(value_parser = volume_name, required = true)]
    pub volume: Option<String>,

    /// The node the alloc runs on
    #[arg(long, value_name = "NODE", value_parser = node_name, env = env::CSIVOL_NODE, required = true)]
    pub node: Option<String>,

    /// The alloc (workload) claiming the volume; claiming again with the same alloc is a
    /// no-op
    #[arg(long, value_name = "ALLOC", value_parser = alloc_name, required = true)]
    pub alloc: Option<String>,

    /// Claim it for reading only
    #[arg(long)]
    pub read_only: bool,

    /// A lease: the server releases the claim unless it is renewed within this long
    /// (`csivol claim renew`)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,

    /// Wait in the volume's queue when other claims are in the way, instead of a refusal;
    /// queued claims are granted in arrival order
    #[arg(long)]
    pub queue: bool,

    /// A label for the claim, shown with it and in the event log (e.g. the CI job's URL).
    /// Repeatable
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    pub labels: Vec<(String, String)>,

    /// Only say whether the claim would be accepted, and why not; records nothing
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,

    /// When --wait runs out of --timeout, release the claim instead of leaving it
    #[arg(long, requires = "wait")]
    pub release_on_timeout: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Subcommand)]
pub enum ClaimCommand {
    /// Extend a claim's lease from now
    Renew(RenewArgs),
    /// List claims across volumes, oldest first
    List(ClaimListArgs),
}

#[derive(Debug, Args)]
pub struct RenewArgs {
    /// The claimed volume
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// The alloc whose claim to renew
    #[arg(long, value_name = "ALLOC", value_parser = alloc_name)]
    pub alloc: String,

    /// The new lease, from now [default: the claim's own TTL]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ClaimListArgs {
    /// Only claims of this volume
    #[arg(long, value_name = "VOLUME", value_parser = volume_name)]
    pub volume: Option<String>,

    /// Only claims on this node
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node: Option<String>,

    /// Only claims in this state
    #[arg(long, value_name = "STATE", value_parser = claim_state())]
    pub state: Option<ClaimState>,

    /// Only claims made longer ago than this (e.g. 1h)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub older_than: Option<Duration>,

    /// Only claims with this label. Repeatable: all must match
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    pub labels: Vec<(String, String)>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The volumes, `NAME` for a write claim or `NAME:ro` for a read claim
    #[arg(value_name = "VOLUME[:ro]", required = true, value_parser = run_volume)]
    pub volumes: Vec<(String, bool)>,

    /// The node the command runs on (this machine's node)
    #[arg(long, value_name = "NODE", value_parser = node_name, env = env::CSIVOL_NODE)]
    pub node: String,

    /// The alloc the claims are made for [default: from the CI job (GITHUB_RUN_ID,
    /// CI_JOB_ID, BUILD_TAG, BUILDKITE_JOB_ID), else random; printed]
    #[arg(long, value_name = "ALLOC", value_parser = alloc_name)]
    pub alloc: Option<String>,

    /// The claims' lease, renewed every third of it while the command runs
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10m")]
    pub ttl: Duration,

    /// Wait in line for volumes held by others instead of failing
    #[arg(long)]
    pub queue: bool,

    /// How long to wait for every volume to be ready (with --queue: including the wait in
    /// line)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2m")]
    pub timeout: Duration,

    /// A label for every claim (e.g. the CI job's URL). Repeatable
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    pub labels: Vec<(String, String)>,

    /// Do not wait for the release to finish after the command
    #[arg(long)]
    pub no_wait_release: bool,

    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The claimed volume
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// The alloc whose claim to release
    #[arg(long, value_name = "ALLOC", value_parser = alloc_name)]
    pub alloc: String,

    /// Exit 0 when the claim is already gone or being released (a missing volume is still
    /// exit 3): for scripts that may release twice
    #[arg(long)]
    pub ignore_missing: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Show this volume in detail
    #[arg(value_parser = volume_name)]
    pub volume: Option<String>,

    /// Only blocked volumes, with the lost node and the unblock command; exit code 6 when
    /// any is blocked, 0 when none is
    #[arg(long)]
    pub blocked: bool,

    /// Only volumes claimed or attached on this node, and only this node
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node: Option<String>,

    /// Keep it on screen and redraw it when something changes (blocking queries on the
    /// event log, and every few seconds for heartbeat countdowns) until interrupted
    #[arg(short, long)]
    pub watch: bool,
}

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

#[derive(Debug, Args)]
pub struct ConfirmArgs {
    /// Do it without asking
    #[arg(short, long)]
    pub yes: bool,

    /// Only show what would happen
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List nodes with their status, heartbeat and plugins
    List,
    /// Show a node: status, heartbeat against the TTL, eligibility, plugins, claims,
    /// attachments, blocked volumes and recent events
    Show(NodeArg),
    /// Take a node out of service: no new claims on it, then (with --wait) wait until its
    /// claims are released by their owners
    ///
    /// Nothing is force-released: the owners release their claims. When the node holds
    /// nothing, `csivol node remove NODE` forgets it; `csivol node eligibility NODE
    /// --enable` puts it back in service.
    Drain(NodeDrainArgs),
    /// Whether a node takes new claims (existing claims are not touched)
    Eligibility(NodeEligibilityArgs),
    /// Forget a node that holds nothing: no claim, no attachment, nothing blocked
    ///
    /// Refused otherwise, with the command that gets it there (a drain, or an unblock for
    /// a lost node). An agent that registers the node again brings it back.
    Remove(NodeArg),
}

#[derive(Debug, Args)]
pub struct NodeDrainArgs {
    /// The node's name
    #[arg(value_parser = node_name)]
    pub node: String,

    /// Wait until no claim is left on the node
    #[arg(long)]
    pub wait: bool,

    /// How long --wait waits before giving up with exit code 5 (the node stays draining)
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub deadline: Duration,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("choice").required(true)))]
pub struct NodeEligibilityArgs {
    /// The node's name
    #[arg(value_parser = node_name)]
    pub node: String,

    /// New claims may be made on the node again (also ends a drain)
    #[arg(long, group = "choice")]
    pub enable: bool,

    /// No new claims on the node
    #[arg(long, group = "choice")]
    pub disable: bool,
}

#[derive(Debug, Args)]
pub struct NodeArg {
    /// The node's name
    #[arg(value_parser = node_name)]
    pub node: String,
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// List plugins with their health across nodes
    List,
    /// Show a plugin
    Show(PluginArg),
    /// Show which nodes may host a plugin's controller, or allow and disallow nodes
    ///
    /// A node hosts a plugin's controller (and receives its controller operations, secrets
    /// included) only when its node token names the plugin (`csivol token create --role
    /// node --node N --controller PLUGIN`) or an operator allowed it here; other agents'
    /// controller registrations are refused. Disallowing takes effect at the node's next
    /// registration; to cut a host off at once, also revoke its token.
    Controllers(PluginControllersArgs),
}

#[derive(Debug, Args)]
pub struct PluginControllersArgs {
    /// csivol's plugin id
    #[arg(value_name = "PLUGIN")]
    pub plugin: String,

    /// Allow this node to host the plugin's controller (repeatable)
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub allow: Vec<String>,

    /// No longer allow this node (repeatable); a grant in its token still counts
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub disallow: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PluginArg {
    /// The plugin's id
    #[arg(value_parser = plugin_name)]
    pub plugin: String,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only events of this volume
    #[arg(long, value_name = "VOLUME", value_parser = volume_name)]
    pub volume: Option<String>,

    /// Only events of this node
    #[arg(long, value_name = "NODE", value_parser = node_name)]
    pub node: Option<String>,

    /// Keep printing new events as they happen (with -o json: one object per line);
    /// starts at the end of the log unless --since or --tail says otherwise
    #[arg(short, long)]
    pub follow: bool,

    /// Only events of the last DURATION (e.g. 10m, 2h)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<Duration>,

    /// Only the last N events (after the other filters)
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once, on stdout
    Create(TokenCreateArgs),
    /// List tokens (never their secrets): role, node, when created, last used, expiry
    List,
    /// Revoke a token: requests with it are refused (401) from then on
    ///
    /// The last usable operator token cannot be revoked.
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token's id (`csivol token list`)
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// What the token may do: `operator` everything, `reader` read only, `claimer` read and
    /// claim, renew, queue and release (CI jobs), `node` one node's agent
    #[arg(long, value_name = "ROLE", value_parser = role())]
    pub role: Role,

    /// The node a `node` token acts for
    #[arg(long, value_name = "NODE", value_parser = node_name, required_if_eq("role", "node"))]
    pub node: Option<String>,

    /// A name people recognise (`alice`, `ci-deploy`), unique; the event log names the
    /// token's actions `ROLE:NAME` (e.g. `operator:alice`) instead of `ROLE:ID`
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,

    /// The token expires after this long (e.g. 30d, 12h); without it, it lasts until revoked
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub ttl: Option<Duration>,

    /// A `node` token's node may host this plugin's controller (repeatable); other nodes'
    /// controller registrations are refused unless an operator allows them
    /// (`csivol plugin controllers PLUGIN --allow NODE`)
    #[arg(long = "controller", value_name = "PLUGIN", requires = "node")]
    pub controllers: Vec<String>,
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

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (use e.g. 90s, 2m, 1h)"))
}

fn volume_name(s: &str) -> Result<String, String> {
    validate_name("volume", s).map(|()| s.to_owned())
}

fn node_name(s: &str) -> Result<String, String> {
    validate_name("node", s).map(|()| s.to_owned())
}

fn alloc_name(s: &str) -> Result<String, String> {
    validate_name("alloc", s).map(|()| s.to_owned())
}

fn plugin_name(s: &str) -> Result<String, String> {
    validate_name("plugin", s).map(|()| s.to_owned())
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
fn run_volume(s: &str) -> Result<(String, bool), String> {
    let (name, ro) = match s.strip_suffix(":ro") {
        Some(name) => (name, true),
        None => (s, false),
    };
    validate_name("volume", name)?;
    Ok((name.to_owned(), ro))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
