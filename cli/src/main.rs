//! `csivol`: the command-line client of the csivol server, for operators and CI pipelines.

use std::process::ExitCode;

use clap::Parser;
use csivol::args::Cli;
use csivol::commands;
use csivol::failure::{Exit, classify, is_broken_pipe};
use csivol::output::Out;

fn main() -> ExitCode {
    // Usage errors exit with 2 here, `--help` and `--version` with 0.
    let cli = Cli::parse();
    let out = Out::new(&cli.global);
    match run(cli, out.clone()) {
        Ok(exit) => exit.into(),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let (exit, hint) = classify(&e);
            out.error(exit, &format!("{e:#}"), hint.as_deref());
            exit.into()
        }
    }
}

fn run(cli: Cli, out: Out) -> anyhow::Result<Exit> {
    // One thread is plenty: a command makes one request at a time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(commands::run(cli, out))
}
