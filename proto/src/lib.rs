//! The CSI v1 protocol as generated tonic/prost code, the conversions between it and the
//! types the rest of csivol uses instead, a connector for plugin endpoints, and the mount
//! table both ends of a node's CSI socket read, and how dev mode's children die with it.
//!
//! Generated types stay at the edge: [`convert`] holds every conversion to and from the wire
//! types, in one place; the plain types themselves are `csivol-api`'s, so that the CLI and
//! the HTTP API carry them without any gRPC stack.

pub mod convert;
pub mod endpoint;
pub mod mountinfo;
pub mod supervised;

/// Generated CSI v1 code (package `csi.v1`). Only [`convert`] and the gRPC edges of the
/// agent and the reference plugin should touch these types.
pub mod csi {
    #[allow(clippy::all, clippy::pedantic, unused_qualifications)] // reason: generated code
    pub mod v1 {
        tonic::include_proto!("csi.v1");
    }
}

pub use endpoint::{CsiEndpoint, EndpointError, PluginConnection};
