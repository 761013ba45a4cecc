//! `csivol-agent`: the server, the node agent and dev mode. Not built yet.

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("csivol-agent: not built yet");
    ExitCode::FAILURE
}
