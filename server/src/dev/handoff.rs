//! What dev mode hands the user: the CLI's token and CA where the CLI looks for them (never
//! over a user's own), the env file, and the banner that says how to use the cluster; and
//! what the rest of dev mode shares with them: the plugin's id, and owner-only files.

use std::path::{Path, PathBuf};

use anyhow::Context;

/// The csivol plugin id dev mode gives the reference plugin.
pub const DEV_PLUGIN: &str = "hostpath";

/// Where the CLI looks for a token when none is given (see the CLI's documentation).
pub fn cli_token_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("csivol").join("token"))
}

/// Beside the CLI's token file, when dev mode wrote that token: the token's SHA-256 and
/// the dev dir it came from. A token with a matching record may be replaced by a later dev
/// cluster; any other token there is the user's and is never overwritten.
pub const DEV_TOKEN_RECORD: &str = "token.from-dev";

/// The same for the CA dev mode puts beside it (`ca.pem`).
pub const DEV_CA_RECORD: &str = "ca.from-dev";

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.trim().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Writes the operator token where the CLI looks by default, unless a token that dev mode
/// did not write is already there (never overwrite someone's token): a token an earlier
/// dev cluster wrote is replaced, so that `csivol` with no flags reaches this one. Returns
/// the path when it holds ours.
pub(super) fn offer_cli_token(token: &str, dir: &Path) -> Option<PathBuf> {
    offer_cli_file(cli_token_path()?, token, DEV_TOKEN_RECORD, dir)
}

/// Puts `content` where the CLI looks by default. What the user put there is never
/// replaced; what an earlier dev cluster wrote (its hash in `record` beside it) is, so that
/// the CLI follows the latest dev cluster wherever it runs. Returns the path when it holds
/// `content`.
fn offer_cli_file(path: PathBuf, content: &str, record: &str, dir: &Path) -> Option<PathBuf> {
    let record = path.with_file_name(record);
    let ours = match std::fs::read_to_string(&path) {
        Ok(existing) if existing.trim() == content.trim() => true,
        Ok(existing) => {
            let from_dev = std::fs::read_to_string(&record)
                .ok()
                .and_then(|r| r.lines().next().map(str::to_owned))
                .is_some_and(|hash| hash == sha256_hex(&existing));
            if !from_dev {
                // The user's: left alone, and a record about an older file of ours goes, so
                // that nothing claims this one came from dev mode.
                let _ = std::fs::remove_file(&record);
                return None;
            }
            false
        }
        Err(_) => false,
    };
    if !ours {
        write_private(&path, content.trim_end()).ok()?;
    }
    let written = std::fs::read_to_string(&path).ok()?;
    write_private(
        &record,
        &format!("{}\n{}", sha256_hex(&written), dir.display()),
    )
    .ok()?;
    Some(path)
}

/// Where the CLI looks for a CA when none is given.
pub fn cli_ca_path() -> Option<PathBuf> {
    Some(cli_token_path()?.with_file_name("ca.pem"))
}

/// Copies the dev CA where the CLI looks by default, as [`offer_cli_file`] does.
pub(super) fn offer_cli_ca(ca: &Path, dir: &Path) -> Option<PathBuf> {
    let ours = std::fs::read_to_string(ca).ok()?;
    offer_cli_file(cli_ca_path()?, &ours, DEV_CA_RECORD, dir)
}

/// `DIR/env`: what `source DIR/env` sets for the CLI to reach this cluster, wherever the
/// user's defaults point: the address, the token, the CA, and the CLI on `PATH`.
pub(super) fn env_file_text(
    url: &str,
    token: &Path,
    ca: Option<&Path>,
    cli: Option<&Path>,
) -> String {
    let mut text = format!(
        "export CSIVOL_ADDR={url}\nexport CSIVOL_TOKEN_FILE={}\n",
        csivol_daemon::shell_word(&token.display().to_string())
    );
    if let Some(ca) = ca {
        text.push_str(&format!(
            "export CSIVOL_CACERT={}\n",
            csivol_daemon::shell_word(&ca.display().to_string())
        ));
    }
    if let Some(dir) = cli.and_then(Path::parent) {
        text.push_str(&format!(
            "export PATH={}:\"$PATH\"\n",
            csivol_daemon::shell_word(&dir.display().to_string())
        ));
    }
    text
}

/// What the banner says once the cluster is up.
pub(super) struct Banner<'a> {
    pub(super) url: &'a str,
    pub(super) token: &'a Path,
    pub(super) env: &'a Path,
    /// The CLI beside this binary, when it was built.
    pub(super) cli: Option<&'a Path>,
    /// Whether the token and CA are where the CLI looks by default.
    pub(super) defaults: bool,
    pub(super) nodes: u32,
    pub(super) mount: &'a str,
    pub(super) dir: &'a Path,
}

pub(super) fn print_banner(b: &Banner<'_>) {
    let Banner {
        url,
        token,
        env,
        cli,
        defaults,
        nodes,
        mount,
        dir,
    } = b;
    let cli = match cli {
        Some(p) => format!("the CLI: {}", p.display()),
        None => "the CLI is not built beside this binary: `cargo build --release --bin csivol` \
                 builds it (then `source` the env file below again)"
            .to_owned(),
    };
    let defaults = if *defaults {
        "\n(its token and CA are also where `csivol` looks by default)"
    } else {
        ""
    };
    println!(
        "csivol dev cluster is up: server {url}, {nodes} node(s), plugin `{DEV_PLUGIN}` (mounts: {mount})\n\
         operator token: {}{defaults}\n\
         {cli}\n\n\
         Try, in another terminal (the env file sets PATH, the address, the token and the CA):\n  \
         source {}\n  \
         csivol status\n  \
         csivol claim demo-data --node node-1 --alloc job-1 --wait\n  \
         csivol volume show demo-data\n  \
         csivol release demo-data --alloc job-1 --wait\n  \
         csivol events\n\n\
         To see a node fail: kill -9 $(cat {}/node-{nodes}/agent.pid)\n\n\
         Ctrl-C takes every node's volumes down through its plugin and stops; run again to resume.",
        token.display(),
        csivol_daemon::shell_word(&env.display().to_string()),
        csivol_daemon::shell_word(&dir.display().to_string())
    );
}

pub(crate) fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("failed to write {}", path.display()))?;
    writeln!(f, "{content}")?;
    Ok(())
}
