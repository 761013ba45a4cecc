//! The processes dev mode starts (each node's agent and plugin): started with their output
//! in a log and their pid in a file, watched, and stopped in order.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

/// A process dev mode started: a node's agent or plugin.
pub(super) struct Kid {
    /// `node-1 agent`, `node-1 plugin`.
    name: String,
    pub(super) child: Child,
    log: PathBuf,
    /// Where this run's output starts in `log` (the file is appended to across runs).
    log_from: u64,
    /// The shell command that starts it again by hand (printed if it dies).
    again: String,
}

impl Kid {
    /// Starts a child with its output appended to `log` and its pid written to `pid_file`
    /// (so a failure can be simulated with `kill -9 $(cat DIR/node-2/agent.pid)`). It dies
    /// with dev mode, even when dev mode is killed outright ([`csivol_csi::supervised`]).
    pub(super) fn spawn(
        name: String,
        mut cmd: Command,
        log: &Path,
        pid_file: &Path,
    ) -> anyhow::Result<Self> {
        let again = shell_line(&cmd, log, pid_file);
        let out = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)?;
        let log_from = out.metadata()?.len();
        let err = out.try_clone()?;
        // A process group of its own: a Ctrl-C in the terminal reaches dev mode only, which
        // stops the children in order (a plugin must outlive its agent's take-down).
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env(
                csivol_csi::supervised::PARENT_PID,
                std::process::id().to_string(),
            )
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd
            .spawn()
            .with_context(|| format!("failed to start a child process (log: {})", log.display()))?;
        if let Some(pid) = child.id() {
            std::fs::write(pid_file, format!("{pid}\n"))?;
        }
        Ok(Self {
            name,
            child,
            log: log.to_owned(),
            log_from,
            again,
        })
    }

    /// What it said last before it exited: its last `error:` line in this run's output.
    fn last_error(&self) -> Option<String> {
        use std::io::{Read, Seek};
        let mut f = std::fs::File::open(&self.log).ok()?;
        f.seek(std::io::SeekFrom::Start(self.log_from)).ok()?;
        let mut text = String::new();
        f.read_to_string(&mut text).ok()?;
        text.lines()
            .rev()
            .find_map(|l| l.strip_prefix("error: "))
            .map(str::to_owned)
    }

    /// "node-2 agent exited (exit status: 1): another csivol-agent ...": why, when it said.
    pub(super) fn exit_line(&self, status: std::process::ExitStatus) -> String {
        match self.last_error() {
            Some(e) => format!("{} exited ({status}): {e}", self.name),
            None => format!(
                "{} exited ({status}); its log: {}",
                self.name,
                self.log.display()
            ),
        }
    }
}

/// The shell command that starts `cmd` again as dev mode did: output appended to `log`,
/// pid written to `pid_file`. Run by hand, it is not stopped by dev mode's Ctrl-C.
fn shell_line(cmd: &Command, log: &Path, pid_file: &Path) -> String {
    let std = cmd.as_std();
    let mut words = vec![csivol_daemon::shell_word(
        &std.get_program().to_string_lossy(),
    )];
    words.extend(
        std.get_args()
            .map(|a| csivol_daemon::shell_word(&a.to_string_lossy())),
    );
    format!(
        "{} >> {} 2>&1 & echo $! > {}",
        words.join(" "),
        csivol_daemon::shell_word(&log.display().to_string()),
        csivol_daemon::shell_word(&pid_file.display().to_string())
    )
}

/// Reports children as they exit, with why and the command that brings each back; returns
/// once none is left.
pub(super) async fn watch_children(children: &mut [Kid]) {
    let mut alive = children.len();
    let mut reported = vec![false; children.len()];
    while alive > 0 {
        for (i, kid) in children.iter_mut().enumerate() {
            if reported[i] {
                continue;
            }
            if let Ok(Some(status)) = kid.child.try_wait() {
                reported[i] = true;
                alive -= 1;
                eprintln!(
                    "{}; the rest of the cluster keeps running; to bring it back (its node comes \
                     back and cleans up as a returning node does), run:\n  {}\n(or Ctrl-C and \
                     run dev mode again)",
                    kid.exit_line(status),
                    kid.again
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How long an agent may take to take its node down (its own bound is 60s).
const AGENT_STOP_TIME: Duration = Duration::from_secs(75);

/// Stops agents first, each taking its node down through its plugin (they must not see
/// their plugin vanish mid-call), then plugins. A second Ctrl-C (or an agent past its
/// time) forces: the rest are killed. Whatever is still mounted below `dir` afterwards was
/// left behind by a forced stop: it is unmounted, and said, so dev mode leaves nothing
/// mounted behind.
pub(super) async fn stop(
    children: &mut Vec<Kid>,
    dir: &Path,
    shutdown: &mut csivol_daemon::Shutdown,
) {
    let mut forced = false;
    for pass in ["agent", "plugin"] {
        for Kid { child, .. } in children.iter_mut().filter(|k| k.name.ends_with(pass)) {
            if let Some(pid) = child.id()
                && let Some(pid) = rustix::process::Pid::from_raw(pid as i32)
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for Kid { name, child, .. } in children.iter_mut().filter(|k| k.name.ends_with(pass)) {
            if !forced {
                tokio::select! {
                    r = tokio::time::timeout(AGENT_STOP_TIME, child.wait()) => {
                        if r.is_err() {
                            eprintln!("{name} did not stop within {}s; killing it", AGENT_STOP_TIME.as_secs());
                        }
                    }
                    () = shutdown.wait() => {
                        eprintln!("forced: killing what is left");
                        forced = true;
                    }
                }
            }
            let _ = child.kill().await;
        }
    }
    children.clear();
    let mut mounts: Vec<PathBuf> = csivol_csi::mountinfo::MountTable::read()
        .map(|t| {
            t.points()
                .filter(|m| m.starts_with(dir))
                .map(Path::to_path_buf)
                .collect()
        })
        .unwrap_or_default();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in mounts {
        eprintln!(
            "{} was left mounted (a forced stop); unmounting it: the agent will find it gone and stage or publish it again",
            m.display()
        );
        if let Err(e) = rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH) {
            eprintln!("failed to unmount {}: {e}", m.display());
        }
    }
}
