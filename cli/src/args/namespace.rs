//! `csivol namespace`: create, list, show and delete namespaces.

use clap::{Args, Subcommand};

use super::namespace_name;

#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// Make a namespace: volumes, claims and events of one team, named apart from
    /// other teams' (`db` may exist in two namespaces)
    ///
    /// A namespace is named like a volume, in at most 63 characters. Commands name it with
    /// -n/--namespace or CSIVOL_NAMESPACE; `default` holds everything that names none.
    /// Creating it again changes nothing.
    Create(NamespaceCreateArgs),
    /// List the namespaces with what each holds
    List,
    /// Show a namespace and what it holds
    Show(NamespaceArg),
    /// Forget an empty namespace (refused while a volume lives in it, naming them)
    Delete(NamespaceArg),
    /// Bound what a namespace may hold: volumes, capacity, claims, per-job volumes
    ///
    /// Each bound is checked when a volume is made, registered or grown and when a claim is
    /// made (or joins a pool's line), in the same write, so two requests at once never both
    /// take the last unit; a request past a bound is refused (exit 4) saying what is used,
    /// what the limit is and who uses most. Bounds not named keep their value; `none`
    /// removes one, `--clear` every one. A volume growing counts at the capacity it grows
    /// to; claims count whether held or waiting.
    Quota(NamespaceQuotaArgs),
}

#[derive(Debug, Args)]
pub struct NamespaceQuotaArgs {
    /// The namespace's name (`default` too)
    #[arg(value_parser = namespace_name)]
    pub namespace: String,
    /// At most this many volumes, or `none`
    #[arg(long, value_name = "N|none", value_parser = count)]
    pub volumes: Option<Bound>,
    /// At most this much capacity over all its volumes (e.g. `500Gi`), or `none`
    #[arg(long, value_name = "SIZE|none", value_parser = size)]
    pub capacity: Option<Bound>,
    /// At most this many claims, held or waiting, or `none`
    #[arg(long, value_name = "N|none", value_parser = count)]
    pub claims: Option<Bound>,
    /// At most this many per-job volumes (`--fresh`), or `none`
    #[arg(long, value_name = "N|none", value_parser = count)]
    pub fresh_volumes: Option<Bound>,
    /// Remove every bound
    #[arg(long, conflicts_with_all = ["volumes", "capacity", "claims", "fresh_volumes"])]
    pub clear: bool,
}

/// A bound given on the command line: a value, or `none` (no bound).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bound(pub Option<u64>);

fn count(s: &str) -> Result<Bound, String> {
    if s == "none" {
        return Ok(Bound(None));
    }
    s.parse::<u64>()
        .map(|n| Bound(Some(n)))
        .map_err(|_| format!("`{s}` is not a count: give a whole number, or `none`"))
}

fn size(s: &str) -> Result<Bound, String> {
    if s == "none" {
        return Ok(Bound(None));
    }
    csivol_api::parse_size(s)
        .map(|n| Bound(Some(n)))
        .map_err(|e| format!("{e}, or `none`"))
}

#[derive(Debug, Args)]
pub struct NamespaceCreateArgs {
    /// The new namespace's name
    #[arg(value_name = "NAMESPACE", value_parser = namespace_name)]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct NamespaceArg {
    /// The namespace's name
    #[arg(value_parser = namespace_name)]
    pub namespace: String,
}
