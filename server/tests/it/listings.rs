//! Listings that can hold the whole inventory (`GET /v1/volumes`, `/v1/claims`,
//! `/v1/snapshots`) are streamed a page at a time: every row once and in order, whatever
//! the inventory, with no answer built whole before it is sent and no read held open for a
//! client that takes its answer slowly.

use std::io::{Read, Write};
use std::net::TcpStream;

use csivol_tests::{FakeAgent, ServerProc, TestDir};
use serde_json::{Value, json};

use crate::{WAIT, claim};

/// Volume `a`, without secrets: a volume's sealed secrets are bound to its name, and its
/// copies are made in SQL.
async fn volume_a(api: &csivol_tests::Api) {
    let (s, b) = api
        .put(
            "/v1/volumes/a",
            json!({"plugin": "hp", "external_id": "ext-a", "access_mode": "single-node-writer",
                "attachment": "file-system", "parameters": {"tier": "fast"}}),
        )
        .await;
    assert_eq!(s, 201, "{b}");
}

/// Volumes (each with three claims) and snapshots the listings hold: many pages of each.
const ROWS: usize = 20_000;

/// Copies of volume `a`, of its claims and of one snapshot of it, `ROWS` of each, named
/// `v00000`... (`s00000`... for the snapshots), written into the stopped server's database
/// as an inventory of that size would be.
fn inventory(data: &std::path::Path) {
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    let columns = |table: &str, but: &[&str]| -> String {
        let all: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        all.into_iter()
            .filter(|c| !but.contains(&c.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let volumes = columns("volumes", &["name", "external_id"]);
    let claims = columns("claims", &["volume"]);
    conn.execute_batch(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {ROWS})
         INSERT INTO volumes (name, external_id, {volumes})
           SELECT printf('v%05d', i), printf('ext-v%05d', i), {volumes} FROM n, volumes WHERE name = 'a';
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {ROWS})
         INSERT INTO claims (volume, {claims})
           SELECT printf('v%05d', i), {claims} FROM n, claims WHERE volume = 'a';
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {ROWS})
         INSERT INTO snapshots (name, volume, plugin, snapshot_id, state, ready_to_use,
             size_bytes, creation_time, parameters, error, created_at, updated_at,
             modify_index, group_name)
           SELECT printf('s%05d', i), printf('v%05d', i), 'hp', printf('snap-%05d', i),
             'ready', 1, 4096, 0, '{{}}', NULL, 0, 0, 1, NULL FROM n;"
    ))
    .unwrap();
}

/// `GET path` on a connection of its own, its answer's head read and no more of its body
/// than came with it: the connection, left open, is a client that takes its answer as
/// slowly as it likes. The head, lowercased.
fn slow_get(base: &str, token: &str, path: &str) -> (TcpStream, String) {
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).expect("the answer's head");
        assert!(
            n > 0,
            "closed before its head: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    (s, String::from_utf8_lossy(&got[..end]).to_lowercase())
}

