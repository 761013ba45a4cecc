//! `csivol completions bash|zsh|fish`.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, Shell};
use crate::failure::Exit;
use crate::output::Out;

pub fn run(_out: &Out, args: CompletionsArgs) -> anyhow::Result<Exit> {
    // Written to memory first: clap_complete panics when its writer fails, and a closed
    // pipe (`csivol completions bash | head -1`) must end the command quietly instead.
    let script = script(args.shell);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script)?;
    stdout.flush()?;
    Ok(Exit::Ok)
}

/// The completion script for `shell`: clap's, plus (for bash) volume and node names asked
/// of the server where an argument takes one.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(
        clap_shell(shell),
        &mut Cli::command(),
        "csivol",
        &mut script,
    );
    if shell == Shell::Bash {
        script.extend_from_slice(BASH_NAMES.as_bytes());
    }
    script
}

/// Wraps clap's `_csivol`: where the word is a volume or a node (`--volume`, `--node`, or
/// the first argument of the commands that take one), the names come from the server
/// through `csivol __complete`, with whatever address and token the shell has.
const BASH_NAMES: &str = r#"
# Volume and node names from the server (`csivol __complete volumes|nodes`).
_csivol_with_names() {
    _csivol "$@"
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" kind=""
    # The value of --node or --volume: only names fit there.
    case "$prev" in
        --node) kind=nodes; COMPREPLY=() ;;
        --volume) kind=volumes; COMPREPLY=() ;;
    esac
    if [[ -z "$kind" && "$cur" != -* ]]; then
        if [[ $COMP_CWORD -eq 2 ]]; then
            case "${COMP_WORDS[1]}" in
                claim|release|status|unblock|detach) kind=volumes ;;
            esac
        elif [[ $COMP_CWORD -eq 3 ]]; then
            case "${COMP_WORDS[1]} ${COMP_WORDS[2]}" in
                "volume show"|"volume deregister"|"claim renew") kind=volumes ;;
                "node show"|"node drain"|"node eligibility"|"node remove") kind=nodes ;;
            esac
        fi
    fi
    if [[ -n "$kind" ]]; then
        local IFS=$'
'
        COMPREPLY+=( $(compgen -W "$(csivol __complete "$kind" 2>/dev/null)" -- "$cur") )
    fi
}
complete -F _csivol_with_names -o bashdefault -o default csivol
"#;

/// `csivol __complete volumes|nodes`: the names, one per line.
pub async fn names(ctx: &crate::ctx::Ctx, what: &str) -> anyhow::Result<Exit> {
    let names: Vec<String> = if what == "nodes" {
        let nodes: Vec<csivol_api::Node> = ctx.client.get("/v1/nodes").await?;
        nodes.into_iter().map(|n| n.name).collect()
    } else {
        let volumes: Vec<csivol_api::Volume> = ctx.client.get("/v1/volumes").await?;
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
