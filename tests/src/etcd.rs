//! A real etcd cluster for tests of the etcd state store: `n` members of the system's
//! `etcd` (Debian package `etcd-server`) on free loopback ports, each with its data dir in
//! the test's temp dir, stopped by pid. A machine without etcd fails the test with how to
//! install it: an etcd test is never skipped.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::{Proc, ServerProc, TestDir};

/// Where the Debian package puts the server.
pub const ETCD_BIN: &str = "/usr/bin/etcd";

/// TLS for the members' client port: their certificate and key, and the CA whose client
/// certificates they require (`--client-cert-auth`). Peers talk plain HTTP on loopback.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

#[derive(Debug)]
pub struct EtcdMember {
    pub name: String,
    pub client_url: String,
    /// Plain HTTP `/health` (etcd's metrics listener), whatever the client port speaks.
    health_url: String,
    proc: Option<Proc>,
    /// The command etcd runs under (`nsenter` into its host), if any.
    wrapper: Vec<String>,
    args: Vec<String>,
    log: PathBuf,
}

/// Where a member runs: under `wrapper`, on `ip`, with its client, peer and metrics ports.
struct Place {
    wrapper: Vec<String>,
    ip: String,
    ports: [u16; 3],
}

impl EtcdMember {
    fn spawn(&mut self) {
        let mut cmd = match self.wrapper.split_first() {
            Some((program, rest)) => {
                let mut cmd = Command::new(program);
                cmd.args(rest).arg(ETCD_BIN);
                cmd
            }
            None => Command::new(ETCD_BIN),
        };
        cmd.args(&self.args);
        self.proc = Some(Proc::spawn(&format!("etcd {}", self.name), cmd, &self.log));
    }

    /// Whether the member answers its health check (only with a quorum it says true).
    pub fn healthy(&self) -> bool {
        healthy_at(&self.health_url)
    }

    /// Where the member answers its health check, for [`healthy_at`] from a caller that
    /// must not hold the member while it waits for the answer.
    pub fn health_url(&self) -> &str {
        &self.health_url
    }

    pub fn is_running(&self) -> bool {
        self.proc.is_some()
    }

    /// Whether the member was started and its process has exited since.
    pub fn has_exited(&mut self) -> bool {
        self.proc.as_mut().is_some_and(|p| p.exited().is_some())
    }

    /// The running member's pid.
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }
}

