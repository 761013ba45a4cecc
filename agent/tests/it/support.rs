//! Support for the node agent's tests: a real `csivol-hostpath` process, the agent's core
//! driven with desired states, and builders for those states.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use csivol_agent::{Core, CoreConfig, PluginSpec};
use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};
use csivol_api::{
    DesiredPublish, DesiredState, DesiredUnpublish, DesiredUnstage, NodeVolume, Report,
};
use csivol_csi::CsiEndpoint;
use csivol_csi::csi::v1 as csi;
use csivol_tests::{Proc, TestDir, bin_path};
use serde_json::Value;
use tokio::sync::mpsc;

/// How long a test waits for something the agent should do promptly.
pub const WAIT: Duration = Duration::from_secs(30);

/// A running `csivol-hostpath`.
pub struct Hostpath {
    proc: Proc,
    pub socket: PathBuf,
    pub state_dir: PathBuf,
    pub node_id: String,
    backend: PathBuf,
    log: PathBuf,
    base_args: Vec<String>,
}

impl Hostpath {
    /// Starts `csivol-hostpath` named `name` in `dir` (its backend in `dir/backend`, shared
    /// by every instance of the test), with `extra` flags. Does not wait for it: the agent
    /// waits for Probe, as it must for real plugins.
    pub fn start(dir: &TestDir, name: &str, extra: &[&str]) -> Self {
        let socket = dir.join(format!("{name}.sock"));
        let state_dir = dir.join(format!("{name}-state"));
        let backend = dir.join("backend");
        let base_args = vec![
            format!("--endpoint=unix://{}", socket.display()),
            format!("--node-id=csi-{name}"),
            format!("--state-dir={}", state_dir.display()),
            format!("--backend-dir={}", backend.display()),
        ];
        let log = dir.join(format!("{name}.log"));
        let proc = spawn(&base_args, extra, &log);
        Self {
            proc,
            socket,
            state_dir,
            node_id: format!("csi-{name}"),
            backend,
            log,
            base_args,
        }
    }

    /// Kills the plugin (SIGKILL) and starts it again with other `extra` flags (its state
    /// survives: its per-volume `node/` files and the backend).
    pub fn restart(&mut self, extra: &[&str]) {
        self.proc.kill();
        self.proc = spawn(&self.base_args, extra, &self.log);
    }

    pub fn spec(&self, id: &str) -> PluginSpec {
        format!("{id}=unix://{}", self.socket.display())
            .parse()
            .unwrap()
    }

    fn connection(&self) -> csivol_csi::PluginConnection {
        CsiEndpoint::Unix(self.socket.clone()).connection(Duration::from_secs(10))
    }

