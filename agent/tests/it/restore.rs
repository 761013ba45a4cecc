//! A server's state restored from a backup while the node agents run, with either store:
//! the mount of a claim made after the backup is taken down promptly after the restart
//! (the agents' periodic resync is ten minutes here, their periodic whole fetch five), its
//! attachment detached through the normal path (the node unstages, then
//! ControllerUnpublishVolume); a claim made before the backup comes back ready, one
//! released after it is mounted again; and a second node asking for the single-writer
//! volume meanwhile is not granted it while the first still holds the mount. The same
//! holds when etcd itself is restored from one of its snapshots under running servers.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use csivol_tests::etcd::EtcdCluster;
use csivol_tests::{Api, Proc, ServerProc, TestDir, bin_path, eventually, is_mounted, run_to_exit};
use serde_json::{Value, json};

use super::procs::{AgentProc, Server, claim_state, create_volume, gone, ready};
use super::support::{Hostpath, WAIT};

/// The longest the restart may take to bring the node to the restored state. Generous for
/// a loaded machine, and far below what the agent would do by itself (its resync is ten
/// minutes here, its whole fetch of the desired state five).
const PROMPTLY: Duration = Duration::from_secs(60);

/// The servers of the test, with one store or the other.
enum Servers {
    Sqlite(Server),
    Etcd {
        etcd: EtcdCluster,
        servers: Vec<ServerProc>,
        /// Each server's data dir and address, kept across restarts.
        places: Vec<(PathBuf, String)>,
        secrets: PathBuf,
        /// Backed up with `etcdctl snapshot save` and restored under the running servers,
        /// instead of through csivol.
        by_snapshot: bool,
    },
}

impl Servers {
    async fn sqlite(dir: &TestDir) -> Self {
        Self::Sqlite(Server::start(dir, &["--heartbeat-ttl=3s"]).await)
    }

    /// Two servers over a real 3-member etcd, on fixed addresses (the agents know them);
    /// `by_snapshot`: backed up and restored as etcd's own snapshot.
    fn etcd(dir: &TestDir, by_snapshot: bool) -> Self {
        let etcd = EtcdCluster::start(dir.path(), 3);
        let secrets = dir.join("secrets.key");
        let places: Vec<(PathBuf, String)> = ["a", "b"]
            .iter()
            .map(|n| {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                (dir.join(n), format!("127.0.0.1:{port}"))
            })
            .collect();
        let mut s = Self::Etcd {
            etcd,
            servers: Vec::new(),
            places,
            secrets,
            by_snapshot,
        };
        s.start_etcd_servers("/csivol");
        s
    }

