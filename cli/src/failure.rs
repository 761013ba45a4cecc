//! Exit codes and the error type that carries one, with an optional hint for the next step.

use std::fmt;
use std::process::ExitCode;

use csivol_api::ErrorCode;

/// The documented exit codes. Scripts rely on them: never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok,
    /// Anything not covered below (a failed claim, a server-side internal error, I/O).
    Error,
    /// The command line, a spec file or the request is wrong (also the server's `invalid`).
    Usage,
    NotFound,
    /// Something is in the way (another claim, capacity, a volume still attached).
    Conflict,
    /// `--wait` ran out of `--timeout`.
    TimedOut,
    /// Held by a lost node; also `status --blocked` when something is blocked.
    Blocked,
    /// No token, an unknown token, or a token without the right.
    Unauthorized,
    /// The server cannot be reached, or answered that it cannot serve now.
    Unreachable,
    /// The node lies outside the volume's accessible topology: the claim can never succeed
    /// there, another node must be chosen.
    Topology,
    /// Stopped by a signal (after releasing what it claimed): 128 + the signal's number,
    /// as shells report it (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP).
    Signal(u8),
    /// `csivol run`: the command's own exit status.
    Command(u8),
}

/// The table printed by `--help` and in the man pages.
pub const EXIT_CODES: &[(Exit, &str)] = &[
    (
        Exit::Ok,
        "success (for `status --blocked`: nothing is blocked)",
    ),
    (
        Exit::Error,
        "other error (e.g. a claim failed, a fence did not confirm the node off, a server-side internal error)",
    ),
    (
        Exit::Usage,
        "usage error: bad arguments, a bad spec file, no confirmation (no terminal to ask on, \
         or \"n\" at the prompt), or a request the server calls invalid",
    ),
    (
        Exit::NotFound,
        "not found: no such volume, claim, node or plugin",
    ),
    (
        Exit::Conflict,
        "conflict: another claim, no free slot, a node that takes no new claims (ineligible, \
         draining), the volume or node is still in use",
    ),
    (
        Exit::TimedOut,
        "timed out waiting (--wait ran out of --timeout; node drain --wait of --deadline)",
    ),
    (
        Exit::Blocked,
        "blocked: held by a lost node (for `status --blocked`: something is blocked)",
    ),
    (
        Exit::Unauthorized,
        "unauthorized: no token, an unknown, expired or revoked token, or one without the right",
    ),
    (
        Exit::Unreachable,
        "server unreachable (or its certificate not trusted), or it answered that it is unavailable",
    ),
    (
        Exit::Topology,
        "topology: the node lies outside the volume's accessible topology (the hint names \
         nodes that reach it)",
    ),
    (
        Exit::Signal(2),
        "interrupted by SIGINT (143: SIGTERM, 129: SIGHUP) after releasing what it claimed; \
         `run` exits with its command's status once the command ran",
    ),
];

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::Error => 1,
            Self::Usage => 2,
            Self::NotFound => 3,
            Self::Conflict => 4,
            Self::TimedOut => 5,
            Self::Blocked => 6,
            Self::Unauthorized => 7,
            Self::Unreachable => 8,
            Self::Topology => 9,
            Self::Signal(n) => 128 + n,
            Self::Command(c) => c,
        }
    }

    /// The stable name of an error exit, for `-o json` errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Usage => "invalid",
            Self::NotFound => "not-found",
            Self::Conflict => "conflict",
            Self::TimedOut => "timed-out",
            Self::Blocked => "blocked",
            Self::Unauthorized => "unauthorized",
            Self::Unreachable => "unavailable",
            Self::Topology => "topology",
            Self::Signal(_) => "interrupted",
            Self::Command(_) => "command-failed",
        }
    }

    /// How the server's error codes map onto exit codes.
    pub fn from_api(code: ErrorCode) -> Self {
        match code {
            ErrorCode::Invalid => Self::Usage,
            ErrorCode::Unauthorized => Self::Unauthorized,
            ErrorCode::NotFound => Self::NotFound,
            ErrorCode::Conflict => Self::Conflict,
            ErrorCode::Blocked => Self::Blocked,
            ErrorCode::Topology => Self::Topology,
            ErrorCode::Unavailable => Self::Unreachable,
            ErrorCode::Failed | ErrorCode::Internal => Self::Error,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> Self {
        ExitCode::from(e.code())
    }
}

/// An error with its exit code and, where there is an obvious next step, a hint.
///
/// It sits at the bottom of an `anyhow` chain; the layers above say what was being done.
#[derive(Debug, Clone)]
pub struct Failure {
    pub exit: Exit,
    pub message: String,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// The exit code and hint of an error chain: those of its [`Failure`], else exit 1.
pub fn classify(err: &anyhow::Error) -> (Exit, Option<String>) {
    err.chain()
        .find_map(|e| e.downcast_ref::<Failure>())
        .map_or((Exit::Error, None), |f| (f.exit, f.hint.clone()))
}

/// Whether the error is a closed stdout (`csivol ... | head`), which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
