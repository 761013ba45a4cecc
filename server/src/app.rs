//! What a running server shares between its parts: the state store, the tokens, the
//! nodes' liveness, the limits and metrics, fencing, the long-poll budget and the clock.
//! The HTTP handlers read it whole (`http/`); fencing and the background tasks are given
//! the parts they use.

use std::sync::Arc;
use std::time::Duration;

use csivol_rules::fence::FenceConfig;

use crate::auth::Tokens;
use crate::capacity::Capacity;
use crate::clock::Clock;
use crate::fence::{Fencer, Fencing};
use crate::inventory::Inventory;
use crate::lifecycle::Limits;
use crate::liveness::Liveness;
use crate::metrics::Metrics;
use crate::store::replicated::{Leadership, Reads};
use crate::store::sqlite::db::Db;

/// The server's shared state, behind one reference count: the HTTP server clones it for
/// each request's handler and middleware, and a clone of the fields one by one took an
/// atomic increment (and a decrement at its drop) for each of them.
#[derive(Clone)]
pub struct App(Arc<AppState>);

impl App {
    pub fn new(state: AppState) -> Self {
        Self(Arc::new(state))
    }

    /// What fencing works with, from this server's parts.
    pub fn fencing(&self) -> Fencing {
        Fencing {
            db: self.db.clone(),
            live: Arc::clone(&self.live),
            metrics: Arc::clone(&self.metrics),
            limits: self.limits.clone(),
            clock: self.clock.clone(),
            config: Arc::clone(&self.fence),
            running: Arc::clone(&self.fencer),
        }
    }
}

impl std::ops::Deref for App {
    type Target = AppState;

    fn deref(&self) -> &AppState {
        &self.0
    }
}

pub struct AppState {
    pub db: Db,
    pub tokens: Arc<Tokens>,
    pub live: Arc<Liveness>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    pub fence: Arc<FenceConfig>,
    pub fencer: Arc<Fencer>,
    /// Long-polls in flight (`--max-long-polls`); an open node channel holds one too.
    pub long_polls: Arc<tokio::sync::Semaphore>,
    /// Whether agents are offered the node channel (`--no-node-channel` turns it off).
    pub node_channel: bool,
    /// A request's body must arrive within this after its headers (`--body-timeout`).
    pub body_timeout: Duration,
    /// With the etcd store: what makes a read consistent (`None`: SQLite, consistent as is).
    pub reads: Option<Reads>,
    /// With the etcd store, this server's leadership (health shows it).
    pub leadership: Option<Leadership>,
    /// The server's one clock (the database writer's too).
    pub clock: Clock,
    /// The plugins' GetCapacity answers, in memory.
    pub capacity: Arc<Capacity>,
    /// The plugins' last ListVolumes, in memory.
    pub inventory: Arc<Inventory>,
    /// The nodes' usage samples, in memory only.
    pub usage: Arc<crate::usage::NodeSamples>,
    /// The nodes' CSI call counts, in memory only.
    pub calls: Arc<crate::calls::NodeCallCounts>,
}
