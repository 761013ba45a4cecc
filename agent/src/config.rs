//! The node agent's settings: flags, the optional TOML file they override, and defaults.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use csivol_api::validate_name;
use csivol_csi::CsiEndpoint;
use serde::Deserialize;

/// `csivol-agent run` flags. Each may also be set in the `--config` file; flags win.
#[derive(Debug, Default, clap::Args)]
pub struct NodeArgs {
    /// The server's URL, e.g. `https://10.0.0.1:7420`: plain `http://` only to a loopback
    /// address (127.0.0.0/8, ::1, localhost), no `USER@`; a bare `HOST:PORT` is https with
    /// --ca-cert, else plain HTTP on loopback only. Several servers of one cluster
    /// comma-separated or repeated, tried in turn when one cannot be reached (the
    /// self-fence clock runs only while none answers).
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub server: Vec<String>,
    /// The CA (PEM) that signed the server's certificate [default: the system's roots].
    #[arg(long, value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// This node's client certificate (PEM) for mutual TLS; it must name this node.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// This node's name, as claims name it.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Where the agent keeps `agent.db`, the staging paths and the target paths.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// File holding this node's token (`csivol token create --role node --node NAME`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A node plugin: csivol's id for it and its endpoint, `unix:///path.sock` or
    /// `tcp://host:port`. Repeatable.
    #[arg(long = "plugin", value_name = "ID=ENDPOINT")]
    pub plugins: Vec<PluginSpec>,
    /// Host this plugin's controller: run its ControllerPublish/Unpublish and
    /// Create/DeleteVolume calls for the server. Repeatable.
    #[arg(long = "controller", value_name = "ID=ENDPOINT")]
    pub controllers: Vec<PluginSpec>,
    /// Self-fence: after this long without reaching the server, unpublish and unstage
    /// every volume on this node (e.g. `5m`). Off by default.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub fence_after: Option<Duration>,
    /// How a published volume is checked ready: `mount` (the target is mounted from the
    /// volume, per `/proc/self/mountinfo`) or `exists` (the target exists; for plugins that
    /// do not mount, such as `csivol-hostpath --mount none`). `ID=CHECK` sets it for one
    /// plugin. Repeatable.
    #[arg(long, value_name = "[ID=]CHECK")]
    pub ready_check: Vec<ReadyCheckSetting>,
    /// When asked to stop (SIGTERM, SIGINT), unpublish and unstage every volume through its
    /// plugin first, recording each step, instead of leaving the mounts in place. Dev mode
    /// uses it; on a real node workloads outlive the agent, so it is off by default.
    #[arg(long)]
    pub take_down_on_stop: bool,
    /// A label reported at registration, e.g. `rack=4`, shown as the agent's own by `csivol
    /// node show`. The server never fences a node by what it says of itself: only a key a
    /// fence method lists in `trust_agent_labels` may select that method. Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// How often the node plugins' attach limits are read again with NodeGetInfo (at once,
    /// too, after a NodeStageVolume or ControllerPublishVolume answered RESOURCE_EXHAUSTED)
    /// [default: 5m].
    #[arg(long, value_parser = humantime::parse_duration)]
    pub node_limits_refresh: Option<Duration>,
    /// TOML file with these settings and tuning (`node_concurrency`, `node_call_timeout`,
    /// `controller_call_timeout`, `volume_ready_timeout`, `resync_interval`, ...).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Default most concurrent node calls per plugin.
pub const DEFAULT_NODE_CONCURRENCY: usize = 4;
/// Default most concurrent controller calls per plugin this agent hosts.
pub const DEFAULT_CONTROLLER_CONCURRENCY: usize = 4;
pub const DEFAULT_NODE_CALL_TIMEOUT: Duration = Duration::from_secs(120);
pub const DEFAULT_CONTROLLER_CALL_TIMEOUT: Duration = Duration::from_secs(60);
pub const DEFAULT_VOLUME_READY_TIMEOUT: Duration = Duration::from_secs(120);
pub const DEFAULT_RESYNC_INTERVAL: Duration = Duration::from_secs(30);
/// How often a controller host lists its plugin's volumes for the server's comparison
/// (plugins with LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES).
pub const DEFAULT_CONTROLLER_LIST_INTERVAL: Duration = Duration::from_secs(60);
/// How often the node plugins' attach limits are read again (NodeGetInfo): a storage
/// system's limit may change while the node runs (other attachments, another instance
/// type), as Kubernetes' CSINode allocatable now follows.
pub const DEFAULT_NODE_LIMITS_REFRESH: Duration = Duration::from_secs(300);
pub const DEFAULT_PLUGIN_WAIT_TIMEOUT: Duration = Duration::from_secs(120);
pub const DEFAULT_RETRY_BASE: Duration = Duration::from_millis(250);
pub const DEFAULT_RETRY_MAX: Duration = Duration::from_secs(30);

/// `ID=ENDPOINT`: csivol's id for a plugin and where it listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSpec {
    pub id: String,
    pub endpoint: CsiEndpoint,
}