/// The names a listing holds under `key`, each once, in order, and nothing else.
#[track_caller]
fn names<'a>(list: &'a Value, key: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list:.200}"))
        .iter()
        .map(|v| v[key].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_listing_of_the_whole_inventory_streams_every_row_once_in_order() {
    let dir = TestDir::new("listings-many");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    volume_a(&api).await;
    // One claim that holds the volume and two queued behind it: positions 1 and 2.
    let (s, b) = claim(&api, "a", "j1", "n1", "write").await;
    assert_eq!(s, 201, "{b}");
    for alloc in ["j2", "j3"] {
        let (s, b) = api
            .post(
                "/v1/volumes/a/claims",
                json!({"alloc": alloc, "node": "n1", "mode": "write", "queue": true}),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    server.proc.terminate(WAIT);
    inventory(&data);
    let server = ServerProc::start(&data, &[]);
    let api = server.api();

    let (s, volumes) = api.get("/v1/volumes").await;
    assert_eq!(s, 200, "{volumes:.300}");
    let mut want: Vec<String> = vec!["a".into()];
    want.extend((0..ROWS).map(|i| format!("v{i:05}")));
    assert_eq!(names(&volumes, "name"), want, "every volume once, by name");
    // As each is shown on its own.
    for i in [0, 499, 500, 19_999] {
        let name = format!("v{i:05}");
        let (_, one) = api.get(&format!("/v1/volumes/{name}")).await;
        assert_eq!(volumes[i + 1], one, "{name}");
    }

    let (s, claims) = api.get("/v1/claims").await;
    assert_eq!(s, 200, "{claims:.300}");
    let listed: Vec<(&str, &str)> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["volume"].as_str().unwrap(), c["alloc"].as_str().unwrap()))
        .collect();
    let want: Vec<(&str, &str)> = want
        .iter()
        .flat_map(|v| ["j1", "j2", "j3"].map(|a| (v.as_str(), a)))
        .collect();
    assert_eq!(listed, want, "every claim once, by volume and creation");
    let positions: Vec<&Value> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["queue_position"])
        .collect();
    for (i, p) in positions.chunks(3).enumerate() {
        assert_eq!(p, [&Value::Null, &json!(1), &json!(2)], "volume {i}");
    }
    // Volumes 255 and 256 are the last of one page and the first of the next.
    for (i, v) in [(256, "v00255"), (257, "v00256"), (ROWS, "v19999")] {
        for (k, alloc) in ["j1", "j2", "j3"].iter().enumerate() {
            let (_, one) = api.get(&format!("/v1/volumes/{v}/claims/{alloc}")).await;
            assert_eq!(claims[i * 3 + k], one, "{v}/{alloc}");
        }
    }
    let (_, two) = api.get("/v1/claims?state=queued&volume=v12345").await;
    assert_eq!(names(&two, "alloc"), ["j2", "j3"], "{two}");

    let (s, snapshots) = api.get("/v1/snapshots").await;
    assert_eq!(s, 200, "{snapshots:.300}");
    let want: Vec<String> = (0..ROWS).map(|i| format!("s{i:05}")).collect();
    assert_eq!(
        names(&snapshots, "name"),
        want,
        "every snapshot once, by name"
    );
    let (_, one) = api.get("/v1/snapshots/s00500").await;
    assert_eq!(snapshots[500], one);
    let (_, of) = api.get("/v1/snapshots?volume=v00007").await;
    assert_eq!(names(&of, "name"), ["s00007"]);
}

#[tokio::test]
async fn a_listing_is_sent_as_it_is_read_and_a_slow_reader_holds_no_read() {
    let dir = TestDir::new("listings-slow");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, false, json!([])).await;
    volume_a(&api).await;
    let (s, b) = claim(&api, "a", "j1", "n1", "write").await;
    assert_eq!(s, 201, "{b}");
    server.proc.terminate(WAIT);
    inventory(&data);
    let server = ServerProc::start(&data, &[]);
    let api = server.api();
    let (_, health) = api.get("/v1/health").await;
    assert!(health.is_object(), "{health}");

    // Each listing's answer begins before it is whole: sent in chunks, its length unknown
    // to the server when its head left (an answer built whole first says its length).
    let mut slow = Vec::new();
    for path in ["/v1/claims", "/v1/snapshots", "/v1/volumes"] {
        let (conn, head) = slow_get(&server.url, &server.token, path);
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(
            head.contains("transfer-encoding: chunked") && !head.contains("content-length"),
            "{path} is streamed: {head}"
        );
        assert!(head.contains("x-csivol-generation: "), "{path}: {head}");
        slow.push(conn);
    }
    // More clients taking whole listings slowly than the server has read connections
    // (8): each holds a read only while a page is read, so every other read is still
    // answered. A read held for the whole answer would hold them all until these clients
    // read on, which they never do.
    for _ in 0..12 {
        slow.push(slow_get(&server.url, &server.token, "/v1/volumes").0);
    }
    let answered = tokio::time::timeout(WAIT, async {
        let (s, v) = api.get("/v1/volumes/v00042").await;
        assert_eq!((s, v["name"].as_str()), (200, Some("v00042")), "{v}");
        let (s, c) = api.get("/v1/claims?volume=v00042").await;
        assert_eq!(s, 200, "{c}");
        assert_eq!(names(&c, "alloc"), ["j1"]);
    })
    .await;
    assert!(
        answered.is_ok(),
        "reads went unanswered while slow clients held their listings"
    );
    drop(slow);
}
