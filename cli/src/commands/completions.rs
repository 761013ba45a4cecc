//! `csivol completions bash|zsh|fish`.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, Shell};
use crate::failure::Exit;
use crate::output::Out;

#[allow(
    clippy::disallowed_methods,
    reason = "a completion script is generated code, not data from the server"
)]
pub fn run(_out: &Out, args: CompletionsArgs) -> anyhow::Result<Exit> {
    // Written to memory first: clap_complete panics when its writer fails, and a closed
    // pipe (`csivol completions bash | head -1`) must end the command quietly instead.
    let script = script(args.shell);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script)?;
    stdout.flush()?;
    Ok(Exit::Ok)
}

/// The completion script for `shell`: clap's, plus volume and node names asked of the
/// server where an argument takes one ([`NAME_ARGUMENTS`], [`NAME_OPTIONS`]).
pub fn script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(
        clap_shell(shell),
        &mut completed_command(),
        "csivol",
        &mut script,
    );
    match shell {
        Shell::Bash => script.extend_from_slice(bash_names().as_bytes()),
        Shell::Zsh => {
            // Before clap's last lines, which call `_csivol` when zsh autoloads the file
            // and register it when the file is sourced: both must reach the wrapper.
            let tail = b"\nif [ \"$funcstack[1]\" = \"_csivol\" ]; then";
            let at = script
                .windows(tail.len())
                .rposition(|w| w == tail)
                .expect("clap's zsh script ends by calling or registering _csivol");
            script.splice(at..at, zsh_names().bytes());
        }
        Shell::Fish => script.extend_from_slice(fish_names().as_bytes()),
    }
    script
}

/// The command line as the scripts complete it: a value that is not a path (an alloc, a
/// reason, a duration) is not completed from file names, which is what the shells do for
/// a value they know nothing about.
fn completed_command() -> clap::Command {
    fn not_files(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            if a.get_action().takes_values() && a.get_value_hint() == clap::ValueHint::Unknown {
                a.value_hint(clap::ValueHint::Other)
            } else {
                a
            }
        })
        .mut_subcommands(not_files)
    }
    not_files(Cli::command())
}

/// The kind of name a word is, and the `csivol __complete` argument that lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    Volumes,
    Nodes,
    Pools,
    Namespaces,
}

impl Names {
    pub fn arg(self) -> &'static str {
        match self {
            Names::Volumes => "volumes",
            Names::Nodes => "nodes",
            Names::Pools => "pools",
            Names::Namespaces => "namespaces",
        }
    }
}

/// The commands whose first argument is a name. The one list the bash, zsh and fish
/// scripts are generated from; a unit test holds it to the clap definitions.
pub const NAME_ARGUMENTS: &[(&str, Names)] = &[
    ("claim", Names::Volumes),
    ("claim renew", Names::Volumes),
    ("claim show", Names::Volumes),
    ("release", Names::Volumes),
    ("status", Names::Volumes),
    ("unblock", Names::Volumes),
    ("detach", Names::Volumes),
    ("fence", Names::Nodes),
    ("volume show", Names::Volumes),
    ("volume deregister", Names::Volumes),
    ("volume drain", Names::Volumes),
    ("volume eligibility", Names::Volumes),
    ("volume expand", Names::Volumes),
    ("volume modify", Names::Volumes),
    ("volume label", Names::Volumes),
    ("node show", Names::Nodes),
    ("node drain", Names::Nodes),
    ("node eligibility", Names::Nodes),
    ("node label", Names::Nodes),
    ("node remove", Names::Nodes),
    ("pool show", Names::Pools),
    ("pool delete", Names::Pools),
    ("namespace show", Names::Namespaces),
    ("namespace delete", Names::Namespaces),
    ("namespace quota", Names::Namespaces),
];

/// The commands whose arguments are names up to `--` (`csivol run VOLUME... -- COMMAND`,
/// `csivol snapshot create --group NAME VOLUME...`).
pub const NAME_LISTS: &[(&str, Names)] =
    &[("run", Names::Volumes), ("snapshot create", Names::Volumes)];

/// The options whose value is a name, in every command that has them.
pub const NAME_OPTIONS: &[(&str, Names)] = &[
    ("--volume", Names::Volumes),
    ("--node", Names::Nodes),
    ("--pool", Names::Pools),
];