impl FromStr for PluginSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (id, endpoint) = s.split_once('=').ok_or_else(|| {
            format!("`{s}`: expected ID=ENDPOINT, e.g. hostpath=unix:///run/csi/hostpath.sock")
        })?;
        validate_name("plugin", id)?;
        let endpoint = endpoint.parse::<CsiEndpoint>().map_err(|e| e.to_string())?;
        Ok(Self {
            id: id.to_owned(),
            endpoint,
        })
    }
}

impl fmt::Display for PluginSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.id, self.endpoint)
    }
}

/// `--label KEY=VALUE`.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{s}`: expected KEY=VALUE, e.g. rack=4")),
    }
}

/// How the agent decides that a published volume is ready for its workload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadyCheck {
    /// The target path is a mount point (per `/proc/self/mountinfo`); for block volumes,
    /// the target exists.
    #[default]
    Mount,
    /// The target path exists: for plugins that present volumes without mounting them,
    /// such as `csivol-hostpath --mount none`.
    Exists,
}

impl ReadyCheck {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mount => "mount",
            Self::Exists => "exists",
        }
    }
}

/// `--ready-check [ID=]CHECK`: the check for every plugin, or for the plugin `ID`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyCheckSetting {
    pub plugin: Option<String>,
    pub check: ReadyCheck,
}

impl FromStr for ReadyCheckSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (plugin, check) = match s.split_once('=') {
            Some((id, check)) => {
                validate_name("plugin", id)?;
                (Some(id.to_owned()), check)
            }
            None => (None, s),
        };
        let check = <ReadyCheck as clap::ValueEnum>::from_str(check, false).map_err(|_| {
            format!("`{s}`: expected `mount`, `exists`, or ID=mount|exists for one plugin")
        })?;
        Ok(Self { plugin, check })
    }
}

/// Exponential backoff with jitter for retried node calls and server requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: DEFAULT_RETRY_BASE,
            max: DEFAULT_RETRY_MAX,
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (1 for the first retry): the exponential
    /// step, half of it fixed and half random ("equal jitter"), so that retries of many
    /// volumes after one plugin hiccup do not arrive together.
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max);
        let half = exp / 2;
        let jitter = rand::random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter)
    }
}

