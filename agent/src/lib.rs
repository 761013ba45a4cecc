//! csivol's server (the control plane over SQLite), node agent (drives the node's CSI
//! plugins toward the server's desired state) and dev mode.

pub mod dev;
pub mod node;
pub mod server;
