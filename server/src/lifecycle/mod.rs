//! Everything that changes cluster state, each function running inside one write
//! transaction, one file per job. From the ground up (no file imports one that imports it
//! back, which a `boundaries` test holds the folder to):
//!
//! - what every job shares: `settings` (`Limits`), `events` (the event log), `backoff`,
//!   `changes` (the row changes every job makes), `node_expansion` (NodeExpandVolume's part
//!   of an expansion, which a detach ends), `heard` (who was heard from since the state
//!   went back in time), `retries` (a claim request older than its alloc's release), `owners` (a claim
//!   belongs to the token that made it);
//! - `ops`, the controller-operation queue: its engine (`ops/queue`) knows no kind of
//!   operation; each kind (attach, detach, create, delete, expand, modify, snapshot, group
//!   snapshot) is a file of `ops/kinds/` and a row of its table;
//! - `admission` (who may claim, where, and who waits), `after_release` (operations held
//!   until their volume's release has finished), `attachments` (a volume's facts loaded
//!   for `transitions::next` and its answer written: `advance_volume`, detaches begun);
//! - the jobs, each a request or a report: `claims`, `volumes`, `expand`, `modify`,
//!   `snapshots`, `group_snapshots`, `leases`, `settle` (after the state went back in
//!   time), `operator` (unblock, detach), `nodes` (registration, loss, return, eligibility,
//!   removal), `fence` (a fence's record), `desired` (a node's desired state), `reports`
//!   (agents' reports), `reconcile` (controller listings), `tokens`, `hosting` (controller
//!   hosts), `labels`, `availability` (whether a volume takes new claims), `pools` (volume labels
//!   and the pools they make, and the end of stagings kept after a release) and
//!   `pool_claims` (a pool's member chosen for a claim);
//! - `lingers` (stagings a node keeps after a release, as its pool asks) sits below the
//!   attachment lifecycle, which loads and settles them; `slots` (a node's volume slots,
//!   which those stagings give up to another volume's claim) below both and admission.
//!
//! This file only names them and what the rest of the server uses. Decisions that need no
//! state are `csivol_rules`'; reads and writes go through the store's traits, never SQL.
//!
//! Handlers change the facts (a claim is recorded, a node reports a volume unstaged) and
//! then call `attachments::advance_volume`, which moves the volume's claims and attachments
//! as far forward as those facts allow. Keeping that one function the only place that
//! derives the next step is what keeps the lifecycle consistent.

mod admission;
mod adopt;
mod after_release;
mod attachments;
mod availability;
mod backoff;
mod changes;
mod claims;
mod desired;
mod events;
mod expand;
mod fence;
mod group_snapshots;
mod heard;
mod hosting;
mod job_cleanup;
mod job_volumes;
mod labels;
mod leases;
mod lingers;
mod modify;
mod mounts;
mod namespaces;
mod node_expansion;
mod nodes;
mod operator;
mod ops;
mod owners;
mod pool_claims;
mod pool_line;
mod pool_members;
mod pool_waits;
mod pools;
mod quotas;
mod reconcile;
mod reports;
mod retries;
mod settings;
pub(crate) mod settle;
mod slots;
mod snapshots;
#[cfg(test)]
mod tests;
mod tokens;
mod usage;
mod volumes;

pub use adopt::{adopt_snapshot, adopt_volume, has_controller_service};
pub use after_release::resume_all_held;
pub use availability::set_volume_eligibility;
pub use claims::{Claimant, claim_dry_run, create_claim, no_claim, release_claim};
pub use desired::{desired_changes, desired_state};
pub use events::prune_events;
pub use expand::expand_volume;
pub(crate) use fence::{Evidence, failure, record_fence};
pub use group_snapshots::{
    create_group_snapshot, delete_group_snapshot, group_snapshot_view, list_group_snapshots,
};
pub use hosting::{change_controller_hosts, refused_hosting};
pub use job_cleanup::{any_job_volume_due, collect_job_volumes};
pub use job_volumes::{create_fresh_claim, fresh_dry_run, keep_after_release};
pub use labels::set_labels;
pub use leases::{expire_leases, renew_lease};
pub use modify::modify_volume;
pub use namespaces::{
    create_namespace, delete_namespace, namespace_view, namespace_views, require_namespace,
};
pub use nodes::{
    Expiry, expire_node, node_id_refused, node_stopping, register_node, remove_node,
    set_eligibility,
};
pub use operator::{detach, require_reason, unblock_node, unblock_volume};
pub use ops::{plugins_with_due_ops, schedule_ops};
pub use pool_claims::{claim_from_pool, released_from_pool};
pub use pool_line::lines_due;
pub use pool_waits::{leave_line, pool_claim, renew_in_line, serve_lines};
pub use pools::{
    any_linger_due, create_pool, delete_pool, end_due_lingers, pool_view, pool_views,
    set_volume_labels,
};
pub use quotas::set_namespace_quota;
pub use reports::apply_reports;
pub use retries::{PRUNE_BATCH, prune_retries};
pub use settings::Limits;
pub use slots::lingering_slots;
pub use snapshots::{
    create_snapshot, delete_snapshot, list_group_members, snapshot_page, snapshot_view,
};
pub use tokens::{NewToken, create_token, first_operator_token, revoke_token};
pub use usage::volume_filling;
pub use volumes::{
    create_volume, deregister_volume, duplicate_ids, register_volume, unknown_plugin, volume_view,
};
