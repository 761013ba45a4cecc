//! `csivol-server`: the control plane, its maintenance commands and dev mode.

use std::process::ExitCode;

use clap::Parser;

/// csivol's server (control plane): the cluster state behind the HTTP API, its backups,
/// and dev mode.
#[derive(Debug, Parser)]
#[command(name = "csivol-server", version)]
struct Cli {
    #[command(subcommand)]
    command: csivol_server::Command,
}

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
