//! `csivol events` and `csivol token`.

use std::time::Duration;

use clap::{Args, Subcommand};
use csivol_api::{Capability, Role};

use super::{capability, node_name, parse_duration, role, volume_name, volume_pattern};

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
    /// List tokens (never their secrets): role, capabilities, namespaces, volumes, node,
    /// when created, last used, expiry
    List,
    /// Show one token (never its secret): its role, every capability it holds and the
    /// namespaces and volume patterns it is narrowed to
    Show(TokenShowArgs),
    /// Revoke a token: requests with it are refused (401) from then on
    ///
    /// The last usable operator token cannot be revoked.
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, Args)]
pub struct TokenShowArgs {
    /// The token's id or name (`csivol token list`)
    #[arg(value_name = "ID|NAME")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token's id (`csivol token list`)
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// What the token may do, a preset of capabilities: `operator` every capability,
    /// `reader` read, `claimer` read and claim (claim, renew, queue and release its own
    /// claims: CI jobs), `node` one node's agent
    #[arg(long, value_name = "ROLE", value_parser = role())]
    pub role: Role,

    /// A capability added to the role's preset (repeatable): read, claim, release-any,
    /// create-delete, snapshot, expand-modify, unblock-detach, fence, manage-nodes,
    /// manage-tokens, backup. A token can only give what it holds itself
    #[arg(long = "capability", value_name = "CAPABILITY", value_parser = capability())]
    pub capabilities: Vec<Capability>,

    /// Narrow the token to volumes whose names match this glob (repeatable; `*` any
    /// characters, `?` one), e.g. `build-*`: it reads, claims and snapshots only those
    /// volumes (and snapshots whose names match), and its listings show only them. A
    /// narrowed token cannot hold the cluster-wide capabilities (fence, manage-nodes,
    /// manage-tokens, backup). Narrow it to namespaces with the global -n/--namespace
    /// (repeatable here; `*` every namespace)
    #[arg(long = "volumes", value_name = "PATTERN", value_parser = volume_pattern)]
    pub volumes: Vec<String>,

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
