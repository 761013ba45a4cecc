//! Tables on stdout, laid out the way kubectl does it: one line per row, columns two spaces
//! apart, and when a table is wider than the terminal (or `COLUMNS`) the least important
//! columns are cut with an ellipsis. A cell is never wrapped; `-o wide` cuts nothing.

use std::borrow::Cow;

use console::Style;

use crate::escape;

/// How a column may be cut when the table does not fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// Never cut: names, states and indexes must stay whole to be read and copied.
    Never,
    /// Free text, cut first, down to [`TEXT_MIN`]: the end goes (`no free slot f…`).
    Text,
    /// A path, cut first, down to [`TEXT_MIN`]: the start goes (`…/targets/v1/job-1`), the
    /// end being what tells two paths apart.
    Path,
    /// Cut only when cutting free text was not enough, down to [`LAST_MIN`].
    Last,
}

/// The rounds of cutting: which columns give up characters, down to what width. Free text
/// keeps a readable start before other columns are cut; names are cut only at the end.
const ROUNDS: &[(&[Cut], usize)] = &[
    (&[Cut::Text, Cut::Path], 20),
    (&[Cut::Last], 8),
    (&[Cut::Text, Cut::Path], 10),
    (&[Cut::Text, Cut::Path, Cut::Last], 4),
];

/// Each column's rule by its header; a header not listed is cut last.
const RULES: &[(&str, Cut)] = &[
    ("INDEX", Cut::Never),
    ("NAME", Cut::Never),
    ("STATE", Cut::Never),
    ("STATUS", Cut::Never),
    ("TIME", Cut::Never),
    ("KIND", Cut::Never),
    ("MESSAGE", Cut::Text),
    ("ERROR", Cut::Text),
    ("NOTES", Cut::Text),
    ("LABELS", Cut::Text),
    ("CLAIMS", Cut::Text),
    ("NODES", Cut::Text),
    ("UNBLOCK WITH", Cut::Text),
    ("PLUGINS (USED/MAX)", Cut::Text),
    ("BLOCKED CLAIMS", Cut::Text),
    ("HEARTBEAT", Cut::Text),
    ("TARGET PATH", Cut::Path),
];

fn rule(header: &str) -> Cut {
    RULES
        .iter()
        .find(|(h, _)| *h == header)
        .map_or(Cut::Last, |(_, c)| *c)
}

/// Headers whose cells are states, coloured by what they mean for the operator.
const STATE_COLUMNS: &[&str] = &["STATE", "STATUS"];

/// A table under construction; [`Table::lines`] lays it out.
#[derive(Clone, Debug)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    /// The width to fit, `None` for no limit.
    width: Option<usize>,
    color: bool,
    /// Columns left out, in this order, when the table would otherwise cut free text
    /// below [`ROUNDS`]' first width: kubectl's "more columns with `-o wide`".
    optional: Vec<String>,
}

