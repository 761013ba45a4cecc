//! `csivol-hostpath`: a spec-following CSI plugin over directories and bind mounts, with
//! fault injection, for csivol's dev mode, tests, benchmarks and demos.
//!
//! Dev mode, the tests and the benchmark run it as a program of its own (`main.rs`).

mod faults;
mod loopdev;
mod mounts;
mod service;
mod store;
mod topology;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Parser;
use csivol_csi::CsiEndpoint;
use csivol_csi::csi::v1 as csi;
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;

use crate::faults::{DelaySpec, FailSpec, Faults, HoldSpec};
use crate::mounts::MountMode;
pub use crate::service::NodeShape;
use crate::service::{Config, Expansion, Feature, Features, Plugin, Service};
use crate::store::Backend;

/// How long calls in flight may take to finish after SIGTERM or SIGINT.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// csivol's reference CSI plugin: volumes are directories (block volumes: image files on
/// loop devices), staging and publishing are bind mounts. Serves the Identity, Controller
/// and Node services on one endpoint.
///
/// Every optional capability is on unless `--disable`d, so that tests can cover plugins
/// without it; topology is on only with `--topology`.
#[derive(Debug, Clone, Parser)]
#[command(name = "csivol-hostpath", version)]
pub struct Args {
    /// Where to listen: `unix:///path/to/plugin.sock` (a stale socket file is replaced).
    #[arg(long)]
    pub endpoint: String,
    /// This node's id, reported by NodeGetInfo.
    #[arg(long)]
    pub node_id: String,
    /// Directory for this instance's state (`node/`, one file per volume; `calls.jsonl`).
    #[arg(long)]
    pub state_dir: PathBuf,
    /// The storage backend, shared by every plugin instance of one simulated cluster:
    /// volume data, volume records and attachments. Defaults to `<state-dir>/backend`.
    #[arg(long)]
    pub backend_dir: Option<PathBuf>,
    /// Most volumes that may be controller-published to this node (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_volumes_per_node: u32,
    /// `bind`: real bind mounts; `none`: directories and marker files only.
    #[arg(long, value_enum, default_value = "bind")]
    pub mount: MountMode,
    /// Do not advertise PUBLISH_UNPUBLISH_VOLUME (a node-only plugin).
    #[arg(long)]
    pub no_controller: bool,
    /// Do not advertise STAGE_UNSTAGE_VOLUME: publish bind-mounts the volume directly.
    #[arg(long)]
    pub no_stage: bool,
    /// What staging and publishing make on the node, as real plugins differ:
    /// `stage-mount` (the volume mounted at the staging path, the target bound from it),
    /// `stage-nothing` (nothing at the staging path, the plugin's own directory bound at
    /// the target, as the Kubernetes reference driver does), `publish-subdir` (the target
    /// bound from a directory inside the staging), `stage-device` (a block volume's
    /// device bound onto a file inside the staging directory, and the target bound from
    /// it).
    #[arg(long, value_enum, default_value = "stage-mount")]
    pub node_shape: NodeShape,
    /// Skip fsync on state writes: they stay atomic against a crash of the plugin, but not
    /// of the machine. For benchmarks.
    #[arg(long)]
    pub no_fsync: bool,
    /// Fail calls: `RPC=CODE[:COUNT]`, e.g. `NodeStageVolume=UNAVAILABLE:2` fails the first
    /// two calls (every call without COUNT). Repeatable.
    #[arg(long = "fail", value_name = "RPC=CODE[:COUNT]")]
    pub fail: Vec<FailSpec>,
    /// Delay calls: `RPC=DURATION`, e.g. `NodePublishVolume=2s`. Repeatable.
    #[arg(long = "delay", value_name = "RPC=DURATION")]
    pub delay: Vec<DelaySpec>,
    /// Hold calls until a file exists: `RPC=FILE`, e.g. `CreateVolume=/tmp/go`. Repeatable.
    #[arg(long = "hold", value_name = "RPC=FILE")]
    pub hold: Vec<HoldSpec>,
    /// A fault: answer NodePublishVolume with success without mounting anything or
    /// creating the target, as some test drivers do. The caller must not take that for a
    /// ready volume.
    #[arg(long)]
    pub publish_without_mount: bool,
    /// Leave out an optional capability: its calls are refused with UNIMPLEMENTED (or, for
    /// `block`, `snapshots` and `clone-volume`, the requests that need it with
    /// INVALID_ARGUMENT), as the spec asks of a plugin without it. Repeatable.
    #[arg(long = "disable", value_enum, value_name = "CAPABILITY")]
    pub disable: Vec<Feature>,
    /// This node's topology segment, `KEY=VALUE` (repeatable, e.g. `--topology zone=a`):
    /// reported by NodeGetInfo, with VOLUME_ACCESSIBILITY_CONSTRAINTS. CreateVolume then
    /// places volumes in the segments of the nodes sharing the backend.
    #[arg(long = "topology", value_name = "KEY=VALUE", value_parser = topology::parse_pair)]
    pub topology: Vec<(String, String)>,
    /// The storage pool's size in bytes: GetCapacity reports it less the capacity of every
    /// volume, and volumes that would not fit are refused (RESOURCE_EXHAUSTED). Without
    /// it, the pool is the free space of the backend's file system.
    #[arg(long, value_name = "BYTES")]
    pub capacity: Option<u64>,
    /// What GetCapacity reports at most for a segment, `KEY=VALUE:BYTES` (repeatable, e.g.
    /// `--segment-capacity zone=b:1048576`): a storage system whose segments have pools of
    /// their own, for testing a caller's use of GetCapacity. Only GetCapacity's answer for
    /// a topology lying in the segment is lowered; the backend stays one.
    #[arg(long = "segment-capacity", value_name = "KEY=VALUE:BYTES", value_parser = topology::parse_segment_capacity)]
    pub segment_capacity: Vec<((String, String), u64)>,
    /// Whether volumes may be expanded while published (`online`) or only when no node
    /// has them (`offline`).
    #[arg(long, value_enum, default_value = "online")]
    pub expansion: Expansion,
    /// Snapshots (and group snapshots) are cut at once but ready to use only this long
    /// afterwards, as with a plugin that uploads them after cutting: until then
    /// CreateSnapshot, ListSnapshots and GetSnapshot report `ready_to_use: false`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "0s")]
    pub snapshot_ready_after: std::time::Duration,
    /// ListVolumes and ListSnapshots return at most this many entries a page, fewer than a
    /// caller's `max_entries` (which bounds a page only from above): a caller must page by
    /// `next_token`, never by counting (0: as many as the caller asks)
    #[arg(long, value_name = "N", default_value = "0")]
    pub list_page: usize,
    /// A fault: answer the first COUNT ListSnapshots calls that carry a `starting_token`
    /// with ABORTED, as a plugin whose token went stale does (the spec has the caller
    /// start the listing again)
    #[arg(long, value_name = "COUNT", default_value = "0")]
    pub stale_snapshot_tokens: u32,
}

