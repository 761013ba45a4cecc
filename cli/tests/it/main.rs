//! The `csivol` binary against a real `csivol-server serve` on loopback. Node agents are
//! played by `FakeAgent` (below the CLI, the line under test); their steps are driven by the
//! tests so that every state a command can meet is reached on purpose.

#[macro_use]
mod support;

mod basics;
mod blocked;
mod claims;
mod escapes;
mod fence;
mod limits;
mod namespaces;
mod nodes;
mod prompt;
mod quotas;
mod real_agent;
mod retries;
mod shells;
mod tables;
mod tokens;
mod transport;
mod volumes;
mod watch;
