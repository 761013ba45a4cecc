//! What the flags that reach an etcd cluster (`cli::EtcdArgs`, `cli::EtcdTlsArgs`, the
//! etcd settings of `serve` and its config file) come to, as plain values: the checks
//! and defaults `serve` and the maintenance commands (`backup`, `restore`, `migrate`,
//! `upgrade`) share, so that each takes them alike.

use std::path::PathBuf;

use anyhow::bail;

use super::{DEFAULT_LEASE_TTL, DEFAULT_MAX_TXN_OPS, DEFAULT_PREFIX, EtcdConfig};

/// The key prefix given (`--etcd-prefix`, `etcd_prefix`), else the default. One given
/// empty (`--etcd-prefix "$PREFIX"` with PREFIX unset) is refused, not taken for the root
/// of etcd's keys, where another cluster's state may live.
pub fn prefix(given: Option<String>) -> anyhow::Result<String> {
    match given {
        None => Ok(DEFAULT_PREFIX.to_owned()),
        Some(p) if p.trim().is_empty() => bail!(
            "--etcd-prefix (etcd_prefix in a config) is empty: give the key prefix the cluster's \
             state lives under \
             (every server of the cluster names the same one), or leave it out for {DEFAULT_PREFIX}"
        ),
        Some(p) => Ok(p),
    }
}

/// A client certificate and its key, which go together.
pub fn cert_key(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> anyhow::Result<Option<(PathBuf, PathBuf)>> {
    match (cert, key) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        _ => bail!("--etcd-cert and --etcd-key go together"),
    }
}

/// Where a maintenance command finds the cluster's state in etcd: at `endpoints`, under
/// `prefix` (as [`prefix`] gave it), with the servers' default lease and transaction size;
/// `None` when no endpoint is given.
pub fn maintenance(
    endpoints: Vec<String>,
    prefix: &str,
    ca_cert: Option<PathBuf>,
    cert_key: Option<(PathBuf, PathBuf)>,
) -> Option<EtcdConfig> {
    if endpoints.is_empty() {
        return None;
    }
    Some(EtcdConfig {
        endpoints,
        prefix: prefix.trim_end_matches('/').to_owned(),
        lease_ttl: DEFAULT_LEASE_TTL,
        max_txn_ops: DEFAULT_MAX_TXN_OPS,
        ca_cert,
        cert_key,
    })
}
