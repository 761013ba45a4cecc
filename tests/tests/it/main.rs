//! csivol's end-to-end tests: real binaries, real sockets, real mounts.

mod bench_smoke;
mod cluster;
mod dev;
mod e2e;
mod fence;
