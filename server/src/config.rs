//! The server's configuration: the `serve` flags resolved over the `--config` file, with
//! the defaults, into the settings a server starts with ([`ServerConfig`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::cli::{EtcdTlsArgs, ServerArgs, StoreKind};
use crate::defaults::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_LISTEN, DEFAULT_PLANNED_STOP_GRACE,
    DEFAULT_REQUEST_MEMORY,
};
use crate::store::replicated;
use crate::{limits, secrets};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    data_dir: Option<PathBuf>,
    listen: Option<SocketAddr>,
    heartbeat_ttl: Option<String>,
    planned_stop_grace: Option<String>,
    controller_concurrency: Option<u32>,
    controller_queue_warning: Option<String>,
    request_memory: Option<String>,
    #[serde(default)]
    fence: Vec<csivol_rules::fence::FenceMethodConfig>,
    #[serde(default)]
    node_labels: BTreeMap<String, BTreeMap<String, String>>,
    secrets_key_file: Option<PathBuf>,
    header_timeout: Option<String>,
    body_timeout: Option<String>,
    max_connections: Option<usize>,
    max_long_polls: Option<usize>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    insecure_http: Option<bool>,
    node_channel: Option<bool>,
    volume_filling_percent: Option<f64>,
    store: Option<StoreKind>,
    #[serde(default)]
    etcd_endpoints: Vec<String>,
    etcd_prefix: Option<String>,
    etcd_lease_ttl: Option<String>,
    etcd_max_txn_ops: Option<usize>,
    etcd_ca_cert: Option<PathBuf>,
    etcd_cert: Option<PathBuf>,
    etcd_key: Option<PathBuf>,
    #[serde(default)]
    limits: limits::LimitsFile,
    /// Per plugin (by the name it registers with): what csivol may do to its mounts.
    #[serde(default)]
    plugins: BTreeMap<String, PluginFile>,
}

/// `[plugins."NAME"]`: what csivol may do to the mounts of one plugin's volumes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PluginFile {
    /// Whether csivol gives a claim's group to a volume itself where the node plugin has
    /// no VOLUME_MOUNT_GROUP: `never` (the default), `on-root-mismatch`, `recursive`.
    #[serde(default)]
    ownership: csivol_api::Ownership,
    /// The gids csivol may give a volume of the plugin: `"1000-1999"` or `"1234"`.
    #[serde(default)]
    ownership_gids: Vec<String>,
    /// The plugin mounts a volume with a SELinux context passed as a `context="..."`
    /// mount flag (as a Kubernetes CSIDriver's `seLinuxMount`): claims may then name one.
    #[serde(default)]
    selinux_mount: bool,
}

/// `[plugins."NAME"]` resolved: the ranges parsed, a setting that can do nothing refused.
fn plugin_mounts(
    plugins: BTreeMap<String, PluginFile>,
) -> anyhow::Result<BTreeMap<String, csivol_rules::mounts::PluginMounts>> {
    use csivol_api::Ownership;
    use csivol_rules::mounts::PluginMounts;
    let mut out = BTreeMap::new();
    for (name, p) in plugins {
        let mut gids = Vec::new();
        for range in &p.ownership_gids {
            let parse = |s: &str| {
                s.trim().parse::<u32>().with_context(|| {
                    format!(
                        "invalid `ownership_gids` entry `{range}` of [plugins.\"{name}\"]: \
                         expected a gid (`1234`) or a range (`1000-1999`)"
                    )
                })
            };
            let (lo, hi) = match range.split_once('-') {
                Some((lo, hi)) => (parse(lo)?, parse(hi)?),
                None => (parse(range)?, parse(range)?),
            };
            if lo > hi {
                bail!("`ownership_gids` range `{range}` of [plugins.\"{name}\"] is empty");
            }
            // gid 0 is root's group: csivol never hands a volume to it on a claimer's word.
            if lo == 0 {
                bail!(
                    "`ownership_gids` of [plugins.\"{name}\"] includes gid 0, root's group; \
                     hint: start the range at 1 or above"
                );
            }
            gids.push(lo..=hi);
        }
        if p.ownership != Ownership::Never && gids.is_empty() {
            bail!(
                "[plugins.\"{name}\"] sets `ownership = \"{}\"` without `ownership_gids`, \
                 so no claim could use it; hint: list the gids claimers may ask for, e.g. \
                 `ownership_gids = [\"1000-1999\"]`",
                p.ownership.as_str()
            );
        }
        out.insert(
            name,
            PluginMounts {
                ownership: p.ownership,
                gids,
                selinux_mount: p.selinux_mount,
            },
        );
    }
    Ok(out)
}

