//! Volume expansion: the request, the progress a volume shows while it grows, and the
//! one parser of human sizes (`20GiB`, `500M`, plain bytes) the CLI and specs share.

use serde::{Deserialize, Serialize};

/// `POST /v1/volumes/{name}/expand`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpandRequest {
    /// The capacity to reach, in bytes; never less than the volume has. Lower than an
    /// expansion that failed (or whose controller call fails and waits for its retry), it
    /// replaces that one; the capacity the volume has cancels it.
    #[serde(default)]
    pub capacity_bytes: u64,
    /// Cancel the expansion that failed or keeps failing; the volume keeps what it has.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
}

/// Where an expansion stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExpansionPhase {
    /// ControllerExpandVolume is queued or running on a controller host.
    Controller,
    /// The storage grew; NodeExpandVolume runs on the nodes listed as `pending`.
    Node,
    /// A call failed for good (`error`); the volume keeps the capacity it reached.
    Failed,
}

impl ExpansionPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Controller => "controller",
            Self::Node => "node",
            Self::Failed => "failed",
        }
    }
}

/// A node's part of an expansion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NodeExpansionState {
    Pending,
    Done,
    Failed,
}

impl NodeExpansionState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
            Self::Failed => "failed",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeExpansion {
    pub node: String,
    pub state: NodeExpansionState,
    /// Retries so far (each report of a retryable error counts one).
    #[serde(default)]
    pub attempt: u32,
    /// Unix ms before which the node does not try again, after a retryable error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl NodeExpansion {
    /// A node's part not started yet.
    pub fn pending(node: &str) -> Self {
        Self {
            node: node.to_owned(),
            state: NodeExpansionState::Pending,
            attempt: 0,
            not_before_ms: None,
            error: None,
        }
    }
}

/// An expansion in progress or failed; a volume has none once it reached its capacity.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expansion {
    /// The capacity asked for, in bytes (the volume's `capacity_bytes` is what it has).
    pub capacity_bytes: u64,
    pub phase: ExpansionPhase,
    /// The nodes where the volume is staged or published, once the controller answered
    /// that they must grow it too.
    #[serde(default)]
    pub nodes: Vec<NodeExpansion>,
    /// The controller grew the volume while no node had it staged, and the plugin needs a
    /// node to grow it too: NodeExpandVolume runs on the next node that stages it (the spec's
    /// order for an offline expansion). Until then the volume may be expanded again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub when_staged: bool,
    /// The last error, while retrying or once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub requested_at: String,
    /// Asked for with `--wait` while the volume was being released (and only that stood in
    /// the way of an offline expansion): ControllerExpandVolume is sent once the release
    /// has finished and no node has the volume.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_release: bool,
}

impl Expansion {
    /// An expansion to `capacity_bytes` asked for at `requested_at`, starting in `phase`.
    pub fn started(capacity_bytes: u64, phase: ExpansionPhase, requested_at: String) -> Self {
        Self {
            capacity_bytes,
            phase,
            nodes: Vec::new(),
            when_staged: false,
            error: None,
            requested_at,
            after_release: false,
        }
    }

    /// `expanding to 2 GiB: node-1 pending`, for tables and `status`.
    pub fn progress(&self) -> String {
        let to = format_size(self.capacity_bytes);
        match self.phase {
            ExpansionPhase::Controller if self.after_release => {
                format!("expanding to {to} once the volume's release has finished")
            }
            ExpansionPhase::Controller => format!("expanding to {to}: controller pending"),
            ExpansionPhase::Node if self.nodes.is_empty() && self.when_staged => {
                format!("grown to {to} in storage; the next node to stage it grows its file system")
            }
            ExpansionPhase::Node => {
                let nodes: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("{} {}", n.node, n.state.as_str()))
                    .collect();
                format!("expanding to {to}: {}", nodes.join(", "))
            }
            ExpansionPhase::Failed => format!("expansion to {to} failed"),
        }
    }
}

/// Why a size did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty size")]
    Empty,
    #[error("`{0}` is not a size: expected a number of bytes with an optional unit")]
    NotANumber(String),
    #[error(
        "unknown unit `{unit}` in `{text}`: use B, K/KB, M/MB, G/GB, T/TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)"
    )]
    Unit { text: String, unit: String },
    #[error("`{0}` is too large")]
    Overflow(String),
    #[error("`{0}` is zero bytes")]
    Zero(String),
}

