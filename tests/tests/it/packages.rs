//! The Debian packages as an operator gets them: built with cargo-deb, installed with
//! `dpkg -i` on this machine (the tests run as root), their files where Debian puts them,
//! each daemon started from the installed example configuration with only the edits its
//! comments ask for (the certificates `tls init` writes, the addresses, the plugin), a
//! volume claimed through the installed CLI, then uninstalled: the programs go, the data
//! dirs stay.
//!
//! The packages are made of the programs this test run built (`cargo deb --no-build`), not
//! of a `dist` build (which the documentation uses for what one installs): a build of
//! three programs more would cost CI many minutes, and what this test checks (the files,
//! the units, the configurations, the programs starting) is the same for both.
//!
//! It changes the machine (`/usr/bin`, `/etc/csivol`, `/var/lib/csivol*`), so it refuses to
//! run where csivol is installed already, takes a machine-wide lock against another run of
//! itself, and removes everything it installed or created, even when it fails.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use csivol_tests::{Proc, TestDir, bin_path, wait_for};

const PACKAGES: [&str; 3] = ["csivol", "csivol-server", "csivol-agent"];
/// What the packages and their daemons create, all removed at the end.
const MACHINE_PATHS: [&str; 3] = ["/etc/csivol", "/var/lib/csivol-server", "/var/lib/csivol"];
const WAIT: Duration = Duration::from_secs(120);
const INSTALL_CARGO_DEB: &str =
    "cargo install cargo-deb --locked --version 3.8.0 (as .ci/run does)";

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("failed to run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn sh(script: &str) -> String {
    let out = run(Command::new("sh").arg("-c").arg(script));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Leaves the machine as it found it: the packages purged, the paths removed, mounts
/// under the agent's data dir undone first.
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("dpkg").arg("--purge").args(PACKAGES).output();
        let under: Vec<PathBuf> = csivol_tests::mounts_under(Path::new("/var/lib/csivol"));
        for m in under.iter().rev() {
            let _ = rustix::mount::unmount(m, rustix::mount::UnmountFlags::DETACH);
        }
        for p in MACHINE_PATHS {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// `key = ...` of `file` set to `value`: the edit an operator makes, checked to have
/// happened.
fn edit(file: &str, key: &str, value: &str) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut found = false;
    let edited: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(&format!("{key} = ")) {
                found = true;
                format!("{key} = {value}")
            } else {
                l.to_owned()
            }
        })
        .collect();
    assert!(found, "{file} has no `{key} = ` line to edit");
    std::fs::write(file, edited.join("\n") + "\n").unwrap();
}

fn csivol(addr: &str, args: &[&str]) -> std::process::Output {
    let token = std::fs::read_to_string("/var/lib/csivol-server/operator.token").unwrap();
    Command::new("/usr/bin/csivol")
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("CSIVOL_ADDR", addr)
        .env("CSIVOL_CACERT", "/etc/csivol/tls/ca.pem")
        .env("CSIVOL_TOKEN", token.trim())
        .output()
        .unwrap()
}