/// Resolved server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub heartbeat_ttl: Duration,
    /// How long a node stays `stopped` after a planned stop before it counts as lost.
    pub planned_stop_grace: Duration,
    pub controller_concurrency: u32,
    /// The oldest wait past which a plugin's controller queue is shown with a warning.
    pub controller_queue_warning: Duration,
    /// How long request keys and claim tombstones are kept.
    pub request_memory: Duration,
    pub fence: csivol_rules::fence::FenceConfig,
    /// `--secrets-key-file`; `None`: `<data-dir>/secrets.key`.
    pub secrets_key_file: Option<PathBuf>,
    pub header_timeout: Duration,
    /// A request's body must arrive within this after its headers.
    pub body_timeout: Duration,
    /// `None`: from the open-file limit at start.
    pub max_connections: Option<usize>,
    /// `None`: three quarters of the connections.
    pub max_long_polls: Option<usize>,
    /// Certificate, key and client CA files.
    pub tls: Option<TlsFiles>,
    pub insecure_http: bool,
    /// Offer agents the node channel (`--no-node-channel`: no).
    pub node_channel: bool,
    /// `Some`: the etcd store (`--store etcd`); `None`: SQLite.
    pub etcd: Option<replicated::EtcdConfig>,
    /// Claim labels, operators' reasons and the event log (`[limits]`).
    pub limits: limits::ServerLimits,
    /// Per plugin, what csivol may do to its mounts (`[plugins."NAME"]`).
    pub plugin_mounts: BTreeMap<String, csivol_rules::mounts::PluginMounts>,
    /// How full a published volume may be, in percent of its bytes or inodes, before a
    /// `volume-filling` event tells of it (`volume_filling_percent`).
    pub volume_filling_percent: f64,
}

/// The server's TLS files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

