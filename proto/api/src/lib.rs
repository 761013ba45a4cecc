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
pub mod limits;
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
pub use text::{
    FreeText, TextError, check_claim_labels, check_map, check_node_labels, check_reason,
    check_text, is_control, map_bytes,
};
pub use tokens::*;
pub use volumes::*;

/// A serde default of `true`.
fn yes() -> bool {
    true
}

/// The header carrying the index of a blocking-query response.
pub const INDEX_HEADER: &str = "x-csivol-index";

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