#[test]
fn packages_install_start_from_their_configs_and_uninstall() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // One run at a time on this machine, whatever worktree it comes from.
    let lock = File::create("/run/lock/csivol-package-test.lock").unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();

    let installed = Command::new("dpkg-query")
        .args(["-W", "-f", "${Package} ${Status}\n"])
        .args(PACKAGES)
        .output()
        .unwrap();
    let installed = String::from_utf8_lossy(&installed.stdout);
    assert!(
        !installed.contains(" installed"),
        "csivol's packages are installed on this machine already ({installed}); this test \
         installs and removes them: run it on a machine without them"
    );
    for p in MACHINE_PATHS {
        assert!(
            !Path::new(p).exists(),
            "{p} exists on this machine; this test creates and removes it: run it on a \
             machine without csivol"
        );
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let version = Command::new(&cargo).args(["deb", "--version"]).output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "cargo-deb is missing: {INSTALL_CARGO_DEB}"
    );
    let _cleanup = Cleanup;
    let test = TestDir::new("packages");

    // The packages, of the programs this run built: their target dir and profile are where
    // `bin_path` finds them (target/debug: the dev profile).
    let bin_dir = bin_path("csivol").parent().unwrap().to_owned();
    let profile = match bin_dir.file_name().unwrap().to_str().unwrap() {
        "debug" => "dev",
        other => other,
    }
    .to_owned();
    for p in ["csivol", "csivol-server", "csivol-agent"] {
        bin_path(p);
    }
    let out = test.join("debs");
    let mut debs = Vec::new();
    for p in PACKAGES {
        run(Command::new(&cargo)
            .current_dir(root)
            .env("CARGO_TARGET_DIR", bin_dir.parent().unwrap())
            .args(["deb", "--locked", "--no-build", "--quiet", "-p", p])
            .args(["--profile", &profile, "--compress-type", "gz", "--fast"])
            .arg("--output")
            .arg(&out));
        let deb = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|f| {
                f.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&format!("{p}_"))
            })
            .unwrap_or_else(|| panic!("no {p}_*.deb in {}", out.display()));
        debs.push(deb);
    }
    run(Command::new("dpkg").arg("-i").args(&debs));

    // Where Debian puts things.
    let units = ["/lib/systemd/system", "/usr/lib/systemd/system"];
    let unit = |name: &str| -> PathBuf {
        units
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {name} in {units:?}"))
    };
    for f in [
        "/usr/bin/csivol",
        "/usr/bin/csivol-server",
        "/usr/bin/csivol-agent",
        "/etc/csivol/server.toml",
        "/etc/csivol/agent.toml",
        "/usr/share/man/man1/csivol.1.gz",
        "/usr/share/man/man1/csivol-claim.1.gz",
        "/usr/share/man/man1/csivol-server.1.gz",
        "/usr/share/man/man1/csivol-server-serve.1.gz",
        "/usr/share/man/man1/csivol-agent.1.gz",
        "/usr/share/man/man1/csivol-agent-run.1.gz",
        "/usr/share/bash-completion/completions/csivol",
        "/usr/share/bash-completion/completions/csivol-server",
        "/usr/share/zsh/vendor-completions/_csivol",
        "/usr/share/zsh/vendor-completions/_csivol-agent",
        "/usr/share/fish/vendor_completions.d/csivol.fish",
        "/usr/share/doc/csivol-server/copyright",
        "/usr/share/doc/csivol-server/running-a-cluster.md",
        "/usr/share/doc/csivol-server/troubleshooting.md",
        "/usr/share/csivol-server/grafana/csivol.json",
    ] {
        assert!(Path::new(f).exists(), "{f} is not installed");
    }
    // The rules as installed load, and their unit tests find them where they are.
    sh("promtool check rules /usr/share/csivol-server/prometheus/csivol-rules.yml");
    sh("cd /usr/share/csivol-server/prometheus && promtool test rules tests/csivol-rules.test.yml");
    let server_unit = unit("csivol-server.service");
    let agent_unit = unit("csivol-agent.service");
    use std::os::unix::fs::PermissionsExt;
    let tls_mode = std::fs::metadata("/etc/csivol/tls")
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(tls_mode & 0o777, 0o700, "/etc/csivol/tls");
    let conffiles = sh("dpkg-query --control-show csivol-server conffiles");
    assert!(conffiles.contains("/etc/csivol/server.toml"), "{conffiles}");
    // The units as systemd reads them: keys in the right sections, programs that exist,
    // man pages that exist (where `man` is installed to look).
    if Path::new("/usr/bin/systemd-analyze").exists() {
        let man = if Path::new("/usr/bin/man").exists() {
            "yes"
        } else {
            "no"
        };
        let out = Command::new("systemd-analyze")
            .args(["verify", &format!("--man={man}")])
            .arg(&server_unit)
            .arg(&agent_unit)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && said.trim().is_empty(), "{said}");
    }

    // The server, from its installed configuration: the certificates its comments say to
    // make, and the address it listens on (loopback and a free port here, as tests do).
    run(Command::new("/usr/bin/csivol-server").args([
        "tls",
        "init",
        "--dir",
        "/etc/csivol/tls",
        "--server-name",
        "127.0.0.1",
        "--node",
        "node-1",
    ]));
    let port = crate::dev::free_port();
    let addr = format!("https://127.0.0.1:{port}");
    edit(
        "/etc/csivol/server.toml",
        "listen",
        &format!("\"127.0.0.1:{port}\""),
    );
    let mut server_cmd = Command::new("/usr/bin/csivol-server");
    server_cmd.args(["serve", "--config", "/etc/csivol/server.toml"]);
    let mut server = Proc::spawn("csivol-server", server_cmd, &test.join("server.log"));
    // Its first operator token is written once its state is; then it answers over TLS.
    wait_for("the installed server to answer over TLS", WAIT, || {
        if let Some(status) = server.exited() {
            panic!(
                "the installed server exited ({status}) from its installed configuration:\n{}",
                std::fs::read_to_string(test.join("server.log")).unwrap_or_default()
            );
        }
        (Path::new("/var/lib/csivol-server/operator.token").exists()
            && csivol(&addr, &["status"]).status.success())
        .then_some(())
    });

    // The agent, from its installed configuration: the node's token, the server's address
    // and the plugin this node runs.
    let token = csivol(
        &addr,
        &[
            "token",
            "create",
            "--role",
            "node",
            "--node",
            "node-1",
            "--controller",
            "hostpath",
        ],
    );
    assert!(token.status.success(), "{token:?}");
    std::fs::write("/etc/csivol/node.token", &token.stdout).unwrap();
    let socket = test.join("plugin.sock");
    let endpoint = format!("\"hostpath=unix://{}\"", socket.display());
    let mut plugin_cmd = Command::new(bin_path("csivol-hostpath"));
    plugin_cmd.args([
        format!("--endpoint=unix://{}", socket.display()),
        "--node-id=node-1".to_owned(),
        format!("--state-dir={}", test.join("plugin").display()),
    ]);
    let _plugin = Proc::spawn("csivol-hostpath", plugin_cmd, &test.join("plugin.log"));
    edit("/etc/csivol/agent.toml", "server", &format!("\"{addr}\""));
    edit(
        "/etc/csivol/agent.toml",
        "plugins",
        &format!("[{endpoint}]"),
    );
    edit(
        "/etc/csivol/agent.toml",
        "controllers",
        &format!("[{endpoint}]"),
    );
    let mut agent_cmd = Command::new("/usr/bin/csivol-agent");
    agent_cmd.args(["run", "--config", "/etc/csivol/agent.toml"]);
    let mut agent = Proc::spawn("csivol-agent", agent_cmd, &test.join("agent.log"));
    wait_for("the installed agent's node ready", WAIT, || {
        let out = csivol(&addr, &["plugin", "show", "hostpath", "-o", "json"]);
        (out.status.success() && String::from_utf8_lossy(&out.stdout).contains("\"node-1\""))
            .then_some(())
    });
    let spec = test.join("data.toml");
    std::fs::write(
        &spec,
        "name = \"data\"\nplugin = \"hostpath\"\naccess_mode = \"single-node-writer\"\n\
         attachment = \"file-system\"\ncapacity = \"1MiB\"\n",
    )
    .unwrap();
    for args in [
        &[
            "volume",
            "create",
            spec.to_str().unwrap(),
            "--wait",
            "--timeout",
            "2m",
        ][..],
        &[
            "claim",
            "data",
            "--node",
            "node-1",
            "--alloc",
            "job-1",
            "--wait",
            "--timeout",
            "2m",
        ],
        &[
            "release",
            "data",
            "--alloc",
            "job-1",
            "--wait",
            "--timeout",
            "2m",
        ],
    ] {
        let out = csivol(&addr, args);
        assert!(
            out.status.success(),
            "csivol {args:?}: {out:?}\nagent log:\n{}",
            std::fs::read_to_string(test.join("agent.log")).unwrap_or_default()
        );
    }
    for (name, proc) in [("csivol-agent", &mut agent), ("csivol-server", &mut server)] {
        let pid = rustix::process::Pid::from_raw(proc.pid() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let status = wait_for(&format!("{name} to stop"), WAIT, || proc.exited());
        assert!(status.success(), "{name} exited with {status}");
    }

    // Removed (not purged): the programs go; the state and the edited configuration stay.
    run(Command::new("dpkg").arg("-r").args(PACKAGES));
    for gone in [
        "/usr/bin/csivol",
        "/usr/bin/csivol-server",
        "/usr/bin/csivol-agent",
        "/usr/share/man/man1/csivol-server.1.gz",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} is left after dpkg -r");
    }
    assert!(!server_unit.exists() && !agent_unit.exists());
    for kept in [
        "/var/lib/csivol-server/state.db",
        "/var/lib/csivol/agent.db",
        "/etc/csivol/server.toml",
    ] {
        assert!(Path::new(kept).exists(), "{kept} is gone after dpkg -r");
    }
}