/// A `case` pattern of literal words around `*` wildcards: bash and zsh match a `*` left
/// outside the quotes (`'run'*' --'`), fish one inside them (`'run* --'`).
fn pattern(parts: &[&str], fish: bool) -> String {
    if fish {
        format!("'{}'", parts.join("*"))
    } else {
        let quoted: Vec<String> = parts
            .iter()
            .map(|p| {
                if p.is_empty() {
                    String::new()
                } else {
                    format!("'{p}'")
                }
            })
            .collect();
        quoted.join("*")
    }
}

/// Case patterns (joined by `sep`: `|` for bash and zsh, ` ` for fish) of the words before
/// the cursor where a [`NAME_LISTS`] command takes no name: after `--`, and where an
/// option's value goes.
fn lists_without_names(sep: &str) -> String {
    let fish = sep == " ";
    let cli = {
        let mut c = Cli::command();
        c.build();
        c
    };
    let mut patterns = Vec::new();
    for (command, _) in NAME_LISTS {
        patterns.push(pattern(&[command, " --"], fish));
        patterns.push(pattern(&[command, " -- ", ""], fish));
        let sub = command
            .split(' ')
            .try_fold(&cli, |c, word| c.find_subcommand(word))
            .expect("a command of NAME_LISTS");
        for arg in sub.get_opts() {
            if !arg.get_action().takes_values() {
                continue;
            }
            let flags = arg
                .get_long()
                .map(|l| format!("--{l}"))
                .into_iter()
                .chain(arg.get_short().map(|c| format!("-{c}")));
            for flag in flags {
                patterns.push(pattern(&[command, &format!(" {flag}")], fish));
            }
        }
    }
    patterns.join(sep)
}

/// Case patterns of the words before the cursor where a [`NAME_LISTS`] command takes a
/// name of `kind` (the exceptions come first, from [`lists_without_names`]).
fn lists_taking(kind: Names, fish: bool) -> Vec<String> {
    NAME_LISTS
        .iter()
        .filter(|(_, k)| *k == kind)
        .flat_map(|(command, _)| {
            [
                pattern(&[command], fish),
                pattern(&[&format!("{command} "), ""], fish),
            ]
        })
        .collect()
}

/// `"claim"|"release"|...`: the commands of [`NAME_ARGUMENTS`] that take `kind`, quoted
/// for a bash or zsh `case` (`sep` `|`) or a fish `case` (`sep` ` `).
fn commands_taking(kind: Names, sep: &str) -> String {
    let mut quoted: Vec<String> = NAME_ARGUMENTS
        .iter()
        .filter(|(_, k)| *k == kind)
        .map(|(command, _)| format!("'{command}'"))
        .collect();
    quoted.extend(lists_taking(kind, sep == " "));
    quoted.join(sep)
}

/// One `case` branch per option of [`NAME_OPTIONS`], in bash/zsh syntax, each setting
/// `kind` and then `extra`.
fn option_cases(extra: &str) -> String {
    NAME_OPTIONS
        .iter()
        .map(|(option, kind)| format!("        {option}) kind={}{extra} ;;\n", kind.arg()))
        .collect()
}

/// Wraps clap's `_csivol`: where the word is a volume or a node, the names come from the
/// server through `csivol __complete`, with whatever address and token the shell has.
/// `${COMP_WORDS[*]:1:COMP_CWORD-1}` (with `IFS=' '`) is the words between `csivol` and
/// the cursor.
fn bash_names() -> String {
    format!(
        r#"
# Volume, node, pool and namespace names from the server
# (`csivol __complete volumes|nodes|pools|namespaces`).
_csivol_with_names() {{
    _csivol "$@"
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" kind=""
    # The value of an option that takes a name: only names fit there.
    case "$prev" in
{options}    esac
    if [[ -z "$kind" && "$cur" != -* ]]; then
        local IFS=' '
        case "${{COMP_WORDS[*]:1:COMP_CWORD-1}}" in
            {none}) ;;
            {volumes}) kind=volumes ;;
            {nodes}) kind=nodes ;;
            {pools}) kind=pools ;;
            {namespaces}) kind=namespaces ;;
        esac
    fi
    if [[ -n "$kind" ]]; then
        local IFS=$'\n'
        COMPREPLY+=( $(compgen -W "$(csivol __complete "$kind" 2>/dev/null)" -- "$cur") )
    fi
}}
complete -F _csivol_with_names -o bashdefault -o default csivol
"#,
        options = option_cases("; COMPREPLY=()"),
        none = lists_without_names("|"),
        volumes = commands_taking(Names::Volumes, "|"),
        nodes = commands_taking(Names::Nodes, "|"),
        pools = commands_taking(Names::Pools, "|"),
        namespaces = commands_taking(Names::Namespaces, "|"),
    )
}

