//! Free text that clients write and people read (labels, reasons, a spec's parameters):
//! the server refuses control characters in it, because nothing needs them there and a
//! terminal obeys them. Names have a stricter rule of their own ([`crate::validate_name`]).
//!
//! An operator's `reason` (unblock, detach, fence) is checked with [`check_text`] where
//! the server requires it. Text a plugin wrote (its errors, the context CreateVolume
//! returned, what it lists) is not refused: it is evidence, and the CLI shows its control
//! characters escaped.

use std::collections::BTreeMap;

use crate::{
    ClaimRequest, ContentSource, CreateVolumeSpec, GroupSnapshotRequest, RegisterRequest,
    SnapshotRequest, Topology, VolumeSpec, validate_name,
};

/// Characters a terminal may act on, or that show text in another order than it reads:
/// C0 controls (ESC, BEL, `\r`, `\n`, `\t`...), DEL, C1 controls (U+0080..U+009F; a
/// terminal taking 8-bit controls reads U+009B as CSI), and the Unicode bidirectional
/// marks, embeddings, overrides and isolates.
pub fn is_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Refuses `value` when it holds a control character; `field` names it in the message.
pub fn check_text(field: &str, value: &str) -> Result<(), String> {
    match value.char_indices().find(|(_, c)| is_control(*c)) {
        None => Ok(()),
        Some((at, c)) => Err(format!(
            "`{field}` holds the control character U+{:04X} at byte {at} (`{}`): control characters and terminal escape sequences are refused in text people read",
            c as u32,
            value.escape_debug()
        )),
    }
}

/// Every key and value of a map (`labels`, `parameters`).
pub fn check_map(field: &str, map: &BTreeMap<String, String>) -> Result<(), String> {
    for (k, v) in map {
        check_text(&format!("{field}` key `{}", k.escape_debug()), k)?;
        check_text(&format!("{field}.{k}"), v)?;
    }
    Ok(())
}

fn check_segments(field: &str, segments: &[Topology]) -> Result<(), String> {
    segments.iter().try_for_each(|s| check_map(field, s))
}

fn check_list(field: &str, values: &[String]) -> Result<(), String> {
    values.iter().try_for_each(|v| check_text(field, v))
}

/// A request whose free text a client wrote.
pub trait FreeText {
    /// The first field that holds a control character, as an error naming it.
    fn check_text(&self) -> Result<(), String>;
}

/// Secret values are not checked: they are never shown, and a plugin may need any bytes
/// in them. Their keys are shown (`password=<redacted>`).
fn check_secret_keys(secrets: &BTreeMap<String, String>) -> Result<(), String> {
    secrets
        .keys()
        .try_for_each(|k| check_text(&format!("secrets` key `{}", k.escape_debug()), k))
}

impl FreeText for VolumeSpec {
    fn check_text(&self) -> Result<(), String> {
        check_text("external_id", &self.external_id)?;
        check_text("fs_type", &self.fs_type)?;
        check_list("mount_flags", &self.mount_flags)?;
        check_map("context", &self.context)?;
        check_map("parameters", &self.parameters)?;
        check_secret_keys(&self.secrets)?;
        check_segments("topology", &self.topology)
    }
}

impl FreeText for CreateVolumeSpec {
    fn check_text(&self) -> Result<(), String> {
        check_text("fs_type", &self.fs_type)?;
        check_list("mount_flags", &self.mount_flags)?;
        check_map("parameters", &self.parameters)?;
        check_secret_keys(&self.secrets)?;
        if let Some(t) = &self.topology_request {
            check_segments("topology_request.required", &t.required)?;
            check_segments("topology_request.preferred", &t.preferred)?;
        }
        match &self.source {
            Some(ContentSource::Snapshot(s)) => validate_name("snapshot", s),
            Some(ContentSource::Volume(v)) => validate_name("volume", v),
            None => Ok(()),
        }
    }
}

impl FreeText for ClaimRequest {
    fn check_text(&self) -> Result<(), String> {
        check_map("labels", &self.labels)
    }
}

impl FreeText for SnapshotRequest {
    fn check_text(&self) -> Result<(), String> {
        check_map("parameters", &self.parameters)
    }
}

impl FreeText for GroupSnapshotRequest {
    fn check_text(&self) -> Result<(), String> {
        check_map("parameters", &self.parameters)
    }
}

/// What a node's agent wrote itself: its labels. What its plugins said (names, versions,
/// NodeGetInfo's ids and topology) is theirs, shown escaped, never refused.
impl FreeText for RegisterRequest {
    fn check_text(&self) -> Result<(), String> {
        check_map("labels", &self.labels)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_refused_by_field() {
        assert_eq!(check_text("reason", "node 2 is off, é ∞"), Ok(()));
        // (value, error)
        let cases = [
            (
                "a\x1b[2J",
                "`reason` holds the control character U+001B at byte 1 (`a\\u{1b}[2J`)",
            ),
            (
                "x\ry",
                "`reason` holds the control character U+000D at byte 1",
            ),
            (
                "tab\t",
                "`reason` holds the control character U+0009 at byte 3",
            ),
            (
                "\u{9b}1m",
                "`reason` holds the control character U+009B at byte 0",
            ),
            (
                "abc\u{202e}",
                "`reason` holds the control character U+202E at byte 3",
            ),
        ];
        for (value, want) in cases {
            let err = check_text("reason", value).unwrap_err();
            assert!(err.starts_with(want), "{value:?}: {err}");
        }
        let labels: BTreeMap<String, String> =
            [("job".into(), "ci\x07".into())].into_iter().collect();
        let err = check_map("labels", &labels).unwrap_err();
        assert!(err.starts_with("`labels.job` holds"), "{err}");
        let keys: BTreeMap<String, String> =
            [("j\x1bob".into(), "ci".into())].into_iter().collect();
        let err = check_map("labels", &keys).unwrap_err();
        assert!(err.starts_with("`labels` key `j\\u{1b}ob` holds"), "{err}");
    }
}