impl ServerConfig {
    pub fn resolve(args: ServerArgs) -> anyhow::Result<Self> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("failed to read config file {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let heartbeat_ttl = duration(
            args.heartbeat_ttl,
            &file.heartbeat_ttl,
            "heartbeat_ttl",
            Duration::from_secs(30),
        )?;
        if heartbeat_ttl < Duration::from_millis(100) {
            bail!("--heartbeat-ttl must be at least 100ms");
        }
        let planned_stop_grace = duration(
            args.planned_stop_grace,
            &file.planned_stop_grace,
            "planned_stop_grace",
            DEFAULT_PLANNED_STOP_GRACE,
        )?;
        let Some(data_dir) = args.data_dir.or(file.data_dir) else {
            bail!("--data-dir is required: the directory that holds the state database");
        };
        let controller_concurrency = args
            .controller_concurrency
            .or(file.controller_concurrency)
            .unwrap_or(8);
        if controller_concurrency == 0 {
            bail!("--controller-concurrency must be at least 1");
        }
        let controller_queue_warning = duration(
            args.controller_queue_warning,
            &file.controller_queue_warning,
            "controller_queue_warning",
            Duration::from_secs(60),
        )?;
        let request_memory = duration(
            args.request_memory,
            &file.request_memory,
            "request_memory",
            DEFAULT_REQUEST_MEMORY,
        )?;
        if request_memory < Duration::from_secs(1) {
            bail!(
                "--request-memory must be at least 1s: it bounds how late a repeated request may                  come and still be answered the same"
            );
        }
        let config_name = || {
            args.config
                .as_ref()
                .map_or_else(String::new, |p| format!(" in {}", p.display()))
        };
        let fence = csivol_rules::fence::FenceConfig::new(file.fence, file.node_labels)
            .map_err(|e| anyhow::anyhow!("{e}{}", config_name()))?;
        let limits = file
            .limits
            .resolve()
            .map_err(|e| anyhow::anyhow!("{e}{}", config_name()))?;
        let etcd = match args.store.or(file.store).unwrap_or(StoreKind::Sqlite) {
            StoreKind::Sqlite => None,
            StoreKind::Etcd => Some(etcd_config(EtcdSettings {
                endpoints: args.etcd_endpoints,
                prefix: args.etcd_prefix,
                lease_ttl: args.etcd_lease_ttl,
                max_txn_ops: args.etcd_max_txn_ops,
                tls: args.etcd_tls,
                file: EtcdFile {
                    endpoints: file.etcd_endpoints,
                    prefix: file.etcd_prefix,
                    lease_ttl: file.etcd_lease_ttl,
                    max_txn_ops: file.etcd_max_txn_ops,
                    ca_cert: file.etcd_ca_cert,
                    cert: file.etcd_cert,
                    key: file.etcd_key,
                },
            })?),
        };
        let volume_filling_percent = file
            .volume_filling_percent
            .unwrap_or(crate::defaults::DEFAULT_VOLUME_FILLING_PERCENT);
        if !(volume_filling_percent > 0.0 && volume_filling_percent <= 100.0) {
            bail!(
                "invalid volume_filling_percent {volume_filling_percent}{}: it is a percentage\n\
                 hint: give a number above 0 and at most 100, e.g. `volume_filling_percent = 85`",
                config_name()
            );
        }
        let plugin_mounts =
            plugin_mounts(file.plugins).map_err(|e| anyhow::anyhow!("{e:#}{}", config_name()))?;
        Ok(Self {
            etcd,
            limits,
            plugin_mounts,
            volume_filling_percent,
            data_dir,
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid")),
            heartbeat_ttl,
            planned_stop_grace,
            controller_concurrency,
            controller_queue_warning,
            request_memory,
            fence,
            secrets_key_file: args.secrets_key_file.or(file.secrets_key_file),
            header_timeout: duration(
                args.header_timeout,
                &file.header_timeout,
                "header_timeout",
                DEFAULT_HEADER_TIMEOUT,
            )?,
            body_timeout: duration(
                args.body_timeout,
                &file.body_timeout,
                "body_timeout",
                DEFAULT_BODY_TIMEOUT,
            )?,
            max_connections: args.max_connections.or(file.max_connections),
            max_long_polls: args.max_long_polls.or(file.max_long_polls),
            tls: match (
                args.tls_cert.or(file.tls_cert),
                args.tls_key.or(file.tls_key),
            ) {
                (Some(cert), Some(key)) => Some(TlsFiles {
                    cert,
                    key,
                    client_ca: args.tls_client_ca.or(file.tls_client_ca),
                }),
                (None, None) => None,
                _ => bail!("--tls-cert and --tls-key go together"),
            },
            insecure_http: args.insecure_http || file.insecure_http.unwrap_or(false),
            node_channel: !args.no_node_channel && file.node_channel.unwrap_or(true),
        })
    }

    pub fn secrets_key_path(&self) -> PathBuf {
        self.secrets_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join(secrets::KEY_FILE))
    }
}

/// A duration setting: the flag, else the config file's `key` (humantime text), else
/// `default`.
fn duration(
    flag: Option<Duration>,
    file: &Option<String>,
    key: &str,
    default: Duration,
) -> anyhow::Result<Duration> {
    match (flag, file) {
        (Some(d), _) => Ok(d),
        (None, Some(s)) => humantime::parse_duration(s)
            .with_context(|| format!("invalid {key} `{s}` in the config file")),
        (None, None) => Ok(default),
    }
}

/// The etcd settings of `--store etcd`: the flags, and the config file's beneath them.
struct EtcdSettings {
    endpoints: Vec<String>,
    prefix: Option<String>,
    lease_ttl: Option<Duration>,
    max_txn_ops: Option<usize>,
    tls: EtcdTlsArgs,
    file: EtcdFile,
}

