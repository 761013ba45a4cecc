//! What the server (`csivol-server`) and the node agent (`csivol-agent`) share, and
//! nothing else: the modes of their data dirs and files, the agent's data-dir lock (which
//! dev mode checks), the signal that stops them, and their log setup.

pub mod lock;
pub mod modes;

/// Completes on SIGTERM or SIGINT: how the server, the node agent and dev mode are asked to
/// stop. Without signal handlers (which should not happen) it never completes, and the
/// process still stops when killed.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
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
