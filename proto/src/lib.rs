//! The CSI v1 protocol as generated tonic/prost code, the domain types the rest of csivol
//! uses instead of it, and a connector for plugin endpoints.
//!
//! Generated types stay at the edge: [`domain`] holds the plain Rust types and every
//! conversion to and from the wire types, in one place.

pub mod api;
pub mod domain;
pub mod endpoint;
pub mod mountinfo;
pub mod tls;

/// Generated CSI v1 code (package `csi.v1`). Only [`domain`] and the gRPC edges of the
/// agent and the reference plugin should touch these types.
pub mod csi {
    #[allow(clippy::all, clippy::pedantic, unused_qualifications)] // reason: generated code
    pub mod v1 {
        tonic::include_proto!("csi.v1");
    }
}

pub use endpoint::{CsiEndpoint, EndpointError};
