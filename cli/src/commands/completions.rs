//! `csivol completions bash|zsh|fish`.

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, Shell};
use crate::failure::Exit;
use crate::output::Out;

pub fn run(_out: &Out, args: CompletionsArgs) -> anyhow::Result<Exit> {
    let mut stdout = std::io::stdout().lock();
    clap_complete::generate(
        clap_shell(args.shell),
        &mut Cli::command(),
        "csivol",
        &mut stdout,
    );
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
