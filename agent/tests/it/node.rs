//! The node agent against a real `csivol-hostpath` on a unix socket with real bind mounts:
//! its core driven with desired states (reconcile, faults, recovery, controller
//! operations, fencing), then the agent binary with the real server.

mod channel;
mod controller;
mod e2e;
mod fencing;
mod ha;
mod procs;
mod reconcile;
mod recovery;
mod shapes;
mod support;
mod truth;
