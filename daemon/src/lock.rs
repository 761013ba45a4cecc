//! The node agent's data-dir lock: `agent.lock` in the data dir, `flock`ed by the agent
//! that runs there, with its pid written in it. Here rather than in the agent so that dev
//! mode (part of csivol-server, which links no node code) can tell that an agent already
//! runs on a node's dir, and whose it is.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

/// The lock file, in the agent's data dir.
pub const FILE: &str = "agent.lock";

/// Writes this process's pid into the lock file it holds.
pub fn record_holder(fd: impl AsFd) -> io::Result<()> {
    let pid = format!("{}\n", std::process::id());
    rustix::fs::ftruncate(&fd, 0)?;
    rustix::io::pwrite(&fd, pid.as_bytes(), 0)?;
    Ok(())
}

/// The pid the holder wrote into the lock file `lock`, while that process lives (the file
/// may hold the pid of an agent that has exited since).
pub fn holder_pid(lock: &Path) -> Option<u32> {
    std::fs::read_to_string(lock)
        .ok()
        .and_then(|p| p.trim().parse::<u32>().ok())
        .filter(|p| Path::new(&format!("/proc/{p}")).exists())
}

/// Whether an agent runs on the data dir `dir` now (it holds the lock), with its pid when
/// known.
pub fn running_agent(dir: &Path) -> Option<Option<u32>> {
    use rustix::fs::{FlockOperation, Mode, OFlags, flock, open};
    let path = dir.join(FILE);
    let fd = open(&path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).ok()?;
    match flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Err(rustix::io::Errno::WOULDBLOCK) => Some(holder_pid(&path)),
        // Free (closing the file releases the lock just taken), or not lockable at all:
        // the agent's own start says why.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_names_its_holder() {
        use rustix::fs::{FlockOperation, Mode, OFlags, flock, open};
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running_agent(dir.path()), None, "no lock file");
        let fd = open(
            dir.path().join(FILE),
            OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .unwrap();
        assert_eq!(running_agent(dir.path()), None, "not locked");
        flock(&fd, FlockOperation::NonBlockingLockExclusive).unwrap();
        record_holder(&fd).unwrap();
        // flock locks belong to the open file: another open of it does not get it.
        assert_eq!(running_agent(dir.path()), Some(Some(std::process::id())));
        drop(fd);
        assert_eq!(running_agent(dir.path()), None, "released");
    }
}
