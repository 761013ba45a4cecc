//! Faults of a two-server cluster over a real 3-member etcd: the leading server killed
//! (-9) under a claim load or paused past its lease, etcd members killed, and a server
//! whose watch fell behind a compaction of etcd's history.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use csivol_tests::{Api, FakeAgent, ServerProc, eventually};
use serde_json::json;
use tokio::sync::Mutex;

use super::{WAIT, register_volume, two_nodes_and_volumes};
use csivol_tests::TestDir;
use csivol_tests::etcd::{Ha, start_ha};

/// What a server logs when it takes the lead.
const LEADS: &str = "this server leads now";

/// One claim sent by the load: volume, alloc, HTTP status (0: no answer) and error code.
pub(super) type Sent = (String, String, u16, String);

/// Claims one of `volumes` volumes at a time, from both APIs in turn, until `stop`.
fn load(
    apis: [Api; 2],
    volumes: usize,
    tasks: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|t| {
            let (apis, stop, sent) = (apis.clone(), stop.clone(), sent.clone());
            tokio::spawn(async move {
                let mut k = 0;
                while !stop.load(Ordering::SeqCst) {
                    let volume = format!("v{}", (k * 7 + t) % volumes);
                    let alloc = format!("a{t}-{k}");
                    let node = if k % 2 == 0 { "n1" } else { "n2" };
                    let body = json!({"alloc": alloc, "node": node, "mode": "write"});
                    let api = &apis[(k + t) % 2];
                    let path = format!("/v1/volumes/{volume}/claims");
                    let (status, code) = match api.send("POST", &path, Some(body)).await {
                        Ok(raw) => {
                            let v: serde_json::Value =
                                serde_json::from_slice(&raw.body).unwrap_or_default();
                            let code = v["error"]["code"].as_str().unwrap_or("").to_owned();
                            (raw.status.as_u16(), code)
                        }
                        Err(_) => (0, String::new()),
                    };
                    sent.lock().await.push((volume, alloc, status, code));
                    k += 1;
                }
            })
        })
        .collect()
}

/// Every acknowledged claim is on `api`, and no volume has two claims or two acks.
pub(super) async fn check_nothing_lost_nothing_twice(
    api: &Api,
    sent: &[Sent],
    volumes: usize,
) -> usize {
    let mut acked: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (v, a, status, code) in sent {
        assert!(
            [0, 201, 409, 503].contains(status),
            "unexpected answer {status} {code} for {v}/{a}"
        );
        if *status == 201 {
            acked.entry(v).or_default().insert(a);
        }
    }
    for (v, allocs) in &acked {
        assert_eq!(
            allocs.len(),
            1,
            "{v} was granted to two writers: {allocs:?}"
        );
        let a = allocs.iter().next().unwrap();
        let (status, c) = api.get(&format!("/v1/volumes/{v}/claims/{a}")).await;
        assert_eq!(status, 200, "acknowledged claim {v}/{a} is gone: {c}");
    }
    for i in 0..volumes {
        let (_, v) = api.get(&format!("/v1/volumes/v{i}")).await;
        let n = v["claims"].as_array().map_or(0, Vec::len);
        assert!(n <= 1, "v{i} has {n} claims: {v}");
    }
    acked.len()
}

pub(super) async fn wait_sent(sent: &Mutex<Vec<Sent>>, n: usize) {
    eventually(&format!("{n} claims sent"), WAIT, || async {
        (sent.lock().await.len() >= n).then_some(())
    })
    .await;
}

