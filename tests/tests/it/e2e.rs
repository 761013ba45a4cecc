//! End-to-end scenarios: the journeys operators and CI pipelines take, failures included,
//! with real binaries, real unix sockets and real bind mounts. Each asserts on the CLI's exit
//! codes and JSON and on the real mount table, never on logs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use csivol_tests::wait_for;
use serde_json::Value;

use crate::cluster::{Cluster, NodeOpts, Out, mounted};

const WAIT: Duration = Duration::from_secs(60);

fn nodes(n: usize) -> Vec<NodeOpts> {
    vec![NodeOpts::default(); n]
}

/// `csivol volume create` from a TOML spec file, waiting until the volume exists.
pub fn create_volume(c: &Cluster, name: &str, mode: &str) {
    c.create_volume_spec(
        name,
        &format!(
            "name = \"{name}\"\nplugin = \"{}\"\naccess_mode = \"{mode}\"\nattachment = \"file-system\"\ncapacity_bytes = 1048576\n",
            crate::cluster::PLUGIN
        ),
    );
}

fn claim(c: &Cluster, volume: &str, node: &str, alloc: &str) -> Out {
    c.csivol(&[
        "claim",
        volume,
        "--node",
        node,
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ])
}

fn release(c: &Cluster, volume: &str, alloc: &str) -> Out {
    c.csivol(&[
        "release",
        volume,
        "--alloc",
        alloc,
        "--wait",
        "--timeout",
        "60s",
        "-o",
        "json",
    ])
}

fn volume(c: &Cluster, name: &str) -> Value {
    c.csivol(&["volume", "show", name, "-o", "json"])
        .ok()
        .json()
}

fn wait_volume_state(c: &Cluster, name: &str, state: &str) -> Value {
    wait_for(&format!("volume {name} to be {state}"), WAIT, || {
        let v = volume(c, name);
        (v["state"] == state).then_some(v)
    })
}

fn target(claim: &Out) -> PathBuf {
    PathBuf::from(
        claim.json()["target_path"]
            .as_str()
            .expect("a ready claim has a target path"),
    )
}

/// Scenario 1: A CI job creates a volume, claims it, writes its results, releases it; a later job
/// on another node claims it and reads them back.
#[test]
fn ci_pipeline_journey() {
    let c = Cluster::start("ci", "30s", nodes(2));
    create_volume(&c, "ci-cache", "single-node-writer");
    let first = claim(&c, "ci-cache", "node-1", "job-1");
    assert_eq!(first.ok().json()["state"], "ready");
    let t1 = target(&first);
    assert!(mounted(&t1), "{} is a real mount", t1.display());
    std::fs::write(t1.join("result.txt"), "built by job-1").unwrap();
    release(&c, "ci-cache", "job-1").ok();
    assert!(!mounted(&t1), "released: unmounted");

    let second = claim(&c, "ci-cache", "node-2", "job-2");
    assert_eq!(second.ok().json()["node"], "node-2");
    let t2 = target(&second);
    assert_eq!(
        std::fs::read_to_string(t2.join("result.txt")).unwrap(),
        "built by job-1"
    );
    release(&c, "ci-cache", "job-2").ok();
    wait_volume_state(&c, "ci-cache", "free");
    assert!(
        c.all_mounts().is_empty(),
        "nothing left mounted: {:?}",
        c.all_mounts()
    );
}

/// Scenario 2: A single-node-writer volume held on node-1 refuses a writer on node-2 (exit 4, naming
/// the holder) until it is released.
#[test]
fn single_writer_conflict_then_handover() {
    let c = Cluster::start("conflict", "30s", nodes(2));
    create_volume(&c, "db", "single-node-writer");
    claim(&c, "db", "node-1", "a1").ok();
    let refused = c.csivol(&["claim", "db", "--node", "node-2", "--alloc", "a2"]);
    assert_eq!(refused.code, 4, "{refused:?}");
    assert!(
        refused.stderr.contains("a1") && refused.stderr.contains("node-1"),
        "names the holder: {refused:?}"
    );
    release(&c, "db", "a1").ok();
    let handed = claim(&c, "db", "node-2", "a2");
    assert_eq!(handed.ok().json()["state"], "ready");
    assert!(mounted(&target(&handed)));
}

