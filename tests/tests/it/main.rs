//! csivol's end-to-end tests: real binaries, real sockets, real mounts.

mod ci;
mod client;
mod cluster;
mod dev;
mod durability;
mod e2e;
mod fence;
mod network;
mod security;
mod snapshots;
