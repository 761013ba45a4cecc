//! `csivol-server tls init`: a CA, a server certificate and node certificates for a small
//! cluster, as PEM files (rcgen, ring). Dev mode makes its own the same way.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// `csivol-server tls ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TlsCommand {
    /// Create a CA, a server certificate and node certificates in a new directory
    ///
    /// Writes ca.pem (give it to the CLI as --ca-cert or CSIVOL_CACERT, and to agents), the
    /// CA's key ca-key.pem (keep it offline), server.pem and server-key.pem (the server's
    /// --tls-cert and --tls-key), and per node node-NAME.pem and node-NAME-key.pem (an
    /// agent's --tls-cert and --tls-key; the server checks that the certificate names the
    /// node its token acts for when started with --tls-client-ca ca.pem). Keys are 0600.
    Init(TlsInitArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct TlsInitArgs {
    /// The directory to write to (created; it must not hold a CA yet).
    #[arg(long)]
    pub dir: PathBuf,
    /// A DNS name or IP address clients reach the server by (repeatable); localhost,
    /// 127.0.0.1 and ::1 are always included.
    #[arg(long = "server-name", value_name = "NAME")]
    pub server_names: Vec<String>,
    /// A node to make a client certificate for (repeatable).
    #[arg(long = "node", value_name = "NODE")]
    pub nodes: Vec<String>,
}

/// The files `init` wrote.
#[derive(Debug, Clone)]
pub struct Files {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

impl Files {
    pub fn in_dir(dir: &Path) -> Self {
        Self {
            ca: dir.join("ca.pem"),
            server_cert: dir.join("server.pem"),
            server_key: dir.join("server-key.pem"),
        }
    }

    pub fn node(dir: &Path, node: &str) -> (PathBuf, PathBuf) {
        (
            dir.join(format!("node-{node}.pem")),
            dir.join(format!("node-{node}-key.pem")),
        )
    }
}

pub fn run(cmd: TlsCommand) -> anyhow::Result<()> {
    let TlsCommand::Init(args) = cmd;
    let files = init(&args.dir, &args.server_names, &args.nodes)?;
    eprintln!(
        "wrote a CA ({}), a server certificate ({}) and {} node certificate(s) in {}",
        files.ca.display(),
        files.server_cert.display(),
        args.nodes.len(),
        args.dir.display()
    );
    Ok(())
}

fn write(path: &Path, text: &str, private: bool) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if private { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| format!("failed to create {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    Ok(())
}

/// Creates the CA, the server certificate (for `server_names` and the loopback names) and a
/// client certificate per node in `dir`.
pub fn init(dir: &Path, server_names: &[String], nodes: &[String]) -> anyhow::Result<Files> {
    let files = Files::in_dir(dir);
    if files.ca.exists() {
        bail!(
            "{} already holds a CA ({})\nhint: choose another --dir; to add a node, sign its \
             certificate with that CA's key (ca-key.pem)",
            dir.display(),
            files.ca.display()
        );
    }
    for n in nodes {
        csivol_api::validate_name("node", n).map_err(anyhow::Error::msg)?;
    }
    csivol_daemon::modes::dir(dir, 0o700)
        .with_context(|| format!("failed to create {}", dir.display()))?;

    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name
        .push(DnType::CommonName, "csivol cluster CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut names = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    for n in server_names {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    let server_key = KeyPair::generate()?;
    let mut server = CertificateParams::new(names)?;
    server
        .distinguished_name
        .push(DnType::CommonName, "csivol server");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = server.signed_by(&server_key, &issuer)?;

    write(&files.ca, &ca_cert.pem(), false)?;
    write(&dir.join("ca-key.pem"), &issuer.key().serialize_pem(), true)?;
    write(&files.server_cert, &server_cert.pem(), false)?;
    write(&files.server_key, &server_key.serialize_pem(), true)?;
    for n in nodes {
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(vec![n.clone()])?;
        p.distinguished_name
            .push(DnType::CommonName, format!("csivol node {n}"));
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = p.signed_by(&key, &issuer)?;
        let (cert_path, key_path) = Files::node(dir, n);
        write(&cert_path, &cert.pem(), false)?;
        write(&key_path, &key.serialize_pem(), true)?;
    }
    Ok(files)
}