#[derive(Debug)]
pub struct EtcdCluster {
    pub members: Vec<EtcdMember>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether the member whose health check is at `health_url` ([`EtcdMember::health_url`])
/// answers healthy: it has a leader and serves a linearizable read, which only a member
/// of a cluster with a quorum does.
/// The last lines of a log file, for a failure's message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(unreadable: {e})"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

pub fn healthy_at(health_url: &str) -> bool {
    http_get(health_url, "/health").is_some_and(|b| b.contains("\"health\":\"true\""))
}

/// A plain HTTP GET of `path` on `url` (`http://127.0.0.1:port`); the body, or `None`.
fn http_get(url: &str, path: &str) -> Option<String> {
    let addr = url.strip_prefix("http://")?;
    let mut s = TcpStream::connect_timeout(&addr.parse().ok()?, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl EtcdCluster {
    /// Starts `n` members under `dir` and waits until the cluster is healthy. A port picked
    /// free can be taken by another test before etcd binds it: a cluster that does not come
    /// up is stopped and started again on other ports.
    pub fn start(dir: &Path, n: usize) -> Self {
        Self::start_with(dir, n, None)
    }

    /// [`EtcdCluster::start`], with TLS on the client port when `tls` is given.
    pub fn start_with(dir: &Path, n: usize, tls: Option<&EtcdTls>) -> Self {
        Self::start_placed(dir, tls, || {
            (0..n)
                .map(|_| Place {
                    wrapper: Vec::new(),
                    ip: "127.0.0.1".to_owned(),
                    ports: [free_port(), free_port(), free_port()],
                })
                .collect()
        })
    }

    /// One member on each of `hosts` (namespaces of a [`crate::netns::Net`]), on etcd's
    /// usual ports of the host's address; the caller must reach them (a thread in the
    /// router, see [`crate::netns::Net::enter_router`]).
    pub fn start_on(dir: &Path, hosts: &[&crate::netns::Host]) -> Self {
        Self::start_placed(dir, None, || {
            hosts
                .iter()
                .map(|h| Place {
                    wrapper: h.prefix(),
                    ip: h.addr.to_string(),
                    ports: [2379, 2380, 2381],
                })
                .collect()
        })
    }

    fn start_placed(dir: &Path, tls: Option<&EtcdTls>, places: impl Fn() -> Vec<Place>) -> Self {
        assert!(
            Path::new(ETCD_BIN).exists(),
            "{ETCD_BIN} is missing: the etcd store's tests need a real etcd; install it with \
             `apt-get install etcd-server` (.ci/run does)"
        );
        for attempt in 0..3 {
            let mut c = Self::spawn_all(&dir.join(format!("etcd-{attempt}")), places(), tls);
            if c.try_wait_healthy(Duration::from_secs(30)) {
                return c;
            }
            for i in 0..c.members.len() {
                c.kill(i);
            }
        }
        panic!("the etcd cluster did not come up in three attempts; see the etcd-*.log files");
    }

    fn spawn_all(dir: &Path, places: Vec<Place>, tls: Option<&EtcdTls>) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let initial: Vec<String> = places
            .iter()
            .enumerate()
            .map(|(i, p)| format!("m{i}=http://{}:{}", p.ip, p.ports[1]))
            .collect();
        let token = format!("csivol-test-{}", std::process::id());
        let members = places
            .into_iter()
            .enumerate()
            .map(|(i, place)| {
                let name = format!("m{i}");
                let data = dir.join(format!("etcd-{name}"));
                let [client, peer, metrics] = place.ports;
                let ip = &place.ip;
                let client_url = format!("{scheme}://{ip}:{client}");
                let peer_url = format!("http://{ip}:{peer}");
                let health_url = format!("http://{ip}:{metrics}");
                let mut args = vec![
                    format!("--name={name}"),
                    format!("--data-dir={}", data.display()),
                    format!("--listen-client-urls={client_url}"),
                    format!("--advertise-client-urls={client_url}"),
                    format!("--listen-peer-urls={peer_url}"),
                    format!("--initial-advertise-peer-urls={peer_url}"),
                    format!("--initial-cluster={}", initial.join(",")),
                    "--initial-cluster-state=new".to_owned(),
                    format!("--initial-cluster-token={token}"),
                    // etcd's defaults for transaction size (--max-txn-ops 128): the
                    // servers split what they commit together to fit.
                    "--log-level=warn".to_owned(),
                    format!("--listen-metrics-urls={health_url}"),
                ];
                if let Some(t) = tls {
                    args.extend([
                        format!("--cert-file={}", t.cert.display()),
                        format!("--key-file={}", t.key.display()),
                        format!("--trusted-ca-file={}", t.ca.display()),
                        "--client-cert-auth".to_owned(),
                    ]);
                }
                let mut m = EtcdMember {
                    name,
                    client_url,
                    health_url,
                    proc: None,
                    wrapper: place.wrapper,
                    args,
                    log: dir.join(format!("etcd-m{i}.log")),
                };
                m.spawn();
                m
            })
            .collect();
        Self { members }
    }

    fn try_wait_healthy(&mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            let exited = self
                .members
                .iter_mut()
                .any(|m| m.proc.as_mut().is_some_and(|p| p.exited().is_some()));
            if exited {
                return false;
            }
            if self.members.iter().all(EtcdMember::healthy) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Waits until every running member answers healthy. A member started again keeps its
    /// ports (its peers know them), and in the moment between its kill and its bind another
    /// test's socket may take one of them: etcd then exits at once, and is started again
    /// here (every second at most) until it binds. A timeout shows the end of the log of
    /// every member not healthy.
    pub fn wait_healthy(&mut self) {
        let timeout = Duration::from_secs(60);
        let deadline = std::time::Instant::now() + timeout;
        let mut last_start = std::time::Instant::now();
        loop {
            if last_start.elapsed() >= Duration::from_secs(1) {
                for m in &mut self.members {
                    if m.has_exited() {
                        eprintln!(
                            "etcd {} exited; starting it again. Its log ends:\n{}",
                            m.name,
                            log_tail(&m.log)
                        );
                        m.spawn();
                        last_start = std::time::Instant::now();
                    }
                }
            }
            let unhealthy: Vec<&EtcdMember> = self
                .members
                .iter()
                .filter(|m| m.is_running() && !m.healthy())
                .collect();
            if unhealthy.is_empty() {
                return;
            }
            if std::time::Instant::now() >= deadline {
                let logs: Vec<String> = unhealthy
                    .iter()
                    .map(|m| format!("etcd {}'s log ends:\n{}", m.name, log_tail(&m.log)))
                    .collect();
                panic!(
                    "timed out after {timeout:?} waiting for the etcd cluster to be healthy\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every member's client URL, comma-separated (for `--etcd-endpoints`).
    pub fn endpoints(&self) -> String {
        self.members
            .iter()
            .map(|m| m.client_url.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// SIGKILL member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut p) = self.members[i].proc.take() {
            p.kill();
        }
    }

    /// Starts member `i` again on its data dir.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.members[i].spawn();
    }

    /// `etcdctl snapshot save` of member 0 to `to`: etcd's own backup of everything.
    pub fn snapshot_save(&self, to: &Path) {
        let mut cmd = Command::new(ETCDCTL_BIN);
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.members[0].client_url))
            .arg("snapshot")
            .arg("save")
            .arg(to);
        let (status, out) =
            crate::run_to_exit("etcdctl snapshot save", cmd, Duration::from_secs(60));
        assert!(status.success(), "{out}");
    }

    /// Restores every member from the snapshot `from` (`etcdctl snapshot restore` into new
    /// data dirs, the members stopped, then started on them), as an operator restores an
    /// etcd cluster: its history goes back to the snapshot's revision, under whoever runs
    /// on it.
    pub fn snapshot_restore(&mut self, from: &Path) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        for m in &mut self.members {
            let arg = |key: &str| {
                m.args
                    .iter()
                    .find_map(|a| a.strip_prefix(key))
                    .map(str::to_owned)
                    .unwrap_or_else(|| panic!("member {} has no {key}", m.name))
            };
            let data = PathBuf::from(arg("--data-dir="));
            let restored = data.with_extension("restored");
            let mut cmd = Command::new(ETCDCTL_BIN);
            cmd.env("ETCDCTL_API", "3")
                .arg("snapshot")
                .arg("restore")
                .arg(from)
                .arg(format!("--name={}", m.name))
                .arg(format!("--data-dir={}", restored.display()))
                .arg(format!("--initial-cluster={}", arg("--initial-cluster=")))
                .arg(format!(
                    "--initial-cluster-token={}",
                    arg("--initial-cluster-token=")
                ))
                .arg(format!(
                    "--initial-advertise-peer-urls={}",
                    arg("--initial-advertise-peer-urls=")
                ));
            let (status, out) =
                crate::run_to_exit("etcdctl snapshot restore", cmd, Duration::from_secs(60));
            assert!(status.success(), "{out}");
            for a in &mut m.args {
                if a.starts_with("--data-dir=") {
                    *a = format!("--data-dir={}", restored.display());
                }
            }
            m.spawn();
        }
        self.wait_healthy();
    }
}

/// Where the Debian package (`etcd-client`) puts etcd's command line client.
pub const ETCDCTL_BIN: &str = "/usr/bin/etcdctl";

/// Two servers over one etcd cluster (`--store etcd`): [`start_ha`].
#[derive(Debug)]
pub struct Ha {
    pub etcd: EtcdCluster,
    pub a: ServerProc,
    pub b: ServerProc,
}

/// Two servers over a fresh etcd cluster, sharing the secrets key.
pub fn start_ha(dir: &TestDir, extra: &[&str]) -> Ha {
    let etcd = EtcdCluster::start(dir.path(), 3);
    let mut args = vec![
        "--store=etcd".to_owned(),
        format!("--etcd-endpoints={}", etcd.endpoints()),
        format!("--secrets-key-file={}", dir.join("secrets.key").display()),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = ServerProc::start(&dir.join("a"), &args);
    let mut b = ServerProc::start(&dir.join("b"), &args);
    assert!(
        !b.data_dir.join("operator.token").exists(),
        "the second server joins the first one's cluster instead of making a new one"
    );
    b.token = a.token.clone();
    Ha { etcd, a, b }
}
