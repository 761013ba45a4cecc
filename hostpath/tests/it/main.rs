//! csivol-hostpath over a real unix socket, through the generated client: the lifecycle with
//! real bind mounts, the spec's error codes, fault injection and restart persistence, every
//! optional capability with and without it, snapshots and clones, topology, and block
//! volumes on real loop devices.

mod block;
mod capabilities;
mod conformance;
mod errors;
mod faults;
mod groups;
mod lifecycle;
mod limits;
mod modify;
mod process;
mod snapshots;
mod support;
mod topology;
