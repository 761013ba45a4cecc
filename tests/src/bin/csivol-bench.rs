//! `csivol-bench`: csivol's load benchmark (throughput, latency, scale), measured against
//! this machine's own floor in the same run. See `csivol-bench --help` and the README.

use std::process::ExitCode;

use clap::Parser;

#[path = "../bench/mod.rs"]
mod bench;

fn main() -> ExitCode {
    // A hidden mode for the end-to-end tests: idle connections held in a process of their
    // own (see `csivol_tests::idle`).
    if let Some(code) = csivol_tests::idle::main_if_asked() {
        return code;
    }
    let args = bench::Args::parse();
    match bench::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
