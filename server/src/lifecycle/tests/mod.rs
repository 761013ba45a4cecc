//! In-process tests of the lifecycle, one file per job: each test runs the lifecycle's
//! functions as write requests of a real database writer (`Db`, a temporary SQLite file,
//! savepoints and group commit as in the server) and checks the rows and events they leave.
//! No HTTP, no child process.

mod adopt;
mod after_release;
mod claims;
mod desired;
mod events;
mod expand;
mod group_snapshots;
mod job_volumes;
mod late_create;
mod linger_slots;
mod lingers;
mod listing;
mod mounts;
mod namespaces;
mod nodes;
mod operator;
mod ops;
mod pool_holds;
mod pool_line;
mod pools;
mod quotas;
mod reports;
mod retries;
mod settle;
mod snapshots;
mod tokens;
mod topology;
mod volumes;

use std::path::PathBuf;
use std::sync::Arc;

use csivol_api::{
    self as api, AttachmentState, ClaimMode, ClaimRequest, ClaimState, RegisterRequest, Report,
    VolumeSpec,
};
use serde_json::json;

use super::Limits;
use crate::error::ApiResult;
use crate::metrics::Metrics;
use crate::model::{ClaimRow, OpRow};
use crate::store::Snapshot;
use crate::store::sqlite::db::Db;
use crate::store::sqlite::writer::WriteCtx;

/// The generation of the state reports are applied to, as the server would give it.
const GENERATION: &str = "00000000000000a1";

/// The plugin every test volume uses.
const PLUGIN: &str = "hp";

