//! Volume labels and pools: a pool is the set of volumes whose labels match its selector;
//! a job claims any free member of it, the server choosing the warmest by cache key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ClaimRequest;

/// `POST /v1/volumes/{name}/labels`: an operator sets and removes a volume's labels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeLabelRequest {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// `PUT /v1/pools/{name}`: a pool of the volumes whose labels match `selector`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// Every `key=value` a member's labels must carry (at least one).
    pub selector: BTreeMap<String, String>,
    /// How long a node keeps a released member staged for the next job (milliseconds),
    /// unless another node needs it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linger_ms: Option<u64>,
}

/// One member of a pool, as `pool show` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMember {
    /// The member's name within the pool's namespace.
    pub volume: String,
    /// The allocs holding it (any claim state), empty when free.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<String>,
    /// The cache key it was last released with by a job that succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// `ineligible` or `draining` when an operator took it out of service (skipped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub availability: Option<crate::Eligibility>,
    /// The nodes it is still attached or staged on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub staged_on: Vec<String>,
}

/// A pool: its selector, members and how warm its recent claims were.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pool {
    /// Its name within its namespace.
    pub name: String,
    #[serde(default = "crate::default_namespace")]
    pub namespace: String,
    pub selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linger_ms: Option<u64>,
    pub members: Vec<PoolMember>,
    /// The pool's line: claims waiting for any member (`claim --pool --queue`), first in
    /// line first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub line: Vec<PoolWaiter>,
    /// How many of the pool's last claims (at most [`Pool::RECENT`]) are counted below.
    pub recent_claims: u32,
    /// Of those, how many got a member last released with the same cache key.
    pub warm_hits: u32,
    pub created_at: String,
}

impl Pool {
    /// How many of a pool's last claims its warm-hit ratio counts.
    pub const RECENT: u32 = 100;
}

/// A claim waiting in a pool's line, as `pool show` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolWaiter {
    pub alloc: String,
    pub node: String,
    pub mode: crate::ClaimMode,
    /// Its place in the line, 1 first.
    pub position: u32,
    /// When it joined the line (RFC 3339), and how long it has waited (milliseconds).
    pub since: String,
    pub waited_ms: u64,
    /// When its lease runs out (RFC 3339), for a claim made with a TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The member held for it: it waited past the server's `pool_hold_after`, and a member
    /// it can use freed; no later claim takes that member before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

/// `POST /v1/pools/{name}/claims`: claim any free member of the pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolClaimRequest {
    pub claim: ClaimRequest,
    /// The job's cache key: a member last released with it is preferred, and it is
    /// recorded as the member's key when the job releases it having succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Prefixes tried in order after the cache key itself, like GitHub's restore-keys.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restore_keys: Vec<String>,
}

/// Why the server gave a pool claim the member it did, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolChoice {
    /// Last released with the job's cache key.
    SameKey,
    /// Still staged (or attached) on the claim's node.
    StagedHere,
    /// Its last cache key shares the longest prefix with the key or a restore key.
    Prefix,
    /// Any free member.
    Cold,
    /// None yet: the claim waits in the pool's line (`--queue`) for a member to free.
    Waiting,
}

impl PoolChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SameKey => "same-key",
            Self::StagedHere => "staged-here",
            Self::Prefix => "prefix",
            Self::Cold => "cold",
            Self::Waiting => "waiting",
        }
    }

    /// In words, as the claim's answer and event say it.
    pub fn says(self) -> &'static str {
        match self {
            Self::SameKey => "warm: same key",
            Self::StagedHere => "staged here",
            Self::Prefix => "warm: prefix",
            Self::Cold => "cold",
            Self::Waiting => "waits in line",
        }
    }
}

/// What a claim made from a pool says of its member's choice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimPool {
    pub pool: String,
    pub choice: PoolChoice,
    /// The choice in words, with the key or prefix that matched.
    pub why: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
}
