//! The node agent's decisions, pure like the server's beside this folder: the agent loads
//! its records, its desired state and what the mount table shows, asks these functions,
//! and carries out their answers on its plugins.
//!
//! - `records`: what the agent recorded in `agent.db` of its stagings and publications.
//! - `observed`: what a plugin made at a staging path or a target, as the agent observed it.
//! - `job`: one volume's desired state and records → its job, the steps to take.
//! - `verify`: recovery and every resync: the records against the checks of one snapshot of
//!   the mount table → the repairs (stage or publish again, take down, record, report
//!   drift).
//!
//! Imports run one way: `job` reads `verify`'s answer, both read `records` and `observed`,
//! and neither of those two reads the others.

pub mod job;
pub mod observed;
pub mod records;
pub mod verify;