/// Renames clap's `_csivol` to `_csivol_clap` and puts a wrapper in its place, as for
/// bash. `${(j: :)words[2,CURRENT-1]}` is the words between `csivol` and the cursor.
fn zsh_names() -> String {
    format!(
        r#"
# Volume, node, pool and namespace names from the server
# (`csivol __complete volumes|nodes|pools|namespaces`).
functions[_csivol_clap]=$functions[_csivol]
_csivol() {{
    local kind="" clap=1
    # The value of an option that takes a name: only names fit there.
    case "${{words[CURRENT-1]}}" in
{options}    esac
    if [[ -z "$kind" && "$PREFIX" != -* ]]; then
        case "${{(j: :)words[2,CURRENT-1]}}" in
            {none}) ;;
            {volumes}) kind=volumes ;;
            {nodes}) kind=nodes ;;
            {pools}) kind=pools ;;
            {namespaces}) kind=namespaces ;;
        esac
    fi
    local ret=1
    if [[ -n "$kind" ]]; then
        local -a names
        names=( ${{(f)"$(_call_program $kind csivol __complete $kind 2>/dev/null)"}} )
        compadd -a names && ret=0
    fi
    if (( clap )); then
        _csivol_clap "$@" && ret=0
    fi
    return ret
}}
"#,
        options = option_cases("; clap=0"),
        none = lists_without_names("|"),
        volumes = commands_taking(Names::Volumes, "|"),
        nodes = commands_taking(Names::Nodes, "|"),
        pools = commands_taking(Names::Pools, "|"),
        namespaces = commands_taking(Names::Namespaces, "|"),
    )
}

/// A condition and a source of names for fish's own `complete`. `$words` is the words
/// between `csivol` and the cursor.
fn fish_names() -> String {
    let options: String = NAME_OPTIONS
        .iter()
        .map(|(option, kind)| {
            format!(
                "        case {option}\n            echo {}\n            return\n",
                kind.arg()
            )
        })
        .collect();
    // After an option that takes a value fish asks only that option's rules; the
    // condition keeps the option out of the lists of options, where it is false.
    let option_rules: String = NAME_OPTIONS
        .iter()
        .map(|(option, _)| {
            format!(
                "complete -c csivol -n '__csivol_names_kind >/dev/null' -l {} -x -a '(__csivol_names)'\n",
                option.trim_start_matches("--")
            )
        })
        .collect();
    format!(
        r#"
# Volume, node, pool and namespace names from the server
# (`csivol __complete volumes|nodes|pools|namespaces`).
function __csivol_names_kind
    set -l words (commandline -opc)
    set -e words[1]
    # The value of an option that takes a name.
    switch "$words[-1]"
{options}    end
    string match -q -- '-*' (commandline -ct); and return 1
    switch "$words"
        case {none}
            return 1
        case {volumes}
            echo volumes
        case {nodes}
            echo nodes
        case {pools}
            echo pools
        case {namespaces}
            echo namespaces
        case '*'
            return 1
    end
end

function __csivol_names
    set -l kind (__csivol_names_kind); or return
    csivol __complete $kind 2>/dev/null
end

complete -c csivol -n '__csivol_names_kind >/dev/null' -f -a '(__csivol_names)'
{option_rules}"#,
        none = lists_without_names(" "),
        volumes = commands_taking(Names::Volumes, " "),
        nodes = commands_taking(Names::Nodes, " "),
        pools = commands_taking(Names::Pools, " "),
        namespaces = commands_taking(Names::Namespaces, " "),
        option_rules = option_rules,
    )
}

