//! `csivol-bench`: csivol's load benchmark (throughput, latency, scale), measured against
//! this machine's own floor in the same run. See `csivol-bench --help` and the README.

use std::process::ExitCode;

use clap::Parser;

#[path = "../bench/mod.rs"]
mod bench;

fn main() -> ExitCode {
    let args = bench::Args::parse();
    match bench::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