/// The config file's etcd settings.
struct EtcdFile {
    endpoints: Vec<String>,
    prefix: Option<String>,
    lease_ttl: Option<String>,
    max_txn_ops: Option<usize>,
    ca_cert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

/// Resolves the etcd store's settings, flags over the file.
fn etcd_config(s: EtcdSettings) -> anyhow::Result<replicated::EtcdConfig> {
    let EtcdSettings { tls, file, .. } = s;
    let endpoints = if s.endpoints.is_empty() {
        file.endpoints
    } else {
        s.endpoints
    };
    if endpoints.is_empty() {
        bail!("--store etcd needs --etcd-endpoints (the etcd cluster's client URLs)");
    }
    let lease_ttl = duration(
        s.lease_ttl,
        &file.lease_ttl,
        "etcd_lease_ttl",
        replicated::DEFAULT_LEASE_TTL,
    )?;
    if lease_ttl < Duration::from_secs(2) {
        bail!("--etcd-lease-ttl must be at least 2s");
    }
    Ok(replicated::EtcdConfig {
        endpoints,
        prefix: replicated::args::prefix(s.prefix.or(file.prefix))?,
        lease_ttl,
        max_txn_ops: s
            .max_txn_ops
            .or(file.max_txn_ops)
            .unwrap_or(replicated::DEFAULT_MAX_TXN_OPS)
            .max(8),
        ca_cert: tls.etcd_ca_cert.or(file.ca_cert),
        cert_key: replicated::args::cert_key(
            tls.etcd_cert.or(file.cert),
            tls.etcd_key.or(file.key),
        )?,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::tls;

    fn resolve(toml: &str) -> anyhow::Result<ServerConfig> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "csivol-server-config-{}-{n}.toml",
            std::process::id()
        ));
        std::fs::write(&path, toml).unwrap();
        let cfg = ServerConfig::resolve(ServerArgs {
            data_dir: Some("/var/lib/csivol-server".into()),
            config: Some(path.clone()),
            ..ServerArgs::default()
        });
        std::fs::remove_file(&path).unwrap();
        cfg
    }