/// What the node engine needs: everything but the server connection. Tests build one
/// directly with [`CoreConfig::new`].
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// Holds `agent.db`, the staging paths and the target paths.
    pub data_dir: PathBuf,
    /// Node plugins (`--plugin`).
    pub plugins: Vec<PluginSpec>,
    /// Controllers this agent hosts (`--controller`).
    pub controllers: Vec<PluginSpec>,
    pub node_concurrency: usize,
    pub controller_concurrency: usize,
    pub node_call_timeout: Duration,
    pub controller_call_timeout: Duration,
    pub volume_ready_timeout: Duration,
    pub resync_interval: Duration,
    /// Whether published volumes' usage is sampled (NodeGetVolumeStats at each resync and
    /// after each publish, where the plugin has GET_VOLUME_STATS); `volume_stats = false`
    /// turns it off (conditions are still checked where the plugin reports them).
    pub volume_stats: bool,
    /// How often a hosted controller's volumes are listed (`controller_list_interval`).
    pub controller_list_interval: Duration,
    /// How often the node plugins' attach limits are read again (`node_limits_refresh`).
    pub node_limits_refresh: Duration,
    /// How long to wait at start for each plugin to answer Probe.
    pub plugin_wait_timeout: Duration,
    /// The readiness check of plugins not in `plugin_ready_checks`.
    pub ready_check: ReadyCheck,
    /// Per plugin id: a node may run plugins that mount and plugins that do not.
    pub plugin_ready_checks: std::collections::BTreeMap<String, ReadyCheck>,
    pub retry: Backoff,
    /// Reported at registration (`--label`, `[labels]`): the agent's own labels, shown by
    /// the server apart from the ones an operator set.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl CoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>, plugins: Vec<PluginSpec>) -> Self {
        Self {
            data_dir: data_dir.into(),
            plugins,
            controllers: Vec::new(),
            node_concurrency: DEFAULT_NODE_CONCURRENCY,
            controller_concurrency: DEFAULT_CONTROLLER_CONCURRENCY,
            node_call_timeout: DEFAULT_NODE_CALL_TIMEOUT,
            controller_call_timeout: DEFAULT_CONTROLLER_CALL_TIMEOUT,
            volume_ready_timeout: DEFAULT_VOLUME_READY_TIMEOUT,
            resync_interval: DEFAULT_RESYNC_INTERVAL,
            volume_stats: true,
            controller_list_interval: DEFAULT_CONTROLLER_LIST_INTERVAL,
            node_limits_refresh: DEFAULT_NODE_LIMITS_REFRESH,
            plugin_wait_timeout: DEFAULT_PLUGIN_WAIT_TIMEOUT,
            ready_check: ReadyCheck::Mount,
            plugin_ready_checks: std::collections::BTreeMap::new(),
            retry: Backoff::default(),
            labels: std::collections::BTreeMap::new(),
        }
    }

    /// How the volumes of `plugin` are checked.
    pub fn ready_check_of(&self, plugin: &str) -> ReadyCheck {
        self.plugin_ready_checks
            .get(plugin)
            .copied()
            .unwrap_or(self.ready_check)
    }
}

/// Everything `csivol-agent run` runs with, flags merged over the config file.
#[derive(Clone, Debug)]
pub struct Settings {
    pub server: String,
    pub node: String,
    pub token_file: PathBuf,
    pub fence_after: Option<Duration>,
    /// The CA the server's certificate must chain to (else the system's roots).
    pub ca_cert: Option<PathBuf>,
    /// This node's client certificate and key, for a server with `--tls-client-ca`.
    pub tls_identity: Option<(PathBuf, PathBuf)>,
    pub core: CoreConfig,
}

/// The config file (`--config FILE`, TOML): the same settings as the flags, plus tuning.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    server: Option<String>,
    ca_cert: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    node: Option<String>,
    data_dir: Option<PathBuf>,
    token_file: Option<PathBuf>,
    #[serde(default)]
    plugins: Vec<String>,
    #[serde(default)]
    controllers: Vec<String>,
    #[serde(default, deserialize_with = "duration")]
    fence_after: Option<Duration>,
    ready_check: Option<ReadyCheck>,
    /// Per plugin id, e.g. `[plugin_ready_checks]` / `hostpath = "exists"`.
    #[serde(default)]
    plugin_ready_checks: std::collections::BTreeMap<String, ReadyCheck>,
    node_concurrency: Option<usize>,
    controller_concurrency: Option<usize>,
    #[serde(default, deserialize_with = "duration")]
    node_call_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    controller_call_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    volume_ready_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    resync_interval: Option<Duration>,
    volume_stats: Option<bool>,
    #[serde(default, deserialize_with = "duration")]
    controller_list_interval: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    node_limits_refresh: Option<Duration>,
    #[serde(default, deserialize_with = "duration")]
    plugin_wait_timeout: Option<Duration>,
    /// `[labels]` / `rack = "4"`.
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

