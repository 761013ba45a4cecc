//! `csivol completions bash|zsh|fish`.

use std::io::Write;

use clap::CommandFactory;

use crate::args::{Cli, CompletionsArgs, Shell};
use crate::failure::Exit;
use crate::output::Out;

pub fn run(_out: &Out, args: CompletionsArgs) -> anyhow::Result<Exit> {
    // Written to memory first: clap_complete panics when its writer fails, and a closed
    // pipe (`csivol completions bash | head -1`) must end the command quietly instead.
    let mut script = Vec::new();
    clap_complete::generate(
        clap_shell(args.shell),
        &mut Cli::command(),
        "csivol",
        &mut script,
    );
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script)?;
    stdout.flush()?;
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