/// Parses a human size: `20GiB`, `1.5GiB`, `500M`, `4096`, `10 GB`. Decimal units
/// (`K`, `M`, `G`, `T`, with or without `B`) are powers of 1000, binary ones (`Ki`, `KiB`,
/// ...) powers of 1024, as `ls`, `df -H` and Kubernetes quantities read them; case does
/// not matter. A fraction is rounded up to whole bytes; zero is refused.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1
    {
        return Err(SizeError::NotANumber(text.to_owned()));
    }
    let mult: u128 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "m" | "mb" => 1000u128.pow(2),
        "g" | "gb" => 1000u128.pow(3),
        "t" | "tb" => 1000u128.pow(4),
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        "ti" | "tib" => 1 << 40,
        _ => {
            return Err(SizeError::Unit {
                text: text.to_owned(),
                unit: unit.to_owned(),
            });
        }
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let overflow = || SizeError::Overflow(text.to_owned());
    if whole.len() > 30 || frac.len() > 18 {
        return Err(overflow());
    }
    let whole: u128 = whole.parse().map_err(|_| overflow())?;
    let scale = 10u128.pow(frac.len() as u32);
    let frac_n: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| overflow())?
    };
    let bytes = whole
        .checked_mul(mult)
        .and_then(|w| w.checked_add((frac_n * mult).div_ceil(scale)))
        .ok_or_else(overflow)?;
    // CSI carries capacities as int64.
    let bytes = u64::try_from(bytes)
        .ok()
        .filter(|b| *b <= i64::MAX as u64)
        .ok_or_else(overflow)?;
    if bytes == 0 {
        return Err(SizeError::Zero(text.to_owned()));
    }
    Ok(bytes)
}

/// `2 GiB`, `500 MB`, `1.5 GiB`, `4097 B`: exact when it can be, binary units first.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 8] = [
        (1 << 40, "TiB"),
        (1_000_000_000_000, "TB"),
        (1 << 30, "GiB"),
        (1_000_000_000, "GB"),
        (1 << 20, "MiB"),
        (1_000_000, "MB"),
        (1 << 10, "KiB"),
        (1000, "KB"),
    ];
    for (size, name) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {name}", bytes / size);
        }
    }
    for (size, name) in [
        (1u64 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ] {
        if bytes >= size {
            return format!("{:.1} {name} ({bytes} B)", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        let cases: &[(&str, Result<u64, &str>)] = &[
            ("4096", Ok(4096)),
            ("4096B", Ok(4096)),
            ("20GiB", Ok(20 << 30)),
            ("20gi", Ok(20 << 30)),
            ("500M", Ok(500_000_000)),
            ("500MB", Ok(500_000_000)),
            ("500 MiB", Ok(500 << 20)),
            ("1.5GiB", Ok(3 << 29)),
            ("0.5K", Ok(500)),
            ("1.0001K", Ok(1001)), // rounded up to whole bytes
            ("2T", Ok(2_000_000_000_000)),
            ("1TiB", Ok(1 << 40)),
            (" 7 kib ", Ok(7 << 10)),
            ("8EiB", Err("unknown unit `EiB` in `8EiB`")),
            ("", Err("empty size")),
            ("GiB", Err("`GiB` is not a size")),
            ("1.2.3G", Err("`1.2.3G` is not a size")),
            (".5G", Err("`.5G` is not a size")),
            ("-1G", Err("`-1G` is not a size")),
            ("0", Err("`0` is zero bytes")),
            ("0GiB", Err("`0GiB` is zero bytes")),
            ("9223372036854775807", Ok(i64::MAX as u64)),
            ("9223372036854775808", Err("too large")),
            ("99999999999TiB", Err("too large")),
        ];
        for (text, want) in cases {
            let got = parse_size(text).map_err(|e| e.to_string());
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(g, w, "{text:?}"),
                (Err(w), Err(g)) => assert!(g.contains(w), "{text:?}: {g}"),
                _ => panic!("{text:?}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn sizes_format() {
        assert_eq!(format_size(2 << 30), "2 GiB");
        assert_eq!(format_size(500_000_000), "500 MB");
        assert_eq!(format_size(4097), "4.0 KiB (4097 B)");
        assert_eq!(format_size(512), "512 B");
        assert_eq!(format_size(3 << 29), "1536 MiB");
        for b in [1u64, 1000, 1 << 20, 20 << 30, 500_000_000, 123_456_789] {
            if let Ok(back) = parse_size(&format_size(b)) {
                assert_eq!(back, b, "{b}");
            }
        }
    }

    #[test]
    fn progress_names_the_nodes() {
        let e = Expansion {
            capacity_bytes: 2 << 30,
            phase: ExpansionPhase::Node,
            nodes: vec![NodeExpansion {
                node: "node-1".into(),
                state: NodeExpansionState::Pending,
                attempt: 0,
                not_before_ms: None,
                error: None,
            }],
            when_staged: false,
            error: None,
            requested_at: String::new(),
            after_release: false,
        };
        assert_eq!(e.progress(), "expanding to 2 GiB: node-1 pending");
        let waiting = Expansion {
            nodes: Vec::new(),
            when_staged: true,
            ..e
        };
        assert_eq!(
            waiting.progress(),
            "grown to 2 GiB in storage; the next node to stage it grows its file system"
        );
        let held = Expansion {
            phase: ExpansionPhase::Controller,
            after_release: true,
            ..waiting
        };
        assert_eq!(
            held.progress(),
            "expanding to 2 GiB once the volume's release has finished"
        );
    }
}
