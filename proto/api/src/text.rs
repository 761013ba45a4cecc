//! Free text and maps that clients write and people read (labels, reasons, a spec's
//! parameters): the server refuses control characters in them, because nothing needs them
//! there and a terminal obeys them, and holds them to the sizes of [`crate::limits`] (the
//! CSI spec's for what is passed on to a plugin, csivol's and the server's for labels and
//! reasons), so that no client can grow the state or the event log without bound. Names
//! have a stricter rule of their own ([`crate::validate_name`]).
//!
//! An operator's `reason` (unblock, detach, fence) is checked with [`check_reason`] where
//! the server requires it. Text a plugin wrote (its errors, the context CreateVolume
//! returned, what it lists) is not refused: it is evidence, and the CLI shows its control
//! characters escaped.

use std::collections::BTreeMap;

use crate::limits::{
    CSI_MAP_BYTES, CSI_MOUNT_FLAGS_BYTES, CSI_STRING_BYTES, Limit, MAX_GROUP_VOLUMES,
    MAX_HOST_CHANGES, MAX_LABEL_REMOVALS, MAX_MOUNT_FLAGS, MAX_NODE_HOLDINGS, MAX_NODE_LABELS,
    MAX_NODE_PLUGINS, MAX_REPORTS, MAX_SEGMENTS, MAX_TOKEN_CONTROLLERS, MAX_TOKEN_PATTERNS,
    NODE_LABEL_VALUE_BYTES, TextLimits,
};
use crate::{
    ClaimRequest, ControllerHostsChange, CreateVolumeSpec, GroupSnapshotRequest, ModifyRequest,
    NodeLabelRequest, RegisterRequest, ReportBatch, SnapshotRequest, TokenRequest, Topology,
    VolumeSpec,
};

/// Characters a terminal may act on, or that show text in another order or on another
/// line than it reads: C0 controls (ESC, BEL, `\r`, `\n`, `\t`...), DEL, C1 controls
/// (U+0080..U+009F; a terminal taking 8-bit controls reads U+009B as CSI), the Unicode
/// line and paragraph separators (U+2028, U+2029: line breaks like `\n`), and the
/// bidirectional marks, embeddings, overrides and isolates.
pub fn is_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// Why a text or a map was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error(
        "`{field}` holds the control character U+{code:04X} at byte {at} (`{shown}`): control characters and terminal escape sequences are refused in text people read"
    )]
    Control {
        field: String,
        code: u32,
        at: usize,
        /// The text, escaped, and cut short when long.
        shown: String,
    },
    #[error("`{field}` holds {bytes} bytes, more than the {max} {limit}")]
    TooLarge {
        field: String,
        bytes: usize,
        max: usize,
        limit: Limit,
    },
    #[error("`{field}` holds {count} {items}, more than the {max} {limit}")]
    TooMany {
        field: String,
        count: usize,
        items: &'static str,
        max: usize,
        limit: Limit,
    },
}

/// Refuses `value` when it holds a control character; `field` names it in the message.
pub fn check_text(field: &str, value: &str) -> Result<(), TextError> {
    match value.char_indices().find(|(_, c)| is_control(*c)) {
        None => Ok(()),
        Some((at, c)) => {
            // A long text is shown by its start: enough to find it, not a megabyte echoed.
            let mut shown: String = value.chars().take(80).collect::<String>();
            shown = shown.escape_debug().to_string();
            if value.chars().nth(80).is_some() {
                shown.push_str("...");
            }
            Err(TextError::Control {
                field: field.to_owned(),
                code: c as u32,
                at,
                shown,
            })
        }
    }
}

/// Refuses `value` when it is longer than `max` bytes or holds a control character.
pub fn check_string(field: &str, value: &str, max: usize, limit: Limit) -> Result<(), TextError> {
    if value.len() > max {
        return Err(TextError::TooLarge {
            field: field.to_owned(),
            bytes: value.len(),
            max,
            limit,
        });
    }
    check_text(field, value)
}

/// Every key and value of a map (`labels`, `parameters`), for control characters.
pub fn check_map(field: &str, map: &BTreeMap<String, String>) -> Result<(), TextError> {
    for (k, v) in map {
        check_text(&format!("{field}` key `{}", k.escape_debug()), k)?;
        check_text(&format!("{field}.{k}"), v)?;
    }
    Ok(())
}

/// The size of a map as the CSI spec's Size Limits count it: its keys and values.
pub fn map_bytes(map: &BTreeMap<String, String>) -> usize {
    map.iter().map(|(k, v)| k.len() + v.len()).sum()
}

