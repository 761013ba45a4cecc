//! `csivol-gen`: writes the checked-in `completions/` and `man/` from the CLI's clap
//! definitions. Run it at the repository root after changing the CLI:
//! `cargo run -p csivol --bin csivol-gen -- --out .`. A test fails while they are stale.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Write csivol's shell completions and man pages.
#[derive(Debug, Parser)]
#[command(name = "csivol-gen")]
struct Args {
    /// The repository root: `completions/` and `man/` below it are replaced
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[allow(
    clippy::disallowed_macros,
    reason = "a developer tool's own messages, with no data from a server"
)]
fn main() -> ExitCode {
    let args = Args::parse();
    match csivol::generate::write_all(&args.out) {
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
