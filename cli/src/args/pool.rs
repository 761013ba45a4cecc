//! `csivol pool`: create, list, show and delete pools.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{parse_duration, pool_name};

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Make a pool of the volumes whose labels match a selector
    ///
    /// Its members are the volumes whose labels carry every KEY=VALUE of --selector (label
    /// them with `csivol volume label` or `labels` in their spec). A volume belongs to one
    /// pool at most: a selector that takes another pool's member is refused. Jobs claim
    /// any free member with `csivol claim --pool` or `csivol run --pool`; the server
    /// prefers the member last released with the job's --cache-key, then one staged on the
    /// job's node, then one whose last key matches a --restore-key or shares the longest
    /// prefix with the key, then any. Creating the same pool again changes nothing.
    Create(PoolCreateArgs),
    /// List the pools with their members and warm-hit ratio
    List,
    /// Show a pool: each member, who holds it, its last cache key, where it is staged, and
    /// the warm-hit ratio of its last claims
    Show(PoolArg),
    /// Forget a pool; its members keep their labels, claims and cache keys
    Delete(PoolArg),
}

#[derive(Debug, Args)]
pub struct PoolCreateArgs {
    /// The new pool's name
    #[arg(value_name = "POOL", value_parser = pool_name)]
    pub name: String,

    /// The labels a member carries, `KEY=VALUE[,KEY=VALUE]`
    #[arg(long, value_name = "KEY=VALUE[,KEY=VALUE]", required = true, value_delimiter = ',', value_parser = super::label)]
    pub selector: Vec<(String, String)>,

    /// How long a node keeps a released member staged for the next job, which then skips
    /// NodeStageVolume (taken down at once when another node needs the member)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub linger: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct PoolArg {
    /// The pool's name
    #[arg(value_parser = pool_name)]
    pub pool: String,
}
