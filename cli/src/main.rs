//! `csivol`: the command-line client. Not built yet.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("csivol: not built yet");
    ExitCode::FAILURE
}
