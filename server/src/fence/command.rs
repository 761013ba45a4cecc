//! Runs a fence method's command: in its own process group, with the method's environment,
//! for at most its timeout (then the whole group is killed), its output bounded and the
//! method's secrets masked in it.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use csivol_rules::fence::FenceMethod;

/// Most bytes of a fence command's stdout, and of its stderr, kept as evidence.
const OUTPUT_LIMIT: usize = 4096;
/// How long the output of a finished or killed command is waited for: a grandchild that
/// keeps its pipes open must not hold the fence up.
const OUTPUT_GRACE: Duration = Duration::from_secs(1);

/// What a fence command did.
#[derive(Debug, Clone)]
pub struct Ran {
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    pub output: String,
    pub duration: Duration,
}

impl Ran {
    pub fn ok(&self) -> bool {
        !self.timed_out && self.exit_status == Some(0)
    }
}

/// Runs `command` with `env` added, in its own process group, for at most the method's
/// timeout; on timeout the whole group is killed (what a finished command left running
/// is not waited for: its output is read for at most a second). Output is bounded, and the method's
/// `env` values (secrets) are masked in it.
pub async fn run_command(
    method: &FenceMethod,
    command: &[String],
    env: &[(String, String)],
) -> Ran {
    let started = Instant::now();
    let mut cmd = tokio::process::Command::new(&command[0]);
    cmd.args(&command[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran {
                exit_status: None,
                timed_out: false,
                output: format!("failed to start {}: {e}", command[0]),
                duration: started.elapsed(),
            };
        }
    };
    let stdout = tokio::spawn(read_bounded(child.stdout.take()));
    let stderr = tokio::spawn(read_bounded(child.stderr.take()));
    let pid = child.id();
    let (exit_status, timed_out) = match tokio::time::timeout(method.timeout, child.wait()).await {
        Ok(Ok(status)) => (status.code(), false),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "failed to wait for the fence command");
            (None, false)
        }
        Err(_) => (None, true),
    };
    if timed_out {
        // All of it goes, with its process group: the child is not reaped yet, so the
        // group's id cannot have been reused.
        if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = child.kill().await;
    }
    let duration = started.elapsed();
    let mut output = String::new();
    for (name, task) in [("stdout", stdout), ("stderr", stderr)] {
        let text = match tokio::time::timeout(OUTPUT_GRACE, task).await {
            Ok(Ok(t)) => t,
            _ => String::from("(not read: still held open)"),
        };
        if !text.trim().is_empty() {
            output.push_str(&format!("{name}:\n{}\n", text.trim_end()));
        }
    }
    for secret in method.env.values().filter(|v| !v.is_empty()) {
        output = output.replace(secret.as_str(), "<redacted>");
    }
    Ran {
        exit_status,
        timed_out,
        output,
        duration,
    }
}

async fn read_bounded(pipe: Option<impl AsyncRead + Unpin>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut more = 0usize;
    let mut buf = [0u8; 4096];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                more += n.saturating_sub(room);
            }
        }
    }
    let mut s = String::from_utf8_lossy(&kept).into_owned();
    if more > 0 {
        s.push_str(&format!("\n[{more} more bytes not kept]"));
    }
    s
}
