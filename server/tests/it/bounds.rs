//! Nothing a client sends grows the state without bound or wraps a number: text and maps
//! are held to their limits (the CSI spec's for what reaches a plugin, the server's
//! `[limits]` for labels and reasons), numbers to their kind's range, the event log to its
//! bytes as well as its count; one backend volume has one name, and what an older server
//! recorded beyond these rules is kept and shown.

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::{Value, json};

use crate::{WAIT, start};

/// A 422 whose message starts with `want` (the field and its limit), with a hint.
#[track_caller]
fn refused(status: u16, body: &Value, want: &str) {
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(want), "want {want:?}, got {body}");
}

fn config(dir: &TestDir, text: &str) -> String {
    let path = dir.join("server.toml");
    std::fs::write(&path, text).unwrap();
    format!("--config={}", path.display())
}

fn spec(external_id: &str, extra: Value) -> Value {
    let mut spec = json!({"plugin": "hp", "external_id": external_id,
        "access_mode": "multi-node-multi-writer", "attachment": "file-system"});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

/// Node `n1` registered with plugin `hp` (no controller: claims go straight to its node)
/// and volume `v` that takes any number of claims.
async fn node_and_volume(server: &ServerProc, api: &Api) -> FakeAgent {
    let n1 = FakeAgent::new(server, "n1").await;
    n1.register(0, false, json!([])).await;
    let (status, body) = api.put("/v1/volumes/v", spec("ext-v", json!({}))).await;
    assert_eq!(status, 201, "{body}");
    n1
}

fn labels(n: usize, value: &str) -> Value {
    (0..n)
        .map(|i| (format!("k{i}"), json!(value)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[tokio::test]
async fn client_text_is_held_to_its_limits_and_the_error_names_them() {
    let dir = TestDir::new("bounds-text");
    let cfg = config(
        &dir,
        "[limits]\nclaim_label_bytes = 200\nreason_bytes = 64\n",
    );
    let server = start(&dir, &[&cfg]);
    let api = server.api();
    let _n1 = node_and_volume(&server, &api).await;
    let claim = |alloc: &str, labels: Value| json!({"alloc": alloc, "node": "n1", "mode": "write", "labels": labels});

    // A claimer's labels: a megabyte, too many of them, over the lowered byte limit, a
    // line separator; a dry run is held to them too.
    let (_, claimer) = api.post("/v1/tokens", json!({"role": "claimer"})).await;
    let ci = api.with_token(claimer["token"].as_str());
    let big = json!({"job": "x".repeat(1_000_000)});
    let (s, b) = ci
        .post("/v1/volumes/v/claims", claim("a1", big.clone()))
        .await;
    refused(
        s,
        &b,
        "`labels` holds 1000003 bytes, more than the 200 this server allows (`claim_label_bytes` in its [limits])",
    );
    assert!(
        b["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("claim_label_bytes"),
        "{b}"
    );
    let (s, b) = ci
        .post("/v1/volumes/v/claims", claim("a1", labels(33, "1")))
        .await;
    refused(
        s,
        &b,
        "`labels` holds 33 labels, more than the 32 this server allows",
    );
    let (s, b) = ci
        .post(
            "/v1/volumes/v/claims",
            claim("a1", json!({"job": "y".repeat(250)})),
        )
        .await;
    refused(s, &b, "`labels` holds 253 bytes, more than the 200");
    let mut dry = claim("a1", big);
    dry["dry_run"] = json!(true);
    let (s, b) = ci.post("/v1/volumes/v/claims", dry).await;
    refused(s, &b, "`labels` holds 1000003 bytes");
    let (s, b) = ci
        .post(
            "/v1/volumes/v/claims",
            claim("a1", json!({"job": "a\u{2028}b"})),
        )
        .await;
    refused(s, &b, "`labels.job` holds the control character U+2028");
    let (s, b) = ci
        .post(
            "/v1/volumes/v/claims",
            claim("a1", json!({"job": "y".repeat(190)})),
        )
        .await;
    assert_eq!(s, 201, "a label within the limit: {b}");

    // What goes to a plugin: the CSI spec's 128 bytes a string, 4 KiB a map.
    let cases = [
        (
            json!({"parameters": {"k": "v".repeat(5000)}}),
            "`parameters` holds 5001 bytes, more than the 4096 the CSI spec allows (its Size Limits)",
        ),
        (
            json!({"context": {"k": "v".repeat(4096)}}),
            "`context` holds 4097 bytes, more than the 4096",
        ),
        (
            json!({"secrets": {"password": "CLEARTEXT".repeat(500)}}),
            "`secrets` holds 4508 bytes, more than the 4096",
        ),
        (
            json!({"mount_flags": ["noatime".repeat(600)]}),
            "`mount_flags` holds 4200 bytes, more than the 4096",
        ),
        (
            json!({"topology": vec![json!({"zone": "a"}); 65]}),
            "`topology` holds 65 segments, more than the 64 csivol allows",
        ),
        (
            json!({"topology": [{"zone": "z".repeat(4096)}]}),
            "`topology` holds 4100 bytes, more than the 4096",
        ),
        (
            json!({"fs_type": "x".repeat(129)}),
            "`fs_type` holds 129 bytes, more than the 128 the CSI spec allows",
        ),
    ];
    for (extra, want) in cases {
        let (s, b) = api.put("/v1/volumes/w", spec("ext-w", extra)).await;
        refused(s, &b, want);
        assert!(
            !b.to_string().contains("CLEARTEXT"),
            "a secret is never echoed: {b}"
        );
    }
    let (s, b) = api
        .put("/v1/volumes/w", spec(&"e".repeat(129), json!({})))
        .await;
    refused(s, &b, "`external_id` holds 129 bytes, more than the 128");
    let (s, b) = api
        .post(
            "/v1/volumes/c/create",
            json!({"plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
                "mutable_parameters": {"iops": "9".repeat(4096)}}),
        )
        .await;
    refused(s, &b, "`mutable_parameters` holds 4100 bytes");
    let (s, b) = api
        .put(
            "/v1/snapshots/s",
            json!({"volume": "v", "parameters": {"k": "p".repeat(4096)}}),
        )
        .await;
    refused(s, &b, "`parameters` holds 4097 bytes");
    let (s, b) = api
        .post(
            "/v1/volumes/v/modify",
            json!({"parameters": {"k": "p".repeat(4096)}}),
        )
        .await;
    refused(s, &b, "`parameters` holds 4097 bytes");

    // An operator's reason, to the lowered limit.
    let long = "r".repeat(65);
    let (s, b) = api
        .post("/v1/volumes/v/unblock", json!({"reason": long}))
        .await;
    refused(
        s,
        &b,
        "`reason` holds 65 bytes, more than the 64 this server allows (`reason_bytes`",
    );
    let (s, b) = api
        .post(
            "/v1/volumes/v/detach",
            json!({"node": "n1", "reason": long}),
        )
        .await;
    refused(s, &b, "`reason` holds 65 bytes");
    let (s, b) = api
        .post("/v1/nodes/n1/fence", json!({"reason": long}))
        .await;
    refused(s, &b, "`reason` holds 65 bytes");

    // The state holds the one claim that fit, and no event echoes a refused request.
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["claims"].as_array().unwrap().len(), 1, "{v}");
    let (_, events) = api.get("/v1/events?limit=10000").await;
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["message"].as_str().unwrap().len() < 1000),
        "{events}"
    );
}

#[tokio::test]
async fn a_lowered_limit_above_the_default_is_refused_at_start() {
    let dir = TestDir::new("bounds-config");
    let cfg = config(&dir, "[limits]\nclaim_labels = 1000\n");
    let (status, out) = csivol_tests::run_to_exit(
        "csivol-server serve",
        {
            let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
            cmd.args([
                "serve",
                &format!("--data-dir={}", dir.join("server").display()),
                "--listen=127.0.0.1:0",
                &cfg,
            ]);
            cmd
        },
        WAIT,
    );
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("[limits] claim_labels = 1000 is above csivol's limit of 32: it may be lowered, not raised"),
        "{out}"
    );
}

#[tokio::test]
async fn numbers_a_client_sends_are_range_checked_never_wrapped() {
    let dir = TestDir::new("bounds-numbers");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = node_and_volume(&server, &api).await;
    let host = FakeAgent::new(&server, "host").await;
    host.register(0, true, json!([])).await;

    // 300000000y wrapped to a lease that ended in 1970; 200000000y panicked the writer.
    for ttl_ms in [9_467_280_000_000_000_000u64, 6_311_520_000_000_000_000] {
        let (s, b) = api
            .post(
                "/v1/volumes/v/claims",
                json!({"alloc": "a1", "node": "n1", "mode": "write", "ttl_ms": ttl_ms}),
            )
            .await;
        refused(
            s,
            &b,
            &format!("`ttl_ms` ({ttl_ms} ms) is out of range: a duration is at most 100 years"),
        );
        let (s, b) = api
            .post("/v1/tokens", json!({"role": "claimer", "ttl_ms": ttl_ms}))
            .await;
        refused(s, &b, "`ttl_ms` (");
    }
    let (s, b) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a1", "node": "n1", "mode": "write", "ttl_ms": 60_000}),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .post(
            "/v1/volumes/v/claims/a1/renew",
            json!({"ttl_ms": 6_311_520_000_000_000_000u64}),
        )
        .await;
    refused(s, &b, "`ttl_ms` (6311520000000000000 ms) is out of range");
    let (_, c) = api.get("/v1/volumes/v/claims/a1").await;
    assert!(
        c["expires_at"].as_str().unwrap() > "2020",
        "the lease stands as it was: {c}"
    );

    // Sizes: CSI's int64, the same for create and expand.
    let create = json!({"plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
        "capacity_bytes": u64::MAX});
    let (s, b) = api.post("/v1/volumes/big/create", create).await;
    refused(
        s,
        &b,
        "`capacity_bytes` 18446744073709551615 is out of range: a size is at most 9223372036854775807 bytes",
    );
    let (s, b) = api
        .post("/v1/volumes/v/expand", json!({"capacity_bytes": u64::MAX}))
        .await;
    refused(
        s,
        &b,
        "`capacity_bytes` 18446744073709551615 is out of range",
    );

    // Counts and indexes of queries.
    for (path, want) in [
        (
            "/v1/events?limit=0",
            "`limit` 0 is out of range: it counts 1 to 10000",
        ),
        ("/v1/events?limit=20000", "`limit` 20000 is out of range"),
        ("/v1/volumes?limit=0", "`limit` 0 is out of range"),
        (
            "/v1/events?index=18446744073709551615",
            "`index` 18446744073709551615 is out of range",
        ),
        (
            "/v1/claims?older_than_ms=18446744073709551615",
            "`older_than_ms` (18446744073709551615 ms) is out of range",
        ),
    ] {
        let (s, b) = api.get(path).await;
        refused(s, &b, want);
    }

    // What a node's agent sends: its fencing delay, ids, times and sizes.
    let (s, b) = n1
        .api
        .post(
            "/v1/nodes/n1/register",
            json!({"plugins": [], "fence_after_ms": u64::MAX}),
        )
        .await;
    refused(
        s,
        &b,
        "`fence_after_ms` (18446744073709551615 ms) is out of range",
    );
    for report in [
        json!({"kind": "deleted", "op": u64::MAX, "attempt": 0}),
        json!({"kind": "fenced", "at_ms": u64::MAX / 2, "volumes": []}),
        json!({"kind": "claim_error", "volume": "v", "alloc": "a1", "error": {"code": "UNAVAILABLE", "message": "m", "final": false, "next_retry_at_ms": u64::MAX}}),
        json!({"kind": "node_expanded", "volume": "v", "attempt": 0, "capacity_bytes": u64::MAX}),
    ] {
        let (s, b) = n1
            .api
            .post("/v1/nodes/n1/reports", json!({"reports": [report]}))
            .await;
        refused(s, &b, "`");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .contains("is out of range"),
            "{b}"
        );
    }
    let (_, health) = api.get("/v1/health").await;
    assert_eq!(health["status"], "ok", "{health}");
}

