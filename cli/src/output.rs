//! Where output goes and how it looks: data (tables, JSON) on stdout; notes, warnings,
//! prompts and progress on stderr. Colour only on a terminal and never with `NO_COLOR`;
//! spinners only when stderr is a terminal, in table mode, and not with `-q`.

use std::io::{BufRead, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use comfy_table::{Attribute, Cell, Color, ColumnConstraint, ContentArrangement, Table};
use console::Style;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::args::{Format, GlobalArgs};
use crate::env;
use crate::failure::{Exit, Failure};

/// Table columns of free text, which wrap when a table does not fit the width.
const WRAPPABLE: &[&str] = &[
    "MESSAGE",
    "ERROR",
    "NOTES",
    "LABELS",
    "CLAIMS",
    "NODES",
    "TARGET PATH",
    "UNBLOCK WITH",
    "PLUGINS (USED/MAX)",
    "BLOCKED CLAIMS",
];

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

    /// One JSON document on stdout.
    pub fn json<T: Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        // Serialised first, so a closed pipe surfaces as the I/O error it is.
        let mut text = serde_json::to_vec_pretty(value)?;
        text.push(b'\n');
        let mut out = std::io::stdout().lock();
        out.write_all(&text)?;
        out.flush()?;
        Ok(())
    }

    /// One JSON object on one line (for streams such as `events --follow`).
    pub fn json_line<T: Serialize + ?Sized>(&self, value: &T) -> anyhow::Result<()> {
        let mut text = serde_json::to_vec(value)?;
        text.push(b'\n');
        let mut out = std::io::stdout().lock();
        out.write_all(&text)?;
        out.flush()?;
        Ok(())
    }

    /// A line of text on stdout.
    pub fn line(&self, text: impl AsRef<str>) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", text.as_ref())?;
        out.flush()?;
        Ok(())
    }

    /// A table with this header, fitting the terminal (or `COLUMNS`).
    pub fn table(&self, header: &[&str]) -> Table {
        let mut t = Table::new();
        t.load_style(comfy_table::presets::NOTHING)
            .set_content_arrangement(ContentArrangement::Dynamic);
        if let Some(w) = self.width {
            t.set_width(w);
        }
        if !self.stdout_tty {
            t.force_no_tty();
        }
        t.set_header(header.iter().map(|h| {
            let c = Cell::new(h);
            if self.color_stdout {
                c.add_attribute(Attribute::Bold)
            } else {
                c
            }
        }));
        // When the table does not fit, only free text wraps; names, states and times stay
        // whole so that they can still be read and copied.
        for (col, h) in t.column_iter_mut().zip(header) {
            if !WRAPPABLE.contains(h) {
                col.set_constraint(ColumnConstraint::ContentWidth);
            }
        }
        t
    }

    /// Prints a table from [`Out::table`] on stdout, columns two spaces apart.
    pub fn print_table(&self, mut t: Table) -> anyhow::Result<()> {
        let n = t.column_count();
        for (i, col) in t.column_iter_mut().enumerate() {
            col.set_padding((0, if i + 1 == n { 0 } else { 2 }));
        }
        let mut out = std::io::stdout().lock();
        for line in t.lines() {
            writeln!(out, "{}", line.trim_end())?;
        }
        out.flush()?;
        Ok(())
    }

    /// A state in a table, coloured by what it means for the operator.
    pub fn state_cell(&self, state: &str) -> Cell {
        let c = Cell::new(state);
        if !self.color_stdout {
            return c;
        }
        match state {
            "ready" | "free" | "attached" | "ok" | "active" => c.fg(Color::Green),
            "blocked" | "failed" | "lost" | "revoked" => {
                c.fg(Color::Red).add_attribute(Attribute::Bold)
            }
            _ => c.fg(Color::Yellow),
        }
    }

    /// Text styled for stdout, when colour is on.
    pub fn paint(&self, style: Style, text: &str) -> String {
        style
            .force_styling(self.color_stdout)
            .apply_to(text)
            .to_string()
    }

    // ---- stderr ----

    /// A note for the person at the terminal (not with `-q`).
    pub fn note(&self, text: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", text.as_ref());
        }
    }

    pub fn warn(&self, text: impl AsRef<str>) {
        let label = Style::new()
            .yellow()
            .bold()
            .force_styling(self.color_stderr)
            .apply_to("warning:");
        eprintln!("{label} {}", text.as_ref());
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
        eprintln!("{} {message}", red.apply_to("error:"));
        if let (Some(h), false) = (hint, self.quiet) {
            let cyan = Style::new().cyan().bold().force_styling(self.color_stderr);
            eprintln!("{} {h}", cyan.apply_to("hint:"));
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
            Err(Failure::new(Exit::Error, "cancelled; nothing was changed").into())
        }
    }

    /// Progress of a wait: a spinner on a terminal, otherwise a line per change.
    pub fn progress(&self) -> Progress {
        if self.quiet {
            return Progress::Silent;
        }
        if self.stderr_tty && !self.json_mode() {
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
            Self::Spinner(bar) => bar.set_message(message.to_owned()),
            Self::Lines { last } => {
                if last.as_deref() != Some(message) {
                    eprintln!("{message}");
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
pub fn waiting(w: &csivol_proto::api::ClaimWaiting) -> String {
    let waited = humantime::parse_rfc3339_weak(&w.since)
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .unwrap_or_default();
    format!(
        "{}: {} of {}",
        w.reason,
        short_duration(waited),
        short_duration(Duration::from_millis(w.timeout_ms))
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
