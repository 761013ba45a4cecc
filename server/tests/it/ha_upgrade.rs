//! A rolling upgrade over one real 3-member etcd: two servers go from schema version N to
//! N+1 one at a time (the test build's extra migration plays N+1), with a rollback on the
//! way, while claims flow through both and a blocking query follows the event log the
//! whole time. N+1 works on N's schema until `upgrade finalize`, which waits for every live
//! server to know N+1, then migrates the state online; afterwards N is refused.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use csivol_tests::etcd::EtcdCluster;
use csivol_tests::{Api, ServerProc, TestDir, eventually};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::{WAIT, register_volume, two_nodes_and_volumes};

/// Set for the server playing the next release (see the server's `schema-next` feature).
const NEXT: (&str, &str) = ("CSIVOL_TEST_SCHEMA_NEXT", "1");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `(running, known)` schema versions of a server, from its health.
async fn schema(api: &Api) -> (i64, i64) {
    let (status, h) = api.get("/v1/health").await;
    assert_eq!(status, 200, "{h}");
    (
        h["schema"]["running"].as_i64().unwrap(),
        h["schema"]["known"].as_i64().unwrap(),
    )
}

/// Runs `csivol-server upgrade ...` (as the next release when `next`); its exit and output.
fn upgrade(etcd: &EtcdCluster, verb: &str, next: bool) -> (std::process::ExitStatus, String) {
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    cmd.args([
        "upgrade",
        verb,
        &format!("--etcd-endpoints={}", etcd.endpoints()),
    ]);
    if next {
        cmd.env(NEXT.0, NEXT.1);
    }
    csivol_tests::run_to_exit("csivol-server upgrade", cmd, Duration::from_secs(120))
}