fn check_map_bytes(
    field: &str,
    map: &BTreeMap<String, String>,
    max: usize,
    limit: Limit,
) -> Result<(), TextError> {
    let bytes = map_bytes(map);
    if bytes > max {
        return Err(TextError::TooLarge {
            field: field.to_owned(),
            bytes,
            max,
            limit,
        });
    }
    Ok(())
}

fn check_count(
    field: &str,
    count: usize,
    items: &'static str,
    max: usize,
    limit: Limit,
) -> Result<(), TextError> {
    if count > max {
        return Err(TextError::TooMany {
            field: field.to_owned(),
            count,
            items,
            max,
            limit,
        });
    }
    Ok(())
}

/// A map passed on to a plugin: 4 KiB at most (CSI), no control characters.
fn check_csi_map(field: &str, map: &BTreeMap<String, String>) -> Result<(), TextError> {
    check_map_bytes(field, map, CSI_MAP_BYTES, Limit::Csi)?;
    check_map(field, map)
}

/// A string passed on to a plugin: 128 bytes at most (CSI), no control characters.
fn check_csi_string(field: &str, value: &str) -> Result<(), TextError> {
    check_string(field, value, CSI_STRING_BYTES, Limit::Csi)
}

fn check_mount_flags(flags: &[String]) -> Result<(), TextError> {
    check_flags("mount_flags", flags)
}

/// Mount flags under `field`: each reaches a plugin in `MountVolume.mount_flags`.
fn check_flags(field: &str, flags: &[String]) -> Result<(), TextError> {
    check_count(field, flags.len(), "flags", MAX_MOUNT_FLAGS, Limit::Csivol)?;
    let bytes = flags.iter().map(String::len).sum();
    if bytes > CSI_MOUNT_FLAGS_BYTES {
        return Err(TextError::TooLarge {
            field: field.to_owned(),
            bytes,
            max: CSI_MOUNT_FLAGS_BYTES,
            limit: Limit::Csi,
        });
    }
    flags.iter().try_for_each(|f| check_text(field, f))
}

fn check_segments(field: &str, segments: &[Topology]) -> Result<(), TextError> {
    check_count(
        field,
        segments.len(),
        "segments",
        MAX_SEGMENTS,
        Limit::Csivol,
    )?;
    segments.iter().try_for_each(|s| check_csi_map(field, s))
}

/// Secret values are not checked for control characters: they are never shown, and a
/// plugin may need any bytes in them. Their keys are shown (`password=<redacted>`). The
/// map is held to the CSI spec's size like any other; the error says how large it is, never
/// what it holds.
fn check_secrets(secrets: &BTreeMap<String, String>) -> Result<(), TextError> {
    check_map_bytes("secrets", secrets, CSI_MAP_BYTES, Limit::Csi)?;
    secrets
        .keys()
        .try_for_each(|k| check_text(&format!("secrets` key `{}", k.escape_debug()), k))
}

/// A claim's labels, to the server's limits (`[limits] claim_labels`, `claim_label_bytes`).
pub fn check_claim_labels(
    labels: &BTreeMap<String, String>,
    limits: &TextLimits,
) -> Result<(), TextError> {
    check_count(
        "labels",
        labels.len(),
        "labels",
        limits.claim_labels,
        Limit::Server("claim_labels"),
    )?;
    check_map_bytes(
        "labels",
        labels,
        limits.claim_label_bytes,
        Limit::Server("claim_label_bytes"),
    )?;
    check_map("labels", labels)
}

/// A node's labels, its agent's or an operator's: [`MAX_NODE_LABELS`] of at most
/// [`NODE_LABEL_VALUE_BYTES`] each.
pub fn check_node_labels(field: &str, labels: &BTreeMap<String, String>) -> Result<(), TextError> {
    check_count(
        field,
        labels.len(),
        "labels",
        MAX_NODE_LABELS,
        Limit::Csivol,
    )?;
    for (k, v) in labels {
        check_string(
            &format!("{field}.{k}"),
            v,
            NODE_LABEL_VALUE_BYTES,
            Limit::Csivol,
        )?;
    }
    check_map(field, labels)
}

/// An operator's reason (unblock, detach, fence), to the server's `[limits] reason_bytes`.
pub fn check_reason(reason: &str, limits: &TextLimits) -> Result<(), TextError> {
    check_string(
        "reason",
        reason,
        limits.reason_bytes,
        Limit::Server("reason_bytes"),
    )
}

/// A request whose free text a client wrote.
pub trait FreeText {
    /// The first field that holds a control character or is larger than its limit, as an
    /// error naming it. Labels and reasons, whose limits are the server's, are checked
    /// with [`check_claim_labels`] and [`check_reason`] against them.
    fn check_text(&self) -> Result<(), TextError>;
}

