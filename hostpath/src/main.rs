//! `csivol-hostpath`: csivol's reference CSI plugin.

use std::process::ExitCode;

use clap::Parser;
use csivol_hostpath::{Args, run};

fn main() -> ExitCode {
    csivol_csi::supervised::exit_with_parent();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    // A plugin mostly waits on its socket: one thread serves it for less CPU per call than
    // a pool of workers waking each other across cores. The handlers, which may block on
    // the disk, mounts and the backend lock, still run on the blocking pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
