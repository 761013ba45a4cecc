//! The server's settings the lifecycle depends on, and where it records latencies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use csivol_rules::schedule::OpClass;

use crate::metrics::Metrics;

/// Server settings the lifecycle depends on, and where it records latencies.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Controller operations in flight per plugin.
    pub controller_concurrency: u32,
    /// The oldest wait past which a plugin's controller queue is shown with a warning.
    pub controller_queue_warning: Duration,
    /// Per plugin, the class of controller operations its last slot went to, so that the
    /// next tie goes to another (`csivol_rules::schedule`). Kept in memory, a hint for ties
    /// only: after a restart (or on another leader) the first tie goes to the one waiting
    /// longest, and a write that rolls back may leave it a turn ahead.
    pub served_last: Arc<Mutex<HashMap<String, OpClass>>>,
    pub metrics: Arc<Metrics>,
    /// How long request keys and claim tombstones are kept (`request_memory`): a request
    /// sent longer ago is refused.
    pub request_memory: Duration,
    /// The limits of claim labels and operators' reasons (`[limits]` in the config file).
    pub text: csivol_api::limits::TextLimits,
    /// Claims one claimer token may hold at once (`[limits] claims_per_claimer`).
    pub claims_per_claimer: usize,
    /// How long the first claim in a pool's line waits before a member that frees and that
    /// it can use is held for it (`[limits] pool_hold_after`).
    pub pool_hold_after: Duration,
    /// How large the event log may grow (`[limits]`).
    pub events: crate::limits::EventBounds,
    /// Per plugin, whether csivol may change a volume's ownership to give it a claim's
    /// group, and to which gids (`[plugins.NAME]` in the config file).
    pub mounts: std::collections::BTreeMap<String, csivol_rules::mounts::PluginMounts>,
}
