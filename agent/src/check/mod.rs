//! `csivol-agent check`: one safe round trip through a plugin before trusting it, on a
//! scratch volume the check creates and deletes, through the agent's own plugin calls:
//! CreateVolume (where offered), ControllerPublishVolume (where needed), NodeStageVolume
//! (where offered), NodePublishVolume, data written and read back through the target, and
//! all of it taken down again; each call made twice, for idempotency. It prints what the
//! plugin is and can do, the shape it stages and publishes in, which readiness check the
//! agent will apply and whether it passes, the time each call took, and every departure
//! from the spec it met (`findings`). It exits non-zero when one would hurt csivol.

mod findings;
mod mount_group;
mod report;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_api::domain::{AccessMode, AccessType, VolumeCapability};
use csivol_api::{
    ControllerOp, ControllerOpKind, DesiredPublish, NodeVolume, Report, TopologyRequest,
};
use csivol_csi::convert::code_name;
use csivol_rules::agent::observed::Observation;
use csivol_rules::agent::records::{PublicationRecord, PublishState, StageState, StagingRecord};
use csivol_rules::agent::verify::Checks as _;
use serde::Serialize;

use self::findings::{Call, Departure, Purpose, Seen, Severity, departures};
use crate::config::{CoreConfig, PluginSpec, ReadyCheck, parse_label};
use crate::mounts::{Checker, Judge};
use crate::plugin::controller::ControllerPlugin;
use crate::plugin::{CallError, NodePlugin, Plugins};

/// `csivol-agent check` flags.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The plugin to check, as `run --plugin` names it: `ID=unix:///path.sock` (or
    /// `tcp://host:port`). Its controller is reached on the same endpoint when it
    /// advertises one.
    #[arg(long, value_name = "ID=ENDPOINT")]
    pub plugin: PluginSpec,
    /// The agent's data dir (`run --data-dir`): the scratch volume's staging path and
    /// target go in a directory of their own below it, where the plugin sees the agent's
    /// paths, and it is removed afterwards.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/csivol")]
    pub data_dir: PathBuf,
    /// Check a raw block volume instead of a mounted file system.
    #[arg(long)]
    pub block: bool,
    /// The scratch volume's size in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub capacity: u64,
    /// A CreateVolume parameter, `KEY=VALUE` (repeatable), as a volume spec's
    /// `parameters` would give it.
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub parameters: Vec<(String, String)>,
    /// For a plugin that cannot create volumes (no CREATE_DELETE_VOLUME): the plugin's id
    /// of an existing scratch volume, published and taken down, never deleted. Its data is
    /// overwritten.
    #[arg(long, value_name = "ID")]
    pub volume_id: Option<String>,
    /// The readiness check the agent will apply to the plugin (`run --ready-check`).
    #[arg(long, value_enum, default_value = "mount")]
    pub ready_check: ReadyCheck,
    /// How long the plugin may take to answer Probe, and each call.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// `text`, or `json` (one object on stdout).
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Format,
    /// Where the plugin has VOLUME_MOUNT_GROUP: the group (a gid) the scratch volume is
    /// mounted with, and the uid and gid of the process that makes a file through it.
    #[arg(long, value_name = "GID", default_value_t = 4242)]
    pub mount_group: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// How long a published target may take to pass its check: a plugin's NodePublishVolume
/// is done when it returns, but a mount may take a moment to show.
const READY_WAIT: Duration = Duration::from_secs(5);

/// What the check found, as `-o json` prints it.
#[derive(Debug, Serialize)]
struct Outcome {
    plugin: String,
    endpoint: String,
    name: String,
    version: String,
    capabilities: csivol_api::domain::PluginCapabilities,
    controller: Option<csivol_api::domain::ControllerCapabilities>,
    node: csivol_api::domain::NodeCapabilities,
    node_info: csivol_api::domain::NodeInfo,
    access: &'static str,
    /// The scratch volume, as the plugin names it.
    volume: Option<String>,
    calls: Vec<Call>,
    /// What the plugin made at the staging path and at the target, in a word each (as
    /// `csivol plugin show` says it), then in full.
    shape: Option<csivol_api::ObservedShape>,
    staging: Option<Observation>,
    target: Option<Observation>,
    ready_check: &'static str,
    ready: Option<Verdict>,
    data: Option<Verdict>,
    /// Where the plugin has VOLUME_MOUNT_GROUP: whether a process of the group (and no
    /// other) made a file through the target mounted with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    mount_group: Option<Verdict>,
    departures: Vec<Departure>,
    /// No departure that would hurt csivol.
    ok: bool,
}