#[tokio::test]
async fn killing_the_leading_server_moves_its_work_and_loses_nothing() {
    let dir = TestDir::new("ha-leader-kill");
    let lease_ttl = Duration::from_secs(2);
    let Ha { etcd: _etcd, a, b } = start_ha(&dir, &["--heartbeat-ttl=3s", "--etcd-lease-ttl=2s"]);
    let leader_is_a = eventually("a leader", WAIT, || async {
        if a.log().contains(LEADS) {
            Some(true)
        } else if b.log().contains(LEADS) {
            Some(false)
        } else {
            None
        }
    })
    .await;
    let (mut leader, survivor): (ServerProc, ServerProc) =
        if leader_is_a { (a, b) } else { (b, a) };
    let s = survivor.api();
    // The nodes heartbeat to the server that stays: taking over must not lose them.
    let n1 = FakeAgent::new(&survivor, "n1").await;
    n1.register(0, false, json!([])).await;
    let _n1_beating = n1.keep_alive();
    let n2 = FakeAgent::new(&survivor, "n2").await;
    n2.register(0, false, json!([])).await;
    let n2_beating = n2.keep_alive();
    let volumes = 24;
    for i in 0..volumes {
        register_volume(&s, &format!("v{i}"), "multi-node-single-writer").await;
    }
    eventually("the leader to see every volume", WAIT, || async {
        let v = format!("/v1/volumes/v{}", volumes - 1);
        (leader.api().get(&v).await.0 == 200).then_some(())
    })
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let tasks = load(
        [leader.api(), s.clone()],
        volumes,
        8,
        stop.clone(),
        sent.clone(),
    );
    wait_sent(&sent, 40).await;
    leader.proc.kill();
    let killed = Instant::now();
    let before = sent.lock().await.len();
    eventually("the other server to take the lead", WAIT, || async {
        survivor.log().contains(LEADS).then_some(())
    })
    .await;
    let takeover = killed.elapsed();
    // A client given both servers (the dead one first, as an agent or the CLI would be)
    // carries on through the other.
    let both = Api::new(
        &format!("{},{}", leader.url, survivor.url),
        Some(&survivor.token),
    );
    let (status, body) = both.get("/v1/volumes/v0").await;
    assert_eq!(status, 200, "{body}");
    wait_sent(&sent, before + 40).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let sent = sent.lock().await.clone();
    let acked = check_nothing_lost_nothing_twice(&s, &sent, volumes).await;
    eprintln!(
        "takeover after kill -9: {takeover:?} (lease TTL {lease_ttl:?}); {} claims sent, {acked} volumes granted",
        sent.len()
    );
    assert!(acked > 0);
    // Within the bound (lease TTL + 1 s), with slack for a loaded 2-vCPU test machine.
    assert!(
        takeover < lease_ttl + Duration::from_secs(3),
        "took {takeover:?} to take over"
    );
    for n in ["n1", "n2"] {
        let (_, node) = s.get(&format!("/v1/nodes/{n}")).await;
        assert_eq!(
            node["status"], "ready",
            "no node is lost by a takeover: {node}"
        );
    }
    // The new leader detects a node loss as the old one would have.
    drop(n2_beating);
    eventually("n2 lost through the new leader", WAIT, || async {
        let (_, node) = s.get("/v1/nodes/n2").await;
        (node["status"] == "lost").then_some(())
    })
    .await;
    let (_, node) = s.get("/v1/nodes/n1").await;
    assert_eq!(node["status"], "ready");
    // Its claims are blocked, and an operator unblocks them through the new leader.
    let on_n2: Vec<(String, String)> = sent
        .iter()
        .filter(|(_, a, status, _)| *status == 201 && claim_node(a) == "n2")
        .map(|(v, a, _, _)| (v.clone(), a.clone()))
        .collect();
    assert!(!on_n2.is_empty(), "the load put claims on n2");
    for (v, a) in &on_n2 {
        eventually(&format!("{v}/{a} blocked"), WAIT, || async {
            let (_, c) = s.get(&format!("/v1/volumes/{v}/claims/{a}")).await;
            (c["state"] == "blocked").then_some(())
        })
        .await;
    }
    let (status, plan) = s
        .post(
            "/v1/nodes/n2/unblock",
            json!({"reason": "n2 is powered off"}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    for (v, a) in &on_n2 {
        let (status, c) = s.get(&format!("/v1/volumes/{v}/claims/{a}")).await;
        assert_eq!(status, 404, "{v}/{a} force-released: {c}");
    }
}

/// The node the load claimed `alloc` on (`a<task>-<k>`: n1 for even k).
fn claim_node(alloc: &str) -> &'static str {
    let k: u64 = alloc.rsplit('-').next().unwrap().parse().unwrap();
    if k.is_multiple_of(2) { "n1" } else { "n2" }
}

#[tokio::test]
async fn etcd_member_loss_keeps_serving_and_no_quorum_refuses() {
    let dir = TestDir::new("ha-etcd-loss");
    let Ha { mut etcd, a, b } = start_ha(&dir, &[]);
    let (aa, bb) = (a.api(), b.api());
    let volumes = 24;
    two_nodes_and_volumes(&a, &aa, volumes, "multi-node-single-writer").await;
    eventually("B to see every volume", WAIT, || async {
        let v = format!("/v1/volumes/v{}", volumes - 1);
        (bb.get(&v).await.0 == 200).then_some(())
    })
    .await;

    // One member killed under load: service goes on.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let tasks = load(
        [aa.clone(), bb.clone()],
        volumes,
        6,
        stop.clone(),
        sent.clone(),
    );
    wait_sent(&sent, 30).await;
    etcd.kill(0);
    let before = sent.lock().await.len();
    wait_sent(&sent, before + 60).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let sent = sent.lock().await.clone();
    let late_ok = sent[before..]
        .iter()
        .filter(|s| s.2 == 201 || s.2 == 409)
        .count();
    assert!(
        late_ok > 0,
        "answers after a member died: {:?}",
        &sent[before..]
    );
    check_nothing_lost_nothing_twice(&bb, &sent, volumes).await;
    register_volume(&bb, "after-one", "single-node-writer").await;

    // Two of three gone: no quorum, writes are refused as unavailable, nothing acknowledged.
    etcd.kill(1);
    let (status, body) = aa
        .put(
            "/v1/volumes/no-quorum",
            json!({"plugin": "hp", "external_id": "x", "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "unavailable", "{body}");
    // The CLI says so with its exit code for an unavailable server (8).
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol"));
    cmd.args([
        "token",
        "create",
        "--role",
        "operator",
        "--name",
        "no-quorum",
    ])
    .env_clear()
    .env("CSIVOL_ADDR", &a.url)
    .env("CSIVOL_TOKEN", &a.token)
    .env("HOME", dir.join("home"))
    .stdin(std::process::Stdio::null());
    let (exit, out) = csivol_tests::run_to_exit("csivol token create", cmd, WAIT);
    assert_eq!(exit.code(), Some(8), "{out}");
    assert!(out.contains("unavailable") || out.contains("etcd"), "{out}");

    // Back: service resumes, and the refused write did not land behind the refusal.
    etcd.restart(0);
    etcd.restart(1);
    etcd.wait_healthy();
    eventually("writes to be accepted again", WAIT, || async {
        let (status, _) = bb
            .put(
                "/v1/volumes/after-quorum",
                json!({"plugin": "hp", "external_id": "y", "access_mode": "single-node-writer", "attachment": "file-system"}),
            )
            .await;
        (status == 201).then_some(())
    })
    .await;
    check_nothing_lost_nothing_twice(&aa, &sent, volumes).await;
    assert_eq!(aa.get("/v1/volumes/after-one").await.0, 200);
}

#[tokio::test]
async fn a_paused_leader_steps_down_and_records_no_false_loss() {
    let dir = TestDir::new("ha-paused-leader");
    let Ha { etcd: _etcd, a, b } = start_ha(&dir, &["--heartbeat-ttl=3s", "--etcd-lease-ttl=2s"]);
    let leader_is_a = eventually("a leader", WAIT, || async {
        if a.log().contains(LEADS) {
            Some(true)
        } else if b.log().contains(LEADS) {
            Some(false)
        } else {
            None
        }
    })
    .await;
    let (leader, other) = if leader_is_a { (a, b) } else { (b, a) };
    let o = other.api();
    let n1 = FakeAgent::new(&other, "n1").await;
    n1.register(0, false, json!([])).await;
    let _beating = n1.keep_alive();
    eventually("the leader to know n1", WAIT, || async {
        (leader.api().get("/v1/nodes/n1").await.0 == 200).then_some(())
    })
    .await;

    // Paused past its lease and past the heartbeat TTL: when it resumes, its clocks say n1
    // has been silent, but it no longer leads, and its loss must not be recorded.
    let pid = rustix::process::Pid::from_raw(leader.proc.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let stopped = Instant::now();
    eventually("the other server to take the lead", WAIT, || async {
        other.log().contains(LEADS).then_some(())
    })
    .await;
    while stopped.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    eventually("the paused server to step down", WAIT, || async {
        leader.log().contains("lost the leader lease").then_some(())
    })
    .await;
    let resumed = Instant::now();
    while resumed.elapsed() < Duration::from_secs(2) {
        let (_, n) = o.get("/v1/nodes/n1").await;
        assert_eq!(
            n["status"], "ready",
            "a deposed leader recorded a loss: {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_server_whose_watch_fell_behind_a_compaction_reloads_its_mirror() {
    let dir = TestDir::new("ha-compaction");
    let Ha { mut etcd, a, b } = start_ha(&dir, &[]);
    let (aa, bb) = (a.api(), b.api());
    register_volume(&aa, "before", "single-node-writer").await;
    eventually("B to see the first volume", WAIT, || async {
        (bb.get("/v1/volumes/before").await.0 == 200).then_some(())
    })
    .await;

    // B is paused; every member is restarted (B's watch connection is gone, so nothing
    // more reaches it), then A writes and etcd's history is compacted past what B saw:
    // resumed, B must watch again from a compacted revision.
    let pid = rustix::process::Pid::from_raw(b.proc.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    for i in 0..3 {
        etcd.restart(i);
        etcd.wait_healthy();
    }
    for i in 0..5 {
        register_volume(&aa, &format!("during-{i}"), "single-node-writer").await;
    }
    let endpoints: Vec<String> = etcd.members.iter().map(|m| m.client_url.clone()).collect();
    let client = csivol_etcd_client::Client::new(&endpoints).unwrap();
    let (rev, _) = client.get(b"/csivol/d/head").await.unwrap();
    client.compact(rev).await.unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();

    eventually(
        "B to see what A wrote while it was behind",
        WAIT,
        || async { (bb.get("/v1/volumes/during-4").await.0 == 200).then_some(()) },
    )
    .await;
    assert!(
        b.log().contains("reloading"),
        "B reloaded its mirror:\n{}",
        b.log()
    );
    // And B writes on top of the reloaded state, seen by A.
    register_volume(&bb, "after", "single-node-writer").await;
    eventually("A to see B's write", WAIT, || async {
        (aa.get("/v1/volumes/after").await.0 == 200).then_some(())
    })
    .await;
}
