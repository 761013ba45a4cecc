//! Every environment variable and default path the CLI reads, in one place.

use std::path::PathBuf;

/// The server's address, e.g. `http://127.0.0.1:7420`; `--addr` wins over it.
pub const CSIVOL_ADDR: &str = "CSIVOL_ADDR";

/// An API token; `--token` wins over it, and it wins over `CSIVOL_TOKEN_FILE`. Set but
/// empty, it is an error (exit 7), not a reason to read `CSIVOL_TOKEN_FILE`.
pub const CSIVOL_TOKEN: &str = "CSIVOL_TOKEN";

/// A file holding an API token (surrounding whitespace is ignored), used when neither
/// `--token` nor `CSIVOL_TOKEN` is set. Set but empty, it is an error (exit 7), not a
/// reason to read the default token file.
pub const CSIVOL_TOKEN_FILE: &str = "CSIVOL_TOKEN_FILE";

/// The CA certificate (PEM) that signed the server's certificate; `--ca-cert` wins over
/// it. Without either, `$XDG_CONFIG_HOME/csivol/ca.pem` when it exists (dev mode writes its
/// CA there), else the system's trust roots.
pub const CSIVOL_CACERT: &str = "CSIVOL_CACERT";

/// The namespace every command names when `--namespace` (`-n`) is not given; unset: the
/// namespace `default`. Set but empty, it is an error (exit 2).
pub const CSIVOL_NAMESPACE: &str = "CSIVOL_NAMESPACE";

/// The node `claim` and `run` claim on when `--node` is not given (a CI runner sets it
/// once for its jobs).
pub const CSIVOL_NODE: &str = "CSIVOL_NODE";

/// Set by `csivol run` for the command it runs: the target path of its only volume.
pub const CSIVOL_PATH: &str = "CSIVOL_PATH";

/// Set by `csivol run` for the command it runs, `CSIVOL_VOLUME_<NAME>`: the csivol name of
/// the volume it claims as `NAME` (for a per-job volume, `--fresh NAME=...`, the name the
/// server gave the volume made for the job; for `--pool NAME=POOL`, the pool's member it
/// got).
pub const CSIVOL_VOLUME: &str = "CSIVOL_VOLUME";

/// CI systems' job identifiers, in the order `csivol run` tries them for a default
/// `--alloc`: GitHub Actions, GitLab CI, Jenkins, Buildkite. GitHub gives the legs of a
/// matrix one run id, attempt and job id, and no id of the leg; legs that run at once run
/// on different runners, so the runner's name keeps their allocs apart (one alloc would
/// make them one claim of a named volume, and refuse the second leg's per-job volume).
pub const CI_JOB_IDS: &[(&str, &[&str])] = &[
    (
        "gh",
        &[
            "GITHUB_RUN_ID",
            "GITHUB_RUN_ATTEMPT",
            "GITHUB_JOB",
            "RUNNER_NAME",
        ],
    ),
    ("gl", &["CI_JOB_ID"]),
    ("jenkins", &["BUILD_TAG"]),
    ("bk", &["BUILDKITE_JOB_ID"]),
];

/// Any non-empty value turns colour off (<https://no-color.org>), like `--no-color`.
pub const NO_COLOR: &str = "NO_COLOR";

/// Terminal width for tables. When it is unset, tables fit the terminal on a TTY and are
/// not wrapped when stdout is a pipe, so scripts and tests see the same layout everywhere.
pub const COLUMNS: &str = "COLUMNS";

/// Base directory for user configuration; the default token file lives below it.
pub const XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";

/// The user's home directory, for `~/.config` when `XDG_CONFIG_HOME` is unset.
pub const HOME: &str = "HOME";

/// The address used when neither `--addr` nor `CSIVOL_ADDR` gives one: the server's default
/// listen address; over https when the default CA file exists (a dev cluster's).
pub const DEFAULT_ADDR: &str = "http://127.0.0.1:7420";
pub const DEFAULT_TLS_ADDR: &str = "https://127.0.0.1:7420";

/// Where the default CA file lives, relative to the configuration directory.
pub const DEFAULT_CA_FILE: &str = "csivol/ca.pem";

/// Where the default token file lives, relative to the configuration directory. Dev mode
/// writes its operator token there so that `csivol` works without further setup.
pub const DEFAULT_TOKEN_FILE: &str = "csivol/token";