/// Scenario 3: A node dies holding a volume: the volume is blocked until an operator unblocks it;
/// the unblock force-detaches through the controller; the dead node's leftovers are cleaned
/// up when its agent comes back.
#[test]
fn node_failure_blocks_until_unblocked() {
    let mut c = Cluster::start("node-failure", "2s", nodes(2));
    create_volume(&c, "vol", "single-node-writer");
    let held = claim(&c, "vol", "node-2", "a1");
    let t = target(held.ok());
    c.kill_agent(1);
    wait_volume_state(&c, "vol", "blocked");

    let blocked = c.csivol(&["status", "--blocked"]);
    assert_eq!(blocked.code, 6, "{blocked:?}");
    assert!(
        blocked.stdout.contains("csivol unblock vol"),
        "shows the command: {blocked:?}"
    );
    let refused = c.csivol(&["claim", "vol", "--node", "node-1", "--alloc", "a2"]);
    assert_eq!(refused.code, 6, "{refused:?}");

    let unblock = c.csivol(&[
        "unblock",
        "vol",
        "--yes",
        "--reason",
        "node-2 lost power",
        "-o",
        "json",
    ]);
    unblock.ok();
    let taken = claim(&c, "vol", "node-1", "a2");
    assert_eq!(taken.ok().json()["state"], "ready");
    let unpublished = c
        .nodes
        .iter()
        .flat_map(|n| n.plugin_calls())
        .any(|call| call["rpc"] == "ControllerUnpublishVolume" && call["code"] == "OK");
    assert!(
        unpublished,
        "the plugin's controller saw ControllerUnpublishVolume"
    );
    assert_eq!(c.csivol(&["status", "--blocked"]).code, 0);
    assert!(mounted(&t), "the dead agent's mount is still there");

    c.start_agent(1);
    wait_for("node-2's leftover mounts to be cleaned up", WAIT, || {
        c.nodes[1].mounts().is_empty().then_some(())
    });
    assert!(!mounted(&t));
    assert!(mounted(&target(&taken)), "node-1's claim is untouched");
}

/// Scenario 4: A lost node that comes back with the volume still mounted resumes the claim
/// nobody released (its workload may still run), untouched; it is released the normal way.
#[test]
fn lost_node_returns_and_resumes_its_claim() {
    let mut c = Cluster::start("node-returns", "2s", nodes(2));
    create_volume(&c, "vol", "single-node-writer");
    let held = claim(&c, "vol", "node-2", "a1");
    let t = target(held.ok());
    std::fs::write(t.join("work.txt"), "in progress").unwrap();
    c.kill_agent(1);
    c.wait_node_status(1, "lost");
    assert_eq!(volume(&c, "vol")["state"], "blocked");
    c.start_agent(1);
    let v = wait_volume_state(&c, "vol", "attached");
    assert_eq!(v["claims"][0]["state"], "ready", "{v}");
    assert!(mounted(&t), "the mount was kept");
    assert_eq!(
        std::fs::read_to_string(t.join("work.txt")).unwrap(),
        "in progress"
    );
    let events = c
        .csivol(&["events", "--volume", "vol", "-o", "json"])
        .ok()
        .json();
    let resumed = events
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "claim-resumed" && e["actor"] == "node:node-2");
    assert!(resumed, "the event log says node-2 resumed it: {events}");
    let node_events = c
        .csivol(&["events", "--node", "node-2", "-o", "json"])
        .ok()
        .json();
    assert!(
        node_events.to_string().contains("node-returned"),
        "{node_events}"
    );
    release(&c, "vol", "a1").ok();
    wait_volume_state(&c, "vol", "free");
    assert!(!mounted(&t));
    assert_eq!(
        c.csivol(&["claim", "vol", "--node", "node-2", "--alloc", "again"])
            .code,
        0,
        "free again"
    );
}