/// Durations in the file are written as in the flags: `30s`, `2m`, `1h 30m`.
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("invalid duration `{s}`: {e}")))
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl Settings {
    /// Merges the flags over the config file (when given) over the defaults.
    pub fn load(args: &NodeArgs) -> Result<Self, ConfigError> {
        let mut file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let origin = |what: &str| match &args.config {
            Some(p) => format!("{what} in {}", p.display()),
            None => what.to_owned(),
        };
        let missing = |flag: &str| {
            ConfigError::Invalid(format!(
                "--{flag} is required (or `{}` in the --config file)",
                flag.replace('-', "_")
            ))
        };
        // A flag given empty (`--server "$SERVER"` with SERVER unset) is a mistake to say,
        // never a reason to take the file's server instead.
        let (server, from) = if args.server.is_empty() {
            let s = file.server.take().ok_or_else(|| missing("server"))?;
            (s, origin("`server`"))
        } else {
            (args.server.join(","), "--server".to_owned())
        };
        if csivol_client::addresses(&server).is_empty() {
            return Err(ConfigError::Invalid(format!(
                "{from} is empty: give the server's URL, e.g. https://10.0.0.1:7420"
            )));
        }
        let ca_cert = args.ca_cert.clone().or(file.ca_cert.take());
        // The certificate and its key come together, from the flags or from the file.
        let tls_identity = match (&args.tls_cert, &args.tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            _ => match (file.tls_cert.take(), file.tls_key.take()) {
                (Some(c), Some(k)) => Some((c, k)),
                (None, None) => None,
                _ => {
                    return Err(ConfigError::Invalid(format!(
                        "{} and `tls_key` go together: give both or neither",
                        origin("`tls_cert`")
                    )));
                }
            },
        };
        let node = args
            .node
            .clone()
            .or(file.node.take())
            .ok_or_else(|| missing("node"))?;
        validate_name("node", &node).map_err(ConfigError::Invalid)?;
        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir.take())
            .ok_or_else(|| missing("data-dir"))?;
        let token_file = args
            .token_file
            .clone()
            .or(file.token_file.take())
            .ok_or_else(|| missing("token-file"))?;
        let fence_after = args.fence_after.or(file.fence_after);
        let core = core_config(args, file, data_dir, &origin)?;
        if fence_after.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::Invalid(
                "--fence-after must be longer than zero".into(),
            ));
        }
        Ok(Self {
            server: server.trim_end_matches('/').to_owned(),
            node,
            token_file,
            fence_after,
            ca_cert,
            tls_identity,
            core,
        })
    }
}