    #[test]
    fn fence_methods_and_node_labels_come_from_the_config_file() {
        let cfg = resolve(
            r#"
[[fence]]
name = "ipmi"
command = ["/usr/sbin/fence_ipmilan", "--ip", "{bmc}", "--action", "off"]
timeout = "30s"
labels = { kind = "metal" }
auto_fence_after = "2m"

[[fence]]
name = "virsh"
command = ["fence_virsh", "--plug", "{node}"]
nodes = ["vm-*"]

[node_labels.node-1]
bmc = "10.0.0.11"
kind = "metal"
"#,
        )
        .unwrap();
        let f = &cfg.fence;
        let names: Vec<_> = f.methods.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["ipmi", "virsh"], "in the file's order");
        assert_eq!(f.methods[0].timeout, Duration::from_secs(30));
        assert_eq!(f.methods[1].timeout, csivol_rules::fence::DEFAULT_TIMEOUT);
        let none = BTreeMap::new();
        let method = |node: &str, operator: &BTreeMap<String, String>| {
            let labels = csivol_rules::fence::Labels {
                operator,
                agent: &none,
            };
            f.choose(node, labels).method().map(|m| m.name.clone())
        };
        let node_1 = f.operator_labels("node-1", &none);
        assert_eq!(method("node-1", &node_1).as_deref(), Some("ipmi"));
        assert_eq!(method("vm-3", &none).as_deref(), Some("virsh"));
        assert_eq!(method("node-2", &none), None);
    }

    #[test]
    fn the_planned_stop_grace_comes_from_the_file_or_its_default() {
        assert_eq!(
            resolve("").unwrap().planned_stop_grace,
            DEFAULT_PLANNED_STOP_GRACE
        );
        let cfg = resolve("planned_stop_grace = \"90s\"\n").unwrap();
        assert_eq!(cfg.planned_stop_grace, Duration::from_secs(90));
        let err = format!(
            "{:#}",
            resolve("planned_stop_grace = \"soon\"\n").unwrap_err()
        );
        assert!(err.contains("invalid planned_stop_grace `soon`"), "{err}");
    }

    #[test]
    fn the_volume_filling_percent_is_a_percentage() {
        assert_eq!(resolve("").unwrap().volume_filling_percent, 85.0);
        let cfg = resolve("volume_filling_percent = 90\n").unwrap();
        assert_eq!(cfg.volume_filling_percent, 90.0);
        for bad in ["0", "-5", "101", "nan"] {
            let err = format!(
                "{:#}",
                resolve(&format!("volume_filling_percent = {bad}\n")).unwrap_err()
            );
            assert!(
                err.contains("invalid volume_filling_percent") && err.contains("hint:"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn bad_fence_methods_are_refused_naming_the_file() {
        let twice = "[[fence]]\nname = \"a\"\ncommand = [\"x\"]\n[[fence]]\nname = \"a\"\ncommand = [\"y\"]\n";
        let err = format!("{:#}", resolve(twice).unwrap_err());
        assert!(
            err.starts_with("fence method `a` is defined twice in ") && err.contains(".toml"),
            "{err}"
        );
        let unknown = "[[fence]]\nname = \"a\"\ncommand = [\"x\"]\ntimout = \"1s\"\n";
        let err = format!("{:#}", resolve(unknown).unwrap_err());
        assert!(err.contains("unknown field `timout`"), "{err}");
    }

    #[test]
    fn the_shipped_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/server.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file: FileConfig = toml::from_str(&text).expect("dist/server.toml parses");
        assert_eq!(file.listen, Some("0.0.0.0:7420".parse().unwrap()));
        assert_eq!(file.heartbeat_ttl.as_deref(), Some("30s"));
        assert_eq!(file.planned_stop_grace.as_deref(), Some("10m"));
        // TLS by default, from the files `tls init --dir /etc/csivol/tls` writes.
        let tls = tls::Files::in_dir(Path::new("/etc/csivol/tls"));
        assert_eq!(file.tls_cert, Some(tls.server_cert));
        assert_eq!(file.tls_key, Some(tls.server_key));
        assert_eq!(file.tls_client_ca, Some(tls.ca));
        assert_eq!(file.insecure_http, None);
        // The commented fence example is a method that applies to its node.
        let fence_lines = [
            "[[fence]]",
            "name ",
            "command ",
            "timeout ",
            "nodes ",
            "env ",
        ];
        let uncommented: Vec<&str> = text
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(r)
                    if fence_lines.iter().any(|k| r.starts_with(k))
                        || r.starts_with("[node_labels")
                        || r.starts_with("bmc ") =>
                {
                    r
                }
                _ => l,
            })
            .collect();
        let resolved = resolve(&uncommented.join("\n")).unwrap();
        assert_eq!(resolved.fence.methods.len(), 1, "{:?}", resolved.fence);
    }

    #[test]
    fn the_example_configs_etcd_settings_resolve() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../dist/server.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let etcd_keys = ["store", "etcd_", "secrets_key_file"];
        let uncommented: Vec<&str> = text
            .lines()
            .map(|l| {
                l.strip_prefix("# ")
                    .filter(|r| etcd_keys.iter().any(|k| r.starts_with(k)))
                    .unwrap_or(l)
            })
            .collect();
        let e = resolve(&uncommented.join("\n"))
            .unwrap()
            .etcd
            .expect("etcd store");
        assert_eq!(e.endpoints.len(), 3);
        assert_eq!(e.prefix, "/csivol");
        assert_eq!(e.lease_ttl, Duration::from_secs(3));
        assert_eq!(e.max_txn_ops, 128);
        assert!(e.ca_cert.is_some() && e.cert_key.is_some());
        assert!(
            resolve("store = \"etcd\"\n")
                .unwrap_err()
                .to_string()
                .contains("--etcd-endpoints")
        );
    }
}