/// `csivol __complete volumes|nodes|pools|namespaces`: the names, one per line.
pub async fn names(ctx: &crate::ctx::Ctx, what: &str) -> anyhow::Result<Exit> {
    let names: Vec<String> = if what == "nodes" {
        let nodes: Vec<csivol_api::Node> = ctx.client.get("/v1/nodes").await?;
        nodes.into_iter().map(|n| n.name).collect()
    } else if what == "namespaces" {
        let all: Vec<csivol_api::Namespace> = ctx.client.get("/v1/namespaces").await?;
        all.into_iter().map(|n| n.name).collect()
    } else if what == "pools" {
        let pools: Vec<csivol_api::Pool> = ctx.client.get("/v1/pools").await?;
        pools.into_iter().map(|p| p.name).collect()
    } else {
        let volumes = ctx.client.volumes(&[]).await?;
        volumes.into_iter().map(|v| v.name).collect()
    };
    for n in names {
        ctx.out.line(n)?;
    }
    Ok(Exit::Ok)
}

pub fn clap_shell(shell: Shell) -> clap_complete::Shell {
    match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    }
}

/// The file a shell's completion script is checked in as, under `completions/`.
pub fn file_name(shell: Shell) -> &'static str {
    match shell {
        Shell::Bash => "csivol.bash",
        Shell::Zsh => "_csivol",
        Shell::Fish => "csivol.fish",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Every command path (`"node show"`) with its command, help excluded.
    fn commands(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{path} {}", sub.get_name()).trim().to_owned();
            out.push((path.clone(), sub.clone()));
            commands(sub, &path, out);
        }
    }

    fn kind_of(name: &str) -> Option<Names> {
        match name {
            "volume" => Some(Names::Volumes),
            "node" => Some(Names::Nodes),
            "pool" => Some(Names::Pools),
            "namespace" => Some(Names::Namespaces),
            _ => None,
        }
    }

    /// The table names exactly the commands whose first argument clap calls `volume`,
    /// `node` or `pool`: a new command that takes a name gets completed, or this fails.
    #[test]
    fn the_name_table_is_what_clap_defines() {
        let mut all = Vec::new();
        commands(&Cli::command(), "", &mut all);
        let mut from_clap = BTreeSet::new();
        let mut lists = BTreeSet::new();
        let mut options = BTreeSet::new();
        for (path, cmd) in &all {
            for (i, arg) in cmd.get_positionals().enumerate() {
                if let Some(kind) = kind_of(arg.get_id().as_str()) {
                    assert_eq!(i, 0, "{path}: a name that is not the first argument");
                    from_clap.insert((path.clone(), kind.arg()));
                }
                // A list of names: `volumes`, up to the `--` of the command after them.
                if let Some(kind) = arg.get_id().as_str().strip_suffix('s').and_then(kind_of) {
                    assert_eq!(i, 0, "{path}: names that are not the first arguments");
                    lists.insert((path.clone(), kind.arg()));
                }
            }
            for arg in cmd.get_opts() {
                if let (Some(long), Some(kind)) = (arg.get_long(), kind_of(arg.get_id().as_str())) {
                    options.insert((format!("--{long}"), kind.arg()));
                }
            }
        }
        let table: BTreeSet<_> = NAME_ARGUMENTS
            .iter()
            .map(|(c, k)| (c.to_string(), k.arg()))
            .collect();
        assert_eq!(table, from_clap);
        let table: BTreeSet<_> = NAME_LISTS
            .iter()
            .map(|(c, k)| (c.to_string(), k.arg()))
            .collect();
        assert_eq!(table, lists);
        let table: BTreeSet<_> = NAME_OPTIONS
            .iter()
            .map(|(o, k)| (o.to_string(), k.arg()))
            .collect();
        assert_eq!(table, options);
    }

    /// The commands are pasted into shell `case` patterns unescaped.
    #[test]
    fn the_table_needs_no_quoting() {
        for (words, _) in NAME_ARGUMENTS.iter().chain(NAME_LISTS).chain(NAME_OPTIONS) {
            assert!(
                words
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '-' || c == ' '),
                "{words}"
            );
        }
    }
}
