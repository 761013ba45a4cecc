//! The HTTP API's JSON types, shared by the server, the node agent and the CLI. Field names
//! are the public contract: the CLI's `-o json` output is these types, serialised.
//!
//! Request bodies refuse unknown fields, so a typo in a script fails loudly instead of
//! being ignored.
//!
//! Serde only: no HTTP client, no gRPC. The typed client is `csivol-client`; the CSI wire
//! types and their conversions to [`domain`] are `csivol-csi`.

use std::fmt;
use std::str::FromStr;

pub mod domain;

mod agent;
mod capacity;
pub mod channel;
mod claims;
mod controller_ops;
mod errors;
mod expansion;
mod job_volumes;
pub mod limits;
mod modify;
mod mounts;
mod name;
mod namespaces;
mod nodes;
mod operator;
mod pools;
mod reconcile;
mod scope;
mod snapshots;
mod text;
mod tokens;
mod usage;
mod volumes;

pub use agent::*;
pub use capacity::*;
pub use claims::*;
pub use controller_ops::*;
pub use domain::{
    AccessMode, AccessType, ControllerCapabilities, ErrorClass, GroupControllerCapabilities,
    NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo, PublishContext, Topology,
    VolumeCapability,
};
pub use errors::*;
pub use expansion::*;
pub use job_volumes::*;
pub use modify::*;
pub use mounts::*;
pub use name::*;
pub use namespaces::*;
pub use nodes::*;
pub use operator::*;
pub use pools::*;
pub use reconcile::*;
pub use scope::*;
pub use snapshots::*;
pub use text::{
    FreeText, TextError, check_claim_labels, check_map, check_node_labels, check_reason,
    check_text, is_control, map_bytes,
};
pub use tokens::*;
pub use usage::*;
pub use volumes::*;

/// A serde default: the namespace of what was made before namespaces.
fn default_namespace() -> String {
    DEFAULT_NAMESPACE.to_owned()
}

/// A serde default of `true`.
fn yes() -> bool {
    true
}

/// The header carrying the index of a blocking-query response.
pub const INDEX_HEADER: &str = "x-csivol-index";

/// A request header a client sets when it follows the outcome (`--wait`): a request that
/// only a release under way stands in the way of (the volume still being unpublished,
/// unstaged or detached after its claims were released) is accepted and carried out once
/// that release has finished, instead of refused: an offline expansion, a deletion, a claim
/// on another node of a single-node volume; a snapshot or a modification then also waits
/// for the release, which its caller asked for first. Its one value is [`WAIT_FOR_RELEASE`].
/// A header, not a body field or a query, because a server that predates it ignores it and
/// answers as it always did, where an unknown field or query would be refused.
pub const WAIT_HEADER: &str = "x-csivol-wait";

/// The value of [`WAIT_HEADER`].
pub const WAIT_FOR_RELEASE: &str = "release";

/// The header naming one mutating request, the same on each of its retries: the server
/// answers a repeat from the same token with the first answer instead of acting again, and
/// refuses the key with another request (422). A header, so that a server that does not
/// know it ignores it rather than refusing the body.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The longest `Idempotency-Key` the server takes; a key is visible ASCII.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;
/// When the client first sent a mutating request (unix milliseconds, its own clock; the
/// same on each retry): a claim request sent before its alloc's last release is not
/// recorded again, and a request older than the server's request memory is refused.
pub const SENT_AT_HEADER: &str = "x-csivol-sent-at";
/// Set on an answer that repeats the first answer kept under the request's key.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// The header carrying the generation of the state an index belongs to: the server's
/// answers name it beside [`INDEX_HEADER`], and a client sends it back with the index it
/// follows from. The state can go back in time (a backup restored, an etcd snapshot
/// restored), and its indexes with it: an index means something only in its generation.
/// A server that is sent another generation than its own answers at once, with its whole
/// state and a new index. Opaque text; an older server ignores the header.
pub const GENERATION_HEADER: &str = "x-csivol-generation";

// The text forms of the API's enums are their JSON forms, for flags and messages.
macro_rules! text_enum {
    ($($t:ident),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                serde_json::from_value(serde_json::Value::String(s.to_owned()))
                    .map_err(|_| format!("unknown {} `{s}`", stringify!($t)))
            }
        }
    )*};
}
text_enum!(
    Attachment,
    VolumeState,
    ClaimMode,
    ClaimState,
    AttachmentState,
    NodeStatus,
    Eligibility,
    Role,
    SnapshotState,
    ModificationState,
    PoolChoice
);
