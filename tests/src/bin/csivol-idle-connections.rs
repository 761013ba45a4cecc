//! `csivol-idle-connections ADDR COUNT FOR SERVER_PID`: opens COUNT idle connections to
//! ADDR and holds them, for the connection-flood test (see `csivol_tests::idle`).

fn main() -> std::process::ExitCode {
    csivol_tests::idle::main()
}
