//! `csivol`: the command-line client of the csivol server, for operators and CI pipelines.

use std::process::ExitCode;

use clap::Parser;
use csivol::args::{self, Cli};
use csivol::commands;
use csivol::failure::{Exit, classify, is_broken_pipe};
use csivol::output::Out;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == args::COMPLETE) {
        let complete = args::CompleteArgs::parse_from(&argv[1..]);
        let out = Out::new(&complete.global);
        return finish(&out, block_on(commands::complete(complete, out.clone())));
    }
    // Usage errors exit with 2 here, `--help` and `--version` with 0.
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| args::usage_error(e).exit());
    let out = Out::new(&cli.global);
    finish(&out, block_on(commands::run(cli, out.clone())))
}

/// The exit code of a command's result, its error printed once.
fn finish(out: &Out, result: anyhow::Result<Exit>) -> ExitCode {
    match result {
        Ok(exit) => exit.into(),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let (exit, hint) = classify(&e);
            out.error(exit, &format!("{e:#}"), hint.as_deref());
            exit.into()
        }
    }
}

fn block_on(command: impl Future<Output = anyhow::Result<Exit>>) -> anyhow::Result<Exit> {
    // One thread is plenty: a command makes one request at a time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(command)
}
