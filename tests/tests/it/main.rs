//! csivol's end-to-end tests: real binaries, real sockets, real mounts.

mod cluster;
mod e2e;
