//! csivol-agent tests with real processes: the server over real HTTP with real SQLite
//! files, the node agent with csivol-hostpath on real unix sockets and real bind mounts.

mod fence;
mod node;
mod queue_and_leases;
mod server;