    async fn wait_ready(&self) {
        let mut identity = csi::identity_client::IdentityClient::new(self.connection());
        let deadline = Instant::now() + WAIT;
        while identity.probe(csi::ProbeRequest {}).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "plugin did not answer Probe: {}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Creates a volume through the plugin's controller, as an operator's storage would.
    pub async fn create(&self, name: &str) -> Vol {
        self.wait_ready().await;
        let mut controller = csi::controller_client::ControllerClient::new(self.connection());
        let v = controller
            .create_volume(csi::CreateVolumeRequest {
                name: name.into(),
                capacity_range: Some(csi::CapacityRange {
                    required_bytes: 1 << 20,
                    limit_bytes: 0,
                }),
                volume_capabilities: vec![csi::VolumeCapability::from(&capability())],
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .volume
            .unwrap();
        Vol {
            name: name.into(),
            plugin: "hp".into(),
            external_id: v.volume_id,
            context: v.volume_context.into_iter().collect(),
            publish_context: BTreeMap::new(),
        }
    }

    /// ControllerPublishVolume to this plugin's node, as the controller host would.
    pub async fn attach(&self, vol: &mut Vol) {
        let mut controller = csi::controller_client::ControllerClient::new(self.connection());
        let r = controller
            .controller_publish_volume(csi::ControllerPublishVolumeRequest {
                volume_id: vol.external_id.clone(),
                node_id: self.node_id.clone(),
                volume_capability: Some(csi::VolumeCapability::from(&capability())),
                volume_context: vol.context.clone().into_iter().collect(),
                ..Default::default()
            })
            .await
            .unwrap();
        vol.publish_context = r.into_inner().publish_context.into_iter().collect();
    }

    /// A volume created and controller-published to this node.
    pub async fn attached(&self, name: &str) -> Vol {
        let mut v = self.create(name).await;
        self.attach(&mut v).await;
        v
    }

    /// Every call the plugin logged, in order.
    pub fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.state_dir.join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// How many calls of `rpc` ended with `code`.
    pub fn count(&self, rpc: &str, code: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c["rpc"] == rpc && c["code"] == code)
            .count()
    }

    /// The reference plugin refuses lifecycle violations with these codes: a passing test
    /// must never trigger them.
    pub fn assert_no_lifecycle_violation(&self) {
        let bad: Vec<_> = self
            .calls()
            .into_iter()
            .filter(|c| c["code"] == "FAILED_PRECONDITION" || c["code"] == "ALREADY_EXISTS")
            .collect();
        assert!(
            bad.is_empty(),
            "the plugin caught lifecycle violations: {bad:#?}\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Where the plugin keeps a volume's data.
    pub fn data_dir(&self, vol: &Vol) -> PathBuf {
        self.backend.join("data").join(&vol.external_id)
    }
}

fn spawn(base: &[String], extra: &[&str], log: &Path) -> Proc {
    let mut cmd = Command::new(bin_path("csivol-hostpath"));
    cmd.args(base).args(extra).env("RUST_LOG", "info");
    Proc::spawn("csivol-hostpath", cmd, log)
}

pub fn capability() -> VolumeCapability {
    VolumeCapability {
        access_type: AccessType::FileSystem {
            fs_type: String::new(),
            mount_flags: vec![],
        },
        access_mode: AccessMode::SingleNodeMultiWriter,
    }
}

/// A volume as the server describes it to the node.
#[derive(Clone, Debug)]
pub struct Vol {
    pub name: String,
    pub plugin: String,
    pub external_id: String,
    pub context: BTreeMap<String, String>,
    pub publish_context: BTreeMap<String, String>,
}

impl Vol {
    pub fn publish(&self, alloc: &str) -> DesiredPublish {
        DesiredPublish {
            alloc: alloc.into(),
            read_only: false,
            mount: Default::default(),
            volume: NodeVolume {
                volume: self.name.clone(),
                plugin: self.plugin.clone(),
                external_id: self.external_id.clone(),
                capability: capability(),
                context: self.context.clone(),
                secrets: BTreeMap::new(),
                publish_context: self.publish_context.clone(),
            },
        }
    }

    pub fn unpublish(&self, alloc: &str) -> DesiredUnpublish {
        DesiredUnpublish {
            volume: self.name.clone(),
            alloc: alloc.into(),
            plugin: self.plugin.clone(),
            external_id: self.external_id.clone(),
        }
    }

    pub fn unstage(&self) -> DesiredUnstage {
        DesiredUnstage {
            volume: self.name.clone(),
            plugin: self.plugin.clone(),
            external_id: self.external_id.clone(),
        }
    }
}

/// A desired state; the index only grows, as the server's does.
pub fn desired(
    publish: Vec<DesiredPublish>,
    unpublish: Vec<DesiredUnpublish>,
    unstage: Vec<DesiredUnstage>,
) -> DesiredState {
    static INDEX: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    DesiredState {
        index: INDEX.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
        status: None,
        publish,
        unpublish,
        unstage,
        // Fields other tests do not use (controller operations, expansions) stay empty.
        ..DesiredState::default()
    }
}

/// A core config for tests: fast retries, the given plugins.
pub fn config(dir: &TestDir, plugins: Vec<PluginSpec>) -> CoreConfig {
    let mut cfg = CoreConfig::new(dir.join("agent"), plugins);
    cfg.retry.base = Duration::from_millis(50);
    cfg.retry.max = Duration::from_millis(500);
    cfg.plugin_wait_timeout = WAIT;
    cfg
}

/// The agent's core, driven directly, with every report it produced.
pub struct Agent {
    pub core: Core,
    reports: mpsc::UnboundedReceiver<Report>,
    pub seen: Vec<Report>,
}

impl Agent {
    pub async fn start(cfg: CoreConfig) -> Self {
        // `RUST_LOG=csivol_agent=debug cargo test ...` shows what the agent did.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
            )
            .try_init();
        let (core, reports) = tokio::time::timeout(WAIT, Core::start(cfg))
            .await
            .expect("the core started in time")
            .expect("the core started");
        Self {
            core,
            reports,
            seen: Vec::new(),
        }
    }

    /// Waits for a report matching `pred` (seen before or arriving now) and returns it.
    pub async fn wait(&mut self, what: &str, pred: impl Fn(&Report) -> bool) -> Report {
        let deadline = tokio::time::Instant::now() + WAIT;
        let mut checked = 0;
        loop {
            if let Some(r) = self.seen[checked..].iter().find(|r| pred(r)) {
                return r.clone();
            }
            checked = self.seen.len();
            match tokio::time::timeout_at(deadline, self.reports.recv()).await {
                Ok(Some(r)) => self.seen.push(r),
                Ok(None) => panic!("the core stopped while waiting for {what}"),
                Err(_) => panic!(
                    "timed out waiting for {what}; reports so far: {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Reports that arrived and were not looked at yet.
    pub fn drain(&mut self) -> Vec<Report> {
        let mut fresh = Vec::new();
        while let Ok(r) = self.reports.try_recv() {
            fresh.push(r);
        }
        self.seen.extend(fresh.iter().cloned());
        fresh
    }

    /// Forgets the reports seen so far, so the next waits look at new ones only.
    pub fn clear(&mut self) {
        while let Ok(r) = self.reports.try_recv() {
            self.seen.push(r);
        }
        self.seen.clear();
    }

    pub async fn published(&mut self, vol: &Vol, alloc: &str) -> PathBuf {
        let r = self
            .wait(&format!("{}/{alloc} published", vol.name), |r| {
                matches!(r, Report::Published { volume, alloc: a, .. } if *volume == vol.name && a == alloc)
            })
            .await;
        let Report::Published { target_path, .. } = r else {
            unreachable!()
        };
        PathBuf::from(target_path)
    }

    pub async fn unpublished(&mut self, vol: &Vol, alloc: &str) {
        self.wait(&format!("{}/{alloc} unpublished", vol.name), |r| {
            matches!(r, Report::Unpublished { volume, alloc: a } if *volume == vol.name && a == alloc)
        })
        .await;
    }

    pub async fn unstaged(&mut self, vol: &Vol) {
        self.wait(
            &format!("{} unstaged", vol.name),
            |r| matches!(r, Report::Unstaged { volume } if *volume == vol.name),
        )
        .await;
    }

    /// A claim error for `vol`/`alloc`, final or not.
    pub async fn claim_error(
        &mut self,
        vol: &Vol,
        alloc: &str,
        is_final: bool,
    ) -> csivol_api::PluginError {
        let r = self
            .wait(
                &format!("a claim error (final: {is_final}) for {}/{alloc}", vol.name),
                |r| {
                    matches!(r, Report::ClaimError { volume, alloc: a, error }
                        if *volume == vol.name && a == alloc && error.is_final == is_final)
                },
            )
            .await;
        let Report::ClaimError { error, .. } = r else {
            unreachable!()
        };
        error
    }

    /// Drops the core as a crash would (mid-way through whatever it does), returning the
    /// reports it made.
    pub fn crash(self) -> Vec<Report> {
        let Self {
            core,
            mut reports,
            mut seen,
        } = self;
        drop(core);
        while let Ok(r) = reports.try_recv() {
            seen.push(r);
        }
        seen
    }
}
