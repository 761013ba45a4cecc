//! Text from data made safe for a terminal. Everything the CLI prints for people passes
//! through here ([`Out`](crate::output::Out)'s writers and [`Table`](crate::table::Table)'s
//! cells): a label, a reason, a plugin's error or a fence's output may hold bytes that a
//! terminal obeys (ESC starts CSI and OSC sequences that clear the screen, move the
//! cursor, set the window title or write to the clipboard; `\r` overwrites what was
//! printed; BEL rings). They are shown escaped instead, visibly (`\x1b`, `\r`, `\x07`), so
//! that an operator sees that something tried. JSON output keeps its values exact, and
//! writes the same characters as JSON escapes (`\u009b`), which [`json`] adds to the ones
//! JSON escapes by itself.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Text that may span lines by design (a block of output, a fence command's output):
/// `\n` is kept, `\t` becomes a space, every other control character is escaped.
pub fn lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// Text shown on one line (a table cell, a `key: value` row, a progress message): `\n`
/// and `\t` become spaces too, so that a field cannot forge lines of its own.
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let needs = |c: char| (c == '\n' && !keep_newlines) || (c != '\n' && unsafe_char(c));
    let Some(first) = text.find(needs) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            '\n' if keep_newlines => out.push('\n'),
            '\n' | '\t' => out.push(' '),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Serialised JSON with every character [`unsafe_char`] calls unsafe beyond C0 written as
/// a JSON escape (`\u009b`, `\u202e`): serde_json escapes C0 controls in strings itself
/// (the newlines left are the layout's), and a terminal that shows `-o json` (or `jq`
/// passing strings through) obeys DEL, C1 controls and the Unicode line separators and
/// bidirectional overrides too. Outside strings JSON is ASCII, so each such character is in
/// a string, where the escape reads back as the same text.
pub fn json(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| c >= '\u{7f}' && unsafe_char(c);
    let Some(first) = text.find(escaped) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        if escaped(c) {
            // Every such character is in the Basic Multilingual Plane: one `\uXXXX`.
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What the server refuses in text clients write, shown escaped here whoever wrote it
/// (a plugin's error is not refused): C0 and C1 controls, DEL, bidirectional overrides.
fn unsafe_char(c: char) -> bool {
    csivol_api::is_control(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_what_a_terminal_obeys_and_reads_back_the_same() {
        let value = serde_json::json!({
            "message": "c1 \u{9b}31m del\x7f bidi \u{202e}txt\u{2066} sep\u{2028}\u{2029} esc\x1b é ∞",
        });
        let raw = serde_json::to_string_pretty(&value).unwrap();
        let escaped = json(&raw);
        assert!(
            !escaped.chars().any(|c| unsafe_char(c) && c != '\n'),
            "{escaped}"
        );
        assert!(
            escaped.contains('\n'),
            "the layout's newlines stay: {escaped}"
        );
        for want in [
            "\\u009b", "\\u007f", "\\u202e", "\\u2066", "\\u2028", "\\u2029", "\\u001b", "é ∞",
        ] {
            assert!(escaped.contains(want), "{want} in {escaped}");
        }
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, value);
        assert!(matches!(json("{\"a\": \"plain\"}"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        // (input, on one line, over lines)
        let cases = [
            ("plain text, é ∞", "plain text, é ∞", "plain text, é ∞"),
            ("a\nb", "a b", "a\nb"),
            ("a\tb", "a b", "a b"),
            (
                "k=v\x1b[2J\x1b]0;title\x07",
                "k=v\\x1b[2J\\x1b]0;title\\x07",
                "k=v\\x1b[2J\\x1b]0;title\\x07",
            ),
            ("ok\rFAILED", "ok\\rFAILED", "ok\\rFAILED"),
            (
                "nul\0 bs\x08 del\x7f",
                "nul\\x00 bs\\x08 del\\x7f",
                "nul\\x00 bs\\x08 del\\x7f",
            ),
            (
                "c1 \u{9b}31m \u{9d}",
                "c1 \\x9b31m \\x9d",
                "c1 \\x9b31m \\x9d",
            ),
            (
                "bidi \u{202e}gpj.exe",
                "bidi \\u{202e}gpj.exe",
                "bidi \\u{202e}gpj.exe",
            ),
            ("line\r\nnext", "line\\r next", "line\\r\nnext"),
        ];
        for (input, one, many) in cases {
            assert_eq!(line(input), one, "{input:?}");
            assert_eq!(lines(input), many, "{input:?}");
            for escaped in [line(input), lines(input)] {
                assert!(
                    !escaped.chars().any(|c| c != '\n' && unsafe_char(c)),
                    "{escaped:?}"
                );
                // Escaping what was escaped changes nothing, so two layers cannot garble it.
                assert_eq!(lines(&escaped), escaped);
            }
        }
        assert!(matches!(line("nothing to do"), Cow::Borrowed(_)));
    }
}
