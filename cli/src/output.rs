//! Where output goes and how it looks: data (tables, JSON) on stdout; notes, warnings,
//! prompts and progress on stderr. Colour only on a terminal and never with `NO_COLOR`;
//! spinners only when stderr is a terminal, in table mode, and not with `-q`.
//!
//! Every text written for people goes through [`escape`] here (or, for tables, in
//! [`Table`]'s cells): no control character that came from data reaches the terminal.
//! The only control sequences written are csivol's own: colours and `status --watch`'s
//! clearing of the screen.

// The one place that writes to the terminal (see `cli/clippy.toml`).
#![allow(
    clippy::disallowed_macros,
    clippy::disallowed_methods,
    reason = "the writers every other module goes through; they escape what they print"
)]

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use console::Style;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::args::{Format, GlobalArgs};
use crate::env;
use crate::escape;
use crate::failure::{Exit, Failure};
use crate::table::Table;

#[derive(Clone, Debug)]
pub struct Out {
    pub format: Format,
    pub quiet: bool,
    color_stdout: bool,
    color_stderr: bool,
    stdout_tty: bool,
    stderr_tty: bool,
    stdin_tty: bool,
    width: Option<u16>,
}

impl Out {
    pub fn new(args: &GlobalArgs) -> Self {
        let stdout_tty = std::io::stdout().is_terminal();
        let stderr_tty = std::io::stderr().is_terminal();
        let color = !args.no_color && !env::no_color();
        Self {
            format: args.output,
            quiet: args.quiet,
            color_stdout: color && stdout_tty,
            color_stderr: color && stderr_tty,
            stdout_tty,
            stderr_tty,
            stdin_tty: std::io::stdin().is_terminal(),
            width: env::columns(),
        }
    }

    pub fn json_mode(&self) -> bool {
        self.format == Format::Json
    }

    // ---- stdout ----

