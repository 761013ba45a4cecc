//! The flags that reach an etcd cluster, shared by `serve` and the maintenance commands
//! (`backup`, `restore`, `migrate`, `upgrade`), so that each takes the same spelling.

use std::path::PathBuf;

use anyhow::bail;

use super::{DEFAULT_LEASE_TTL, DEFAULT_MAX_TXN_OPS, DEFAULT_PREFIX, EtcdConfig};

/// TLS to etcd's `https://` endpoints.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdTlsArgs {
    /// The CA (PEM) that signed the etcd members' certificates, for `https://` endpoints.
    #[arg(long, value_name = "FILE")]
    pub etcd_ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) for etcd's `--client-cert-auth`; with --etcd-key.
    #[arg(long, value_name = "FILE", requires = "etcd_key")]
    pub etcd_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    pub etcd_key: Option<PathBuf>,
}

impl EtcdTlsArgs {
    /// The certificate and key, which go together.
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
}

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

/// Where a maintenance command finds the cluster's state in etcd.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct EtcdArgs {
    /// The etcd cluster's client URLs (`http://h1:2379,...`), as the servers have them in
    /// `--etcd-endpoints`.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// The key prefix the state lives under in etcd [default: /csivol].
    #[arg(long, value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    #[command(flatten)]
    pub tls: EtcdTlsArgs,
}

impl EtcdArgs {
    /// The cluster these flags name; `None` when they name none (no endpoints).
    pub fn config(&self) -> anyhow::Result<Option<EtcdConfig>> {
        if self.etcd_endpoints.is_empty() {
            return Ok(None);
        }
        Ok(Some(EtcdConfig {
            endpoints: self.etcd_endpoints.clone(),
            prefix: prefix(self.etcd_prefix.clone())?
                .trim_end_matches('/')
                .to_owned(),
            lease_ttl: DEFAULT_LEASE_TTL,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            ca_cert: self.tls.etcd_ca_cert.clone(),
            cert_key: EtcdTlsArgs::cert_key(self.tls.etcd_cert.clone(), self.tls.etcd_key.clone())?,
        }))
    }
}