/// Serves the plugin until SIGTERM or SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let socket = match args.endpoint.parse::<CsiEndpoint>()? {
        CsiEndpoint::Unix(path) => path,
        CsiEndpoint::Tcp(_) => {
            bail!("csivol-hostpath listens on unix sockets only: use --endpoint unix:///path.sock")
        }
    };
    if args.node_id.is_empty() {
        bail!("--node-id must not be empty");
    }
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("failed to create state dir {}", args.state_dir.display()))?;
    let backend_dir = args
        .backend_dir
        .clone()
        .unwrap_or_else(|| args.state_dir.join("backend"));
    let backend = Backend::open(backend_dir.clone(), !args.no_fsync)
        .with_context(|| format!("failed to open backend dir {}", backend_dir.display()))?;
    let cfg = Config {
        node_id: args.node_id.clone(),
        mount: args.mount,
        stage: !args.no_stage,
        shape: args.node_shape,
        controller_publish: !args.no_controller,
        max_volumes_per_node: args.max_volumes_per_node,
        fsync: !args.no_fsync,
        publish_without_mount: args.publish_without_mount,
        features: Features::without(&args.disable),
        topology: args.topology.iter().cloned().collect(),
        capacity: args
            .capacity
            .map(|c| i64::try_from(c).context("--capacity is too large"))
            .transpose()?,
        segment_capacity: args
            .segment_capacity
            .iter()
            .map(|((k, v), bytes)| {
                let bytes = i64::try_from(*bytes).context("--segment-capacity is too large")?;
                Ok(([(k.clone(), v.clone())].into_iter().collect(), bytes))
            })
            .collect::<anyhow::Result<_>>()?,
        expansion: args.expansion,
        snapshot_ready_after: args.snapshot_ready_after,
        list_page: args.list_page,
        stale_snapshot_tokens: Arc::new(args.stale_snapshot_tokens.into()),
    };
    let plugin = Plugin::new(
        cfg,
        backend,
        &args.state_dir,
        Faults::new(&args.fail, &args.delay, &args.hold),
    )
    .with_context(|| format!("failed to load state from {}", args.state_dir.display()))?;
    let listener = bind(&socket).await?;
    tracing::info!(endpoint = args.endpoint, node_id = args.node_id, mount = ?args.mount, "csivol-hostpath serving");

    let service = Service(Arc::new(plugin));
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tonic::transport::Server::builder()
        .add_service(csi::identity_server::IdentityServer::new(service.clone()))
        .add_service(csi::controller_server::ControllerServer::new(
            service.clone(),
        ))
        .add_service(csi::group_controller_server::GroupControllerServer::new(
            service.clone(),
        ))
        .add_service(csi::node_server::NodeServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
            shutdown_signal().await;
            let _ = stopping_tx.send(());
        });
    // Graceful shutdown waits for clients to close their connections, and a CO keeps its
    // connection open; so calls in flight get a grace period, then the plugin exits.
    let grace = async {
        let _ = stopping_rx.await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        served = server => served,
        () = grace => Ok(()),
    };
    let _ = std::fs::remove_file(&socket);
    served.context("gRPC server failed")?;
    tracing::info!("csivol-hostpath stopped");
    Ok(())
}

/// Binds the socket, replacing a stale socket file but never one a live plugin serves.
async fn bind(socket: &std::path::Path) -> anyhow::Result<UnixListener> {
    if socket.exists() {
        if tokio::net::UnixStream::connect(socket).await.is_ok() {
            bail!(
                "another process is serving on {}; stop it or choose another --endpoint",
                socket.display()
            );
        }
        std::fs::remove_file(socket)
            .with_context(|| format!("failed to remove stale socket {}", socket.display()))?;
    }
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
    }
    UnixListener::bind(socket).with_context(|| format!("failed to listen on {}", socket.display()))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // Without signal handlers the plugin still stops when killed; it just cannot
        // remove its socket file first.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