/// Sends `method path` through `api` until some server answers it: a request caught by a
/// server being stopped is sent again (claims and releases are idempotent per alloc).
async fn answered(api: &Api, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    for _ in 0..600 {
        match api.send(method, path, body.clone()).await {
            Ok(raw) => {
                let v = serde_json::from_slice(&raw.body).unwrap_or(Value::Null);
                return (raw.status.as_u16(), v);
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("no server answered {method} {path} for 30 s");
}

/// Every object in `v` with one more field, as a newer server's answer may have (a
/// string: objects that are maps of strings get an entry more, which they must take too).
fn with_unknown_fields(v: &mut Value) {
    match v {
        Value::Object(o) => {
            for x in o.values_mut() {
                with_unknown_fields(x);
            }
            o.insert("a_field_of_a_newer_release".into(), json!("x"));
        }
        Value::Array(a) => a.iter_mut().for_each(with_unknown_fields),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_upgrade_one_at_a_time_with_claims_flowing_and_a_blocking_query_open() {
    let dir = TestDir::new("ha-rolling-upgrade");
    let etcd = EtcdCluster::start(dir.path(), 3);
    let common = [
        "--store=etcd".to_owned(),
        format!("--etcd-endpoints={}", etcd.endpoints()),
        format!("--secrets-key-file={}", dir.join("secrets.key").display()),
        "--heartbeat-ttl=300s".to_owned(),
    ];
    let common: Vec<&str> = common.iter().map(String::as_str).collect();
    let listen = |p: u16| format!("127.0.0.1:{p}");
    let (pa, pb) = (free_port(), free_port());
    let mut a = ServerProc::start_via(&[], &dir.join("a"), &listen(pa), &common);
    let mut b = ServerProc::start_via(&[], &dir.join("b"), &listen(pb), &common);
    b.token = a.token.clone();
    let (n, next) = schema(&a.api()).await;
    assert_eq!(n, next, "a server of release N");
    let both = Api::new(&format!("{},{}", a.url, b.url), Some(&a.token));

    let volumes = 8;
    two_nodes_and_volumes(&a, &both, volumes, "multi-node-multi-writer").await;

    // Claims and releases from four clients, through whichever server answers.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let refused = Arc::new(Mutex::new(Vec::<String>::new()));
    let load: Vec<_> = (0..4)
        .map(|t| {
            let (api, stop, acked, refused) =
                (both.clone(), stop.clone(), acked.clone(), refused.clone());
            tokio::spawn(async move {
                let mut k = 0;
                while !stop.load(Ordering::SeqCst) {
                    let (volume, alloc) = (format!("v{}", (k + t) % volumes), format!("a{t}-{k}"));
                    let node = if k % 2 == 0 { "n1" } else { "n2" };
                    let claims = format!("/v1/volumes/{volume}/claims");
                    let body = json!({"alloc": alloc, "node": node, "mode": "write"});
                    let (status, c) = answered(&api, "POST", &claims, Some(body)).await;
                    if status != 201 && status != 200 {
                        refused.lock().await.push(format!("claim {status} {c}"));
                    } else {
                        acked.lock().await.push(alloc.clone());
                    }
                    let (status, r) =
                        answered(&api, "DELETE", &format!("{claims}/{alloc}"), None).await;
                    if status != 202 {
                        refused.lock().await.push(format!("release {status} {r}"));
                    }
                    k += 1;
                }
            })
        })
        .collect();
    // A blocking query on the event log, open the whole time: each answer's last index is
    // the next query's, through whichever server answers.
    let seen = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let follower = {
        let (api, stop, seen) = (both.clone(), stop.clone(), seen.clone());
        tokio::spawn(async move {
            let mut index = 0u64;
            let mut last_pass = false;
            loop {
                let path = format!("/v1/events?index={index}&wait=2s");
                let (status, events) = answered(&api, "GET", &path, None).await;
                assert_eq!(status, 200, "{events}");
                for e in events.as_array().unwrap() {
                    let i = e["index"].as_u64().unwrap();
                    assert!(i > index, "events come in index order: {i} after {index}");
                    index = i;
                    if e["kind"] == "claim-created" {
                        seen.lock()
                            .await
                            .insert(e["alloc"].as_str().unwrap().to_owned());
                    }
                }
                if last_pass && events.as_array().unwrap().is_empty() {
                    return index;
                }
                last_pass = stop.load(Ordering::SeqCst);
            }
        })
    };
    let progress = |n: usize| {
        let acked = acked.clone();
        async move {
            let from = acked.lock().await.len();
            eventually(
                &format!("{n} more claims"),
                Duration::from_secs(60),
                || async { (acked.lock().await.len() >= from + n).then_some(()) },
            )
            .await;
        }
    };
    progress(20).await;

    // B runs release N+1 on the cluster's schema N; A reads what B writes.
    tokio::task::block_in_place(|| b.restart_with_env(&[NEXT]));
    assert_eq!(schema(&b.api()).await, (n, n + 1), "N+1 runs on schema N");
    register_volume(&b.api(), "written-by-next", "single-node-writer").await;
    let (status, v) = a.api().get("/v1/volumes/written-by-next").await;
    assert_eq!(status, 200, "release N reads what N+1 wrote: {v}");
    progress(20).await;

    // The gate stays down while A runs release N.
    let (status, out) = upgrade(&etcd, "finalize", true);
    assert!(
        !status.success(),
        "finalized with a server of release N: {out}"
    );
    assert!(out.contains(&a.url), "names the server that lags: {out}");
    assert!(
        out.contains(&format!("do not know schema version {}", n + 1)),
        "{out}"
    );

    // A rollback before the gate is just starting release N again.
    tokio::task::block_in_place(|| b.restart_with_env(&[]));
    assert_eq!(schema(&b.api()).await, (n, n));
    progress(20).await;

    // Forward again, one server at a time; then the gate.
    tokio::task::block_in_place(|| b.restart_with_env(&[NEXT]));
    progress(10).await;
    tokio::task::block_in_place(|| a.restart_with_env(&[NEXT]));
    progress(10).await;
    let (status, out) = upgrade(&etcd, "status", true);
    assert!(status.success(), "{out}");
    assert!(out.contains(&format!("schema version {n}")), "{out}");
    assert!(out.contains("upgrade finalize"), "{out}");
    let (status, out) = upgrade(&etcd, "finalize", true);
    assert!(status.success(), "{out}");
    assert!(
        out.contains(&format!("schema version {} now", n + 1)),
        "{out}"
    );
    for s in [&a, &b] {
        eventually("each server to migrate its copy", WAIT, || async {
            (schema(&s.api()).await == (n + 1, n + 1)).then_some(())
        })
        .await;
    }
    progress(20).await;
    let (status, out) = upgrade(&etcd, "finalize", true);
    assert!(
        status.success() && out.contains("nothing to finalize"),
        "{out}"
    );

    // After the gate, release N is refused at start.
    let mut old = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    old.arg("serve")
        .arg(format!("--data-dir={}", dir.join("old").display()))
        .arg("--listen=127.0.0.1:0")
        .args(&common);
    let (status, out) = csivol_tests::run_to_exit("csivol-server serve", old, WAIT);
    assert!(!status.success(), "{out}");
    assert!(out.contains("newer than this csivol-server knows"), "{out}");

    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.await.unwrap();
    }
    let last = follower.await.unwrap();
    let refused = refused.lock().await.clone();
    assert!(
        refused.is_empty(),
        "requests refused during the upgrade: {refused:?}"
    );
    let acked = acked.lock().await.clone();
    let seen = seen.lock().await.clone();
    let missed: Vec<_> = acked.iter().filter(|a| !seen.contains(*a)).collect();
    assert!(
        missed.is_empty(),
        "the blocking query missed claims: {missed:?}"
    );
    eprintln!(
        "{} claims through the upgrade, all seen by the blocking query (up to index {last})",
        acked.len()
    );

    // The state was migrated: every volume of before the gate has the new column filled.
    let raw = a.api().send("GET", "/v1/backup", None).await.unwrap();
    assert_eq!(raw.status.as_u16(), 200);
    let file = dir.join("after.db");
    std::fs::write(&file, &raw.body).unwrap();
    let conn = rusqlite::Connection::open(&file).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, n + 1);
    let unfilled: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM volumes WHERE upgrade_probe IS NOT 'migrated'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(unfilled, 0, "every volume migrated");

    // Answers of release N+1 read by the types of a release that knows fewer fields.
    let mut volume = a.api().get("/v1/volumes/v0").await.1;
    let mut claims = a.api().get("/v1/claims").await.1;
    let mut health = a.api().get("/v1/health").await.1;
    for v in [&mut volume, &mut claims, &mut health] {
        with_unknown_fields(v);
    }
    serde_json::from_value::<csivol_api::Volume>(volume).expect("a volume");
    serde_json::from_value::<Vec<csivol_api::Claim>>(claims).expect("claims");
    serde_json::from_value::<csivol_api::Health>(health).expect("health");
}