/// The settings of the agent's work (its plugins and controllers, readiness checks,
/// concurrency and timeouts), the flags over the file; `origin` names a file setting in an
/// error.
fn core_config(
    args: &NodeArgs,
    file: FileConfig,
    data_dir: PathBuf,
    origin: &dyn Fn(&str) -> String,
) -> Result<CoreConfig, ConfigError> {
    let parse_specs = |list: &[String], what: &str| -> Result<Vec<PluginSpec>, ConfigError> {
        list.iter()
            .map(|s| {
                s.parse()
                    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", origin(what))))
            })
            .collect()
    };
    // Repeated flags replace the file's list rather than add to it, so a flag can
    // always say exactly what runs.
    let plugins = if args.plugins.is_empty() {
        parse_specs(&file.plugins, "plugins")?
    } else {
        args.plugins.clone()
    };
    let controllers = if args.controllers.is_empty() {
        parse_specs(&file.controllers, "controllers")?
    } else {
        args.controllers.clone()
    };
    if plugins.is_empty() && controllers.is_empty() {
        return Err(ConfigError::Invalid(
            "no plugin given: pass --plugin ID=unix:///path/to/plugin.sock (repeatable)".into(),
        ));
    }
    for list in [&plugins, &controllers] {
        for (i, p) in list.iter().enumerate() {
            if list[..i].iter().any(|q| q.id == p.id) {
                return Err(ConfigError::Invalid(format!(
                    "plugin `{}` is given twice with the same role",
                    p.id
                )));
            }
        }
    }
    let mut core = CoreConfig::new(data_dir, plugins);
    core.controllers = controllers;
    core.ready_check = file.ready_check.unwrap_or_default();
    core.plugin_ready_checks = file.plugin_ready_checks;
    core.labels = file.labels;
    core.labels.extend(args.labels.iter().cloned());
    for id in core.plugin_ready_checks.keys() {
        validate_name("plugin", id)
            .map_err(|e| ConfigError::Invalid(format!("{}: {e}", origin("plugin_ready_checks"))))?;
    }
    // Flags win over the file, the per-plugin ones over the general one.
    for s in &args.ready_check {
        match &s.plugin {
            Some(id) => {
                core.plugin_ready_checks.insert(id.clone(), s.check);
            }
            None => core.ready_check = s.check,
        }
    }
    let positive = |n: Option<usize>, what: &str, default: usize| match n {
        Some(0) => Err(ConfigError::Invalid(format!(
            "{} must be at least 1",
            origin(what)
        ))),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    core.node_concurrency = positive(
        file.node_concurrency,
        "node_concurrency",
        DEFAULT_NODE_CONCURRENCY,
    )?;
    core.controller_concurrency = positive(
        file.controller_concurrency,
        "controller_concurrency",
        DEFAULT_CONTROLLER_CONCURRENCY,
    )?;
    core.node_call_timeout = file.node_call_timeout.unwrap_or(DEFAULT_NODE_CALL_TIMEOUT);
    core.controller_call_timeout = file
        .controller_call_timeout
        .unwrap_or(DEFAULT_CONTROLLER_CALL_TIMEOUT);
    core.volume_ready_timeout = file
        .volume_ready_timeout
        .unwrap_or(DEFAULT_VOLUME_READY_TIMEOUT);
    core.resync_interval = file.resync_interval.unwrap_or(DEFAULT_RESYNC_INTERVAL);
    core.volume_stats = file.volume_stats.unwrap_or(true);
    core.controller_list_interval = file
        .controller_list_interval
        .unwrap_or(DEFAULT_CONTROLLER_LIST_INTERVAL);
    core.plugin_wait_timeout = file
        .plugin_wait_timeout
        .unwrap_or(DEFAULT_PLUGIN_WAIT_TIMEOUT);
    core.node_limits_refresh = args
        .node_limits_refresh
        .or(file.node_limits_refresh)
        .unwrap_or(DEFAULT_NODE_LIMITS_REFRESH);
    for (d, what) in [
        (core.node_call_timeout, "node_call_timeout"),
        (core.controller_call_timeout, "controller_call_timeout"),
        (core.volume_ready_timeout, "volume_ready_timeout"),
        (core.resync_interval, "resync_interval"),
        (core.controller_list_interval, "controller_list_interval"),
        (core.node_limits_refresh, "node_limits_refresh"),
    ] {
        if d.is_zero() {
            return Err(ConfigError::Invalid(format!(
                "{} must be longer than zero",
                origin(what)
            )));
        }
    }
    Ok(core)
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/agent.toml");
        let file = read_file(&path).expect("dist/agent.toml parses");
        assert_eq!(file.node.as_deref(), Some("node-1"));
        assert_eq!(file.fence_after, Some(Duration::from_secs(300)));
    }

    fn args(extra: &[&str]) -> NodeArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            node: NodeArgs,
        }
        let mut argv = vec!["node"];
        argv.extend(extra);
        Cli::try_parse_from(argv).unwrap().node
    }

    #[test]
    fn plugin_specs() {
        let p: PluginSpec = "hp=unix:///run/hp.sock".parse().unwrap();
        assert_eq!(p.id, "hp");
        assert_eq!(p.to_string(), "hp=unix:///run/hp.sock");
        assert!(
            "hp".parse::<PluginSpec>()
                .unwrap_err()
                .contains("ID=ENDPOINT")
        );
        assert!(
            "../x=unix:///a"
                .parse::<PluginSpec>()
                .unwrap_err()
                .contains("invalid plugin name")
        );
        assert!(
            "hp=/run/hp.sock"
                .parse::<PluginSpec>()
                .unwrap_err()
                .contains("invalid plugin endpoint")
        );
    }

    #[test]
    fn flags_override_the_file() {
        let dir = std::env::temp_dir().join(format!("csivol-node-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("agent.toml");
        std::fs::write(
            &file,
            r#"
server = "http://file:1"
ca_cert = "/etc/csivol/tls/ca.pem"
tls_cert = "/etc/csivol/tls/node-n-file.pem"
tls_key = "/etc/csivol/tls/node-n-file-key.pem"
node = "n-file"
data_dir = "/var/lib/csivol"
token_file = "/etc/csivol/token"
plugins = ["hp=unix:///run/hp.sock"]
fence_after = "5m"
node_concurrency = 2
volume_ready_timeout = "10s"
ready_check = "exists"

[plugin_ready_checks]
b = "exists"
c = "exists"

[labels]
bmc = "10.0.0.11"
rack = "4"
"#,
        )
        .unwrap();
        let s = Settings::load(&args(&[
            "--config",
            file.to_str().unwrap(),
            "--ready-check=a=exists",
            "--ready-check=c=mount",
            "--node",
            "n-flag",
            "--plugin",
            "a=unix:///a.sock",
            "--plugin",
            "b=tcp://127.0.0.1:9000",
            "--label",
            "rack=5",
            "--label=zone=a=b",
        ]))
        .unwrap();
        let labels: Vec<_> = s
            .core
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(labels, ["bmc=10.0.0.11", "rack=5", "zone=a=b"], "flags win");
        assert!(
            parse_label("=x")
                .unwrap_err()
                .contains("expected KEY=VALUE")
        );
        assert!(parse_label("x").is_err());
        assert_eq!(s.server, "http://file:1");
        assert_eq!(
            s.ca_cert.as_deref(),
            Some(Path::new("/etc/csivol/tls/ca.pem"))
        );
        assert_eq!(
            s.tls_identity,
            Some((
                "/etc/csivol/tls/node-n-file.pem".into(),
                "/etc/csivol/tls/node-n-file-key.pem".into()
            ))
        );
        assert_eq!(s.node, "n-flag");
        assert_eq!(s.fence_after, Some(Duration::from_secs(300)));
        let ids: Vec<_> = s.core.plugins.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(s.core.node_concurrency, 2);
        assert_eq!(s.core.volume_ready_timeout, Duration::from_secs(10));
        assert_eq!(s.core.node_call_timeout, DEFAULT_NODE_CALL_TIMEOUT);
        assert_eq!(s.core.ready_check, ReadyCheck::Exists);
        // Per plugin: the flag over the file over the general setting.
        assert_eq!(s.core.ready_check_of("a"), ReadyCheck::Exists);
        assert_eq!(s.core.ready_check_of("b"), ReadyCheck::Exists);
        assert_eq!(s.core.ready_check_of("c"), ReadyCheck::Mount);
        assert_eq!(s.core.ready_check_of("other"), ReadyCheck::Exists);
        let err = "x=maybe".parse::<ReadyCheckSetting>().unwrap_err();
        assert!(err.contains("expected `mount`, `exists`"), "{err}");

        // A certificate without its key is refused, naming the file.
        std::fs::write(&file, "tls_cert = \"/c.pem\"\n").unwrap();
        let err = Settings::load(&args(&[
            "--config",
            file.to_str().unwrap(),
            "--server",
            "https://s:1",
        ]))
        .unwrap_err();
        assert!(
            err.to_string().contains("and `tls_key` go together"),
            "{err}"
        );
        std::fs::write(&file, "nodes = \"typo\"\n").unwrap();
        let err = Settings::load(&args(&["--config", file.to_str().unwrap()])).unwrap_err();
        assert!(err.to_string().contains("unknown field `nodes`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn required_settings_are_named() {
        let err = Settings::load(&args(&["--server", "http://s:1"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--node is required (or `node` in the --config file)"
        );
        let err = Settings::load(&args(&[
            "--server=http://s:1",
            "--node=n",
            "--data-dir=/d",
            "--token-file=/t",
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("no plugin given"), "{err}");
    }

    #[test]
    fn several_servers_repeated_or_comma_separated() {
        let base = [
            "--node=n",
            "--data-dir=/d",
            "--token-file=/t",
            "--plugin=p=unix:///p",
        ];
        for servers in [
            &["--server=http://a:1", "--server=http://b:1/"][..],
            &["--server=http://a:1,http://b:1/"][..],
        ] {
            let mut a: Vec<&str> = base.to_vec();
            a.extend(servers);
            let s = Settings::load(&args(&a)).unwrap();
            assert_eq!(
                csivol_client::addresses(&s.server),
                ["http://a:1", "http://b:1"]
            );
        }
    }

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
        };
        for _ in 0..50 {
            let d1 = b.delay(1);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = b.delay(3);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d30 = b.delay(30);
            assert!(d30 >= Duration::from_millis(500) && d30 <= Duration::from_secs(1));
        }
    }
}
