//! What the server (`csivol-server`) and the node agent (`csivol-agent`) share, and
//! nothing else: the modes of their data dirs and files, the agent's data-dir lock (which
//! dev mode checks), the signal that stops them, and their log setup.

pub mod lock;
pub mod modes;

/// SIGTERM and SIGINT, listened for from the moment it is made: a signal that comes
/// before anyone waits (while a program is still starting) is kept for the next
/// [`Shutdown::wait`] instead of stopping the process with the default action, which
/// would skip its orderly stop.
pub struct Shutdown {
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Shutdown {
    /// Listens from now on. Must be called within a Tokio runtime.
    pub fn listen() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some((term, int)),
            _ => None,
        };
        Self { signals }
    }

    /// Completes on the next SIGTERM or SIGINT, or on one that came since the last wait.
    /// Without signal handlers (which should not happen) it never completes, and the
    /// process still stops when killed.
    pub async fn wait(&mut self) {
        let Some((term, int)) = self.signals.as_mut() else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
}

/// Completes on SIGTERM or SIGINT: how the server, the node agent and dev mode are asked to
/// stop. It listens from its first poll; a program that must not be stopped by the
/// default action while it starts holds a [`Shutdown`] from its first step instead.
pub async fn shutdown_signal() {
    Shutdown::listen().wait().await;
}

/// Logs to stderr, filtered by `RUST_LOG` (default `info`). Under systemd (stderr connected
/// to the journal, which sets `JOURNAL_STREAM`) the journal stamps every line itself: a
/// second timestamp only pushes the message off the screen in `journalctl`.
pub fn init_logs() {
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        logs.without_time().with_ansi(false).init();
    } else {
        logs.init();
    }
}

/// `word` as `sh` reads it back: as it is when it is plain, else in single quotes. For the
/// commands the daemons print for a user to run.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}