    /// One JSON document on stdout (characters a terminal obeys escaped: [`escape::json`]).
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        // Serialised first, so a closed pipe surfaces as the I/O error it is.
        self.write_json(&serde_json::to_string_pretty(value)?)
    }

    /// One JSON object on one line (for streams such as `events --follow`).
    pub fn json_line<T: Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        self.write_json(&serde_json::to_string(value)?)
    }

    fn write_json(&self, text: &str) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(escape::json(text).as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()?;
        Ok(())
    }

    pub fn stdout_is_tty(&self) -> bool {
        self.stdout_tty
    }

    /// Clears the terminal and puts the cursor top left, like watch(1).
    pub fn clear_screen(&self) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        out.write_all(b"\x1b[2J\x1b[H")?;
        out.flush()?;
        Ok(())
    }

    /// Text on stdout and a newline; it may span lines (control characters escaped).
    pub fn line(&self, text: impl AsRef<str>) -> anyhow::Result<()> {
        self.write_line(&escape::lines(text.as_ref()))
    }

    /// Text on stdout as one line: newlines in it become spaces (an event, a finding).
    pub fn one_line(&self, text: impl AsRef<str>) -> anyhow::Result<()> {
        self.write_line(&escape::line(text.as_ref()))
    }

    /// One line on stdout in `style` when colour is on (a record's title).
    pub fn styled_line(&self, style: Style, text: &str) -> anyhow::Result<()> {
        let text = escape::line(text);
        let painted = style.force_styling(self.color_stdout).apply_to(&*text);
        self.write_line(&painted.to_string())
    }

    fn write_line(&self, text: &str) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}")?;
        out.flush()?;
        Ok(())
    }

    /// A table with this header, fitting the terminal (or `COLUMNS`) by cutting its least
    /// important columns; with `-o wide`, or in a pipe without `COLUMNS`, nothing is cut.
    pub fn table(&self, header: &[&str]) -> Table {
        let width = match self.format {
            Format::Wide => None,
            _ => self.width.map(usize::from).or_else(|| {
                self.stdout_tty
                    .then(|| {
                        console::Term::stdout()
                            .size_checked()
                            .map(|(_, w)| usize::from(w))
                    })
                    .flatten()
            }),
        };
        Table::new(header, width, self.color_stdout)
    }

    /// Prints a table from [`Out::table`] on stdout (its cells were escaped as they were
    /// added; its lines hold only the table's own colours).
    pub fn print_table(&self, t: Table) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        for line in t.lines() {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        Ok(())
    }

    // ---- stderr ----

    /// A command's result when nothing is left to print (a claim released, a snapshot
    /// deleted, a token revoked): `note` for people; with `-o json` instead one document on
    /// stdout, `{"outcome": ..., ...}` (`outcome` and the names in it), so that every
    /// outcome in JSON mode is one document.
    pub fn done(&self, note: impl AsRef<str>, outcome: serde_json::Value) -> anyhow::Result<()> {
        if self.json_mode() {
            return self.json(&outcome);
        }
        self.note(note);
        Ok(())
    }

    /// A note for the person at the terminal (not with `-q`, nor with `-o json`, where
    /// stderr carries JSON only).
    pub fn note(&self, text: impl AsRef<str>) {
        if !self.quiet && !self.json_mode() {
            eprintln!("{}", escape::lines(text.as_ref()));
        }
    }

    /// What a confirmation prompt asks about, said before it: a note, shown with `-o json`
    /// too when stdin is a terminal, where the prompt follows.
    pub fn before_prompt(&self, text: impl AsRef<str>) {
        if !self.quiet && (!self.json_mode() || self.stdin_tty) {
            eprintln!("{}", escape::lines(text.as_ref()));
        }
    }

    /// A warning on stderr; with `-o json`, as one JSON line `{"warning": "..."}`, so that
    /// stderr holds JSON documents only.
    pub fn warn(&self, text: impl AsRef<str>) {
        if self.json_mode() {
            eprintln!("{}", serde_json::json!({ "warning": text.as_ref() }));
            return;
        }
        let label = Style::new()
            .yellow()
            .bold()
            .force_styling(self.color_stderr)
            .apply_to("warning:");
        eprintln!("{label} {}", escape::lines(text.as_ref()));
    }

    /// The final error: what failed and why, then the next step.
    /// The error a command ends with: with `-o json`, one JSON object on stderr
    /// (`{"error": {"code", "exit", "message", "hint"?}}`), so that scripts parse it too.
    pub fn error(&self, exit: Exit, message: &str, hint: Option<&str>) {
        if self.json_mode() {
            let mut e = serde_json::json!({
                "code": exit.name(),
                "exit": exit.code(),
                "message": message,
            });
            if let Some(h) = hint {
                e["hint"] = h.into();
            }
            eprintln!("{}", serde_json::json!({ "error": e }));
            return;
        }
        let red = Style::new().red().bold().force_styling(self.color_stderr);
        eprintln!("{} {}", red.apply_to("error:"), escape::lines(message));
        if let (Some(h), false) = (hint, self.quiet) {
            let cyan = Style::new().cyan().bold().force_styling(self.color_stderr);
            eprintln!("{} {}", cyan.apply_to("hint:"), escape::lines(h));
        }
    }

    /// Asks before something destructive. `what` names the action ("unblock volume v1");
    /// the caller has already shown on stderr exactly what will happen.
    pub fn confirm(&self, what: &str, yes: bool, has_dry_run: bool) -> anyhow::Result<()> {
        if yes {
            return Ok(());
        }
        if !self.stdin_tty {
            return Err(Failure::usage(format!(
                "refusing to {what} without confirmation: stdin is not a terminal; nothing was changed"
            ))
            .hint(if has_dry_run {
                "check what it will do with --dry-run, then run it again with --yes"
            } else {
                "run it again with --yes"
            })
            .into());
        }
        eprint!("Proceed? [y/N] ");
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            Ok(())
        } else {
            // The same exit as a confirmation refused without a terminal: nothing was
            // agreed to, so nothing happened.
            Err(Failure::usage("cancelled; nothing was changed").into())
        }
    }

    /// Whether a wait's progress shows live (a spinner on a terminal). Where it does not (a
    /// CI job's log), a wait may take fewer requests and show fewer steps.
    pub fn live_progress(&self) -> bool {
        !self.quiet && self.stderr_tty && !self.json_mode()
    }

    /// Progress of a wait: a spinner on a terminal, otherwise a line per change; none with
    /// `-q` or `-o json`.
    pub fn progress(&self) -> Progress {
        if self.quiet || self.json_mode() {
            return Progress::Silent;
        }
        if self.live_progress() {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .expect("valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(100));
            return Progress::Spinner(bar);
        }
        Progress::Lines { last: None }
    }
}

#[derive(Debug)]
pub enum Progress {
    Spinner(ProgressBar),
    Lines { last: Option<String> },
    Silent,
}

impl Progress {
    pub fn set(&mut self, message: &str) {
        match self {
            Self::Spinner(bar) => bar.set_message(escape::line(message).into_owned()),
            Self::Lines { last } => {
                if last.as_deref() != Some(message) {
                    eprintln!("{}", escape::line(message));
                    *last = Some(message.to_owned());
                }
            }
            Self::Silent => {}
        }
    }

