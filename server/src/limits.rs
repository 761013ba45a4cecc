//! The `[limits]` table of the server's config file: the limits of claim labels and of
//! operators' reasons (csivol's defaults, which an operator may lower but not raise), how
//! many claims one claimer token may hold, and how large the event log may grow, in events
//! and in bytes.

use anyhow::bail;
use csivol_api::limits::{
    DEFAULT_CLAIM_LABEL_BYTES, DEFAULT_CLAIM_LABELS, DEFAULT_CLAIMS_PER_CLAIMER,
    DEFAULT_REASON_BYTES, MAX_CLAIMS_PER_CLAIMER, TextLimits,
};
use serde::Deserialize;

/// How many of the newest events the event log keeps by default; older ones are pruned
/// every minute.
pub const DEFAULT_EVENTS_KEPT: u64 = 100_000;
/// How many bytes of events the log keeps by default (their text, as stored).
pub const DEFAULT_EVENTS_BYTES: u64 = 64 << 20;
/// The fewest events `events_kept` may keep: a smaller log would lose the history of an
/// incident before anyone read it.
const MIN_EVENTS_KEPT: u64 = 1_000;
/// The fewest bytes `events_bytes` may keep.
const MIN_EVENTS_BYTES: u64 = 1 << 20;

/// `[limits]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsFile {
    claim_labels: Option<usize>,
    claim_label_bytes: Option<usize>,
    reason_bytes: Option<usize>,
    claims_per_claimer: Option<usize>,
    events_kept: Option<u64>,
    /// Bytes, or a size with a unit (`"64MiB"`).
    events_bytes: Option<SizeText>,
    /// A duration (`"5m"`).
    pool_hold_after: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SizeText {
    Bytes(u64),
    Text(String),
}

/// How large the event log may grow. Events older than the newest `kept` are pruned;
/// beyond `bytes`, the oldest events are pruned too, except operators' actions (unblock,
/// detach, fence, token changes...), which only the count prunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventBounds {
    pub kept: i64,
    pub bytes: i64,
    /// Events dropped in one transaction at most: with the etcd store, one transaction
    /// holds a bounded number of operations (`--etcd-max-txn-ops`).
    pub batch: usize,
}

/// Events dropped in one transaction at most, with SQLite.
pub const PRUNE_BATCH: usize = 10_000;

impl Default for EventBounds {
    fn default() -> Self {
        Self {
            kept: DEFAULT_EVENTS_KEPT as i64,
            bytes: DEFAULT_EVENTS_BYTES as i64,
            batch: PRUNE_BATCH,
        }
    }
}

impl EventBounds {
    /// With the etcd store (`max_txn_ops` its `--etcd-max-txn-ops`), a prune's batch fits
    /// in one etcd transaction beside what a commit adds to it.
    pub fn in_txn_ops(self, max_txn_ops: Option<usize>) -> Self {
        Self {
            batch: max_txn_ops.map_or(PRUNE_BATCH, |ops| (ops / 2).max(1)),
            ..self
        }
    }
}

/// How long the first claim in a pool's line waits by default before a member that frees
/// and that it can use is held for it, whoever else could take that member now.
pub const DEFAULT_POOL_HOLD_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// The server's limits, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    pub text: TextLimits,
    /// Claims one claimer token may hold at once, queued ones included.
    pub claims_per_claimer: usize,
    pub events: EventBounds,
    /// How long the first claim in a pool's line waits before a member is held for it.
    pub pool_hold_after: std::time::Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            text: TextLimits::default(),
            claims_per_claimer: DEFAULT_CLAIMS_PER_CLAIMER,
            events: EventBounds::default(),
            pool_hold_after: DEFAULT_POOL_HOLD_AFTER,
        }
    }
}

