//! `csivol-gen`: writes the checked-in `completions/` and `man/` from every program's clap
//! definitions: the CLI's (with the names its scripts ask the server for), and those of
//! `csivol-server`, `csivol-agent` and `csivol-hostpath`. Run it at the repository root after
//! changing a command line: `cargo run -p csivol-gen -- --out .`. A test fails while they
//! are stale.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use csivol::generate::{man_pages, section};

/// Write csivol's shell completions and man pages.
#[derive(Debug, Parser)]
#[command(name = "csivol-gen")]
struct Args {
    /// The repository root: `completions/` and `man/` below it are replaced
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match write_all(&args.out) {
        Ok(()) => {
            eprintln!(
                "wrote {} and {}",
                args.out.join("completions").display(),
                args.out.join("man").display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn write_all(root: &Path) -> anyhow::Result<()> {
    let completions = recreate(&root.join("completions"))?;
    // One directory of pages per program, as each package ships its own.
    let man = recreate(&root.join("man"))?;
    csivol::generate::write_cli(&completions, &recreate(&man.join("csivol"))?)?;
    for daemon in daemons() {
        let dir = recreate(&man.join(daemon.name))?;
        man_pages(daemon.command.clone(), &dir, &|is_root, _| {
            daemon_sections(&daemon, is_root)
        })?;
        if daemon.completions {
            for shell in [
                clap_complete::Shell::Bash,
                clap_complete::Shell::Zsh,
                clap_complete::Shell::Fish,
            ] {
                let mut script = Vec::new();
                clap_complete::generate(
                    shell,
                    &mut daemon.command.clone(),
                    daemon.name,
                    &mut script,
                );
                let file = match shell {
                    clap_complete::Shell::Zsh => format!("_{}", daemon.name),
                    clap_complete::Shell::Fish => format!("{}.fish", daemon.name),
                    _ => format!("{}.bash", daemon.name),
                };
                let path = completions.join(file);
                fs::write(&path, script)
                    .with_context(|| format!("failed to write {}", path.display()))?;
            }
        }
    }
    Ok(())
}

fn recreate(dir: &Path) -> anyhow::Result<PathBuf> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("failed to remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("failed to create {}", dir.display()))?;
    Ok(dir.to_owned())
}

/// A program besides the CLI, and what its pages say beyond clap's.
struct Daemon {
    name: &'static str,
    command: clap::Command,
    /// Packaged with completion scripts (the reference plugin is not packaged).
    completions: bool,
    files: &'static [(&'static str, &'static str)],
}

fn daemons() -> Vec<Daemon> {
    vec![
        Daemon {
            name: "csivol-server",
            command: csivol_server::cli::Cli::command(),
            completions: true,
            files: &[
                (
                    "/etc/csivol/server.toml",
                    "The configuration serve reads with --config; every key may also be a flag (flags win).",
                ),
                (
                    "/etc/csivol/tls/",
                    "Where tls init --dir /etc/csivol/tls writes the CA, the server's certificate and key, and each node's.",
                ),
                (
                    "/var/lib/csivol-server/",
                    "The data dir: state.db and its write-ahead log, cluster.id, operator.token (the first operator token), secrets.key.",
                ),
            ],
        },
        Daemon {
            name: "csivol-agent",
            command: csivol_agent::cli::Cli::command(),
            completions: true,
            files: &[
                (
                    "/etc/csivol/agent.toml",
                    "The configuration run reads with --config; every key may also be a flag (flags win).",
                ),
                (
                    "/etc/csivol/node.token",
                    "The node's token (csivol token create --role node --node NAME).",
                ),
                (
                    "/var/lib/csivol/",
                    "The data dir: agent.db (what the agent staged and published), agent.lock (held by the running agent, with its pid), the staging and target directories.",
                ),
            ],
        },
        Daemon {
            name: "csivol-hostpath",
            command: csivol_hostpath::Args::command(),
            completions: false,
            files: &[],
        },
    ]
}

/// EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO of a daemon's pages (the last three on its
/// root page only).
fn daemon_sections(d: &Daemon, is_root: bool) -> String {
    let mut out = section(
        "EXIT STATUS",
        &[
            (
                "0",
                "stopped on a signal (SIGTERM, SIGINT), or the command succeeded",
            ),
            (
                "1",
                "an error: refused to start, a backup, restore or migration failed; the message says why, with a hint",
            ),
            ("2", "usage error"),
        ],
    );
    if !is_root {
        return out;
    }
    out.push_str(&section(
        "ENVIRONMENT",
        &[
            (
                "RUST_LOG",
                "Filters the log lines on stderr (default info; e.g. csivol_server=debug).",
            ),
            (
                "JOURNAL_STREAM",
                "Set by systemd: log lines then carry no timestamp of their own.",
            ),
        ],
    ));
    if !d.files.is_empty() {
        out.push_str(&section("FILES", d.files));
    }
    out.push_str(&section(
        "SEE ALSO",
        &[(
            "csivol(1), csivol-server(1), csivol-agent(1), csivol-hostpath(1)",
            "The documentation by task is docs/ in csivol's source.",
        )],
    ));
    out
}