#[derive(Debug, Serialize)]
struct Verdict {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    why: Option<String>,
}

impl From<&Result<(), String>> for Verdict {
    fn from(r: &Result<(), String>) -> Self {
        Self {
            ok: r.is_ok(),
            why: r.as_ref().err().cloned(),
        }
    }
}

/// The calls of the round trip, timed and recorded.
#[derive(Default)]
struct Trip {
    calls: Vec<Call>,
}

impl Trip {
    async fn call<T>(
        &mut self,
        rpc: &'static str,
        purpose: Purpose,
        f: impl Future<Output = Result<T, CallError>>,
    ) -> Option<T> {
        let started = Instant::now();
        let r = f.await;
        let ms = started.elapsed().as_millis() as u64;
        let (code, message, value) = match r {
            Ok(v) => (None, String::new(), Some(v)),
            Err(e) => (Some(code_name(e.code).to_owned()), e.message, None),
        };
        self.calls.push(Call {
            rpc,
            purpose,
            code,
            message,
            ms,
        });
        value
    }

    /// The call, then the same call again: both recorded; the first one's answer.
    async fn twice<T, F, Fut>(&mut self, rpc: &'static str, mut f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, CallError>>,
    {
        let first = self.call(rpc, Purpose::First, f()).await?;
        self.call(rpc, Purpose::Again, f()).await;
        Some(first)
    }
}

/// Runs the check; `Ok(false)` when a departure would hurt csivol.
pub async fn run(args: CheckArgs) -> anyhow::Result<bool> {
    let id = args.plugin.id.clone();
    let (cfg, node, controller) = connect(&args).await?;
    let creates = controller
        .as_ref()
        .is_some_and(|c| c.capabilities.create_delete_volume);
    if args.volume_id.is_none() && !creates {
        bail!(
            "plugin `{id}` cannot create volumes (no controller with CREATE_DELETE_VOLUME), so the \
             check has no scratch volume of its own\nhint: create one by the storage system's own \
             means and pass --volume-id ID (its data is overwritten)"
        );
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("failed to create {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.canonicalize()?;
    let tag = format!("{:08x}", rand::random::<u32>());
    let base = data_dir.join(format!("check-{tag}"));
    let mut outcome = Outcome {
        plugin: id.clone(),
        endpoint: args.plugin.endpoint.to_string(),
        name: node.identity.info.name.clone(),
        version: node.identity.info.vendor_version.clone(),
        capabilities: node.identity.capabilities,
        controller: controller.as_ref().map(|c| c.capabilities),
        node: node.capabilities,
        node_info: node.info.clone(),
        access: if args.block {
            "block device"
        } else {
            "file system"
        },
        volume: None,
        calls: Vec::new(),
        shape: None,
        staging: None,
        target: None,
        ready_check: args.ready_check.as_str(),
        ready: None,
        data: None,
        mount_group: None,
        departures: Vec::new(),
        ok: false,
    };
    let mut seen = Seen {
        ready_check: args.ready_check.as_str(),
        ..Seen::default()
    };
    let mut trip = Trip::default();
    let round = Round {
        args: &args,
        node: &node,
        controller: controller.as_ref(),
        cfg: &cfg,
        base: &base,
        name: format!("csivol-check-{tag}"),
        mount: mount_group::mount(&node.capabilities, args.block, args.mount_group),
    };
    round
        .run(&mut trip, &mut outcome, &mut seen)
        .await
        .context("the round trip could not be carried out")?;
    outcome.calls = trip.calls;
    outcome.shape = outcome.target.as_ref().map(|t| csivol_api::ObservedShape {
        staging: outcome.staging.as_ref().map(|s| s.kind().to_owned()),
        target: t.kind().to_owned(),
    });
    outcome.ready = seen.ready.as_ref().map(Verdict::from);
    outcome.data = seen.data.as_ref().map(Verdict::from);
    outcome.mount_group = seen.mount_group.as_ref().map(Verdict::from);
    outcome.departures = departures(&outcome.calls, &seen);
    outcome.ok = !outcome
        .departures
        .iter()
        .any(|d| d.severity == Severity::Hurts);
    match args.output {
        Format::Json => {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer_pretty(&mut out, &outcome)?;
            writeln!(out)?;
        }
        Format::Text => report::print_text(&outcome)?,
    }
    Ok(outcome.ok)
}

/// The plugin's node service, and its controller service where it has one, each connected
/// with the check's timeouts.
async fn connect(
    args: &CheckArgs,
) -> anyhow::Result<(CoreConfig, NodePlugin, Option<ControllerPlugin>)> {
    let id = &args.plugin.id;
    let mut cfg = CoreConfig::new(&args.data_dir, vec![args.plugin.clone()]);
    cfg.plugin_wait_timeout = args.timeout;
    cfg.node_call_timeout = args.timeout;
    cfg.controller_call_timeout = args.timeout;
    cfg.ready_check = args.ready_check;
    let mut plugins = Plugins::connect(&cfg)
        .await
        .with_context(|| format!("failed to reach plugin `{id}`"))?;
    let node = plugins.node.remove(id).expect("connected as a node plugin");
    let controller = if node.identity.capabilities.controller_service {
        let mut with = cfg.clone();
        with.plugins.clear();
        with.controllers = vec![args.plugin.clone()];
        let mut c = Plugins::connect(&with)
            .await
            .with_context(|| format!("failed to reach the controller of plugin `{id}`"))?;
        c.controller.remove(id)
    } else {
        None
    };
    Ok((cfg, node, controller))
}

/// One round trip's fixed parts.
struct Round<'a> {
    args: &'a CheckArgs,
    node: &'a NodePlugin,
    controller: Option<&'a ControllerPlugin>,
    cfg: &'a CoreConfig,
    /// The check's own directory below the data dir.
    base: &'a Path,
    /// The scratch volume's name (CreateVolume's `name`, csivol's volume name).
    name: String,
    /// What the scratch volume is staged and published with: a group where the plugin
    /// has VOLUME_MOUNT_GROUP.
    mount: csivol_api::ClaimMount,
}

impl Round<'_> {
    fn op(&self, kind: ControllerOpKind) -> ControllerOp {
        ControllerOp {
            id: 0,
            attempt: 0,
            plugin: self.args.plugin.id.clone(),
            not_before_ms: 0,
            kind,
        }
    }

    fn capability(&self) -> VolumeCapability {
        VolumeCapability {
            access_type: if self.args.block {
                AccessType::BlockDevice
            } else {
                AccessType::FileSystem {
                    fs_type: String::new(),
                    mount_flags: Vec::new(),
                }
            },
            access_mode: AccessMode::SingleNodeWriter,
        }
    }

    /// The scratch volume the round trip uses: the one given (`--volume-id`), or one
    /// CreateVolume made (asked twice: the same name is the same volume). Returns every
    /// volume the plugin created (two when the second CreateVolume made another), the
    /// volume context, and the volume's id.
    async fn scratch_volume(
        &self,
        trip: &mut Trip,
        cap: &VolumeCapability,
    ) -> (Vec<String>, BTreeMap<String, String>, Option<String>) {
        let mut created: Vec<String> = Vec::new();
        let mut context = Default::default();
        let external_id = match (&self.args.volume_id, self.controller) {
            (Some(id), _) => Some(id.clone()),
            (None, Some(c)) => {
                // Placed where this node reaches it, as csivol asks for a volume with a
                // topology.
                let topology_request = self
                    .node
                    .info
                    .accessible_topology
                    .clone()
                    .filter(|_| {
                        self.node
                            .identity
                            .capabilities
                            .volume_accessibility_constraints
                    })
                    .map(|t| TopologyRequest {
                        required: vec![t.clone()],
                        preferred: vec![t],
                    });
                let create = self.op(ControllerOpKind::Create {
                    volume: self.name.clone(),
                    capability: cap.clone(),
                    capacity_bytes: self.args.capacity,
                    parameters: self.args.parameters.iter().cloned().collect(),
                    secrets: Default::default(),
                    topology_request,
                    source: None,
                    mutable_parameters: Default::default(),
                    csi_name: None,
                });
                for purpose in [Purpose::First, Purpose::Again] {
                    let r = trip.call("CreateVolume", purpose, c.run(&create)).await;
                    let Some(Report::Created {
                        external_id,
                        context: ctx,
                        ..
                    }) = r
                    else {
                        break;
                    };
                    if !created.contains(&external_id) {
                        created.push(external_id);
                    }
                    context = ctx;
                }
                created.first().cloned()
            }
            (None, None) => None,
        };
        (created, context, external_id)
    }

    /// Brings the scratch volume up and takes it down again, whatever failed on the way
    /// up: nothing the check made is left behind (or it says what is).
    async fn run(
        &self,
        trip: &mut Trip,
        outcome: &mut Outcome,
        seen: &mut Seen,
    ) -> anyhow::Result<()> {
        let cap = self.capability();
        let node_id = self.node.info.node_id.clone();
        // The scratch volume: created (twice: the same name is the same volume), or given.
        let (created, context, external_id) = self.scratch_volume(trip, &cap).await;
        outcome.volume = external_id.clone();
        if let [first, second, ..] = &created[..] {
            seen.second_volume = Some((first.clone(), second.clone()));
        }
        let Some(external_id) = external_id else {
            return Ok(());
        };
        let volume = NodeVolume {
            volume: self.name.clone(),
            plugin: self.args.plugin.id.clone(),
            external_id: external_id.clone(),
            capability: cap.clone(),
            context: context.clone(),
            secrets: Default::default(),
            publish_context: Default::default(),
        };
        let publish_op = |readonly| {
            self.op(ControllerOpKind::Publish {
                volume: self.name.clone(),
                external_id: external_id.clone(),
                node_id: node_id.clone(),
                capability: cap.clone(),
                readonly,
                context: context.clone(),
                secrets: Default::default(),
            })
        };
        let attaches = self
            .controller
            .filter(|c| c.capabilities.publish_unpublish_volume);
        let mut attached = false;
        let mut volume = volume;
        let up = async {
            if let Some(c) = attaches {
                let op = publish_op(false);
                let r = trip.twice("ControllerPublishVolume", || c.run(&op)).await;
                let Some(Report::ControllerPublished {
                    publish_context, ..
                }) = r
                else {
                    return None;
                };
                attached = true;
                volume.publish_context = publish_context;
            }
            Some(())
        }
        .await;
        let staging = self.base.join("staging").join(&self.name);
        let target = self.base.join("targets").join(&self.name).join("check");
        let mut staged = false;
        let mut published = false;
        if up.is_some() {
            staged = self.node.stages();
            if staged {
                std::fs::create_dir_all(&staging)
                    .with_context(|| format!("failed to create {}", staging.display()))?;
                staged = trip
                    .twice("NodeStageVolume", || {
                        self.node.stage(&volume, &self.mount, &staging)
                    })
                    .await
                    .is_some();
                if staged {
                    outcome.staging = Some(Checker::read(self.base)?.observe(&staging, true));
                }
            }
            if staged || !self.node.stages() {
                published = self
                    .publish(
                        trip,
                        outcome,
                        seen,
                        &volume,
                        staged.then_some(&*staging),
                        &target,
                    )
                    .await?;
            }
        }
        // The unpublish of a volume that does not exist: its error table.
        let unknown = self.base.join("targets").join("no-such-volume");
        let ghost = format!("{}-no-such-volume", self.name);
        trip.call(
            "NodeUnpublishVolume",
            Purpose::UnknownVolume,
            self.node.unpublish(&ghost, &unknown),
        )
        .await;
        // Down again, for whatever came up.
        if published {
            trip.twice("NodeUnpublishVolume", || {
                self.node.unpublish(&external_id, &target)
            })
            .await;
            seen.left_at_target = left_at(&Checker::read(self.base)?.observe(&target, false));
        }
        if staged {
            trip.twice("NodeUnstageVolume", || {
                self.node.unstage(&external_id, &staging)
            })
            .await;
            seen.left_at_staging = left_at(&Checker::read(self.base)?.observe(&staging, true));
        }
        if let (true, Some(c)) = (attached, attaches) {
            let op = self.op(ControllerOpKind::Unpublish {
                volume: self.name.clone(),
                external_id: external_id.clone(),
                node_id: node_id.clone(),
                secrets: Default::default(),
            });
            trip.twice("ControllerUnpublishVolume", || c.run(&op)).await;
        }
        if let Some(c) = self.controller {
            for id in &created {
                let op = self.op(ControllerOpKind::Delete {
                    volume: self.name.clone(),
                    external_id: id.clone(),
                    secrets: Default::default(),
                });
                trip.twice("DeleteVolume", || c.run(&op)).await;
            }
        }
        remove_scratch(self.base);
        Ok(())
    }

    /// NodePublishVolume (twice), the readiness check the agent applies, and data through
    /// the target. Returns whether the plugin published.
    async fn publish(
        &self,
        trip: &mut Trip,
        outcome: &mut Outcome,
        seen: &mut Seen,
        volume: &NodeVolume,
        staging: Option<&Path>,
        target: &Path,
    ) -> anyhow::Result<bool> {
        // The CO creates the target's parent; the plugin the target itself. A block
        // volume's target is a file the agent creates empty under the default check, as
        // `run` does.
        let parent = target.parent().expect("below the check's directory");
        std::fs::create_dir_all(parent)
            .with_context(|| format!("failed to create {}", parent.display()))?;
        if self.args.block && self.args.ready_check == ReadyCheck::Mount {
            std::fs::File::create(target)
                .with_context(|| format!("failed to create {}", target.display()))?;
        }
        let desired = DesiredPublish {
            alloc: "check".into(),
            read_only: false,
            mount: self.mount.clone(),
            volume: volume.clone(),
        };
        let published = trip
            .twice("NodePublishVolume", || {
                self.node.publish(&desired, staging, target)
            })
            .await
            .is_some();
        if !published {
            return Ok(false);
        }
        // Judged as the agent judges a claim's target: against what the plugin made at the
        // staging path, which is recorded as it is in agent.db.
        let staging_record = staging.map(|path| StagingRecord {
            volume: self.name.clone(),
            plugin: self.args.plugin.id.clone(),
            external_id: volume.external_id.clone(),
            path: path.to_owned(),
            state: StageState::Staged,
            block: self.args.block,
            observed: outcome.staging.clone(),
        });
        let record = PublicationRecord {
            volume: self.name.clone(),
            alloc: "check".into(),
            plugin: self.args.plugin.id.clone(),
            external_id: volume.external_id.clone(),
            target: target.to_owned(),
            staging: staging.map(Path::to_owned),
            block: self.args.block,
            state: PublishState::Published,
            observed: None,
        };
        let until = Instant::now() + READY_WAIT;
        let verdict = loop {
            let checker = Checker::read(self.base)?;
            let judge = Judge {
                checker: Some(&checker),
                default_check: self.cfg.ready_check,
                plugin_checks: &self.cfg.plugin_ready_checks,
            };
            match judge.publication(
                &record,
                staging_record.as_ref(),
                std::slice::from_ref(&record),
            ) {
                Ok(made) => {
                    outcome.target = Some(made);
                    break Ok(());
                }
                Err(why) if Instant::now() >= until => {
                    outcome.target = Some(checker.observe(target, false));
                    break Err(why);
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        let ready = verdict.is_ok();
        seen.ready = Some(verdict);
        if ready {
            seen.data = Some(write_and_read(target, self.args.block));
            if let Some(gid) = self.mount.gid {
                seen.mount_group = Some(mount_group::write_as(target, gid));
            }
        }
        Ok(true)
    }
}

/// What is still at a path the plugin should have cleaned up, if anything of its making.
fn left_at(o: &Observation) -> Option<String> {
    (o.kind() != "none").then(|| report::describe(o))
}

/// Writes through the target and reads it back: a file in a file system, bytes on a
/// block device.
fn write_and_read(target: &Path, block: bool) -> Result<(), String> {
    let data = format!("csivol check {:016x}", rand::random::<u64>());
    let io = |what: &str, e: std::io::Error| format!("failed to {what} {}: {e}", target.display());
    if block {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(target)
            .map_err(|e| io("open", e))?;
        dev.write_all_at(data.as_bytes(), 0)
            .and_then(|()| dev.sync_all())
            .map_err(|e| io("write to", e))?;
        let mut back = vec![0; data.len()];
        dev.read_exact_at(&mut back, 0)
            .map_err(|e| io("read from", e))?;
        return (back == data.as_bytes()).then_some(()).ok_or_else(|| {
            format!(
                "read back other bytes than were written at {}",
                target.display()
            )
        });
    }
    let file = target.join(".csivol-check");
    std::fs::write(&file, &data).map_err(|e| io("write a file in", e))?;
    let back = std::fs::read_to_string(&file).map_err(|e| io("read a file in", e))?;
    let _ = std::fs::remove_file(&file);
    (back == data).then_some(()).ok_or_else(|| {
        format!(
            "read back another text than was written in {}",
            target.display()
        )
    })
}

/// Removes the check's own directory, unless something is still mounted below it (then
/// it is left for an operator, who is told).
fn remove_scratch(base: &Path) {
    let mounted = crate::mounts::mount_points()
        .map(|points| points.iter().any(|p| p.starts_with(base)))
        .unwrap_or(true);
    if mounted {
        eprintln!(
            "warning: something is still mounted below {}; it is left there for you to unmount",
            base.display()
        );
    } else if let Err(e) = std::fs::remove_dir_all(base) {
        eprintln!("warning: failed to remove {}: {e}", base.display());
    }
}
