//! What a node's agent samples besides its reports: how full each published volume is
//! (NodeGetVolumeStats' `usage`), and how its own CSI calls went. Sent on the node channel
//! as `stats` lines (version 3) and kept in the server's memory only: a sample is worth
//! something until the next one, so none is written to the cluster state.

use serde::{Deserialize, Serialize};

/// One `stats` line: a batch of usage samples and the agent's call counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeStats {
    /// The agent's start id, new at every start: the call counts are cumulative since that
    /// start, so a new id is a restart, not a drop.
    pub start: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub usage: Vec<UsageSample>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<CallCounts>,
}

/// How full a published claim's volume is, as its node plugin said.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSample {
    pub volume: String,
    pub alloc: String,
    pub plugin: String,
    /// Absent when the node plugin does not report usage (it has no GET_VOLUME_STATS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<VolumeUsage>,
}

/// A volume's usage in bytes and in inodes; either is absent when the plugin did not
/// report that unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<UsageNumbers>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inodes: Option<UsageNumbers>,
}

/// Used, available and total of one unit. csi.proto, `VolumeUsage`: "The available
/// capacity in specified Unit. This field is OPTIONAL." and "The used capacity in
/// specified Unit. This field is OPTIONAL.", so `used` and `available` may be absent
/// (a plugin that leaves them 0); "The total capacity in specified Unit. This field is
/// REQUIRED."
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageNumbers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<u64>,
    pub total: u64,
}

impl UsageNumbers {
    /// What is used: as reported, or total less available when only that was given.
    pub fn used(&self) -> Option<u64> {
        self.used
            .or_else(|| self.available.map(|a| self.total.saturating_sub(a)))
    }

    /// How full, in percent of the total; `None` when neither `used` nor `available` was
    /// reported, or the total is 0.
    pub fn percent(&self) -> Option<f64> {
        let used = self.used()?;
        (self.total > 0).then(|| used as f64 * 100.0 / self.total as f64)
    }
}

/// A claim's usage as the server last heard it from the claim's node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reported", rename_all = "snake_case")]
pub enum ClaimUsage {
    /// The node plugin's last sample, and when it came (RFC 3339).
    Sampled {
        #[serde(flatten)]
        usage: VolumeUsage,
        at: String,
    },
    /// The node plugin does not report usage (it has no GET_VOLUME_STATS).
    NotReported,
}

/// The upper bounds of the buckets of the agents' CSI call durations, in seconds: the
/// agent counts its calls into these, the server adds them into its histogram.
pub const CALL_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// One kind of CSI call an agent made since its start: how many, how long in all, and how
/// many fell in each bucket of [`CALL_BUCKETS`]: the first bucket whose bound is at least
/// the call's duration, or the last, one past the bounds, for a call longer than them all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallCounts {
    pub plugin: String,
    /// The CSI method (`NodePublishVolume`).
    pub method: String,
    /// The gRPC code name it answered (`OK`, `NOT_FOUND`, `DEADLINE_EXCEEDED`).
    pub code: String,
    pub count: u64,
    /// Their durations summed, in microseconds.
    pub micros: u64,
    /// One count per bucket of [`CALL_BUCKETS`], in order, and one for longer calls.
    pub buckets: Vec<u64>,
}

/// One node's calls of one method of a plugin, over its agent's life (`plugin show`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginCallStats {
    pub node: String,
    /// The CSI method (`NodePublishVolume`).
    pub method: String,
    pub calls: u64,
    /// Calls that did not answer OK.
    pub errors: u64,
    /// The bound of the bucket that holds the median call, of [`CALL_BUCKETS`], in
    /// microseconds; absent when it is past the last bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<u64>,
    /// Likewise for the 99th percentile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_used_comes_from_used_or_from_what_is_available() {
        let n = |used, available, total| UsageNumbers {
            used,
            available,
            total,
        };
        for (numbers, used, percent) in [
            (n(Some(50), Some(50), 100), Some(50), Some(50.0)),
            (n(None, Some(10), 100), Some(90), Some(90.0)),
            (n(Some(30), None, 100), Some(30), Some(30.0)),
            // Only the total: nothing to say of what is used.
            (n(None, None, 100), None, None),
            (n(Some(5), None, 0), Some(5), None),
        ] {
            assert_eq!(numbers.used(), used, "{numbers:?}");
            assert_eq!(numbers.percent(), percent, "{numbers:?}");
        }
    }

    #[test]
    fn a_claims_usage_says_whether_it_was_reported() {
        let json = serde_json::to_value(ClaimUsage::NotReported).unwrap();
        assert_eq!(json, serde_json::json!({"reported": "not_reported"}));
        let sampled = ClaimUsage::Sampled {
            usage: VolumeUsage {
                bytes: Some(UsageNumbers {
                    used: Some(1),
                    available: Some(2),
                    total: 3,
                }),
                inodes: None,
            },
            at: "t".into(),
        };
        let json = serde_json::to_value(&sampled).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"reported": "sampled", "at": "t",
                "bytes": {"used": 1, "available": 2, "total": 3}})
        );
        assert_eq!(serde_json::from_value::<ClaimUsage>(json).unwrap(), sampled);
    }
}
