//! csivol's decisions as pure functions over plain data: what the server decides when it
//! records a claim and moves a volume, and what the node agent decides to do for one
//! volume. Nothing here reads a clock, a file, a socket or a database; the server and the
//! agent load the facts, call these functions and carry out their answers. Each module is
//! table-tested: its cases read as the specification.
//!
//! - `claims`: whether a claim may be recorded (access modes, single writer, single node,
//!   blocked holders, the node's eligibility, topology and free slots).
//! - `after_release`: what a release under way means for an operation asked of its volume
//!   (refused with the truth, or held until the release has finished), and when a held one
//!   runs.
//! - `transitions`: a volume's facts → the next states of its claims and attachments and
//!   the controller operations to queue.
//! - `queue`: which refusals a claim may wait out, and which queued claims to grant.
//! - `expansion`: whether and how a volume may be expanded now (a failed expansion lowered
//!   or cancelled).
//! - `modify`: whether a volume's mutable parameters may be changed now, and which keys
//!   ControllerModifyVolume is sent.
//! - `capacity`: whether a volume fits by the plugin's fresh GetCapacity answers, and the
//!   order of its preferred segments.
//! - `snapshots`: whether a volume may be snapshotted, created from a snapshot or cloned.
//! - `schedule`: which waiting controller operations of a plugin run next: shared fairly
//!   between attaches, detaches and the rest, and between volumes.
//! - `reconcile`: a controller's listing against csivol's attachments → findings.
//! - `fence`: which configured fence method applies to a node, its command, and when an
//!   automatic fence is due.
//! - `hosting`: whether a registering node may host a plugin's controller.
//! - `kinds`: event and controller-operation kinds.
//! - `nodes`: whether a node takes new claims, and whether it may be forgotten.
//! - `retries`: which answers are kept under a request's key, when a repeat is the same
//!   request, and when a request is too old, or a claim older than its alloc's release.
//! - `settle`: which volumes the server holds back after the state went back in time, and
//!   until when.
//! - `usage`: when a volume counts as filling up (a threshold with hysteresis).
//! - `agent/`: the node agent's decisions (a volume's job, its recovery, what it observed and
//!   recorded), in a folder of their own.

pub mod after_release;
pub mod agent;
pub mod capacity;
pub mod claims;
pub mod expansion;
pub mod fence;
pub mod hosting;
pub mod kinds;
pub mod modify;
pub mod mount_options;
pub mod mounts;
pub mod nodes;
pub mod queue;
pub mod reconcile;
pub mod retries;
pub mod schedule;
pub mod settle;
pub mod snapshots;
pub mod transitions;
pub mod usage;