impl FreeText for VolumeSpec {
    fn check_text(&self) -> Result<(), TextError> {
        check_csi_string("external_id", &self.external_id)?;
        check_csi_string("fs_type", &self.fs_type)?;
        check_mount_flags(&self.mount_flags)?;
        check_csi_map("context", &self.context)?;
        check_csi_map("parameters", &self.parameters)?;
        check_secrets(&self.secrets)?;
        check_segments("topology", &self.topology)?;
        check_flags("claim_mount_flags", &self.claim_mount_flags)?;
        check_csi_string(
            "selinux_context",
            self.selinux_context.as_deref().unwrap_or(""),
        )
    }
}

impl FreeText for CreateVolumeSpec {
    fn check_text(&self) -> Result<(), TextError> {
        check_csi_string("fs_type", &self.fs_type)?;
        check_mount_flags(&self.mount_flags)?;
        check_csi_map("parameters", &self.parameters)?;
        check_csi_map("mutable_parameters", &self.mutable_parameters)?;
        check_secrets(&self.secrets)?;
        if let Some(t) = &self.topology_request {
            check_segments("topology_request.required", &t.required)?;
            check_segments("topology_request.preferred", &t.preferred)?;
        }
        check_flags("claim_mount_flags", &self.claim_mount_flags)?;
        check_csi_string(
            "selinux_context",
            self.selinux_context.as_deref().unwrap_or(""),
        )
    }
}

/// Control characters only: the labels' sizes are the server's ([`check_claim_labels`]).
impl FreeText for ClaimRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_map("labels", &self.labels)?;
        check_flags("mount.mount_flags", &self.mount.mount_flags)?;
        check_csi_string(
            "mount.selinux_context",
            self.mount.selinux_context.as_deref().unwrap_or(""),
        )
    }
}

impl FreeText for crate::SnapshotAdoptRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_csi_string("snapshot_id", &self.snapshot_id)
    }
}

impl FreeText for SnapshotRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_csi_map("parameters", &self.parameters)
    }
}

impl FreeText for GroupSnapshotRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_count(
            "volumes",
            self.volumes.len(),
            "volumes",
            MAX_GROUP_VOLUMES,
            Limit::Csivol,
        )?;
        check_csi_map("parameters", &self.parameters)
    }
}

/// The plugins a node token names and the volume patterns a token is narrowed to (names
/// and patterns, each checked by its own rule).
impl FreeText for TokenRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_count(
            "controllers",
            self.controllers.len(),
            "plugins",
            MAX_TOKEN_CONTROLLERS,
            Limit::Csivol,
        )?;
        check_count(
            "volumes",
            self.volumes.len(),
            "patterns",
            MAX_TOKEN_PATTERNS,
            Limit::Csivol,
        )
    }
}

/// The nodes allowed and disallowed (names, each checked by the naming rule).
impl FreeText for ControllerHostsChange {
    fn check_text(&self) -> Result<(), TextError> {
        check_count(
            "allow",
            self.allow.len(),
            "nodes",
            MAX_HOST_CHANGES,
            Limit::Csivol,
        )?;
        check_count(
            "disallow",
            self.disallow.len(),
            "nodes",
            MAX_HOST_CHANGES,
            Limit::Csivol,
        )
    }
}

/// The label keys an operator removes from a node (each checked by the label key rule;
/// the labels set are checked against the node's as they would be after the change).
impl FreeText for NodeLabelRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_count(
            "remove",
            self.remove.len(),
            "label keys",
            MAX_LABEL_REMOVALS,
            Limit::Csivol,
        )
    }
}

/// How many reports one batch carries. What they say is the node's and its plugins'
/// evidence, bounded by the request's body, never refused for its text.
impl FreeText for ReportBatch {
    fn check_text(&self) -> Result<(), TextError> {
        check_count(
            "reports",
            self.reports.len(),
            "reports",
            MAX_REPORTS,
            Limit::Csivol,
        )
    }
}

/// ControllerModifyVolume's `mutable_parameters`, a map like any other.
impl FreeText for ModifyRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_csi_map("parameters", &self.parameters)
    }
}

