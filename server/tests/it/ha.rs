//! Several servers over one real 3-member etcd cluster (`--store etcd`): either server
//! serves every call, a blocking query on one wakes on a write through the other, tokens
//! made on one work on the other, and concurrent writers split across both still give one
//! winner.

use std::time::{Duration, Instant};

use csivol_tests::etcd::{EtcdCluster, start_ha};
use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::json;

use super::{WAIT, claim, claim_state, register_volume};

async fn node_status(api: &Api, node: &str) -> String {
    let (status, n) = api.get(&format!("/v1/nodes/{node}")).await;
    assert_eq!(status, 200, "{n}");
    n["status"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn two_servers_over_etcd_serve_one_cluster() {
    let dir = TestDir::new("ha-two-servers");
    let ha = start_ha(&dir, &["--heartbeat-ttl=3s"]);
    let (a, b) = (ha.a.api(), ha.b.api());
    let started = Instant::now();

    // The node's token is made through A and used through B once B has loaded it.
    let n1 = FakeAgent::new(&ha.a, "n1").await;
    n1.register(0, true, json!([])).await;
    let _beating = n1.keep_alive();
    let n1_on_b = FakeAgent {
        api: b.with_token(n1.api.token.as_deref()),
        node: "n1".into(),
    };
    register_volume(&a, "v1", "single-node-writer").await;
    eventually("B to see the volume made through A", WAIT, || async {
        (b.get("/v1/volumes/v1").await.0 == 200).then_some(())
    })
    .await;

    // Claimed through B; a blocking query on A wakes when B's next write lands.
    let (status, c) = claim(&b, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["state"], "attaching");
    let index = c["index"].as_u64().unwrap();
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            a.get(&format!("/v1/volumes/v1/claims/a1?index={index}&wait=20s"))
                .await
        })
    };
    let op = n1_on_b.wait_op("publish").await;
    let (status, body) = n1_on_b
        .api
        .post(
            "/v1/nodes/n1/reports",
            json!({"reports": [{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}]}),
        )
        .await;
    assert!(status < 300, "{status} {body}");
    let (status, woke) = waiter.await.unwrap();
    assert_eq!(status, 200, "{woke}");
    assert_eq!(woke["state"], "publishing");
    assert!(woke["index"].as_u64().unwrap() > index);

    // Ready through A, seen on B; released through B, seen by the node through A.
    n1.report(
        json!([{"kind": "published", "volume": "v1", "alloc": "a1", "target_path": "/mnt/a1"}]),
    )
    .await;
    eventually("B to see the claim ready", WAIT, || async {
        (claim_state(&b, "v1", "a1").await.as_deref() == Some("ready")).then_some(())
    })
    .await;
    let (status, body) = b.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    eventually(
        "the node to be told through A to unpublish",
        WAIT,
        || async {
            let d = n1.desired().await;
            (d["unpublish"][0]["alloc"] == "a1").then_some(())
        },
    )
    .await;

    // The node heartbeats to A only; whichever server leads, it is not lost.
    let ttl = Duration::from_secs(3);
    while started.elapsed() < 3 * ttl {
        assert_eq!(node_status(&a, "n1").await, "ready");
        assert_eq!(node_status(&b, "n1").await, "ready");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn sixty_four_writers_across_two_servers_one_wins() {
    let dir = TestDir::new("ha-race");
    let ha = start_ha(&dir, &[]);
    let (a, b) = (ha.a.api(), ha.b.api());
    for n in ["n1", "n2"] {
        FakeAgent::new(&ha.a, n)
            .await
            .register(0, false, json!([]))
            .await;
    }
    register_volume(&a, "v", "multi-node-single-writer").await;
    // Many writes at once through one server: committed together they would be more
    // operations than one etcd transaction holds by default (128), so they are split, and
    // every one is still accepted. Whether they arrive together is up to the scheduler, so
    // a burst is sent again (a few times at most) until one was.
    for burst in 0..5 {
        let registered: Vec<_> = (0..100)
            .map(|i| {
                let a = a.clone();
                tokio::spawn(async move {
                    register_volume(&a, &format!("many-{burst}-{i}"), "single-node-writer").await
                })
            })
            .collect();
        for r in registered {
            r.await.unwrap();
        }
        if ha.a.log().contains("committing in halves") {
            break;
        }
    }
    assert!(
        ha.a.log().contains("committing in halves"),
        "the writes were committed together and split"
    );
    eventually("B to see the volume", WAIT, || async {
        (b.get("/v1/volumes/v").await.0 == 200).then_some(())
    })
    .await;
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let api = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                claim(
                    &api,
                    "v",
                    &format!("alloc-{i}"),
                    if i % 4 < 2 { "n1" } else { "n2" },
                    "write",
                )
                .await
            })
        })
        .collect();
    let (mut created, mut conflicts) = (0, 0);
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            201 => created += 1,
            409 => {
                assert!(
                    body["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains("already has a writer"),
                    "{body}"
                );
                conflicts += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((created, conflicts), (1, 63));
    for api in [&a, &b] {
        eventually("both servers to show the one claim", WAIT, || async {
            let (_, v) = api.get("/v1/volumes/v").await;
            (v["claims"].as_array().map(Vec::len) == Some(1)).then_some(())
        })
        .await;
    }
}

#[tokio::test]
async fn migrating_a_single_server_into_etcd_keeps_everything() {
    let dir = TestDir::new("ha-migrate");
    let mut single = ServerProc::start(&dir.join("single"), &[]);
    let api = single.api();
    let n1 = FakeAgent::new(&single, "n1").await;
    n1.register(0, false, json!([])).await;
    register_volume(&api, "v1", "single-node-writer").await;
    let (status, c) = claim(&api, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let (status, t) = api
        .post("/v1/tokens", json!({"role": "claimer", "name": "ci"}))
        .await;
    assert_eq!(status, 201, "{t}");
    let (_, events_before) = api.get("/v1/events").await;
    single.proc.terminate(Duration::from_secs(10));

    let etcd = EtcdCluster::start(dir.path(), 3);
    let migrate = |extra: &[&str]| {
        let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
        cmd.args([
            "migrate",
            &format!("--from=sqlite:{}", single.data_dir.display()),
            &format!("--to=etcd:{}", etcd.endpoints()),
        ])
        .args(extra);
        csivol_tests::run_to_exit("migrate", cmd, Duration::from_secs(60))
    };
    let (status, out) = migrate(&[]);
    assert!(status.success(), "{out}");
    assert!(out.contains("verified"), "{out}");
    let (status, out) = migrate(&[]);
    assert!(
        !status.success(),
        "a second copy into a used prefix is refused: {out}"
    );
    assert!(out.contains("already holds"), "{out}");

    // A server over etcd serves the same cluster: the old tokens, volume, claim, events.
    let key = single.data_dir.join("secrets.key");
    let mut moved = ServerProc::start(
        &dir.join("moved"),
        &[
            "--store=etcd",
            &format!("--etcd-endpoints={}", etcd.endpoints()),
            &format!("--secrets-key-file={}", key.display()),
        ],
    );
    moved.token = single.token.clone();
    let m = moved.api();
    let (status, v) = m.get("/v1/volumes/v1").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["claims"][0]["alloc"], "a1");
    assert_eq!(v["secret_keys"], json!(["key"]));
    let (_, node) = m.get("/v1/nodes/n1").await;
    assert_eq!(node["name"], "n1");
    let ci = m.with_token(t["token"].as_str());
    assert_eq!(
        ci.get("/v1/volumes").await.0,
        200,
        "the claimer token works"
    );
    let (_, events_after) = m.get("/v1/events").await;
    let before = events_before.as_array().unwrap();
    assert!(!before.is_empty());
    let after = events_after.as_array().unwrap();
    for e in before {
        assert!(after.contains(e), "event {e} kept");
    }
    // A backup from a server over etcd is a consistent SQLite copy of the state.
    let raw = m.send("GET", "/v1/backup", None).await.unwrap();
    assert_eq!(raw.status.as_u16(), 200);
    assert!(raw.body.starts_with(b"SQLite format 3"), "a SQLite file");
    // And it takes new writes on top.
    let (status, c) = claim(&m, "v1", "a1", "n1", "write").await;
    assert!(status == 200 || status == 201, "{c}");
}

/// A 3-member etcd over TLS that requires client certificates, and the directory of the
/// certificates (`tls init`'s: `ca.pem`, and `node-csivol-server.pem` with its key for
/// the client).
pub(super) fn etcd_over_tls(dir: &TestDir) -> (EtcdCluster, std::path::PathBuf) {
    let certs = dir.join("tls");
    let mut init = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    init.args([
        "tls",
        "init",
        &format!("--dir={}", certs.display()),
        "--server-name=127.0.0.1",
        "--node=csivol-server",
    ]);
    let (status, out) = csivol_tests::run_to_exit("tls init", init, Duration::from_secs(30));
    assert!(status.success(), "{out}");
    let tls = csivol_tests::etcd::EtcdTls {
        ca: certs.join("ca.pem"),
        cert: certs.join("server.pem"),
        key: certs.join("server-key.pem"),
    };
    let etcd = EtcdCluster::start_with(dir.path(), 3, Some(&tls));
    assert!(etcd.endpoints().starts_with("https://"));
    (etcd, certs)
}

#[tokio::test]
async fn servers_reach_etcd_over_tls_with_a_client_certificate() {
    let dir = TestDir::new("ha-etcd-tls");
    let (etcd, certs) = etcd_over_tls(&dir);
    let common = [
        "--store=etcd".to_owned(),
        format!("--etcd-endpoints={}", etcd.endpoints()),
        format!("--etcd-ca-cert={}", certs.join("ca.pem").display()),
    ];
    // Without a client certificate etcd refuses the server, which then refuses to start.
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    cmd.arg("serve")
        .arg(format!("--data-dir={}", dir.join("refused").display()))
        .arg("--listen=127.0.0.1:0")
        .args(&common);
    let (status, out) = csivol_tests::run_to_exit("server", cmd, Duration::from_secs(60));
    assert!(!status.success(), "{out}");
    assert!(out.contains("etcd"), "{out}");

    let mut args: Vec<String> = common.to_vec();
    args.push(format!(
        "--secrets-key-file={}",
        dir.join("secrets.key").display()
    ));
    args.push(format!(
        "--etcd-cert={}",
        certs.join("node-csivol-server.pem").display()
    ));
    args.push(format!(
        "--etcd-key={}",
        certs.join("node-csivol-server-key.pem").display()
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = ServerProc::start(&dir.join("a"), &args);
    let mut b = ServerProc::start(&dir.join("b"), &args);
    b.token = a.token.clone();
    register_volume(&a.api(), "v1", "single-node-writer").await;
    eventually("B to see the volume over TLS", WAIT, || async {
        (b.api().get("/v1/volumes/v1").await.0 == 200).then_some(())
    })
    .await;
}

/// Servers over one etcd need one secrets key: a second server given another key is
/// refused at start, before anyone registers a volume with secrets it could not open.
#[tokio::test]
async fn a_server_with_another_secrets_key_is_refused() {
    let dir = TestDir::new("ha-secrets-key");
    let etcd = EtcdCluster::start(dir.path(), 1);
    let store = [
        "--store=etcd".to_owned(),
        format!("--etcd-endpoints={}", etcd.endpoints()),
    ];
    let mut args: Vec<String> = store.to_vec();
    args.push(format!(
        "--secrets-key-file={}",
        dir.join("a.key").display()
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = ServerProc::start(&dir.join("a"), &args);
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    cmd.args(["serve", "--listen=127.0.0.1:0"])
        .arg(format!("--data-dir={}", dir.join("b").display()))
        .arg(format!(
            "--secrets-key-file={}",
            dir.join("b.key").display()
        ))
        .args(&store);
    let (status, out) = csivol_tests::run_to_exit("csivol-server serve", cmd, WAIT);
    assert!(!status.success(), "the server started: {out}");
    assert!(
        out.contains("is not the one this cluster's secrets are sealed with"),
        "{out}"
    );
    assert_eq!(a.api().get("/v1/health").await.0, 200, "A serves on");
}

/// An operator's node labels are cluster state: set through one server, they choose and
/// fill the fence method on the other (both read the same `[[fence]]` config).
#[tokio::test]
async fn node_labels_set_through_one_server_fence_through_the_other() {
    let dir = TestDir::new("ha-node-labels");
    std::fs::write(
        dir.join("server.toml"),
        "[[fence]]\nname = \"ipmi\"\ncommand = [\"fence_ipmilan\", \"--ip\", \"{bmc}\"]\n",
    )
    .unwrap();
    let config = format!("--config={}", dir.join("server.toml").display());
    let ha = start_ha(&dir, &[&config]);
    let (a, b) = (ha.a.api(), ha.b.api());
    let n1 = FakeAgent::new(&ha.a, "n1").await;
    n1.register_labeled(0, false, json!([]), json!({"bmc": "10.6.6.6"}))
        .await;
    let (status, node) = a
        .post("/v1/nodes/n1/labels", json!({"set": {"bmc": "10.0.0.11"}}))
        .await;
    assert_eq!(status, 200, "{node}");
    let seen = eventually("B to see the label set through A", WAIT, || async {
        let (_, n) = b.get("/v1/nodes/n1").await;
        (n["labels"]["bmc"] == "10.0.0.11").then_some(n)
    })
    .await;
    assert_eq!(seen["fence_method"], "ipmi", "{seen}");
    let (status, plan) = b
        .post(
            "/v1/nodes/n1/fence",
            json!({"reason": "check", "dry_run": true, "force": true}),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        plan["command"],
        json!(["fence_ipmilan", "--ip", "10.0.0.11"])
    );
}

#[tokio::test]
async fn a_group_snapshot_asked_of_one_server_is_cut_and_deleted_through_the_other() {
    let dir = TestDir::new("ha-group-snapshot");
    let ha = start_ha(&dir, &["--heartbeat-ttl=5s"]);
    let (a, b) = (ha.a.api(), ha.b.api());
    // A controller host whose plugin's group controller can cut group snapshots.
    let n1 = FakeAgent::new(&ha.a, "n1").await;
    let (status, body) = n1
        .api
        .post(
            "/v1/nodes/n1/register",
            json!({"plugins": [{
                "id": "hp",
                "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
                "capabilities": {"controller_service": true, "volume_accessibility_constraints": false, "group_controller_service": true},
                "controller": {"create_delete_volume": true, "publish_unpublish_volume": false, "list_volumes": false, "list_volumes_published_nodes": false, "publish_readonly": false, "single_node_multi_writer": false, "create_delete_snapshot": true, "group_snapshots": true},
            }]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let _beating = n1.keep_alive();
    register_volume(&a, "v1", "single-node-writer").await;
    register_volume(&a, "v2", "single-node-writer").await;
    eventually(
        "B to see the volumes and the group controller",
        WAIT,
        || async {
            let (_, p) = b.get("/v1/plugins/hp").await;
            let (status, _) = b.get("/v1/volumes/v2").await;
            (status == 200 && p["group_snapshots"] == true).then_some(())
        },
    )
    .await;
    let (status, body) = b
        .put("/v1/group-snapshots/g", json!({"volumes": ["v1", "v2"]}))
        .await;
    assert_eq!(status, 202, "{body}");

    // Cut as the host reports through A; the group and its members are seen on B.
    let op = n1.wait_op("create_group_snapshot").await;
    assert_eq!(op["source_volume_ids"], json!(["ext-v1", "ext-v2"]), "{op}");
    let member = |v: &str| json!({"snapshot_id": format!("snap-{v}"), "source_volume_id": format!("ext-{v}"), "size_bytes": 0, "ready_to_use": true});
    n1.report(json!([{"kind": "group_snapshot_created", "op": op["id"], "attempt": op["attempt"],
        "group_snapshot_id": "group-1", "ready_to_use": true, "snapshots": [member("v1"), member("v2")]}]))
        .await;
    eventually(
        "B to see the group ready with its members",
        WAIT,
        || async {
            let (_, g) = b.get("/v1/group-snapshots/g").await;
            let names: Vec<_> = g["members"]
                .as_array()?
                .iter()
                .map(|m| m["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            (g["state"] == "ready" && names == ["g.v1", "g.v2"]).then_some(())
        },
    )
    .await;
    let (status, m) = b.get("/v1/snapshots/g.v2").await;
    assert_eq!((status, &m["group"]), (200, &json!("g")), "{m}");

    // A member alone is refused through A; the group is deleted through B.
    let (status, body) = a.delete("/v1/snapshots/g.v1").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (422, &json!("invalid")),
        "{body}"
    );
    let (status, body) = b.delete("/v1/group-snapshots/g").await;
    assert_eq!(status, 202, "{body}");
    let op = n1.wait_op("delete_group_snapshot").await;
    assert_eq!(op["snapshot_ids"], json!(["snap-v1", "snap-v2"]), "{op}");
    n1.report(
        json!([{"kind": "group_snapshot_deleted", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    eventually("B to see the group and its members gone", WAIT, || async {
        let (status, _) = b.get("/v1/group-snapshots/g").await;
        let (_, all) = b.get("/v1/snapshots").await;
        (status == 404 && all.as_array()?.is_empty()).then_some(())
    })
    .await;
}

/// Labels, pools and pool claims are rows of the replicated state like any other: a pool
/// made through A takes volumes labelled through A, a claim through B gets a member, and
/// the key its successful release records through A is what B chooses by next.
#[tokio::test]
async fn a_pool_made_through_one_server_is_claimed_from_through_the_other() {
    let dir = TestDir::new("ha-pools");
    let ha = start_ha(&dir, &[]);
    let (a, b) = (ha.a.api(), ha.b.api());
    let n1 = FakeAgent::new(&ha.a, "n1").await;
    n1.register(0, true, json!([])).await;
    let _beating = n1.keep_alive();
    for v in ["m1", "m2"] {
        register_volume(&a, v, "single-node-writer").await;
        let (status, body) = a
            .post(
                &format!("/v1/volumes/{v}/labels"),
                json!({"set": {"pool": "cache"}}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, p) = a
        .put("/v1/pools/cache", json!({"selector": {"pool": "cache"}}))
        .await;
    assert_eq!(status, 201, "{p}");
    let pool_claim = |api: Api, alloc: &'static str| async move {
        api.post(
            "/v1/pools/cache/claims",
            json!({"claim": {"alloc": alloc, "node": "n1", "mode": "write"}, "cache_key": "main"}),
        )
        .await
    };
    let c = eventually("B to claim from the pool made through A", WAIT, || async {
        let (status, c) = pool_claim(b.clone(), "a1").await;
        (status == 201).then_some(c)
    })
    .await;
    assert_eq!(
        (&c["volume"], &c["pool"]["choice"]),
        (&json!("m1"), &json!("cold")),
        "{c}"
    );
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}]))
        .await;
    n1.report(
        json!([{"kind": "published", "volume": "m1", "alloc": "a1", "target_path": "/mnt/a1"}]),
    )
    .await;
    eventually("the claim ready", WAIT, || async {
        (claim_state(&a, "m1", "a1").await.as_deref() == Some("ready")).then_some(())
    })
    .await;
    let (status, body) = a.delete("/v1/volumes/m1/claims/a1?succeeded=true").await;
    assert_eq!(status, 202, "{body}");
    n1.report(json!([{"kind": "unpublished", "volume": "m1", "alloc": "a1"}, {"kind": "unstaged", "volume": "m1"}]))
        .await;
    let op = n1.wait_op("unpublish").await;
    n1.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
    eventually("B to see m1's key and m1 free", WAIT, || async {
        let (_, p) = b.get("/v1/pools/cache").await;
        let m1 = &p["members"][0];
        (m1["cache_key"] == "main" && m1.get("holders").is_none() && m1.get("staged_on").is_none())
            .then_some(())
    })
    .await;
    let (status, c) = pool_claim(b.clone(), "a2").await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(
        (&c["volume"], &c["pool"]["choice"]),
        (&json!("m1"), &json!("same-key")),
        "{c}"
    );

    // The pool's line is replicated too: a claim that waits in it through B is listed
    // through A, and a member released through A goes to it.
    let (status, c) = pool_claim(a.clone(), "a3").await;
    assert_eq!((status, &c["volume"]), (201, &json!("m2")), "{c}");
    let (status, w) = b
        .post(
            "/v1/pools/cache/claims",
            json!({"claim": {"alloc": "a4", "node": "n1", "mode": "write", "queue": true}}),
        )
        .await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(
        (&w["volume"], &w["state"], &w["queue_position"]),
        (&json!(""), &json!("queued"), &json!(1)),
        "{w}"
    );
    eventually("A to list a4 in the pool's line", WAIT, || async {
        let (_, p) = a.get("/v1/pools/cache").await;
        (p["line"][0]["alloc"] == "a4").then_some(())
    })
    .await;
    let (status, body) = a.delete("/v1/volumes/m2/claims/a3").await;
    assert_eq!(status, 202, "{body}");
    n1.report(json!([{"kind": "unpublished", "volume": "m2", "alloc": "a3"}]))
        .await;
    let c = eventually("B to see a4 granted m2", WAIT, || async {
        let (status, c) = b.get("/v1/pools/cache/claims/a4").await;
        (status == 200 && c["volume"] == "m2").then_some(c)
    })
    .await;
    assert_eq!(c["pool"]["choice"], "cold", "{c}");
}