/// Scenario 5: An agent that loses the server for its fence time takes its volumes down by itself,
/// and says so when the server is back.
#[test]
fn agent_fences_itself_without_the_server() {
    let opts = NodeOpts {
        agent_args: vec!["--fence-after=2s".into()],
        ..Default::default()
    };
    let mut c = Cluster::start("fence", "30s", vec![opts]);
    create_volume(&c, "vol", "single-node-writer");
    let held = claim(&c, "vol", "node-1", "a1");
    let t = target(held.ok());
    c.kill_server();
    // Unpublished, then unstaged: everything the node had mounted goes.
    wait_for("the agent to fence itself", WAIT, || {
        c.nodes[0].mounts().is_empty().then_some(())
    });
    assert!(!mounted(&t));
    c.start_server();
    let node = wait_for("the fence to be reported", WAIT, || {
        let out = c.csivol(&["node", "show", "node-1", "-o", "json"]);
        (out.code == 0 && out.json()["fenced_at"].is_string()).then(|| out.json())
    });
    assert_eq!(node["fence_after"], "2s");
    let events = c
        .csivol(&["events", "--node", "node-1", "-o", "json"])
        .ok()
        .json();
    assert!(events.to_string().contains("node-fenced"), "{events}");
}

/// Scenario 6: The server is killed while 50 claims and releases are under way; after a restart,
/// every acknowledged operation completes and the state matches the mount tables.
#[test]
fn server_restart_in_the_middle_of_claims() {
    let c = Cluster::start("restart", "30s", nodes(2));
    let n = 25;
    for i in 0..n * 2 {
        create_volume(&c, &format!("v{i}"), "multi-node-multi-writer");
    }
    for i in 0..n {
        claim(
            &c,
            &format!("v{i}"),
            &format!("node-{}", i % 2 + 1),
            &format!("a{i}"),
        )
        .ok();
    }
    let c = Arc::new(std::sync::Mutex::new(c));
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..n * 2)
        .map(|i| {
            let c = Arc::clone(&c);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let args: Vec<String> = if i < n {
                    vec![
                        "release".into(),
                        format!("v{i}"),
                        "--alloc".into(),
                        format!("a{i}"),
                    ]
                } else {
                    vec![
                        "claim".into(),
                        format!("v{i}"),
                        "--node".into(),
                        format!("node-{}", i % 2 + 1),
                        "--alloc".into(),
                        format!("a{i}"),
                    ]
                };
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let cmd = {
                    let g = c.lock().unwrap();
                    g.command(Some(&g.token), &args)
                };
                let out = crate::cluster::run(cmd);
                done.fetch_add(1, Ordering::SeqCst);
                (i, out)
            })
        })
        .collect();
    wait_for("some operations acknowledged", WAIT, || {
        (done.load(Ordering::SeqCst) >= 10).then_some(())
    });
    c.lock().unwrap().kill_server();
    c.lock().unwrap().start_server();
    let results: Vec<(usize, Out)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let c = Arc::try_unwrap(c).ok().unwrap().into_inner().unwrap();
    let acknowledged = results.iter().filter(|(_, o)| o.code == 0).count();
    assert!(acknowledged >= 10, "only {acknowledged} acknowledged");
    for (i, out) in &results {
        if out.code != 0 {
            continue;
        }
        let name = format!("v{i}");
        let alloc = format!("a{i}");
        wait_for(
            &format!("acknowledged operation on {name} to complete"),
            WAIT,
            || {
                let v = volume(&c, &name);
                let claims = v["claims"].as_array().unwrap();
                let mine = claims.iter().find(|cl| cl["alloc"] == alloc.as_str());
                let complete = if *i < n {
                    mine.is_none()
                } else {
                    mine.is_some_and(|cl| cl["state"] == "ready")
                };
                complete.then_some(())
            },
        );
    }
    // Let the rest settle, then compare the server's view with the real mount tables.
    wait_for("every claim to settle", WAIT, || {
        let all = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
        let settled = all.as_array().unwrap().iter().all(|v| {
            v["claims"]
                .as_array()
                .unwrap()
                .iter()
                .all(|cl| cl["state"] == "ready")
                && v["attachments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|a| a["state"] == "attached")
        });
        settled.then_some(())
    });
    let all = c.csivol(&["volume", "list", "-o", "json"]).ok().json();
    let mut expected_targets = Vec::new();
    for v in all.as_array().unwrap() {
        for cl in v["claims"].as_array().unwrap() {
            expected_targets.push(PathBuf::from(cl["target_path"].as_str().unwrap()));
        }
    }
    for t in &expected_targets {
        assert!(
            mounted(t),
            "a ready claim's target {} is mounted",
            t.display()
        );
    }
    let targets_mounted: Vec<_> = c
        .all_mounts()
        .into_iter()
        .filter(|m| m.to_string_lossy().contains("/targets/"))
        .collect();
    assert_eq!(
        targets_mounted.len(),
        expected_targets.len(),
        "no mount the server does not know of: {targets_mounted:?}"
    );
}