    fn start_etcd_servers(&mut self, prefix: &str) {
        let Self::Etcd {
            etcd,
            servers,
            places,
            secrets,
            ..
        } = self
        else {
            unreachable!()
        };
        let args = [
            "--store=etcd".to_owned(),
            format!("--etcd-endpoints={}", etcd.endpoints()),
            format!("--etcd-prefix={prefix}"),
            format!("--secrets-key-file={}", secrets.display()),
            "--heartbeat-ttl=3s".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        servers.clear();
        for (data_dir, listen) in places.iter() {
            servers.push(ServerProc::start_via(&[], data_dir, listen, &args));
        }
    }

    fn api(&self) -> Api {
        match self {
            Self::Sqlite(s) => s.api.clone(),
            Self::Etcd { servers, .. } => servers[0].api(),
        }
    }

    /// Every server's address, for the agents.
    fn urls(&self) -> String {
        match self {
            Self::Sqlite(s) => s.url(),
            Self::Etcd { places, .. } => places
                .iter()
                .map(|(_, l)| format!("http://{l}"))
                .collect::<Vec<_>>()
                .join(","),
        }
    }

    /// `csivol-server backup` while the servers run (or etcd's snapshot).
    fn backup(&self, to: &Path) {
        if let Self::Etcd {
            etcd,
            by_snapshot: true,
            ..
        } = self
        {
            etcd.snapshot_save(to);
            return;
        }
        let mut cmd = std::process::Command::new(bin_path("csivol-server"));
        cmd.arg("backup").arg(format!("--to={}", to.display()));
        match self {
            Self::Sqlite(s) => cmd.arg(format!("--data-dir={}", s.data_dir().display())),
            Self::Etcd { etcd, .. } => cmd
                .arg(format!("--etcd-endpoints={}", etcd.endpoints()))
                .arg("--etcd-prefix=/csivol"),
        };
        let (status, out) = run_to_exit("csivol-server backup", cmd, WAIT);
        assert!(status.success(), "{out}");
    }

    /// Stops the servers, restores `from` with `csivol-server restore` (into the data dir,
    /// forced; into a fresh etcd prefix), starts them again on it; what restore said.
    async fn restore(&mut self, from: &Path) -> String {
        if let Self::Etcd {
            etcd,
            by_snapshot: true,
            ..
        } = self
        {
            // Under the running servers: they find etcd's history gone back by themselves.
            etcd.snapshot_restore(from);
            return String::new();
        }
        let mut cmd = std::process::Command::new(bin_path("csivol-server"));
        cmd.arg("restore").arg(format!("--from={}", from.display()));
        match self {
            Self::Sqlite(s) => {
                s.proc.kill();
                cmd.arg(format!("--data-dir={}", s.data_dir().display()))
                    .arg("--force");
            }
            Self::Etcd { etcd, servers, .. } => {
                for s in servers.iter_mut() {
                    s.proc.kill();
                }
                cmd.arg(format!("--etcd-endpoints={}", etcd.endpoints()))
                    .arg("--etcd-prefix=/restored");
            }
        }
        let (status, out) = run_to_exit("csivol-server restore", cmd, WAIT);
        assert!(status.success(), "{out}");
        match self {
            Self::Sqlite(s) => s.start_again().await,
            Self::Etcd { .. } => {
                let token = self.api().token.clone();
                self.start_etcd_servers("/restored");
                if let Self::Etcd { servers, .. } = self {
                    for s in servers.iter_mut() {
                        s.token = token.clone().unwrap_or_default();
                    }
                }
            }
        }
        out
    }
}

/// One node: its reference plugin and its agent (which hosts the plugin's controller too).
struct Node {
    name: String,
    hp: Hostpath,
    /// Stopped (by pid) when the test ends.
    _agent: Proc,
}

impl Node {
    /// `plugin_args`: the reference plugin's own flags besides its places.
    async fn start(dir: &TestDir, servers: &Servers, name: &str, plugin_args: &[&str]) -> Self {
        let (status, t) = servers
            .api()
            .post(
                "/v1/tokens",
                json!({"role": "node", "node": name, "controllers": ["hp"]}),
            )
            .await;
        assert_eq!(status, 201, "{t}");
        let token = dir.join(format!("{name}.token"));
        std::fs::write(&token, t["token"].as_str().unwrap()).unwrap();
        // A resync far longer than the test: a take-down within it is not the resync's.
        let config = dir.join(format!("{name}.toml"));
        std::fs::write(&config, "resync_interval = \"10m\"\n").unwrap();
        let hp = Hostpath::start(dir, name, plugin_args);
        let args = vec![
            "run".to_owned(),
            format!("--server={}", servers.urls()),
            format!("--node={name}"),
            format!("--data-dir={}", dir.join(format!("{name}-agent")).display()),
            format!("--token-file={}", token.display()),
            format!("--config={}", config.display()),
            format!("--plugin=hp=unix://{}", hp.socket.display()),
            format!("--controller=hp=unix://{}", hp.socket.display()),
        ];
        let log = dir.join(format!("{name}-agent"));
        Self {
            name: name.to_owned(),
            hp,
            _agent: AgentProc::spawn(&args, &log, 1),
        }
    }
}

async fn claim_on(api: &Api, volume: &str, alloc: &str, node: &str) -> Value {
    let (status, body) = api
        .post(
            &format!("/v1/volumes/{volume}/claims"),
            json!({"alloc": alloc, "node": node, "mode": "write"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    body
}

/// Whether a ControllerUnpublishVolume of `external_id` from `node_id` succeeded on any of
/// the nodes' plugins (whichever agent ran it as controller host).
fn detached(nodes: &[Node], external_id: &str, node_id: &str) -> bool {
    nodes.iter().any(|n| {
        n.hp.calls().iter().any(|c| {
            c["rpc"] == "ControllerUnpublishVolume"
                && c["code"] == "OK"
                && c["volume_id"] == external_id
                && c["node_id"] == node_id
        })
    })
}

async fn restored_state_is_followed(dir: &TestDir, mut servers: Servers) {
    let nodes = [
        Node::start(dir, &servers, "n1", &[]).await,
        Node::start(dir, &servers, "n2", &[]).await,
    ];
    let _shown = Shown(dir);
    let api = servers.api();
    for n in &nodes {
        let path = format!("/v1/nodes/{}", n.name);
        eventually(&format!("{} registered", n.name), WAIT, || async {
            (api.get(&path).await.0 == 200).then_some(())
        })
        .await;
    }
    for v in ["keep", "logs", "cache"] {
        create_volume(&api, v, "single-node-writer").await;
    }
    claim_on(&api, "keep", "before", "n1").await;
    let keep = ready(&api, "keep", "before").await;
    claim_on(&api, "logs", "released", "n1").await;
    let logs = ready(&api, "logs", "released").await;

    let backup = dir.join("backup.db");
    servers.backup(&backup);

    // After the backup: one claim released (its volume unmounted), one made (mounted).
    let (status, body) = api.delete("/v1/volumes/logs/claims/released").await;
    assert_eq!(status, 202, "{body}");
    gone(&api, "logs", "released").await;
    assert!(!is_mounted(&logs));
    claim_on(&api, "cache", "after", "n1").await;
    let cache = ready(&api, "cache", "after").await;
    let (_, v) = api.get("/v1/volumes/cache").await;
    let cache_id = v["external_id"].as_str().unwrap().to_owned();
    assert!(is_mounted(&cache) && is_mounted(&keep));

    let before = api.send("GET", "/v1/volumes/cache", None).await.unwrap();
    let said = servers.restore(&backup).await;
    let restarted = Instant::now();
    let api = servers.api();
    // Every answer names the state's new generation (the servers of an etcd restored
    // under them find it out first: until then a refusal may come from the state before).
    eventually(
        "answers of the restored state's generation",
        WAIT,
        || async {
            let now = api.send("GET", "/v1/volumes/cache", None).await.ok()?;
            (now.status == 200 && now.generation.is_some() && now.generation != before.generation)
                .then_some(())
        },
    )
    .await;
    // What restore said it would do, before doing it (etcd's own restore says nothing).
    let by_csivol = !matches!(
        servers,
        Servers::Etcd {
            by_snapshot: true,
            ..
        }
    );
    if by_csivol {
        assert!(
            said.contains("brings back")
                && said.contains("claim of alloc released on volume logs, node n1"),
            "{said}"
        );
        assert!(said.contains("until n1, n2 registered again"), "{said}");
    }
    if matches!(servers, Servers::Sqlite(_)) {
        // Into a data dir that held the state now; into etcd, the prefix held nothing.
        assert!(
            said.contains("takes down")
                && said.contains("claim of alloc after on volume cache, node n1"),
            "{said}"
        );
    }
    // A second node asks for the volume the first one still holds, unknown to the state
    // (until the first says so: then the claim waits in line behind what it says).
    let (status, wanted) = api
        .post(
            "/v1/volumes/cache/claims",
            json!({"alloc": "wanted", "node": "n2", "mode": "write", "queue": true}),
        )
        .await;
    assert_eq!(status, 201, "{wanted}");
    // Until the first node's mount is gone, the second is not granted the volume.
    let deadline = restarted + PROMPTLY;
    while is_mounted(&cache) {
        // Not granted: neither attached to n2 nor on its way there (a plugin that does
        // not check where a volume is published would let n2 mount it).
        let c = claim_state(&api, "cache", "wanted").await;
        assert!(
            c.as_ref()
                .is_some_and(|c| c["state"] == "pending" || c["state"] == "queued"),
            "node n2's claim of cache was granted while n1 still holds it mounted: {c:?}"
        );
        assert!(
            Instant::now() < deadline,
            "the mount made after the backup is still there {PROMPTLY:?} after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "the mount made after the backup was taken down {:?} after the restart",
        restarted.elapsed()
    );
    // Through the normal path: the node unstaged, then ControllerUnpublishVolume.
    eventually("cache detached from n1", WAIT, || async {
        detached(&nodes, &cache_id, "csi-n1").then_some(())
    })
    .await;
    // Then it goes to the second node; what the backup has comes back.
    let wanted = ready(&api, "cache", "wanted").await;
    assert!(is_mounted(&wanted));
    assert!(!is_mounted(&cache));
    assert_eq!(
        claim_state(&api, "keep", "before").await.unwrap()["state"],
        "ready"
    );
    assert!(
        is_mounted(&keep),
        "a claim of the backup still mounted stays"
    );
    let logs = ready(&api, "logs", "released").await;
    assert!(
        is_mounted(&logs),
        "a claim of the backup released since is mounted again"
    );
    for n in &nodes {
        n.hp.assert_no_lifecycle_violation();
    }
    if let Servers::Etcd {
        servers,
        by_snapshot: true,
        ..
    } = &servers
    {
        // Found by the servers themselves, and the state given a new generation.
        let logs: String = servers.iter().map(ServerProc::log).collect();
        assert!(logs.contains("etcd's state went back in time"), "{logs}");
        assert!(logs.contains("the state is of a new generation"), "{logs}");
    }
}

/// A claim still publishing when the backup was taken and ready after it: the restored
/// state has it publishing, while its node has it mounted and reported it ready to the
/// state before. The node says so again when it registers with the restored state, so the
/// claim is ready again rather than publishing for ever while its workload runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_publishing_at_the_backup_is_ready_again_after_the_restore() {
    let dir = TestDir::new("restore-publishing");
    let mut servers = Servers::sqlite(&dir).await;
    // NodePublishVolume slow enough for the backup to be taken while the claim publishes.
    let node = Node::start(&dir, &servers, "n1", &["--delay=NodePublishVolume=10s"]).await;
    let _shown = Shown(&dir);
    let api = servers.api();
    create_volume(&api, "cache", "single-node-writer").await;
    claim_on(&api, "cache", "slow", "n1").await;
    eventually("claim cache/slow publishing", WAIT, || async {
        claim_state(&api, "cache", "slow")
            .await
            .filter(|c| c["state"] == "publishing")
    })
    .await;
    let backup = dir.join("backup.db");
    servers.backup(&backup);
    // Still publishing once the backup is done, so publishing in the backup.
    let now = claim_state(&api, "cache", "slow").await.unwrap();
    assert_eq!(
        now["state"], "publishing",
        "the claim was ready before the backup was done: the plugin's delay is too short"
    );
    let target = ready(&api, "cache", "slow").await;

    servers.restore(&backup).await;
    let api = servers.api();
    let c = eventually(
        "claim cache/slow ready again after the restore",
        PROMPTLY,
        || async {
            claim_state(&api, "cache", "slow")
                .await
                .filter(|c| c["state"] == "ready")
        },
    )
    .await;
    assert_eq!(c["target_path"].as_str(), target.to_str(), "{c}");
    assert!(is_mounted(&target), "the claim's mount stays");
    node.hp.assert_no_lifecycle_violation();
}

/// Shows every log of the test (servers, agents, plugins) when it fails.
struct Shown<'a>(&'a TestDir);

impl Drop for Shown<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.0.path()) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                eprintln!("--- {} ---\n{text}", path.display());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_sqlite_state_is_followed_and_nothing_is_mounted_twice() {
    let dir = TestDir::new("restore-sqlite");
    let servers = Servers::sqlite(&dir).await;
    restored_state_is_followed(&dir, servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_etcd_state_is_followed_and_nothing_is_mounted_twice() {
    let dir = TestDir::new("restore-etcd");
    let servers = Servers::etcd(&dir, false);
    restored_state_is_followed(&dir, servers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_snapshot_restored_under_running_servers_is_followed_too() {
    let dir = TestDir::new("restore-etcd-snapshot");
    let servers = Servers::etcd(&dir, true);
    restored_state_is_followed(&dir, servers).await;
}
