//! A server's start and the files it writes: nothing is left behind by a start that cannot
//! listen, every file is its owner's only from the moment it is written (backups too), a
//! restore says how to start the server as it runs, and a stop while the server starts is
//! taken in order.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use csivol_tests::{Proc, ServerProc, TestDir, bin_path, run_to_exit, wait_for};

const WAIT: Duration = Duration::from_secs(60);

/// Runs a program under `umask 022`, as a shell of an ordinary login would: the modes a
/// file gets are then the program's own choice, not the test runner's umask.
fn under_umask_022(program: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(program);
    cmd
}

fn csivol_server(args: &[&str]) -> (ExitStatus, String) {
    let mut cmd = under_umask_022(&bin_path("csivol-server"));
    cmd.args(args);
    run_to_exit("csivol-server", cmd, WAIT)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn serve_on_a_port_in_use_leaves_nothing_behind() {
    let dir = TestDir::new("server-port-in-use");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let data = dir.join("data");
    let (status, out) = csivol_server(&[
        "serve",
        &format!("--data-dir={}", data.display()),
        &format!("--listen=127.0.0.1:{port}"),
    ]);
    assert!(!status.success(), "{out}");
    assert!(
        out.contains(&format!("failed to listen on 127.0.0.1:{port}")),
        "{out}"
    );
    assert!(
        !data.exists(),
        "no key, token or database made: {:?}",
        std::fs::read_dir(&data).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
}

/// Every file a new server writes in its data dir, and every backup, is 0600 when it is
/// written: the data dir's docs promise it, and a backup holds sealed secrets and token
/// hashes.
#[tokio::test]
async fn files_and_backups_are_their_owners_only_from_the_start() {
    let dir = TestDir::new("server-file-modes");
    let data = dir.join("data");
    let server = ServerProc::start_via(
        &["sh", "-c", "umask 022 && exec \"$0\" \"$@\""],
        &data,
        "127.0.0.1:0",
        &[],
    );
    for name in [
        "cluster.id",
        "server.addr",
        "operator.token",
        "secrets.key",
        "state.db",
    ] {
        assert_eq!(mode(&data.join(name)), 0o600, "{name}");
    }

    // A backup while the server runs, and over HTTP (the same online backup, written
    // beside the database before it is sent).
    let to = dir.join("backup.db");
    let (status, out) = csivol_server(&[
        "backup",
        &format!("--data-dir={}", data.display()),
        &format!("--to={}", to.display()),
    ]);
    assert!(status.success(), "{out}");
    assert_eq!(mode(&to), 0o600, "{out}");
    let resp = server.api().send("GET", "/v1/backup", None).await.unwrap();
    assert_eq!(resp.status, 200);
    drop(server);

    // A restore's database is the data dir's, 0600, whatever the backup's mode.
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644)).unwrap();
    let restored = dir.join("restored");
    let (status, out) = csivol_server(&[
        "restore",
        &format!("--from={}", to.display()),
        &format!("--data-dir={}", restored.display()),
    ]);
    assert!(status.success(), "{out}");
    assert_eq!(mode(&restored.join("state.db")), 0o600, "{out}");
    assert_eq!(mode(&restored.join("cluster.id")), 0o600, "{out}");
}

/// The command a restore prints to start the server again names the config it was given:
/// the data dir alone would start the server on the default address, without TLS.
#[test]
fn a_restore_says_to_start_the_server_with_its_config() {
    let dir = TestDir::new("server-restore-config");
    let data = dir.join("data");
    let to = dir.join("backup.db");
    drop(ServerProc::start(&data, &[]));
    let (status, out) = csivol_server(&[
        "backup",
        &format!("--data-dir={}", data.display()),
        &format!("--to={}", to.display()),
    ]);
    assert!(status.success(), "{out}");

    let restored = dir.join("restored");
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\nlisten = \"127.0.0.1:0\"\n",
            restored.display().to_string()
        ),
    )
    .unwrap();
    let (status, out) = csivol_server(&[
        "restore",
        &format!("--from={}", to.display()),
        &format!("--config={}", config.display()),
    ]);
    assert!(status.success(), "{out}");
    assert!(
        restored.join("state.db").exists(),
        "into the config's data dir: {out}"
    );
    assert!(
        out.contains(&format!(
            "start the server on it: csivol-server serve --config {};",
            config.display()
        )),
        "{out}"
    );

    // Without a config, the hint does not offer a command that would start it otherwise.
    let (status, out) = csivol_server(&[
        "restore",
        &format!("--from={}", to.display()),
        &format!("--data-dir={}", dir.join("other").display()),
    ]);
    assert!(status.success(), "{out}");
    assert!(
        out.contains("with the other flags (or --config) it runs with"),
        "{out}"
    );
}

/// SIGTERM while the server waits for its store at start (here an etcd that does not
/// answer) stops it in order: exit 0, not death by the signal, and no cluster half-made in
/// its data dir.
#[test]
fn a_stop_while_the_server_starts_is_taken_in_order() {
    let dir = TestDir::new("server-stop-starting");
    let data = dir.join("data");
    // A port nothing listens on: etcd's client is refused there, and the server waits.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = dir.join("server.log");
    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.args([
        "serve",
        &format!("--data-dir={}", data.display()),
        "--listen=127.0.0.1:0",
        "--store=etcd",
        &format!("--etcd-endpoints=http://127.0.0.1:{closed}"),
    ])
    .env("RUST_LOG", "info");
    let mut proc = Proc::spawn("csivol-server serve", cmd, &log);
    let said = || std::fs::read_to_string(&log).unwrap_or_default();
    // Provably starting: it has tried etcd and is trying again.
    wait_for("the server to wait for etcd", WAIT, || {
        assert!(proc.running(), "the server exited: {}", said());
        said()
            .contains("etcd did not answer; trying again")
            .then_some(())
    });
    let status = proc
        .terminate(WAIT)
        .unwrap_or_else(|| panic!("not stopped within {WAIT:?}: {}", said()));
    assert!(
        status.success(),
        "stopped in order, not by the signal: {status:?}\n{}",
        said()
    );
    assert!(
        said().contains("asked to stop while starting"),
        "{}",
        said()
    );
    for name in ["operator.token", "cluster.id", "server.addr"] {
        assert!(!data.join(name).exists(), "{name} made: {}", said());
    }
}

/// An etcd prefix given empty (`--etcd-prefix "$PREFIX"` with PREFIX unset) is refused,
/// never taken for the root of etcd's keys, nor passed over for the config's prefix.
#[test]
fn an_empty_etcd_prefix_is_refused() {
    let dir = TestDir::new("server-empty-prefix");
    let data = dir.join("data");
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\nlisten = \"127.0.0.1:0\"\nstore = \"etcd\"\n\
             etcd_endpoints = [\"http://127.0.0.1:1\"]\netcd_prefix = \"/team-a\"\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    for args in [
        vec![
            "serve".to_owned(),
            format!("--config={}", config.display()),
            "--etcd-prefix=".to_owned(),
        ],
        vec![
            "backup".to_owned(),
            "--etcd-endpoints=http://127.0.0.1:1".to_owned(),
            "--etcd-prefix=".to_owned(),
            format!("--to={}", dir.join("b.db").display()),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (status, out) = csivol_server(&args);
        assert!(!status.success(), "{out}");
        assert!(
            out.contains("error: --etcd-prefix (etcd_prefix in a config) is empty"),
            "{out}"
        );
    }
    assert!(!data.exists(), "nothing made");
}
