//! Per-job volumes: a volume made for one job's claim (`csivol run --fresh`, `csivol claim
//! --fresh`), in the topology of the node it is claimed on, and deleted after the claim's
//! release.

use serde::{Deserialize, Serialize};

use crate::{ClaimRequest, CreateVolumeSpec};

/// What a per-job volume is made from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FreshSource {
    /// A csivol snapshot: the new volume starts with its data, with the spec of the volume
    /// it was cut from.
    Snapshot(String),
    /// A csivol volume: the new volume is its clone, with its spec.
    Volume(String),
    /// A volume spec of its own (`volume create`'s), which may name a source itself.
    Spec(Box<CreateVolumeSpec>),
}

impl FreshSource {
    /// In words, for messages: `snapshot `golden``.
    pub fn describe(&self) -> String {
        match self {
            Self::Snapshot(s) => format!("snapshot `{s}`"),
            Self::Volume(v) => format!("a clone of volume `{v}`"),
            Self::Spec(s) => format!("a spec of plugin `{}`", s.plugin),
        }
    }
}

/// `POST /v1/fresh-claims`: a new volume for the job, claimed by it. The server records
/// the volume and the claim in one transaction; the claim waits (`queued`) until the
/// volume is created, then goes on like any claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FreshClaimRequest {
    /// The name the job gives the volume (`NAME` of `--fresh NAME=...`): one volume per
    /// alloc and name while its claim lasts.
    pub name: String,
    pub source: FreshSource,
    /// The claim: its alloc, node and mode; a lease (`ttl_ms`) is required.
    pub claim: ClaimRequest,
}

/// What the volume list and a volume's view say of a per-job volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVolume {
    /// The alloc whose job it was made for.
    pub alloc: String,
    /// The name that job gave it.
    pub name: String,
    /// The node it was made for (in whose topology).
    pub node: String,
    /// Kept after a failed job until then (RFC 3339), for inspection; deleted after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_until: Option<String>,
}

/// `DELETE /v1/volumes/{name}/claims/{alloc}?keep_ms=N`: the job failed, and its per-job
/// volume is kept this long after the release before it is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepQuery {
    #[serde(default)]
    pub keep_ms: Option<u64>,
}