/// Beside the default token file when dev mode wrote that token: its hash and the dev dir
/// (written by `csivol-server dev`; read for the hint of a refused token).
pub const DEV_TOKEN_RECORD: &str = "token.from-dev";

/// The same beside the default CA file, when dev mode wrote that CA.
pub const DEV_CA_RECORD: &str = "ca.from-dev";

/// A variable's value, treating an empty one as unset: only for the variables whose
/// conventions say so (`NO_COLOR`, `COLUMNS`, the XDG base directories, `HOME`) and for CI
/// systems' job ids, none of which chooses a server or a credential.
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A csivol setting from the environment: `Ok(None)` when the variable is unset. One that
/// is set but empty (or blank) is an error naming it, never a reason to go on to the next
/// source: `CSIVOL_TOKEN="$(cat "$MISSING_FILE")"` in a CI job must fail, not let the job
/// run with a stronger token from `CSIVOL_TOKEN_FILE` or the default token file.
pub fn setting(name: &'static str) -> Result<Option<String>, SetButEmpty> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(v) if v.to_string_lossy().trim().is_empty() => Err(SetButEmpty(name)),
        Some(v) => Ok(Some(v.to_string_lossy().into_owned())),
    }
}

/// A variable that is set to nothing (see [`setting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetButEmpty(pub &'static str);

impl std::fmt::Display for SetButEmpty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is set but empty", self.0)
    }
}

impl std::error::Error for SetButEmpty {}

/// `$XDG_CONFIG_HOME/csivol/token`, else `~/.config/csivol/token`.
pub fn default_token_file() -> Option<PathBuf> {
    Some(config_dir()?.join(DEFAULT_TOKEN_FILE))
}

/// `$XDG_CONFIG_HOME/csivol/ca.pem`, else `~/.config/csivol/ca.pem`, when it exists.
pub fn default_ca_file() -> Option<PathBuf> {
    Some(config_dir()?.join(DEFAULT_CA_FILE)).filter(|p| p.exists())
}

/// `$XDG_CONFIG_HOME`, else `~/.config`: the XDG Base Directory Specification asks that an
/// unset or empty `XDG_CONFIG_HOME`, or a relative one, be taken as not given (dev mode,
/// which writes the files read here, reads it the same way).
fn config_dir() -> Option<PathBuf> {
    let xdg = var(XDG_CONFIG_HOME)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    Some(match xdg {
        Some(dir) => dir,
        None => PathBuf::from(var(HOME)?).join(".config"),
    })
}

/// Whether colour is turned off by the environment.
pub fn no_color() -> bool {
    var(NO_COLOR).is_some()
}

/// The table width from `COLUMNS`, if set to a usable number.
pub fn columns() -> Option<u16> {
    var(COLUMNS)?.parse().ok().filter(|w| *w >= 20)
}

/// The environment variables an operator may set, with their meaning, for the man page.
pub const DOCUMENTED: &[(&str, &str)] = &[
    (
        CSIVOL_ADDR,
        "The server's address, e.g. http://127.0.0.1:7420. --addr wins over it. Set but \
         empty, it is a usage error, not the default address.",
    ),
    (
        CSIVOL_TOKEN,
        "The API token. --token wins over it; it wins over CSIVOL_TOKEN_FILE. Set but empty, \
         it is an error (exit 7): csivol never goes on to another token then.",
    ),
    (
        CSIVOL_TOKEN_FILE,
        "A file holding the API token, used when neither --token nor CSIVOL_TOKEN is set. Set \
         but empty, it is an error (exit 7).",
    ),
    (
        CSIVOL_CACERT,
        "The CA certificate (PEM) that signed the server's certificate. --ca-cert wins over it; \
         without either, $XDG_CONFIG_HOME/csivol/ca.pem when it exists, else the system's roots. \
         Set but empty, it is a usage error.",
    ),
    (
        CSIVOL_NODE,
        "The node claim and run use when --node is not given. Set but empty, it is a usage \
         error.",
    ),
    (
        NO_COLOR,
        "Any non-empty value turns colour off, like --no-color.",
    ),
    (
        COLUMNS,
        "The width tables fit in. Unset, tables fit the terminal, and are not wrapped when \
         stdout is not a terminal.",
    ),
    (
        XDG_CONFIG_HOME,
        "Where the default token and CA files are looked for: $XDG_CONFIG_HOME/csivol/token \
         and ca.pem (~/.config/csivol/ when unset, empty or not an absolute path).",
    ),
];
