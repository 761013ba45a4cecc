//! Claims: `claim` (and its `list`, `renew`), `run`, `release`, `status`.

use std::time::Duration;

use clap::{Args, Subcommand};
use csivol_api::ClaimState;

use crate::env;

use super::{
    Fresh, WaitArgs, alloc_name, claim_state, fresh, label, node_name, parse_duration, pool_name,
    run_pool, run_volume, volume_name,
};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ClaimArgs {
    #[command(subcommand)]
    pub command: Option<ClaimCommand>,

    /// The volume to claim
    #[arg(value_parser = volume_name, required_unless_present_any = ["fresh", "pool"], conflicts_with = "pool")]
    pub volume: Option<String>,

    /// Claim a volume made for this claim instead: `NAME=snapshot:SNAP` (with the
    /// snapshot's data), `NAME=volume:VOL` (a clone) or `NAME=spec:FILE` (a `volume
    /// create` spec). It is created in the topology of --node and deleted after the
    /// release, or when the lease (--ttl, required) runs out; its name is shown
    #[arg(long, value_name = "NAME=SOURCE", value_parser = fresh, conflicts_with_all = ["volume", "queue", "pool"])]
    pub fresh: Option<Fresh>,
    /// Claim any free member of this pool instead of a named volume: the server picks the
    /// warmest for --cache-key and says which and why; with --queue, a claim that finds
    /// every member taken waits in the pool's line
    #[arg(long, value_name = "POOL", value_parser = pool_name, conflicts_with = "dry_run")]
    pub pool: Option<String>,

    /// The job's cache key (e.g. the branch): a member last released with it is preferred,
    /// and a release with `csivol release --succeeded` records it as the member's
    #[arg(long, value_name = "KEY", requires = "pool")]
    pub cache_key: Option<String>,

    /// A prefix of cache keys to fall back on, tried in order after --cache-key itself (like
    /// GitHub's restore-keys). Repeatable
    #[arg(long = "restore-key", value_name = "PREFIX", requires = "cache_key")]
    pub restore_keys: Vec<String>,

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
    /// queued claims are granted in arrival order. With --pool: wait in the pool's line
    /// for any member
    #[arg(long)]
    pub queue: bool,

    /// A label for the claim, shown with it and in the event log (e.g. the CI job's URL).
    /// Repeatable
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    pub labels: Vec<(String, String)>,

    #[command(flatten)]
    pub mount: MountArgs,

    /// Only say whether the claim would be accepted, and why not; records nothing
    #[arg(long, conflicts_with = "wait")]
    pub dry_run: bool,

    /// When --wait runs out of --timeout, release the claim instead of leaving it
    #[arg(long, requires = "wait")]
    pub release_on_timeout: bool,

    #[command(flatten)]
    pub wait: WaitArgs,
}

/// How a claim asks for its volume to be mounted: one definition for `claim` and `run`,
/// so that their help says the same.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The group (a gid) the workload writes the volume as: the node plugin applies it where
    /// it has VOLUME_MOUNT_GROUP, else csivol gives the volume's root that group, g+rwX and
    /// setgid where the `ownership` of the volume or of its plugin (the server's config)
    /// allows it; refused otherwise. `run` asks by default for the caller's primary group
    /// when the caller is not root, and where that cannot be applied runs without it and
    /// says why
    #[arg(long, value_name = "GID", conflicts_with = "group")]
    pub gid: Option<u32>,

    /// Like --gid, the group named on this machine (/etc/group)
    #[arg(long, value_name = "NAME")]
    pub group: Option<String>,

    /// A mount flag for the claim's own mount (e.g. `noatime`), among the volume spec's
    /// `claim_mount_flags`; sent with NodePublishVolume only. `ro`/`rw` are the claim's
    /// mode (`claim --read-only`, `run VOLUME:ro`), not flags. Repeatable
    #[arg(long = "mount-flag", value_name = "FLAG")]
    pub mount_flags: Vec<String>,

    /// The SELinux context to mount the volume with (e.g.
    /// `system_u:object_r:container_file_t:s0:c1,c2`), passed as a `context="..."` mount
    /// flag; only for a plugin the server's config declares able to (`selinux_mount`)
    #[arg(long, value_name = "CONTEXT")]
    pub selinux_context: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ClaimCommand {
    /// Extend a claim's lease from now
    Renew(RenewArgs),
    /// List claims across volumes, oldest first
    List(ClaimListArgs),
    /// Show one claim: its state, its mount (group and who applies it, what csivol's
    /// ownership change did, its own flags and SELinux context), lease and labels
    Show(ClaimShowArgs),
}

