//! `csivol-server`: the control plane, its maintenance commands and dev mode.

use std::process::ExitCode;

use clap::Parser;
use csivol_server::cli::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    csivol_daemon::init_logs();
    // The multi-threaded runtime: the server's HTTP load spreads over the cores.
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(csivol_server::run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
