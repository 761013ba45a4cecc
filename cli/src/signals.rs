//! The signals a CI job is stopped with, as one future: `claim --wait` releases its claim
//! on them, `run` forwards them to its command.

use tokio::signal::unix::{SignalKind, signal};

/// A signal that asks csivol to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Int,
    Term,
    Hup,
}

impl Stop {
    pub fn name(self) -> &'static str {
        match self {
            Self::Int => "SIGINT",
            Self::Term => "SIGTERM",
            Self::Hup => "SIGHUP",
        }
    }

    /// The signal's number (128 + it is the conventional exit code).
    pub fn number(self) -> u8 {
        match self {
            Self::Hup => 1,
            Self::Int => 2,
            Self::Term => 15,
        }
    }
}

/// Listens for SIGINT, SIGTERM and SIGHUP from now on.
#[derive(Debug)]
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> Stop {
        tokio::select! {
            _ = self.int.recv() => Stop::Int,
            _ = self.term.recv() => Stop::Term,
            _ = self.hup.recv() => Stop::Hup,
        }
    }
}

/// Completes on the first SIGINT or SIGTERM (never when the handlers cannot be set up).
pub async fn terminated() -> Stop {
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Stop::Int,
        _ = term.recv() => Stop::Term,
    }
}