impl Table {
    pub fn new(header: &[&str], width: Option<usize>, color: bool) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            width,
            color,
            optional: Vec::new(),
        }
    }

    /// Columns that may be left out at a narrow width, the first named going first.
    pub fn optional(&mut self, headers: &[&str]) {
        self.optional = headers.iter().map(|h| (*h).to_owned()).collect();
    }

    /// Leaves out optional columns until free text keeps a readable width (or none are
    /// left to drop).
    fn drop_optional(&mut self) {
        let Some(limit) = self.width else { return };
        for name in self.optional.clone() {
            let widths = self.widths();
            let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            let text_cut = self
                .header
                .iter()
                .zip(&widths)
                .any(|(h, w)| matches!(rule(h), Cut::Text | Cut::Path) && *w < ROUNDS[0].1);
            if total <= limit && !text_cut {
                return;
            }
            let Some(i) = self.header.iter().position(|h| *h == name) else {
                continue;
            };
            self.header.remove(i);
            for row in &mut self.rows {
                row.remove(i);
            }
        }
    }

    pub fn add_row<S: Into<String>>(&mut self, row: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = row.into_iter().map(Into::into).collect();
        row.resize(self.header.len(), String::new());
        // A cell is one line: newlines in free text (an error from a plugin) become spaces,
        // and control characters are shown escaped, before the table adds its colours.
        for cell in &mut row {
            if cell.contains('\n') {
                *cell = cell.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            if let Cow::Owned(escaped) = escape::line(cell) {
                *cell = escaped;
            }
        }
        self.rows.push(row);
    }

    /// The column widths that fit [`Table::width`], cutting by [`RULES`].
    fn widths(&self) -> Vec<usize> {
        let mut widths: Vec<usize> = self
            .header
            .iter()
            .enumerate()
            .map(|(i, h)| {
                self.rows
                    .iter()
                    .map(|r| len(&r[i]))
                    .chain([len(h)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let Some(limit) = self.width else {
            return widths;
        };
        let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
        let rules: Vec<Cut> = self.header.iter().map(|h| rule(h)).collect();
        // Round by round (free text and paths first), the widest column of the round gives
        // up one character at a time, so that the cut is shared out evenly.
        for &(round, min) in ROUNDS {
            while total(&widths) > limit {
                let widest = (0..widths.len())
                    .filter(|&i| round.contains(&rules[i]) && widths[i] > min)
                    .max_by_key(|&i| (widths[i], i));
                match widest {
                    Some(i) => widths[i] -= 1,
                    None => break,
                }
            }
        }
        widths
    }

    /// The table as lines, without trailing spaces.
    pub fn lines(mut self) -> Vec<String> {
        self.drop_optional();
        let widths = self.widths();
        let rules: Vec<Cut> = self.header.iter().map(|h| rule(h)).collect();
        let mut out = Vec::with_capacity(self.rows.len() + 1);
        let header_style = Style::new().bold().force_styling(self.color);
        let mut render = |row: &[String], is_header: bool| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let text = cut(cell, widths[i], rules[i]);
                let pad = widths[i] - len(&text);
                let painted = if is_header {
                    header_style.apply_to(&text).to_string()
                } else if STATE_COLUMNS.contains(&self.header[i].as_str()) {
                    state_style(&text)
                        .force_styling(self.color)
                        .apply_to(&text)
                        .to_string()
                } else {
                    text
                };
                line.push_str(&painted);
                if i + 1 < row.len() {
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            out.push(line.trim_end().to_owned());
        };
        render(&self.header, true);
        for row in &self.rows {
            render(row, false);
        }
        out
    }
}

fn len(s: &str) -> usize {
    s.chars().count()
}

/// `s` in at most `width` characters, with an ellipsis where it was cut.
fn cut(s: &str, width: usize, how: Cut) -> String {
    let n = len(s);
    if n <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    match how {
        Cut::Path => {
            let tail: String = s.chars().skip(n - (width - 1)).collect();
            format!("…{tail}")
        }
        _ => {
            let head: String = s.chars().take(width - 1).collect();
            format!("{head}…")
        }
    }
}

/// A state's colour: green when all is well, red when the operator must act.
fn state_style(state: &str) -> Style {
    match state {
        "ready" | "free" | "attached" | "ok" | "eligible" => Style::new().green(),
        "failed" | "lost" => Style::new().red().bold(),
        s if s.starts_with("blocked") => Style::new().red().bold(),
        _ => Style::new().yellow(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(width: Option<usize>) -> Table {
        let mut t = Table::new(&["NAME", "STATE", "TARGET PATH", "MESSAGE"], width, false);
        t.add_row([
            "v1",
            "ready",
            "/var/lib/csivol/node-1/agent/targets/v1/job-1",
            "published at /var/lib/csivol/node-1/agent/targets/v1/job-1 after 2 retries",
        ]);
        t.add_row(["volume-2", "blocked", "-", "node node-2\nwas lost"]);
        t
    }

    #[test]
    fn cells_cannot_drive_the_terminal() {
        let mut t = Table::new(&["NAME", "STATE", "MESSAGE"], Some(80), true);
        t.add_row(["v\x1b[2J", "ready", "ok\rFAILED\x1b]0;title\x07"]);
        let lines = t.lines();
        // The state is coloured (the table's own escape), the data is not obeyed.
        assert_eq!(
            lines[1],
            "v\\x1b[2J  \x1b[32mready\x1b[0m  ok\\rFAILED\\x1b]0;title\\x07"
        );
    }

    #[test]
    fn fits_by_cutting_free_text_and_paths_first() {
        let lines = table(Some(60)).lines();
        insta::assert_snapshot!(lines.join("\n"), @r"
        NAME      STATE    TARGET PATH           MESSAGE
        v1        ready    …nt/targets/v1/job-1  published at /var/…
        volume-2  blocked  -                     node node-2 was lo…
        ");
        assert!(lines.iter().all(|l| len(l) <= 60), "{lines:#?}");
    }

    #[test]
    fn without_a_width_or_wide_nothing_is_cut() {
        let lines = table(None).lines();
        assert!(lines[1].ends_with("after 2 retries"), "{lines:#?}");
        assert_eq!(
            lines[2],
            "volume-2  blocked  -                                              node node-2 was lost"
        );
    }

    #[test]
    fn a_narrow_terminal_never_gives_a_cell_one_character_per_line() {
        let lines = table(Some(20)).lines();
        assert_eq!(lines.len(), 3, "{lines:#?}");
        // Names and states stay whole even when the table cannot fit.
        assert!(lines[2].starts_with("volume-2  blocked  "), "{lines:#?}");
    }
}
