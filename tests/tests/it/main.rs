//! csivol's end-to-end tests: real binaries, real sockets, real mounts.

mod bench_smoke;
mod cluster;
mod e2e;
