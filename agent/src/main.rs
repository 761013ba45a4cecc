//! `csivol-agent`: the server, the node agent and dev mode, one binary.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// csivol's server (control plane), node agent and dev mode.
#[derive(Debug, Parser)]
#[command(name = "csivol-agent", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the server: the cluster state in SQLite behind the HTTP API.
    Server(csivol_agent::server::ServerArgs),
    /// Run the node agent: drive this node's CSI plugins toward the server's desired state.
    Node(csivol_agent::node::NodeArgs),
    /// Run a whole cluster on this machine: server, node agents and reference plugins.
    Dev(csivol_agent::dev::DevArgs),
    /// Make TLS certificates for a small cluster.
    #[command(subcommand)]
    Tls(csivol_agent::tls::TlsCommand),
    /// Run the reference CSI plugin (dev mode starts it this way).
    #[command(hide = true)]
    Hostpath(csivol_hostpath::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(cli.command, Command::Node(_) | Command::Hostpath(_)) {
        csivol_csi::supervised::exit_with_parent();
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // Under systemd (stderr connected to the journal, which sets JOURNAL_STREAM) the journal
    // stamps every line itself: a second timestamp only pushes the message off the screen
    // in `journalctl`.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        logs.without_time().with_ansi(false).init();
    } else {
        logs.init();
    }
    // A node agent, or the reference plugin started by dev mode, is a small process that
    // mostly waits on sockets: one thread runs it for less CPU per call than a pool of
    // workers waking each other across cores (blocking work still goes to the blocking
    // pool: agent.db commits, the plugin's handlers). The server and dev mode keep the
    // multi-threaded runtime: the server's HTTP load spreads over the cores.
    let runtime = match &cli.command {
        Command::Node(_) | Command::Hostpath(_) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => csivol_agent::server::run(args).await,
            Command::Node(args) => csivol_agent::node::run(args).await,
            Command::Dev(args) => csivol_agent::dev::run(args).await,
            Command::Tls(cmd) => csivol_agent::tls::run(cmd),
            Command::Hostpath(args) => csivol_hostpath::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