    pub fn finish(&mut self) {
        if let Self::Spinner(bar) = self {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// An RFC 3339 time to the second (`2026-11-30T01:19:18Z`), as tables show it; `-o wide`
/// keeps the milliseconds.
pub fn time(out: &Out, ts: &str) -> String {
    if out.format == Format::Wide {
        return ts.to_owned();
    }
    trim_millis(ts)
}

fn trim_millis(ts: &str) -> String {
    match (ts.find('.'), ts.ends_with('Z')) {
        (Some(dot), true) => format!("{}Z", &ts[..dot]),
        _ => ts.to_owned(),
    }
}

/// An absolute time with a relative hint, as a record shows it:
/// `2026-11-30T01:19:18Z (3m ago)`, or `(in 20s)` for a time to come.
pub fn when(ts: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339_weak(ts) else {
        return ts.to_owned();
    };
    let now = SystemTime::now();
    let hint = match now.duration_since(t) {
        Ok(d) => format!("{} ago", short_duration(d)),
        Err(e) => format!("in {}", short_duration(e.duration())),
    };
    format!("{} ({hint})", trim_millis(ts))
}

/// A byte count for people: `64 MiB`, `1.5 GiB`, `512 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: &[&str] = &["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = 0;
    let mut value = n as f64;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value.fract() == 0.0 || value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        let text = format!("{value:.1}");
        format!("{} {}", text.trim_end_matches(".0"), UNITS[unit])
    }
}

/// How long ago an RFC 3339 time was, e.g. `12s`, `3m4s`, `2h5m`, `3d4h`.
pub fn age(ts: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339_weak(ts) else {
        return ts.to_owned();
    };
    let d = SystemTime::now().duration_since(t).unwrap_or_default();
    short_duration(d)
}

/// What a claim waits for on its node and how long it has waited, e.g. `published; waiting
/// for the target to be mounted from the volume: ...: 20s of 2m`.
pub fn waiting(w: &csivol_api::ClaimWaiting) -> String {
    let waited = humantime::parse_rfc3339_weak(&w.since)
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    format!(
        "{}: {} of {}",
        w.reason,
        short_duration(waited),
        given_duration(Duration::from_millis(w.timeout_ms))
    )
}

pub fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (big, small) = match s {
        0..60 => return format!("{s}s"),
        60..3600 => ((s / 60, "m"), (s % 60, "s")),
        3600..86400 => ((s / 3600, "h"), (s % 3600 / 60, "m")),
        _ => ((s / 86400, "d"), (s % 86400 / 3600, "h")),
    };
    if small.0 == 0 {
        format!("{}{}", big.0, big.1)
    } else {
        format!("{}{}{}{}", big.0, big.1, small.0, small.1)
    }
}

/// A duration someone set (a `--timeout`, a TTL), exactly as short as it reads: whole
/// seconds as [`short_duration`] shows them (`2m`, `1m30s`), anything finer to the
/// millisecond (`1ms`, `1s500ms`), never rounded down to `0s`.
pub fn given_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        return short_duration(d);
    }
    let d = if d >= Duration::from_millis(1) {
        Duration::from_millis(d.as_millis() as u64)
    } else {
        d
    };
    humantime::format_duration(d).to_string().replace(' ', "")
}

/// `-` for nothing, so empty table cells still read as "none".
pub fn or_dash(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_owned(),
        _ => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(3 << 29), "1.5 GiB");
        assert_eq!(bytes(1000 << 30), "1000 GiB");
        assert_eq!(bytes(u64::MAX), "16 EiB");
    }

    #[test]
    fn times_in_records_have_a_relative_hint() {
        assert_eq!(
            trim_millis("2026-11-30T01:19:18.648Z"),
            "2026-11-30T01:19:18Z"
        );
        assert!(when("2020-01-01T00:00:00.000Z").ends_with(" ago)"));
        assert!(when("2999-01-01T00:00:00Z").starts_with("2999-01-01T00:00:00Z (in "));
    }

    #[test]
    fn given_durations_are_never_rounded_to_nothing() {
        let ms = |n| given_duration(Duration::from_millis(n));
        assert_eq!(ms(1), "1ms");
        assert_eq!(ms(1500), "1s500ms");
        assert_eq!(ms(120_000), "2m");
        assert_eq!(ms(90_000), "1m30s");
        assert_eq!(given_duration(Duration::from_micros(300)), "300us");
    }

    #[test]
    fn short_durations() {
        let s = |secs| short_duration(Duration::from_secs(secs));
        assert_eq!(s(0), "0s");
        assert_eq!(s(59), "59s");
        assert_eq!(s(60), "1m");
        assert_eq!(s(61), "1m1s");
        assert_eq!(s(3600 * 2 + 300), "2h5m");
        assert_eq!(s(86400 * 3), "3d");
    }
}
