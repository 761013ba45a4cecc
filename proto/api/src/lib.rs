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
pub mod channel;
mod claims;
mod errors;
mod expansion;
mod modify;
mod name;
mod nodes;
mod operator;
mod reconcile;
mod snapshots;
mod text;
mod tokens;
mod volumes;

pub use agent::*;
pub use claims::*;
pub use domain::{
    AccessMode, AccessType, ControllerCapabilities, ErrorClass, GroupControllerCapabilities,
    NodeCapabilities, NodeInfo, PluginCapabilities, PluginInfo, PublishContext, Topology,
    VolumeCapability,
};
pub use errors::*;
pub use expansion::*;
pub use modify::*;
pub use name::*;
pub use nodes::*;
pub use operator::*;
pub use reconcile::*;
pub use snapshots::*;
pub use text::{FreeText, check_map, check_text, is_control};
pub use tokens::*;
pub use volumes::*;

/// A serde default of `true`.
fn yes() -> bool {
    true
}

/// The header carrying the index of a blocking-query response.
pub const INDEX_HEADER: &str = "x-csivol-index";

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
    ModificationState
);