/// A fresh cluster state in a temporary directory, removed when dropped.
struct Env {
    db: Db,
    dir: PathBuf,
    limits: Limits,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Env {
    fn new() -> Self {
        Self::with_clock(crate::clock::Clock::wall())
    }

    /// A cluster state whose writes are stamped by `clock` (a test's held clock).
    fn with_clock(clock: crate::clock::Clock) -> Self {
        // Tests run in parallel in one process: a counter keeps their directories apart.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("csivol-lifecycle-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = Db::start(&dir.join("state.db"), clock).unwrap();
        Self {
            db,
            dir,
            limits: Limits {
                controller_concurrency: 8,
                controller_queue_warning: std::time::Duration::from_secs(60),
                served_last: Default::default(),
                metrics: Arc::new(Metrics::default()),
                request_memory: crate::defaults::DEFAULT_REQUEST_MEMORY,
                text: Default::default(),
                claims_per_claimer: csivol_api::limits::DEFAULT_CLAIMS_PER_CLAIMER,
                pool_hold_after: crate::limits::DEFAULT_POOL_HOLD_AFTER,
                events: Default::default(),
                mounts: Default::default(),
            },
        }
    }

    /// Runs `f` as one write request; its answer once committed (or rolled back).
    async fn write<T, F>(&self, mut f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnMut(&mut WriteCtx<'_>, &Limits) -> ApiResult<T> + Send + 'static,
    {
        let limits = self.limits.clone();
        self.db.write(move |ctx| f(ctx, &limits)).await
    }

    /// Reads the committed state.
    async fn read<T, F>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(&dyn Snapshot) -> ApiResult<T> + Send + 'static,
    {
        self.db.read(move |c| f(c)).await.unwrap()
    }

    /// Registers `node` running plugin `hp` (which announces a controller service); with
    /// `host`, the node hosts its controller (ControllerPublish needed); `published` are the
    /// (volume, alloc) it reports mounted.
    async fn register(&self, node: &str, host: bool, published: &[(&str, &str)]) -> bool {
        let req = registration(node, host, published);
        let n = node.to_owned();
        self.write(move |ctx, l| super::register_node(ctx, &n, &req, l))
            .await
            .unwrap()
    }

    async fn volume(&self, name: &str, access_mode: &str) {
        let mut spec = spec(access_mode);
        // One backend volume per name; `v`, the volume most tests use, keeps `ext-1`.
        if name != "v" {
            spec.external_id = format!("ext-{name}");
        }
        let n = name.to_owned();
        self.write(move |ctx, _| super::register_volume(ctx, &n, spec.clone(), "op"))
            .await
            .unwrap();
    }

    async fn claim_with(&self, volume: &str, req: ClaimRequest) -> ApiResult<api::Claim> {
        let v = volume.to_owned();
        self.write(move |ctx, l| {
            super::create_claim(
                ctx,
                &v,
                &req,
                &super::Claimant::operator("ci"),
                l,
                false,
                None,
            )
        })
        .await
        .map(|(c, _)| c)
    }

    async fn claim(
        &self,
        volume: &str,
        alloc: &str,
        node: &str,
        mode: ClaimMode,
    ) -> ApiResult<api::Claim> {
        self.claim_with(volume, ClaimRequest::new(alloc, node, mode))
            .await
    }

    async fn release(&self, volume: &str, alloc: &str) -> ApiResult<api::Claim> {
        let (v, a) = (volume.to_owned(), alloc.to_owned());
        self.write(move |ctx, _| {
            super::release_claim(ctx, &v, &a, &super::Claimant::operator("ci"))
        })
        .await
        .and_then(|released| released)
    }

    async fn report(&self, node: &str, reports: Vec<Report>) {
        let n = node.to_owned();
        self.write(move |ctx, l| {
            super::apply_reports(ctx, &n, reports.clone(), l, Some(GENERATION))
        })
        .await
        .unwrap();
    }

    async fn claim_row(&self, volume: &str, alloc: &str) -> Option<ClaimRow> {
        let (v, a) = (volume.to_owned(), alloc.to_owned());
        self.read(move |c| c.claim(&v, &a)).await
    }

    async fn claim_state(&self, volume: &str, alloc: &str) -> Option<ClaimState> {
        self.claim_row(volume, alloc).await.map(|c| c.state)
    }

    async fn attachment_state(&self, volume: &str, node: &str) -> Option<AttachmentState> {
        let (v, n) = (volume.to_owned(), node.to_owned());
        self.read(move |c| c.attachment(&v, &n))
            .await
            .map(|a| a.state)
    }

    /// Every queued operation as `kind volume node host attempt`, by id.
    async fn ops(&self) -> Vec<String> {
        let ops = self.db.read(crate::store::sqlite::every_op).await.unwrap();
        ops.into_iter()
            .map(|o| {
                format!(
                    "{} {} {} {} {}",
                    o.kind,
                    o.volume,
                    o.node.as_deref().unwrap_or("-"),
                    o.host.as_deref().unwrap_or("-"),
                    o.attempt
                )
            })
            .collect()
    }

    async fn ops_of(&self, host: &str) -> Vec<OpRow> {
        let h = host.to_owned();
        self.read(move |c| c.ops_of_host(&h)).await
    }

    /// The event log as `kind volume node alloc` lines, in order.
    async fn events(&self) -> Vec<String> {
        self.read(|c| {
            let events = c.events(0, &Default::default(), u32::MAX)?;
            let or = |v: Option<String>| v.unwrap_or_else(|| "-".into());
            Ok(events
                .into_iter()
                .map(|e| format!("{} {} {} {}", e.kind, or(e.volume), or(e.node), or(e.alloc)))
                .collect())
        })
        .await
    }

    /// Events of one kind, as [`Env::events`] lists them.
    /// The message of the latest event of `kind` on `node`.
    async fn last_message(&self, kind: &str, node: &str) -> String {
        let (kind, node) = (kind.to_owned(), node.to_owned());
        self.read(move |c| {
            let f = crate::store::EventFilter {
                node: Some(node.clone()),
                ..Default::default()
            };
            let events = c.events(0, &f, u32::MAX)?;
            Ok(events
                .into_iter()
                .rev()
                .find(|e| e.kind == kind)
                .unwrap_or_else(|| panic!("no `{kind}` event on node `{node}`"))
                .message)
        })
        .await
    }

    async fn events_of(&self, kind: &str) -> Vec<String> {
        self.events()
            .await
            .into_iter()
            .filter(|e| e.split(' ').next() == Some(kind))
            .collect()
    }

    /// A write claim of `v` by `alloc` on `node` taken to ready the way a node agent and a
    /// controller host take it: ControllerPublish by `node` (which hosts the controller),
    /// then the publish.
    async fn ready_claim(&self, volume: &str, alloc: &str, node: &str) {
        self.claim(volume, alloc, node, ClaimMode::Write)
            .await
            .unwrap();
        self.controller_published(node).await;
        assert_eq!(
            self.claim_state(volume, alloc).await,
            Some(ClaimState::Publishing)
        );
        self.report(node, vec![published(volume, alloc)]).await;
        assert_eq!(
            self.claim_state(volume, alloc).await,
            Some(ClaimState::Ready)
        );
    }

    /// Answers every publish operation assigned to `host` with success.
    async fn controller_published(&self, host: &str) {
        let reports = self
            .ops_of(host)
            .await
            .into_iter()
            .map(|o| Report::ControllerPublished {
                op: o.id as u64,
                attempt: o.attempt,
                publish_context: [("device".to_owned(), format!("/dev/{}", o.volume))].into(),
            })
            .collect();
        self.report(host, reports).await;
    }
}

fn registration(node: &str, host: bool, published: &[(&str, &str)]) -> RegisterRequest {
    let controller = host.then(|| {
        // Listing with the published nodes: the reconciliation tests send listings, which
        // the server compares only from a plugin that says where its volumes are published.
        json!({"create_delete_volume": true, "publish_unpublish_volume": true, "list_volumes": true,
               "list_volumes_published_nodes": true, "publish_readonly": false, "single_node_multi_writer": false})
    });
    let published: Vec<_> = published
        .iter()
        .map(|(v, a)| json!({"volume": v, "alloc": a}))
        .collect();
    serde_json::from_value(json!({
        "plugins": [{
            "id": PLUGIN,
            "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
            "capabilities": {"controller_service": true, "volume_accessibility_constraints": false},
            "node": {
                "info": {"node_id": format!("csi-{node}"), "max_volumes_per_node": 0},
                "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false,
                                 "volume_condition": false, "single_node_multi_writer": false}
            },
            "controller": controller,
        }],
        "published": published,
    }))
    .unwrap()
}

fn spec(access_mode: &str) -> VolumeSpec {
    serde_json::from_value(json!({
        "plugin": PLUGIN,
        "external_id": "ext-1",
        "access_mode": access_mode,
        "attachment": "file-system",
    }))
    .unwrap()
}

/// Node `n1` with a ready claim `a1` of volume `v`, attached through controller host `ctl`.
/// What `create_volume` is asked for in the tests: a 1 KiB single-node-writer file system
/// volume of plugin `hp`.
fn create_spec() -> csivol_api::CreateVolumeSpec {
    serde_json::from_value(serde_json::json!({
        "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
        "capacity_bytes": 1024,
    }))
    .unwrap()
}

async fn ready_node() -> Env {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    env.controller_published("ctl").await;
    env.report("n1", vec![published("v", "a1")]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
    env
}

fn published(volume: &str, alloc: &str) -> Report {
    Report::Published {
        volume: volume.to_owned(),
        alloc: alloc.to_owned(),
        target_path: format!("/targets/{volume}/{alloc}"),
        observed: None,
        ownership: None,
    }
}

fn plugin_error(code: &str, is_final: bool) -> api::PluginError {
    api::PluginError {
        code: code.to_owned(),
        message: "the plugin says no".to_owned(),
        is_final,
        next_retry_at_ms: (!is_final).then_some(4_102_444_800_000),
    }
}