impl LimitsFile {
    /// The limits this table sets, every one checked against its range.
    pub(crate) fn resolve(self) -> anyhow::Result<ServerLimits> {
        fn lowered(
            name: &str,
            value: Option<usize>,
            default: usize,
            min: usize,
        ) -> anyhow::Result<usize> {
            match value {
                None => Ok(default),
                Some(v) if v > default => bail!(
                    "[limits] {name} = {v} is above csivol's limit of {default}: it may be lowered, not raised"
                ),
                Some(v) if v < min => bail!("[limits] {name} = {v} is below its least, {min}"),
                Some(v) => Ok(v),
            }
        }
        let text = TextLimits {
            claim_labels: lowered("claim_labels", self.claim_labels, DEFAULT_CLAIM_LABELS, 0)?,
            claim_label_bytes: lowered(
                "claim_label_bytes",
                self.claim_label_bytes,
                DEFAULT_CLAIM_LABEL_BYTES,
                0,
            )?,
            // A reason is required for every operator action: it needs a few bytes.
            reason_bytes: lowered("reason_bytes", self.reason_bytes, DEFAULT_REASON_BYTES, 16)?,
        };
        // Raised for a large CI farm sharing one token, lowered for a small one.
        let claims_per_claimer = self
            .claims_per_claimer
            .unwrap_or(DEFAULT_CLAIMS_PER_CLAIMER);
        if !(1..=MAX_CLAIMS_PER_CLAIMER).contains(&claims_per_claimer) {
            bail!(
                "[limits] claims_per_claimer = {claims_per_claimer} is out of range: 1 to {MAX_CLAIMS_PER_CLAIMER}"
            );
        }
        let kept = self.events_kept.unwrap_or(DEFAULT_EVENTS_KEPT);
        let bytes = match self.events_bytes {
            None => DEFAULT_EVENTS_BYTES,
            Some(SizeText::Bytes(b)) => b,
            Some(SizeText::Text(t)) => csivol_api::parse_size(&t)
                .map_err(|e| anyhow::anyhow!("invalid [limits] events_bytes: {e}"))?,
        };
        let in_range = |name: &str, v: u64, min: u64| -> anyhow::Result<i64> {
            if v < min {
                bail!("[limits] {name} = {v} is below its least, {min}");
            }
            csivol_api::limits::size_bytes(name, v).map_err(|e| anyhow::anyhow!("[limits] {e}"))
        };
        let pool_hold_after = match self.pool_hold_after {
            None => DEFAULT_POOL_HOLD_AFTER,
            Some(t) => humantime::parse_duration(&t).map_err(|e| {
                anyhow::anyhow!("invalid [limits] pool_hold_after `{t}`: {e} (e.g. \"5m\")")
            })?,
        };
        Ok(ServerLimits {
            text,
            claims_per_claimer,
            pool_hold_after,
            events: EventBounds {
                kept: in_range("events_kept", kept, MIN_EVENTS_KEPT)?,
                bytes: in_range("events_bytes", bytes, MIN_EVENTS_BYTES)?,
                batch: PRUNE_BATCH,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(toml: &str) -> Result<ServerLimits, String> {
        toml::from_str::<LimitsFile>(toml)
            .map_err(|e| e.to_string())?
            .resolve()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn limits_are_lowered_never_raised() {
        assert_eq!(resolve(""), Ok(ServerLimits::default()));
        let l = resolve("claim_labels = 4\nclaim_label_bytes = 512\nreason_bytes = 200\nevents_kept = 5000\nevents_bytes = \"8MiB\"").unwrap();
        assert_eq!(
            l.text,
            TextLimits {
                claim_labels: 4,
                claim_label_bytes: 512,
                reason_bytes: 200
            }
        );
        assert_eq!(
            l.events,
            EventBounds {
                kept: 5000,
                bytes: 8 << 20,
                batch: PRUNE_BATCH
            }
        );
        assert_eq!(
            resolve("pool_hold_after = \"90s\"").map(|l| l.pool_hold_after),
            Ok(std::time::Duration::from_secs(90))
        );
        let e = resolve("pool_hold_after = \"soon\"").unwrap_err();
        assert!(e.contains("invalid [limits] pool_hold_after `soon`"), "{e}");
        let e = resolve("claim_labels = 33").unwrap_err();
        assert!(e.contains("may be lowered, not raised"), "{e}");
        let e = resolve("reason_bytes = 3").unwrap_err();
        assert!(e.contains("below its least, 16"), "{e}");
        let e = resolve("events_bytes = 1000").unwrap_err();
        assert!(e.contains("below its least"), "{e}");
        // Raising the event log's bounds is the operator's choice of disk.
        assert_eq!(
            resolve("events_kept = 1000000").unwrap().events.kept,
            1_000_000
        );
        assert!(
            resolve("events_byte = 1")
                .unwrap_err()
                .contains("unknown field")
        );
        // A claimer's claims: raised or lowered, within a range.
        assert_eq!(resolve("").unwrap().claims_per_claimer, 1_000);
        assert_eq!(
            resolve("claims_per_claimer = 20000")
                .unwrap()
                .claims_per_claimer,
            20_000
        );
        let e = resolve("claims_per_claimer = 0").unwrap_err();
        assert!(e.contains("out of range: 1 to 100000"), "{e}");
    }
}