/// The bytes of an event as the log counts them: its text.
fn event_bytes(e: &Value) -> usize {
    ["kind", "actor", "message", "volume", "node", "alloc"]
        .iter()
        .map(|k| e[*k].as_str().map_or(0, str::len))
        .sum()
}

#[tokio::test]
async fn the_event_log_is_bounded_in_bytes_and_keeps_operator_actions() {
    let dir = TestDir::new("bounds-events");
    let cfg_path = dir.join("server.toml");
    std::fs::write(&cfg_path, "").unwrap();
    let mut server = start(&dir, &[&format!("--config={}", cfg_path.display())]);
    let api = server.api();
    // Operators' actions first: the oldest events of the log.
    for name in ["alice", "bob", "carol"] {
        let (s, b) = api
            .post("/v1/tokens", json!({"role": "reader", "name": name}))
            .await;
        assert_eq!(s, 201, "{b}");
    }
    let n1 = node_and_volume(&server, &api).await;
    // 300 claims with 4 KB of labels each: about 1.2 MB of claim-created events. On a
    // loaded machine they may take longer than the heartbeat TTL, so the node beats.
    let beating = n1.keep_alive();
    for i in 0..300 {
        let (s, b) = api
            .post(
                "/v1/volumes/v/claims",
                json!({"alloc": format!("a{i}"), "node": "n1", "mode": "write", "labels": {"job": "j".repeat(4000)}}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    drop(beating);
    // A page of the log is streamed whole and in order, its index the last event's.
    let (_, all) = api.get("/v1/events?limit=10000").await;
    let all = all.as_array().unwrap().clone();
    assert!(all.len() > 300, "{}", all.len());
    assert!(
        all.windows(2)
            .all(|w| w[0]["index"].as_u64() < w[1]["index"].as_u64())
    );
    let raw = api.send("GET", "/v1/events?limit=600", None).await.unwrap();
    let page: Vec<Value> = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(page.len(), 600.min(all.len()));
    assert_eq!(page[..], all[..page.len()]);
    assert_eq!(raw.index, page.last().unwrap()["index"].as_u64());
    let total: usize = all.iter().map(event_bytes).sum();
    assert!(total > 1 << 20, "{total}");

    // Restarted with a byte bound of 1 MiB: the first pruning, at start, keeps the newest
    // events within it, and every operator action.
    std::fs::write(&cfg_path, "[limits]\nevents_bytes = \"1MiB\"\n").unwrap();
    server.restart_with_env(&[]);
    let api = server.api();
    let kept = eventually("the log pruned to its bytes", WAIT, || async {
        let (_, events) = api.get("/v1/events?limit=10000").await;
        let events = events.as_array().unwrap().clone();
        let total: usize = events.iter().map(event_bytes).sum();
        (total <= 1 << 20).then_some(events)
    })
    .await;
    let tokens: Vec<&str> = kept
        .iter()
        .filter(|e| e["kind"] == "token-created")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    for name in ["alice", "bob", "carol"] {
        assert!(
            tokens.iter().any(|m| m.contains(name)),
            "operator actions are kept: {name} in {tokens:?}"
        );
    }
    let claims: Vec<&str> = kept
        .iter()
        .filter(|e| e["kind"] == "claim-created")
        .map(|e| e["alloc"].as_str().unwrap())
        .collect();
    assert!(claims.len() > 100 && claims.len() < 300, "{}", claims.len());
    assert_eq!(claims.last(), Some(&"a299"), "the newest are kept");
    assert!(!claims.contains(&"a0"), "the oldest went");
}

#[tokio::test]
async fn an_external_id_registered_under_one_name_is_refused_under_another() {
    let dir = TestDir::new("bounds-duplicate");
    let server = start(&dir, &[]);
    let api = server.api();
    let (s, b) = api
        .put("/v1/volumes/v1", spec("hostpath-000001", json!({})))
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .put("/v1/volumes/dup1", spec("hostpath-000001", json!({})))
        .await;
    assert_eq!(s, 409, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().starts_with(
            "external id `hostpath-000001` of plugin `hp` is already registered as volume `v1`"
        ),
        "{b}"
    );
    assert!(
        b["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol volume deregister v1"),
        "{b}"
    );
    let (s, _) = api.get("/v1/volumes/dup1").await;
    assert_eq!(s, 404, "nothing was recorded");
    // The volume itself may be registered again, changed, and given another id.
    let (s, b) = api
        .put("/v1/volumes/v1", spec("hostpath-000001", json!({})))
        .await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = api
        .put(
            "/v1/volumes/v1",
            spec("hostpath-000001", json!({"parameters": {"tier": "fast"}})),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .put("/v1/volumes/v1", spec("hostpath-000002", json!({})))
        .await;
    assert_eq!(s, 201, "{b}");
    // Its old id is free again; the same id of another plugin is another backend volume.
    let (s, b) = api
        .put("/v1/volumes/dup1", spec("hostpath-000001", json!({})))
        .await;
    assert_eq!(s, 201, "{b}");
    let mut other = spec("hostpath-000002", json!({}));
    other["plugin"] = json!("other");
    let (s, b) = api.put("/v1/volumes/elsewhere", other).await;
    assert_eq!(s, 201, "{b}");
}

/// An older server's database: volume `a` and its duplicate `b` on one external id, and a
/// claim whose labels are far beyond today's limits, at the schema version before this
/// one (the index this one adds dropped).
fn age_database(data: &std::path::Path) -> String {
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('volumes') WHERE name <> 'name'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let columns = columns.join(", ");
    conn.execute_batch(&format!(
        "INSERT INTO volumes (name, {columns}) SELECT 'b', {columns} FROM volumes WHERE name = 'a';"
    ))
    .unwrap();
    let big: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("k{i}"), json!("x".repeat(10_000))))
        .collect();
    let labels = Value::from(big).to_string();
    conn.execute(
        "UPDATE claims SET labels = ?1 WHERE alloc = 'j1'",
        [&labels],
    )
    .unwrap();
    crate::back_to_the_previous_schema(&conn);
    labels
}

#[tokio::test]
async fn an_older_database_with_duplicates_and_oversized_labels_migrates_and_keeps_them() {
    let dir = TestDir::new("bounds-upgrade");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    let (s, b) = api.put("/v1/volumes/a", spec("e1", json!({}))).await;
    assert_eq!(s, 201, "{b}");
    let (s, b) = api
        .post(
            "/v1/volumes/a/claims",
            json!({"alloc": "j1", "node": "n1", "mode": "write", "labels": {"job": "1"}}),
        )
        .await;
    assert_eq!(s, 201, "{b}");
    server.proc.terminate(WAIT);
    let labels = age_database(&data);

    let server = ServerProc::start(&data, &["--check"]);
    let api = server.api();
    let log = server.log();
    assert!(
        log.contains("external id `e1` of plugin `hp` is registered as 2 volumes: a, b"),
        "{log}"
    );
    assert!(log.contains("csivol volume deregister b"), "{log}");
    // Both names are kept, and the labels as recorded.
    for name in ["a", "b"] {
        let (s, v) = api.get(&format!("/v1/volumes/{name}")).await;
        assert_eq!((s, v["external_id"].as_str()), (200, Some("e1")), "{v}");
    }
    let (_, c) = api.get("/v1/volumes/a/claims/j1").await;
    assert_eq!(c["labels"].to_string(), labels, "kept as recorded");
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    let index: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'volumes_external_id'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(index, 1, "migrated over the duplicates");
    // New ones are refused: a third name on the id, the same labels on a new claim.
    let (s, b) = api.put("/v1/volumes/c", spec("e1", json!({}))).await;
    assert_eq!(s, 409, "{b}");
    let (s, b) = api
        .post(
            "/v1/volumes/a/claims",
            json!({"alloc": "j2", "node": "n1", "mode": "write", "labels": serde_json::from_str::<Value>(&labels).unwrap()}),
        )
        .await;
    refused(s, &b, "`labels` holds 40 labels, more than the 32");
    // The volumes it names may still be registered again as they are.
    let (s, b) = api.put("/v1/volumes/b", spec("e1", json!({}))).await;
    assert_eq!(s, 200, "{b}");
}

/// Two servers over one etcd, each asked at the same moment to register one backend
/// volume under a name of its own: the check runs in each registration's write
/// transaction, which etcd's compare covers, so one name wins and the other is refused.
#[tokio::test]
async fn two_servers_registering_one_external_id_at_once_keep_one_name() {
    let dir = TestDir::new("bounds-ha-duplicate");
    let ha = csivol_tests::etcd::start_ha(&dir, &[]);
    let (a, b) = (ha.a.api(), ha.b.api());
    for i in 0..10 {
        let id = format!("ext-{i}");
        let (path_a, path_b) = (format!("/v1/volumes/a{i}"), format!("/v1/volumes/b{i}"));
        let (on_a, on_b) = tokio::join!(
            a.put(&path_a, spec(&id, json!({}))),
            b.put(&path_b, spec(&id, json!({}))),
        );
        let mut statuses = [on_a.0, on_b.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "{on_a:?} {on_b:?}");
    }
    let (_, volumes) = a.get("/v1/volumes").await;
    let volumes = volumes.as_array().unwrap();
    assert_eq!(
        volumes.len(),
        10,
        "one name per backend volume: {volumes:?}"
    );
    let mut ids: Vec<&str> = volumes
        .iter()
        .map(|v| v["external_id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 10);
}
