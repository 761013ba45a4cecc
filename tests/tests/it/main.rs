//! csivol's end-to-end tests: real binaries, real sockets, real mounts.

mod bench_smoke;
mod cluster;
mod durability;
mod e2e;
