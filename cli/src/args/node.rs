//! `csivol node` and `csivol plugin`.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::{node_name, parse_duration, plugin_name};

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
    /// Set or remove the labels an operator keeps on a node: the only labels fence methods
    /// select by and fill their commands from (`{bmc}`)
    ///
    /// `KEY=VALUE` sets a label, `KEY-` removes it. The labels a node's own agent reports
    /// are shown apart by `csivol node show` and never fill a fence command: a node must
    /// not choose the machine its fence powers off. Labels in the server's config file
    /// (`[node_labels.NODE]`) are changed there. Each change is an event with who made it.
    Label(NodeLabelArgs),
    /// Forget a node that holds nothing: no claim, no attachment, nothing blocked
    ///
    /// Refused otherwise, with the command that gets it there (a drain, or an unblock for
    /// a lost node). An agent that registers the node again brings it back.
    Remove(NodeArg),
}

#[derive(Debug, Args)]
pub struct NodeLabelArgs {
    /// The node's name
    #[arg(value_parser = node_name)]
    pub node: String,

    /// `KEY=VALUE` to set a label, `KEY-` to remove one
    #[arg(required = true, value_name = "KEY=VALUE|KEY-", value_parser = label_change)]
    pub changes: Vec<LabelChange>,
}

/// One change of `csivol node label`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelChange {
    Set(String, String),
    Remove(String),
}

pub(super) fn label_change(s: &str) -> Result<LabelChange, String> {
    match (s.split_once('='), s.strip_suffix('-')) {
        (Some((k, v)), _) if !k.is_empty() => Ok(LabelChange::Set(k.to_owned(), v.to_owned())),
        (None, Some(k)) if !k.is_empty() => Ok(LabelChange::Remove(k.to_owned())),
        _ => Err(format!(
            "`{s}`: expected KEY=VALUE to set a label or KEY- to remove it, e.g. bmc=10.0.0.12"
        )),
    }
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
    /// List what the plugin's storage holds (ListVolumes) beside csivol's records
    ///
    /// The plugin's last listing, taken by its controller hosts every
    /// `controller_list_interval` where the controller reports LIST_VOLUMES: each volume's
    /// id, size, the csivol volume recorded with it (or `unknown`: storage made outside
    /// csivol), and, where the plugin says them, the nodes it is published to
    /// (LIST_VOLUMES_PUBLISHED_NODES) and its condition (VOLUME_CONDITION).
    Volumes(PluginArg),
    /// List the plugin's snapshots (ListSnapshots) beside csivol's snapshot records
    ///
    /// The plugin's last listing, taken by its controller hosts every
    /// `controller_list_interval` where the controller reports LIST_SNAPSHOTS (all pages;
    /// started over when the plugin answers a page's token ABORTED): each snapshot's id,
    /// the csivol snapshot recorded with it (or `unknown`: made outside csivol, which
    /// `csivol snapshot adopt` registers), its source volume's id and the csivol volume
    /// recorded with that id, its size, when it was cut and whether it is ready to use.
    Snapshots(PluginArg),
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
