//! Exit codes and the error type that carries one, with an optional hint for the next step.

use std::fmt;
use std::process::ExitCode;

use csivol_proto::api::ErrorCode;

/// The documented exit codes. Scripts rely on them: never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// Anything not covered below (a failed claim, a server-side internal error, I/O).
    Error = 1,
    /// The command line, a spec file or the request is wrong (also the server's `invalid`).
    Usage = 2,
    NotFound = 3,
    /// Something is in the way (another claim, capacity, a volume still attached).
    Conflict = 4,
    /// `--wait` ran out of `--timeout`.
    TimedOut = 5,
    /// Held by a lost node; also `status --blocked` when something is blocked.
    Blocked = 6,
    /// No token, an unknown token, or a token without the right.
    Unauthorized = 7,
    /// The server cannot be reached, or answered that it cannot serve now.
    Unreachable = 8,
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
        "usage error: bad arguments, a bad spec file, or a request the server calls invalid",
    ),
    (
        Exit::NotFound,
        "not found: no such volume, claim, node or plugin",
    ),
    (
        Exit::Conflict,
        "conflict: another claim, no free slot, the volume is still in use",
    ),
    (
        Exit::TimedOut,
        "timed out waiting (--wait ran out of --timeout)",
    ),
    (
        Exit::Blocked,
        "blocked: held by a lost node (for `status --blocked`: something is blocked)",
    ),
    (
        Exit::Unauthorized,
        "unauthorized: no token, an unknown token, or one without the right",
    ),
    (
        Exit::Unreachable,
        "server unreachable, or it answered that it is unavailable",
    ),
];

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// How the server's error codes map onto exit codes.
    pub fn from_api(code: ErrorCode) -> Self {
        match code {
            ErrorCode::Invalid => Self::Usage,
            ErrorCode::Unauthorized => Self::Unauthorized,
            ErrorCode::NotFound => Self::NotFound,
            ErrorCode::Conflict => Self::Conflict,
            ErrorCode::Blocked => Self::Blocked,
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
