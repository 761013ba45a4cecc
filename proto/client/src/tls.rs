//! TLS for csivol's HTTP API, shared by the client and the server's listener: rustls with
//! the ring provider (no OpenSSL, nothing but the Rust toolchain and a C compiler to build).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// How long csivol's HTTP clients keep an idle connection for reuse: shorter than the
/// server's default header timeout (10s), after which it closes idle keep-alive
/// connections, so that a client does not send a request on a connection the server is
/// closing at that moment (the request would fail without an answer).
pub const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Installs ring as the process's rustls provider (once; later calls do nothing).
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The certificates in a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("failed to read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("failed to read a private key from {}: {e}", path.display()))
}

/// A root store from `ca` (PEM), else the system's trust roots.
pub fn roots(ca: Option<&Path>) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            for c in load_certs(path)? {
                roots
                    .add(c)
                    .map_err(|e| format!("invalid CA certificate in {}: {e}", path.display()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for c in found.certs {
                let _ = roots.add(c);
            }
        }
    }
    Ok(roots)
}

/// A client configuration: the server verified against `ca` (else the system roots), and
/// `identity` (certificate and key files) presented for mutual TLS when given.
pub fn client_config(
    ca: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, String> {
    install_provider();
    let builder = rustls::ClientConfig::builder().with_root_certificates(Arc::new(roots(ca)?));
    match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| format!("invalid client certificate {}: {e}", cert.display())),
        None => Ok(builder.with_no_client_auth()),
    }
}
