//! csivol-agent tests: the node agent against a real `csivol-hostpath` on a unix socket
//! with real bind mounts: its engine driven with desired states (claims brought up and
//! taken down, faults, recovery, controller operations, fencing), then the agent binary
//! with a real `csivol-server` (run `cargo build -p csivol-server` first when testing this
//! crate alone).

mod channel;
mod check;
mod controller;
mod devices;
mod e2e;
mod engine;
mod fencing;
mod ha;
mod procs;
mod recovery;
mod restore;
mod server_address;
mod shapes;
mod spellings;
mod start;
mod support;
mod truth;