/// Scenario 7: A flaky, slow plugin: claims converge, and while they wait `status` shows the last
/// error and the next retry.
#[test]
fn slow_and_failing_plugin_converges_visibly() {
    let opts = NodeOpts {
        plugin_args: vec![
            "--fail=NodeStageVolume=UNAVAILABLE:4".into(),
            "--delay=NodePublishVolume=1s".into(),
        ],
        ..Default::default()
    };
    let c = Cluster::start("flaky", "30s", vec![opts]);
    create_volume(&c, "vol", "single-node-writer");
    c.csivol(&["claim", "vol", "--node", "node-1", "--alloc", "a1"])
        .ok();
    let seen = wait_for("the plugin's error to show", WAIT, || {
        let v = volume(&c, "vol");
        let cl = v["claims"][0].clone();
        let err = cl["error"].as_str().unwrap_or_default().to_owned();
        (err.contains("UNAVAILABLE") || cl["state"] == "ready").then_some(cl)
    });
    assert!(
        seen["error"]
            .as_str()
            .unwrap_or_default()
            .contains("UNAVAILABLE"),
        "status shows the error while it waits: {seen}"
    );
    assert!(
        seen["next_retry_at"].is_string(),
        "and when it retries: {seen}"
    );
    let status = c.csivol(&["status", "vol"]);
    assert_eq!(status.code, 0, "{status:?}");
    let ready = claim(&c, "vol", "node-1", "a1");
    assert_eq!(ready.ok().json()["state"], "ready");
    assert!(mounted(&target(&ready)));
}

/// Scenario 8: A node that takes two volumes refuses the third with a clear capacity message, and
/// takes it once one is released.
#[test]
fn capacity_refuses_then_fits() {
    let opts = NodeOpts {
        plugin_args: vec!["--max-volumes-per-node=2".into()],
        ..Default::default()
    };
    let c = Cluster::start("capacity", "30s", vec![opts]);
    for v in ["v1", "v2", "v3"] {
        create_volume(&c, v, "single-node-writer");
    }
    claim(&c, "v1", "node-1", "a1").ok();
    claim(&c, "v2", "node-1", "a2").ok();
    let full = c.csivol(&["claim", "v3", "--node", "node-1", "--alloc", "a3"]);
    assert_eq!(full.code, 4, "{full:?}");
    assert!(full.stderr.contains("no free slot"), "{full:?}");
    release(&c, "v1", "a1").ok();
    wait_volume_state(&c, "v1", "free");
    assert_eq!(
        claim(&c, "v3", "node-1", "a3").ok().json()["state"],
        "ready"
    );
}

/// Scenario 9: Tokens: a node token cannot act for another node or as an operator, a reader cannot
/// claim, no token gets nothing; exit code 7 each time.
#[test]
fn tokens_and_roles() {
    let c = Cluster::start("auth", "30s", nodes(2));
    create_volume(&c, "vol", "single-node-writer");
    let node1 = c.node_token("node-1");
    let as_node = c.csivol_as(
        Some(&node1),
        &["claim", "vol", "--node", "node-1", "--alloc", "x"],
    );
    assert_eq!(as_node.code, 7, "{as_node:?}");
    let other_node = c.csivol_as(Some(&node1), &["node", "show", "node-2"]);
    assert_eq!(other_node.code, 7, "{other_node:?}");
    let reader = c
        .csivol(&["token", "create", "--role", "reader", "-o", "json"])
        .ok()
        .json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(c.csivol_as(Some(&reader), &["volume", "list"]).code, 0);
    let as_reader = c.csivol_as(
        Some(&reader),
        &["claim", "vol", "--node", "node-1", "--alloc", "x"],
    );
    assert_eq!(as_reader.code, 7, "{as_reader:?}");
    let anonymous = c.csivol_as(None, &["volume", "list"]);
    assert_eq!(anonymous.code, 7, "{anonymous:?}");
    // At the API: node-1's token is refused for node-2's agent endpoints.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (status, _) = rt.block_on(
        c.api()
            .with_token(Some(&node1))
            .post("/v1/nodes/node-2/heartbeat", serde_json::json!({})),
    );
    assert_eq!(status, 403);
}
