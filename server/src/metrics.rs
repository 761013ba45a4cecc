//! `GET /v1/metrics`: Prometheus text. Gauges are read from the database at scrape time;
//! latencies and outcomes are recorded as they happen.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::error::ApiResult;
use super::model::{StateCounts, WaitingOps};

mod ages;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    pub kind: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginKindLabel {
    pub plugin: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ViaLabel {
    pub via: String,
}

#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    claims: Family<StateLabel, Gauge>,
    nodes: Family<StateLabel, Gauge>,
    ops: Family<StateLabel, Gauge>,
    claims_with_error: Gauge,
    claims_abnormal: Gauge,
    /// Ready claims whose node found their mount gone or no longer backed by the volume.
    pub claim_drifts: Counter,
    /// Claim recorded → reported ready.
    pub claim_ready_seconds: Histogram,
    /// Controller operation queued → reported done or failed.
    pub op_seconds: Family<OpLabel, Histogram>,
    /// Reports by how they came (`channel`, `request`).
    node_reports: Family<ViaLabel, Counter>,
    /// Controller operation due → handed to a controller host, by plugin and kind.
    op_wait_seconds: Family<PluginKindLabel, Histogram>,
    /// Controller operations waiting for a slot or a host (due), by plugin and kind.
    queue_depth: Family<PluginKindLabel, Gauge>,
    /// How long the oldest due operation of a plugin has waited.
    queue_oldest_seconds: Family<PluginLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Fence method runs by result (`ok`, `failed`).
    fences: Family<StateLabel, Counter>,
    /// Lost nodes whose automatic fence failed and is retried.
    nodes_fence_failing: Gauge,
    /// Open node channels.
    pub node_channels: Gauge,
    /// Heartbeats by how they came (`channel`, `request`).
    heartbeats: Family<ViaLabel, Counter>,
    /// Desired-state queries that had to wait for a change (long-polls held open).
    pub desired_waits: Counter,
    /// Desired-state changes pushed on node channels as entries (version 2).
    pub desired_pushes: Counter,
    /// Desired-state queries answered (requests, waiting or not).
    pub desired_fetches: Counter,
    /// How long reads waited to be made consistent with etcd (etcd store only).
    pub read_catch_up_seconds: Histogram,
    /// How long volumes have been blocked, and the oldest claim of each unsettled state.
    ages: ages::Ages,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("csivol");
        let claims = Family::<StateLabel, Gauge>::default();
        let nodes = Family::<StateLabel, Gauge>::default();
        let ops = Family::<StateLabel, Gauge>::default();
        let claims_with_error = Gauge::default();
        let claims_abnormal = Gauge::default();
        let claim_drifts = Counter::default();
        let claim_ready_seconds = Histogram::new(exponential_buckets(0.001, 2.0, 20));
        let op_seconds = Family::<OpLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 20))
        });
        let node_reports = Family::<ViaLabel, Counter>::default();
        let op_wait_seconds = Family::<PluginKindLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 22))
        });
        let queue_depth = Family::<PluginKindLabel, Gauge>::default();
        let queue_oldest_seconds =
            Family::<PluginLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "controller_op_wait_seconds",
            "Time a controller operation waited, from due (queued, or its retry due) to handed to a controller host",
            op_wait_seconds.clone(),
        );
        registry.register(
            "controller_queue",
            "Controller operations due and waiting for a slot of their plugin or a controller host",
            queue_depth.clone(),
        );
        registry.register(
            "controller_queue_oldest_seconds",
            "How long the oldest waiting controller operation of a plugin has waited (0: none waits)",
            queue_oldest_seconds.clone(),
        );
        let fences = Family::<StateLabel, Counter>::default();
        let nodes_fence_failing = Gauge::default();
        let node_channels = Gauge::default();
        let heartbeats = Family::<ViaLabel, Counter>::default();
        let desired_waits = Counter::default();
        let desired_pushes = Counter::default();
        let desired_fetches = Counter::default();
        let read_catch_up_seconds = Histogram::new(exponential_buckets(0.0001, 2.0, 20));
        registry.register(
            "read_catch_up_seconds",
            "Time a read waited for this server's copy of the state to reach etcd's last commit",
            read_catch_up_seconds.clone(),
        );
        registry.register(
            "node_channels",
            "Open node channels (agents heartbeating and told of changes on one connection)",
            node_channels.clone(),
        );
        registry.register(
            "heartbeats",
            "Node heartbeats by how they came: on the node channel, or as a request",
            heartbeats.clone(),
        );
        registry.register(
            "desired_pushes",
            "Desired-state changes pushed to agents on their node channels, as the changed volumes' entries",
            desired_pushes.clone(),
        );
        registry.register(
            "desired_fetches",
            "Desired-state queries from agents (requests, whether they waited or not)",
            desired_fetches.clone(),
        );
        registry.register(
            "desired_waits",
            "Desired-state queries that waited for a change (agents' long-polls)",
            desired_waits.clone(),
        );
        registry.register(
            "fences",
            "Fence method runs by result (ok: the node was confirmed off)",
            fences.clone(),
        );
        registry.register(
            "nodes_fence_failing",
            "Lost nodes whose automatic fence failed; it is retried with backoff",
            nodes_fence_failing.clone(),
        );
        registry.register("claims", "Claims by state", claims.clone());
        registry.register("nodes", "Nodes by status", nodes.clone());
        registry.register(
            "controller_ops",
            "Controller operations queued and in flight",
            ops.clone(),
        );
        registry.register(
            "claims_with_error",
            "Claims whose last step failed",
            claims_with_error.clone(),
        );
        registry.register(
            "claims_abnormal",
            "Claims whose plugin reports an abnormal volume condition",
            claims_abnormal.clone(),
        );
        registry.register(
            "claim_drifts",
            "Ready claims found unmounted or no longer backed by their volume, then repaired",
            claim_drifts.clone(),
        );
        registry.register(
            "claim_ready_seconds",
            "Time from claim to ready",
            claim_ready_seconds.clone(),
        );
        registry.register(
            "controller_op_seconds",
            "Time from queueing a controller operation to its outcome",
            op_seconds.clone(),
        );
        registry.register(
            "node_reports",
            "Reports received from node agents, by how they came: on the node channel, or in a request",
            node_reports.clone(),
        );
        let ages = ages::Ages::register(&mut registry);
        Self {
            registry,
            claims,
            nodes,
            ops,
            claims_with_error,
            claims_abnormal,
            claim_drifts,
            claim_ready_seconds,
            op_seconds,
            node_reports,
            op_wait_seconds,
            queue_depth,
            queue_oldest_seconds,
            fences,
            nodes_fence_failing,
            node_channels,
            heartbeats,
            desired_waits,
            desired_pushes,
            desired_fetches,
            read_catch_up_seconds,
            ages,
        }
    }
}

