//! The restore fault: a backup taken at a random moment (`GET /v1/backup` or
//! `csivol-server backup`, by turns at random), the load going on, then every server
//! stopped (SIGTERM), the backup restored (`csivol-server restore --force` into the
//! data dir; with the etcd store, into a fresh prefix through etcd, which the servers then
//! serve), and the servers started again, as an operator rolls a cluster back.
//!
//! What it legitimately does, the history's model knows: the backup and the restore are
//! operations on every volume, so claims acknowledged before the backup come back (those
//! released since with them) and claims made after it are forgotten. The operator then
//! releases each claim that came back whose cycle is over, as nobody holds it; a cycle
//! still under way looks after its own. What must not happen whatever the restore did:
//! a volume mounted on two nodes against its access mode (the observers), a released
//! claim back other than by the restore (the history).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use csivol_api as api;
use rand::Rng;
use rand::rngs::StdRng;

use super::cluster::ChaosCluster;
use super::faults::{Found, Load, STOP_TIMEOUT};
use super::ledger::unix_ms;
use super::load::{self, Answer, persist};
use super::starts::judge;
use crate::history::{Input, Output};

/// How long the operator's releases after a restore may take: the restored state holds
/// back single-writer volumes until every node has registered again.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(120);

/// The fault, from the backup to the operator's releases after the restore.
pub async fn restore(
    cluster: &tokio::sync::Mutex<ChaosCluster>,
    load: &Load<'_>,
    rng: &mut StdRng,
    found: &mut Found,
) -> anyhow::Result<()> {
    let n = load.ledger.restores() + 1;
    let file = load.root.join(format!("backup-{n}.db"));
    let via_api = rng.random_bool(0.5);
    let at = load.history.now();
    let backup_ms = unix_ms();
    if via_api {
        backup_via_api(load, &file).await?;
    } else {
        let cmd = cluster.lock().await.backup_command(&file);
        run("csivol-server backup", cmd).await?;
    }
    load.history
        .record_all(at, Some(load.history.now()), Input::Backup, Output::Ok);
    found.notes.push(format!(
        "backup through {}",
        if via_api {
            "GET /v1/backup"
        } else {
            "csivol-server backup"
        }
    ));
    // Claims made and released meanwhile are what the restore forgets and brings back.
    tokio::time::sleep(Duration::from_millis(rng.random_range(500..4000))).await;

    let from = load.history.now();
    {
        let mut c = cluster.lock().await;
        for (i, s) in c.servers.iter_mut().enumerate() {
            if s.running() {
                let status = s.terminate(STOP_TIMEOUT).await;
                judge(&format!("server {}", i + 1), "stopped", status, found);
            }
        }
        // No server serves the old state any more: a release sent before now may be
        // undone by what follows, one sent after it acts on the restored state.
        load.ledger.restored();
        let restored = match c.restore_command(&file, n) {
            Ok(cmd) => run("csivol-server restore", cmd).await,
            Err(e) => Err(e),
        };
        let output = match restored {
            Ok(out) => out,
            Err(e) => {
                // Whether the state went back is not known: the history allows both.
                for s in &mut c.servers {
                    s.start_again().await?;
                }
                load.history
                    .record_all(from, None, Input::Restore, Output::Unknown);
                return Err(e);
            }
        };
        c.after_restore(n)?;
        let log = load.root.join("restores.log");
        let _ = append(
            &log,
            &format!("restore {n} from {}:\n{output}\n", file.display()),
        );
        for s in &mut c.servers {
            s.start_again().await?;
        }
    }
    load.history
        .record_all(from, Some(load.history.now()), Input::Restore, Output::Ok);
    load.ledger.restore_window(backup_ms, unix_ms());
    let released = release_orphans(load, Instant::now() + RELEASE_TIMEOUT).await?;
    for _ in 0..released {
        found
            .notes
            .push("claim come back with a restore, released".to_owned());
    }
    Ok(())
}

/// `GET /v1/backup`, written to `to` (0600: it holds sealed secrets and token hashes).
async fn backup_via_api(load: &Load<'_>, to: &Path) -> anyhow::Result<()> {
    let r = load
        .http
        .get("/v1/backup")
        .await?
        .expect("GET /v1/backup", &[200])?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(to)
        .with_context(|| format!("failed to create {}", to.display()))?;
    f.write_all(&r.body)?;
    f.sync_all()?;
    Ok(())
}

