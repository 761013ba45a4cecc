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