/// What a node's agent wrote itself: its labels. What its plugins said (names, versions,
/// NodeGetInfo's ids and topology) is theirs, shown escaped, never refused.
impl FreeText for RegisterRequest {
    fn check_text(&self) -> Result<(), TextError> {
        check_count(
            "plugins",
            self.plugins.len(),
            "plugins",
            MAX_NODE_PLUGINS,
            Limit::Csivol,
        )?;
        check_count(
            "published",
            self.published.len(),
            "claims",
            MAX_NODE_HOLDINGS,
            Limit::Csivol,
        )?;
        check_count(
            "staged",
            self.staged.len(),
            "volumes",
            MAX_NODE_HOLDINGS,
            Limit::Csivol,
        )?;
        check_node_labels("labels", &self.labels)
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
            let err = check_text("reason", value).unwrap_err().to_string();
            assert!(err.starts_with(want), "{value:?}: {err}");
        }
        let labels: BTreeMap<String, String> =
            [("job".into(), "ci\x07".into())].into_iter().collect();
        let err = check_map("labels", &labels).unwrap_err().to_string();
        assert!(err.starts_with("`labels.job` holds"), "{err}");
        let keys: BTreeMap<String, String> =
            [("j\x1bob".into(), "ci".into())].into_iter().collect();
        let err = check_map("labels", &keys).unwrap_err().to_string();
        assert!(err.starts_with("`labels` key `j\\u{1b}ob` holds"), "{err}");
        // Line and paragraph separators are line breaks like `\n`.
        for sep in ['\u{2028}', '\u{2029}'] {
            let err = check_text("reason", &format!("a{sep}b"))
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("`reason` holds the control character U+202"),
                "{err}"
            );
        }
        // A long text is shown by its start only.
        let long = format!("{}\x1b", "x".repeat(10_000));
        let err = check_text("labels.job", &long).unwrap_err().to_string();
        assert!(err.len() < 400, "{err}");
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn what_goes_to_a_plugin_is_held_to_the_csi_size_limits() {
        let spec = |f: &dyn Fn(&mut VolumeSpec)| {
            let mut s = VolumeSpec {
                plugin: "hp".into(),
                external_id: "e".into(),
                access_mode: crate::AccessMode::SingleNodeWriter,
                attachment: crate::Attachment::FileSystem,
                fs_type: String::new(),
                mount_flags: Vec::new(),
                context: BTreeMap::new(),
                parameters: BTreeMap::new(),
                secrets: BTreeMap::new(),
                topology: Vec::new(),
                claim_mount_flags: Vec::new(),
                selinux_context: None,
                ownership: None,
                labels: BTreeMap::new(),
            };
            f(&mut s);
            s.check_text().map_err(|e| e.to_string())
        };
        assert_eq!(spec(&|_| {}), Ok(()));
        let at_limit = "x".repeat(128);
        assert_eq!(spec(&|s| s.external_id = at_limit.clone()), Ok(()));
        // (change, error)
        type Change = dyn Fn(&mut VolumeSpec);
        let cases: [(&Change, &str); 6] = [
            (
                &|s| s.external_id = "x".repeat(129),
                "`external_id` holds 129 bytes, more than the 128 the CSI spec allows (its Size Limits)",
            ),
            (
                &|s| s.parameters = map(&[("k", &"v".repeat(4096))]),
                "`parameters` holds 4097 bytes, more than the 4096 the CSI spec allows",
            ),
            (
                &|s| s.secrets = map(&[("password", &"CLEARTEXT".repeat(500))]),
                "`secrets` holds 4508 bytes, more than the 4096",
            ),
            (
                &|s| s.mount_flags = vec!["noatime".repeat(600)],
                "`mount_flags` holds 4200 bytes, more than the 4096",
            ),
            (
                &|s| s.topology = vec![map(&[("zone", "a")]); 65],
                "`topology` holds 65 segments, more than the 64 csivol allows",
            ),
            (
                &|s| s.context = map(&[("a", "b\u{2028}c")]),
                "`context.a` holds the control character U+2028",
            ),
        ];
        for (change, want) in cases {
            let err = spec(change).unwrap_err();
            assert!(err.starts_with(want), "want {want:?}, got {err}");
            assert!(
                !err.contains("CLEARTEXT"),
                "a secret's value is never shown: {err}"
            );
        }
    }

    #[test]
    fn labels_and_reasons_are_held_to_the_servers_limits() {
        let limits = TextLimits {
            claim_labels: 2,
            claim_label_bytes: 10,
            reason_bytes: 5,
        };
        assert_eq!(
            check_claim_labels(&map(&[("a", "1"), ("b", "2")]), &limits),
            Ok(())
        );
        let err = check_claim_labels(&map(&[("a", "1"), ("b", "2"), ("c", "3")]), &limits)
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "`labels` holds 3 labels, more than the 2 this server allows (`claim_labels` in its [limits])"
        );
        let err = check_claim_labels(&map(&[("job", "0123456789")]), &limits)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("`labels` holds 13 bytes, more than the 10"),
            "{err}"
        );
        assert_eq!(check_reason("fixed", &limits), Ok(()));
        let err = check_reason("power off", &limits).unwrap_err().to_string();
        assert!(err.contains("`reason_bytes`"), "{err}");
        let too_many: BTreeMap<String, String> =
            (0..65).map(|i| (format!("k{i}"), "v".to_owned())).collect();
        assert!(check_node_labels("labels", &too_many).is_err());
    }
}