/// Runs a maintenance command to its end; its stdout, or an error with what it said.
async fn run(what: &str, mut cmd: Command) -> anyhow::Result<String> {
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .context("the command's task failed")?
        .with_context(|| format!("failed to run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// Releases, as the operator who restored would, every claim of the restored state whose
/// cycle is not under way: the backup had it, and whoever held it is gone (its cycle saw
/// it released, or dropped). A cycle under way looks after its own claim. Each claim
/// released is first a read of it in the history (seen by the listing), so that the
/// checker judges whether the restore explains it: the operator's release must not hide
/// a released claim come back some other way. Returns how many were released.
async fn release_orphans(load: &Load<'_>, deadline: Instant) -> anyhow::Result<usize> {
    let mut retries = 0;
    let listed_at = load.history.now();
    let volumes: Vec<api::Volume> =
        match persist(deadline, &mut retries, || load.http.get("/v1/volumes")).await {
            Answer::Got(r) => r.expect("GET /v1/volumes", &[200])?.json()?,
            Answer::TimedOut => bail!("the restored servers did not list the volumes in time"),
        };
    let listed = load.history.now();
    let mut released = 0;
    for v in &volumes {
        for c in &v.claims {
            if load.ledger.in_flight(&v.name, &c.alloc) {
                continue;
            }
            // A job's claim (per-job volume or pool member) is in no history: released
            // unless its job is under way, which looks after it.
            if super::jobs::is_job(&c.alloc) {
                if !load.ledger.in_flight(super::jobs::JOB, &c.alloc) {
                    super::jobs::release_back(load.http, &v.name, &c.alloc, deadline)
                        .await
                        .map_err(|e| {
                            anyhow::anyhow!(
                                "the job claim of {} on {}, back with the restore: {e}",
                                c.alloc,
                                v.name
                            )
                        })?;
                    released += 1;
                }
                continue;
            }
            // A claim its node still held, found from its report, is no claim come back.
            let found = c.state == api::ClaimState::Releasing
                && load::found_on_its_node(c, &load::history(load.http, &c.alloc).await);
            if !found {
                load.history.record(
                    &v.name,
                    listed_at,
                    Some(listed),
                    Input::Read(c.alloc.clone()),
                    Output::Present,
                );
            }
            load::release(
                load.http,
                load.history,
                load.ledger,
                &v.name,
                &c.alloc,
                deadline,
                &mut retries,
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "the claim of {} on {}, back with the restore: {e}",
                    c.alloc,
                    v.name
                )
            })?;
            if !found
                && (matches!(
                    c.state,
                    api::ClaimState::Releasing | api::ClaimState::Failed
                ) || load::failed_by_the_server(load.http, &c.alloc).await)
            {
                // Its release was under way (or it had failed) when the backup was taken,
                // or it failed since (the restored state publishes it again, and the
                // plugin may refuse: the storage kept a later attachment): its node takes
                // it down on its own (before the operator's release, maybe), which the
                // history says as the server's own drop, from the listing to its being
                // seen gone.
                load.history.record(
                    &v.name,
                    listed_at,
                    Some(load.history.now()),
                    Input::Dropped(c.alloc.clone()),
                    Output::Ok,
                );
            }
            released += 1;
        }
    }
    Ok(released)
}

impl ChaosCluster {
    /// `csivol-server backup` of the cluster's state into `to`: from the data dir, or
    /// through etcd from the prefix the servers serve.
    pub fn backup_command(&self, to: &Path) -> Command {
        let mut cmd = Command::new(&self.bins.server);
        cmd.arg("backup").arg(format!("--to={}", to.display()));
        cmd.args(self.state_args());
        cmd
    }

    /// `csivol-server restore` of `from`: into the (stopped) server's data dir with
    /// `--force`, or through etcd into a prefix of its own for restore `n` (a restore
    /// into etcd takes an empty prefix).
    pub fn restore_command(&self, from: &Path, n: u64) -> anyhow::Result<Command> {
        let mut cmd = Command::new(&self.bins.server);
        cmd.arg("restore").arg(format!("--from={}", from.display()));
        match &self.ha {
            None => {
                cmd.args(self.state_args()).arg("--force");
            }
            Some(_) => {
                let endpoints = self.servers[0]
                    .arg("etcd-endpoints")
                    .context("the servers run without --etcd-endpoints")?;
                cmd.arg(format!("--etcd-endpoints={endpoints}"))
                    .arg(format!("--etcd-prefix={}", restored_prefix(n)));
            }
        }
        Ok(cmd)
    }

    /// After restore `n`: the servers serve the prefix it went into (etcd); the database
    /// it replaced is removed (SQLite: the server's disk is small, and the fault fills it).
    pub fn after_restore(&mut self, n: u64) -> anyhow::Result<()> {
        if self.ha.is_some() {
            for s in &mut self.servers {
                s.set_arg("etcd-prefix", &restored_prefix(n));
            }
            return Ok(());
        }
        let dir = &self.servers[0].data_dir;
        for e in std::fs::read_dir(dir)?.flatten() {
            if e.file_name()
                .to_string_lossy()
                .starts_with("state.db.before-restore-")
            {
                std::fs::remove_file(e.path())?;
            }
        }
        Ok(())
    }

    /// The flags that name the cluster's state to a maintenance command.
    fn state_args(&self) -> Vec<String> {
        let s = &self.servers[0];
        match &self.ha {
            None => vec![format!("--data-dir={}", s.data_dir.display())],
            Some(_) => {
                let mut v = Vec::new();
                if let Some(e) = s.arg("etcd-endpoints") {
                    v.push(format!("--etcd-endpoints={e}"));
                }
                if let Some(p) = s.arg("etcd-prefix") {
                    v.push(format!("--etcd-prefix={p}"));
                }
                v
            }
        }
    }
}

/// The etcd prefix restore `n` goes into.
fn restored_prefix(n: u64) -> String {
    format!("/csivol-restored-{n}")
}