#[derive(Debug, Args)]
pub struct ClaimShowArgs {
    /// The claimed volume
    #[arg(value_parser = volume_name)]
    pub volume: String,

    /// The alloc whose claim to show
    #[arg(long, value_name = "ALLOC", value_parser = alloc_name)]
    pub alloc: String,
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
    #[arg(value_name = "VOLUME[:ro]", required_unless_present_any = ["fresh", "pools"], value_parser = run_volume)]
    pub volumes: Vec<(String, bool)>,

    /// A free member of a pool, `NAME=POOL` (write): the server picks the warmest for
    /// --cache-key; COMMAND gets its target path as CSIVOL_PATH_<NAME> and the member's
    /// volume name as CSIVOL_VOLUME_<NAME>. Repeatable
    #[arg(long = "pool", value_name = "NAME=POOL", value_parser = run_pool)]
    pub pools: Vec<(String, String)>,

    /// The job's cache key (e.g. the branch): a pool member last released with it is
    /// preferred, and recorded as the member's key when COMMAND exits 0 (a failed or killed
    /// job leaves the key the member had)
    #[arg(long, value_name = "KEY", requires = "pools")]
    pub cache_key: Option<String>,

    /// A prefix of cache keys to fall back on, tried in order after --cache-key itself (like
    /// GitHub's restore-keys). Repeatable
    #[arg(long = "restore-key", value_name = "PREFIX", requires = "cache_key")]
    pub restore_keys: Vec<String>,

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

    /// Wait in line for volumes held by others instead of failing (for a pool, in the
    /// pool's line for any member)
    #[arg(long)]
    pub queue: bool,

    /// A volume made for this job: `NAME=snapshot:SNAP` (with the snapshot's data),
    /// `NAME=volume:VOL` (a clone) or `NAME=spec:FILE` (a `volume create` spec), created in
    /// the topology of --node and deleted after the job; `CSIVOL_PATH_<NAME>` is its path,
    /// `CSIVOL_VOLUME_<NAME>` its name. Repeatable
    #[arg(long, value_name = "NAME=SOURCE", value_parser = fresh)]
    pub fresh: Vec<Fresh>,

    /// When the command fails, keep its per-job volumes this long after the release (under
    /// their names, listed by `volume list`) for inspection, then delete them
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "fresh")]
    pub keep_on_failure: Option<Duration>,

    /// How long to wait for every volume to be ready (with --queue: including the wait in
    /// line)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "2m")]
    pub timeout: Duration,

    /// A label for every claim (e.g. the CI job's URL). Repeatable
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label)]
    pub labels: Vec<(String, String)>,

    #[command(flatten)]
    pub mount: MountArgs,

    /// Do not wait for the release to finish after the command
    #[arg(long)]
    pub no_wait_release: bool,

    /// The command and its arguments, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND", value_hint = clap::ValueHint::CommandWithArguments)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The claimed volume
    #[arg(value_parser = volume_name, required_unless_present = "pool", conflicts_with = "pool")]
    pub volume: Option<String>,

    /// Release the alloc's claim from this pool: it leaves the pool's line if it still
    /// waits there, else its member is released
    #[arg(long, value_name = "POOL", value_parser = pool_name)]
    pub pool: Option<String>,

    /// The alloc whose claim to release
    #[arg(long, value_name = "ALLOC", value_parser = alloc_name)]
    pub alloc: String,

    /// Exit 0 when the claim is already gone or being released (a missing volume is still
    /// exit 3): for scripts that may release twice
    #[arg(long)]
    pub ignore_missing: bool,

    /// The job succeeded: a claim made from a pool with a cache key records that key as
    /// the member's (without it the member keeps the key it had)
    #[arg(long)]
    pub succeeded: bool,

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
