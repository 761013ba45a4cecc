//! csivol-hostpath over a real unix socket, through the generated client: the lifecycle with
//! real bind mounts, the spec's error codes, fault injection and restart persistence.

mod errors;
mod faults;
mod lifecycle;
mod process;
mod support;
