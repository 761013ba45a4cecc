//! csivol's end-to-end tests: real binaries, real sockets, real mounts.

mod after_release;
mod block;
mod boundaries;
mod ci;
mod client;
mod cluster;
mod dev;
mod docs;
mod durability;
mod e2e;
mod expand;
mod fence;
mod fence_trust;
mod group_snapshots;
mod limits;
mod modify;
mod network;
mod packages;
mod partition;
mod product_text;
mod queue;
mod reconcile;
mod security;
mod snapshots;
mod staging;
mod topology;
