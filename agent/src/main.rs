//! `csivol-agent`: the node agent, alone in its binary (the server is `csivol-server`).

use std::process::ExitCode;

use clap::Parser;
use csivol_agent::cli::{Cli, Command};

/// The commands of `csivol-agent server` that are commands of `csivol-server` of their own.
const SERVER_ACTIONS: [&str; 4] = ["backup", "restore", "rotate-secrets-key", "migrate"];

/// `csivol-agent server ARGS` as `csivol-server` spells it: `serve ARGS`, or the
/// maintenance command among ARGS first, followed by the rest.
fn server_command(args: &[String]) -> Vec<&str> {
    let action = args
        .iter()
        .find(|a| SERVER_ACTIONS.contains(&a.as_str()))
        .map_or("serve", String::as_str);
    let mut new = vec!["csivol-server", action];
    new.extend(args.iter().map(String::as_str).filter(|a| *a != action));
    new
}

/// Says what to run instead of a command `csivol-agent` no longer has: a usage error.
fn moved(old: &str, new: Vec<&str>, args: &[String]) -> ExitCode {
    let program = new[0];
    let mut words: Vec<String> = new.iter().map(|w| csivol_daemon::shell_word(w)).collect();
    words.extend(args.iter().map(|w| csivol_daemon::shell_word(w)));
    eprintln!(
        "error: `csivol-agent {old}` is no longer part of csivol-agent, which runs the node \
         agent only; it is the `{program}` program now\nhint: run `{}`",
        words.join(" ")
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Command::Check(args) => return check(args),
        Command::Run(args) => args,
        Command::Node(args) => {
            eprintln!(
                "warning: `csivol-agent node` is now `csivol-agent run`; the old spelling \
                 goes in the next release"
            );
            args
        }
        Command::Server(m) => return moved("server", server_command(&m.args), &[]),
        Command::Dev(m) => return moved("dev", vec!["csivol-server", "dev"], &m.args),
        Command::Tls(m) => return moved("tls", vec!["csivol-server", "tls"], &m.args),
        Command::Hostpath(m) => return moved("hostpath", vec!["csivol-hostpath"], &m.args),
    };
    csivol_csi::supervised::exit_with_parent();
    csivol_daemon::init_logs();
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(csivol_agent::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `csivol-agent check`: 0 when csivol can use the plugin, 1 when not (or the check could
/// not be made).
fn check(args: csivol_agent::check::CheckArgs) -> ExitCode {
    csivol_daemon::init_logs();
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(csivol_agent::check::run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Option<tokio::runtime::Runtime> {
    // A node agent is a small process that mostly waits on sockets: one thread runs it for
    // less CPU per call than a pool of workers waking each other across cores (blocking
    // work still goes to the blocking pool: agent.db commits).
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .inspect_err(|e| eprintln!("error: failed to start the async runtime: {e}"))
        .ok()
}
