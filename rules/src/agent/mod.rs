//! The node agent's decisions, pure like the server's beside this folder: the agent loads
//! its records, its desired state and what the mount table shows, asks these functions,
//! and carries out their answers on its plugins.
//!
//! - `records`: what the agent recorded in `agent.db` of its stagings and publications.
//! - `observed`: what a plugin made at a staging path or a target, as the agent observed it.
//! - `plan`: one volume's desired state and records → the steps to take.
//! - `verify`: the agent's recovery plan: its records against the checks of one snapshot of
//!   the mount table → stage or publish again, take down, record, report drift.
//!
//! Imports run one way: `plan` reads `verify`'s answer, both read `records` and
//! `observed`, and neither of those two reads the others.

pub mod observed;
pub mod plan;
pub mod records;
pub mod verify;
