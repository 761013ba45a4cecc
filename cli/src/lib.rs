//! The `csivol` command-line client, as a library for the `csivol` binary and for
//! `csivol-gen` (`gen/`), which writes the checked-in completions and man pages. Not a
//! stable API.

pub mod args;
pub mod client;
pub mod commands;
pub mod ctx;
pub mod env;
pub mod escape;
pub mod failure;
pub mod generate;
pub mod groups;
pub mod output;
pub mod plan;
pub mod render;
pub mod signals;
pub mod spec;
pub mod table;
pub mod usage;
pub mod wait;