impl Metrics {
    /// Adds metrics made at each scrape by `collector` (the nodes' samples).
    pub fn collect(&mut self, collector: Box<dyn prometheus_client::collector::Collector>) {
        self.registry.register_collector(collector);
    }

    /// Counts a heartbeat that came on the node channel, or as a request.
    pub fn heartbeat(&self, channel: bool) {
        let via = if channel { "channel" } else { "request" }.to_owned();
        self.heartbeats.get_or_create(&ViaLabel { via }).inc();
    }

    /// Counts `n` reports that came on the node channel, or in a request.
    pub fn node_reports(&self, n: u64, channel: bool) {
        let via = if channel { "channel" } else { "request" }.to_owned();
        self.node_reports.get_or_create(&ViaLabel { via }).inc_by(n);
    }

    /// Observes how long an operation of `plugin` waited before it was handed out.
    pub fn op_waited(&self, plugin: &str, kind: &str, waited_ms: i64) {
        self.op_wait_seconds
            .get_or_create(&PluginKindLabel {
                plugin: plugin.to_owned(),
                kind: kind.to_owned(),
            })
            .observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// Counts a run of a fence method.
    pub fn fence(&self, ok: bool) {
        let state = if ok { "ok" } else { "failed" }.to_owned();
        self.fences.get_or_create(&StateLabel { state }).inc();
    }

    /// Refreshes the gauges from the store's counts and the controller operations waiting
    /// at `now`, and renders everything.
    pub fn render(
        &self,
        counts: &StateCounts,
        waiting: &[WaitingOps],
        now: i64,
    ) -> ApiResult<String> {
        let count_by =
            |rows: &[(String, i64)], family: &Family<StateLabel, Gauge>, all: &[&str]| {
                for s in all {
                    family
                        .get_or_create(&StateLabel {
                            state: (*s).to_owned(),
                        })
                        .set(0);
                }
                for (state, n) in rows {
                    family
                        .get_or_create(&StateLabel {
                            state: state.clone(),
                        })
                        .set(*n);
                }
            };
        let claim_states: Vec<_> = csivol_api::ClaimState::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        count_by(&counts.claims, &self.claims, &claim_states);
        let node_statuses: Vec<_> = csivol_api::NodeStatus::ALL
            .iter()
            .map(|s| s.as_str())
            .collect();
        count_by(&counts.nodes, &self.nodes, &node_statuses);
        self.nodes_fence_failing.set(counts.nodes_fence_failing);
        count_by(&counts.ops, &self.ops, &["queued", "in_flight"]);
        self.queue_gauges(waiting, now);
        self.ages.refresh(counts, now);
        self.claims_with_error.set(counts.claims_with_error);
        self.claims_abnormal.set(counts.claims_abnormal);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).map_err(|e| {
            super::error::ApiError::internal(format!("failed to render metrics: {e}"))
        })?;
        Ok(out)
    }

    /// Every plugin's queue depth by kind and its oldest wait, from the operations due at
    /// `now`; the series of a queue that emptied go, as a scraper reads a series that is
    /// not there as none.
    fn queue_gauges(&self, waiting: &[WaitingOps], now: i64) {
        self.queue_depth.clear();
        self.queue_oldest_seconds.clear();
        let mut oldest: std::collections::BTreeMap<&str, i64> = Default::default();
        for w in waiting.iter().filter(|w| w.due) {
            let o = oldest.entry(&w.plugin).or_insert(w.since);
            *o = (*o).min(w.since);
            self.queue_depth
                .get_or_create(&PluginKindLabel {
                    plugin: w.plugin.clone(),
                    kind: w.kind.clone(),
                })
                .set(i64::from(w.count));
        }
        for (plugin, since) in oldest {
            self.queue_oldest_seconds
                .get_or_create(&PluginLabel {
                    plugin: plugin.to_owned(),
                })
                .set((now - since).max(0) as f64 / 1000.0);
        }
    }
}
