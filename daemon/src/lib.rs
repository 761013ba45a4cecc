//! What the server (`csivol-server`) and the node agent (`csivol-agent`) share, and
//! nothing else: the modes of their data dirs and files, the agent's data-dir lock (which
//! dev mode checks), the signal that stops them, and their log setup.

pub mod lock;
pub mod modes;

/// SIGTERM and SIGINT, how the server, the node agent and dev mode are asked to stop,
/// listened for from the moment it is made: each holds one from its first step. A signal
/// that comes before anyone waits (while a program is still starting) is kept for the next
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

    /// Whether a SIGTERM or SIGINT came since the last wait, without waiting: a program
    /// that finished a step it would not break off looks before it takes the next.
    pub async fn pending(&mut self) -> bool {
        tokio::select! {
            biased;
            () = self.wait() => true,
            () = std::future::ready(()) => false,
        }
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

/// Logs to stderr, filtered by `RUST_LOG` (default `info`): a level, and `target=level`
/// directives, comma-separated (`info,csivol_agent=debug`). Under systemd (stderr connected
/// to the journal, which sets `JOURNAL_STREAM`) the journal stamps every line itself: a
/// second timestamp only pushes the message off the screen in `journalctl`.
///
/// The filter is `tracing_subscriber`'s `Targets`, not its `EnvFilter`: the same directives
/// without span and field filters, and without the regular-expression engine they bring,
/// which every node agent would otherwise map.
pub fn init_logs() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, refused) = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(!journal && std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let registry = tracing_subscriber::registry().with(filter);
    if journal {
        registry.with(logs.without_time()).init();
    } else {
        registry.with(logs).init();
    }
    if let Some(e) = refused {
        tracing::warn!("{e}");
    }
}

/// The filter `RUST_LOG` asks for, or `info` and why its value was refused.
fn log_filter(var: Option<&str>) -> (tracing_subscriber::filter::Targets, Option<String>) {
    let info = || tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO);
    match var.map(str::trim).filter(|v| !v.is_empty()) {
        None => (info(), None),
        Some(v) => match v.parse() {
            Ok(filter) => (filter, None),
            Err(e) => (
                info(),
                Some(format!(
                    "RUST_LOG={v:?} is not a log filter ({e}); logging at info\n\
                     hint: give a level, or `target=level` directives separated by commas, \
                     e.g. RUST_LOG=info,csivol_agent=debug"
                )),
            ),
        },
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

#[cfg(test)]
mod tests {
    use tracing::Level;
    use tracing::level_filters::LevelFilter;

    use super::log_filter;

    #[test]
    fn rust_log_takes_a_level_and_target_directives_and_refuses_the_rest() {
        let at = |var: Option<&str>, target: &str| {
            let (filter, refused) = log_filter(var);
            assert_eq!(refused, None, "{var:?}");
            [
                Level::TRACE,
                Level::DEBUG,
                Level::INFO,
                Level::WARN,
                Level::ERROR,
            ]
            .into_iter()
            .find(|l| filter.would_enable(target, l))
            .map_or(LevelFilter::OFF, LevelFilter::from_level)
        };
        assert_eq!(at(None, "csivol_agent"), LevelFilter::INFO);
        assert_eq!(at(Some(" "), "csivol_agent"), LevelFilter::INFO);
        assert_eq!(at(Some("debug"), "h2"), LevelFilter::DEBUG);
        let docs = Some("info,csivol_agent=debug");
        assert_eq!(at(docs, "csivol_agent::session"), LevelFilter::DEBUG);
        assert_eq!(at(docs, "h2"), LevelFilter::INFO);
        assert_eq!(
            at(Some("csivol_server=trace"), "csivol_server"),
            LevelFilter::TRACE
        );
        assert_eq!(at(Some("csivol_server=trace"), "tonic"), LevelFilter::OFF);

        let (filter, refused) = log_filter(Some("csivol_agent=loud"));
        let refused = refused.unwrap();
        assert!(
            refused.contains("RUST_LOG=\"csivol_agent=loud\""),
            "{refused}"
        );
        assert!(refused.contains("hint:"), "{refused}");
        assert!(filter.would_enable("csivol_agent", &Level::INFO));
        assert!(!filter.would_enable("csivol_agent", &Level::DEBUG));
    }
}
