//! Processes started by a supervisor that must not outlive it: dev mode starts the node
//! agents and plugins with [`PARENT_PID`] set, and each asks the kernel for SIGTERM when
//! its parent dies (`PR_SET_PDEATHSIG`), even when the parent was killed outright and
//! could stop nothing itself. Shared by the agent and the reference plugin, the two
//! processes dev mode starts.

/// The environment variable a supervisor sets to its own pid for its children.
pub const PARENT_PID: &str = "CSIVOL_PARENT_PID";

/// Asks for SIGTERM when the parent dies, if [`PARENT_PID`] is set; exits at once when the
/// parent died before the request took effect (the child is then an orphan already, and the
/// kernel would never send the signal).
pub fn exit_with_parent() {
    let Some(parent) = std::env::var(PARENT_PID)
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
    else {
        return;
    };
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))
    {
        eprintln!("warning: cannot ask to stop with the parent process {parent}: {e}");
        return;
    }
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        eprintln!("error: the parent process {parent} is gone; exiting");
        std::process::exit(1);
    }
}
