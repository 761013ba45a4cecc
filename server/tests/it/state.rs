//! The server's state is never silently lost or wrong: a data dir that held a cluster does
//! not start as an empty one, backups restore, and transitions decided in memory are
//! recorded even after the database refused them for a while.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use csivol_tests::{ServerProc, TestDir, bin_path, run_to_exit};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// Starts `csivol-server serve` on `data_dir` expecting it to refuse; returns what it said.
fn refused_start(data_dir: &Path) -> String {
    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.args(["serve", "--listen=127.0.0.1:0"])
        .arg(format!("--data-dir={}", data_dir.display()));
    let (status, out) = run_to_exit("csivol-server serve", cmd, WAIT);
    assert!(!status.success(), "the server started: {out}");
    out
}

/// A cluster with one volume, whose server was killed (its state still in the WAL).
async fn killed_cluster(dir: &TestDir) -> (std::path::PathBuf, String) {
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let (status, body) = server
        .api()
        .put(
            "/v1/volumes/v1",
            json!({"plugin": "hp", "external_id": "e1", "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let id = std::fs::read_to_string(data.join("cluster.id")).unwrap();
    assert_eq!(
        id.trim().len(),
        32,
        "a cluster id is written beside the database: {id}"
    );
    server.proc.kill();
    (data, id.trim().to_owned())
}

#[tokio::test]
async fn a_restart_keeps_the_cluster_and_its_id() {
    let dir = TestDir::new("state-restart");
    let (data, id) = killed_cluster(&dir).await;
    let server = ServerProc::start(&data, &[]);
    let (status, v) = server.api().get("/v1/volumes/v1").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        std::fs::read_to_string(data.join("cluster.id"))
            .unwrap()
            .trim(),
        id
    );
    assert!(
        server.log().contains(&format!("cluster={id}")),
        "{}",
        server.log()
    );
}

#[tokio::test]
async fn a_lost_wal_is_refused_not_started_as_an_empty_cluster() {
    let dir = TestDir::new("state-no-wal");
    let (data, id) = killed_cluster(&dir).await;
    let wal = data.join("state.db-wal");
    assert!(
        wal.exists(),
        "a small database keeps its changes in the WAL"
    );
    std::fs::remove_file(&wal).unwrap();
    let out = refused_start(&data);
    assert!(out.contains("holds no cluster state"), "{out}");
    assert!(
        out.contains("state.db-wal"),
        "names the missing file: {out}"
    );
    assert!(out.contains(&format!("cluster {id}")), "{out}");
    assert!(
        out.contains("hint: restore the latest backup with `csivol-server restore"),
        "{out}"
    );
    // Refusing twice is as safe as once: the first refusal changed nothing.
    let again = refused_start(&data);
    assert!(again.contains("holds no cluster state"), "{again}");
    assert!(!again.contains("migrated"), "{again}");
}

#[tokio::test]
async fn an_empty_or_missing_database_is_refused() {
    let dir = TestDir::new("state-empty-db");
    let (data, _) = killed_cluster(&dir).await;
    for f in ["state.db-wal", "state.db-shm"] {
        let _ = std::fs::remove_file(data.join(f));
    }
    std::fs::File::create(data.join("state.db")).unwrap(); // truncated to 0 bytes
    let out = refused_start(&data);
    assert!(out.contains("is empty (0 bytes)"), "{out}");
    std::fs::remove_file(data.join("state.db")).unwrap();
    let out = refused_start(&data);
    assert!(out.contains("is missing"), "{out}");
    assert!(
        !data.join("state.db").exists(),
        "a refused start creates nothing"
    );
    // An operator token alone is a sign of a cluster too.
    std::fs::remove_file(data.join("cluster.id")).unwrap();
    let out = refused_start(&data);
    assert!(out.contains("operator.token"), "{out}");
}

#[tokio::test]
async fn a_database_of_another_cluster_is_refused() {
    let dir = TestDir::new("state-other-cluster");
    let (data, _) = killed_cluster(&dir).await;
    std::fs::write(
        data.join("cluster.id"),
        "0123456789abcdef0123456789abcdef\n",
    )
    .unwrap();
    let out = refused_start(&data);
    assert!(
        out.contains("belongs to cluster 0123456789abcdef0123456789abcdef"),
        "{out}"
    );
}

#[tokio::test]
async fn two_servers_never_share_a_data_dir() {
    let dir = TestDir::new("state-lock");
    let data = dir.join("server");
    let _server = ServerProc::start(&data, &[]);
    let out = refused_start(&data);
    assert!(
        out.contains("another csivol server is running on data dir"),
        "{out}"
    );
}

pub(crate) fn server_command(args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.args(args);
    let (status, out) = run_to_exit("csivol-server", cmd, WAIT);
    (status.success(), out)
}

async fn volume_names(api: &csivol_tests::Api) -> Vec<String> {
    let (status, list) = api.get("/v1/volumes").await;
    assert_eq!(status, 200, "{list}");
    let mut names: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn backup_while_serving_and_restore_round_trip() {
    let dir = TestDir::new("state-backup");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let id = std::fs::read_to_string(data.join("cluster.id"))
        .unwrap()
        .trim()
        .to_owned();
    let put = |api: csivol_tests::Api, name: String| async move { register(&api, &name).await };
    for i in 0..20 {
        put(api.clone(), format!("before-{i}")).await;
    }
    let reader = {
        let (s, t) = api.post("/v1/tokens", json!({"role": "reader"})).await;
        assert_eq!(s, 201, "{t}");
        api.with_token(t["token"].as_str())
    };
    // Writes keep coming while the backups are taken.
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                put(api.clone(), format!("during-{i}")).await;
            }
        })
    };
    let file = dir.join("backup.db");
    let (ok, out) = server_command(&[
        "backup",
        &format!("--data-dir={}", data.display()),
        &format!("--to={}", file.display()),
    ]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("backed up cluster {id}")), "{out}");
    // The server's own config says where the data dir is, too.
    let config = dir.join("server.toml");
    std::fs::write(
        &config,
        format!("data_dir = {:?}\n", data.display().to_string()),
    )
    .unwrap();
    let (ok, out) = server_command(&[
        "backup",
        &format!("--config={}", config.display()),
        &format!("--to={}", dir.join("backup-2.db").display()),
    ]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("backed up cluster {id}")), "{out}");

    // The same over HTTP, for operators only.
    let (status, body) = reader.get("/v1/backup").await;
    assert_eq!(status, 403, "{body}");
    let resp = server.api().send("GET", "/v1/backup", None).await.unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.headers["x-csivol-cluster"], id.as_str());
    let http_file = dir.join("http-backup.db");
    std::fs::write(&http_file, &resp.body).unwrap();
    writer.await.unwrap();
    let all = volume_names(&api).await;
    assert_eq!(all.len(), 220);

    // A restore refuses a running server's data dir, even forced.
    let (ok, out) = server_command(&[
        "restore",
        &format!("--from={}", file.display()),
        &format!("--data-dir={}", data.display()),
        "--force",
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("a csivol server is running on data dir"),
        "{out}"
    );
    server.proc.kill();

    // Into a new data dir: the cluster comes back with its id and its tokens.
    for (n, backup) in [&file, &http_file].into_iter().enumerate() {
        let restored = dir.join(format!("restored-{n}"));
        let (ok, out) = server_command(&[
            "restore",
            &format!("--from={}", backup.display()),
            &format!("--data-dir={}", restored.display()),
        ]);
        assert!(ok, "{out}");
        assert!(out.contains(&format!("restored cluster {id}")), "{out}");
        // The operator keeps their token; the restored database knows it.
        std::fs::copy(data.join("operator.token"), restored.join("operator.token")).unwrap();
        let again = ServerProc::start(&restored, &[]);
        let names = volume_names(&again.api()).await;
        for i in 0..20 {
            assert!(names.contains(&format!("before-{i}")), "{names:?}");
        }
        assert!(
            names.iter().all(|n| all.contains(n)),
            "a backup holds only committed state: {names:?}"
        );
        assert_eq!(
            std::fs::read_to_string(restored.join("cluster.id"))
                .unwrap()
                .trim(),
            id
        );
        let (status, body) = again
            .api()
            .with_token(reader.token.as_deref())
            .get("/v1/volumes")
            .await;
        assert_eq!(status, 200, "a token made before the backup works: {body}");
    }

    // Over the stopped original: refused unless forced, and then the old database is kept.
    let (ok, out) = server_command(&[
        "restore",
        &format!("--from={}", file.display()),
        &format!("--data-dir={}", data.display()),
    ]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("already holds a cluster ({id})")),
        "{out}"
    );
    assert!(
        out.contains("hint: to replace it, run the restore again with --force"),
        "{out}"
    );
    let (ok, out) = server_command(&[
        "restore",
        &format!("--from={}", file.display()),
        &format!("--data-dir={}", data.display()),
        "--force",
    ]);
    assert!(ok, "{out}");
    let kept = std::fs::read_dir(&data)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("state.db.before-restore-")
        });
    assert!(kept, "the replaced database is kept aside");
    let server = ServerProc::start(&data, &[]);
    assert!(volume_names(&server.api()).await.len() >= 20);
}

#[tokio::test]
async fn out_of_range_indexes_are_refused_not_wrapped() {
    let dir = TestDir::new("state-index-range");
    let server = ServerProc::start(&dir.join("server"), &[]);
    let api = server.api();
    let (status, body) = api.post("/v1/tokens", json!({"role": "reader"})).await;
    assert_eq!(status, 201, "{body}");
    let (status, events) = api.get("/v1/events").await;
    assert_eq!(status, 200);
    assert!(
        !events.as_array().unwrap().is_empty(),
        "a token's creation is an event"
    );
    for path in [
        "/v1/events?index=9223372036854775808",
        "/v1/events?index=18446744073709551615",
        "/v1/events?index=9223372036854775808&wait=1s",
        "/v1/volumes/v1?index=9223372036854775808&wait=1s",
        "/v1/volumes/v1/claims/a1?index=18446744073709551615&wait=1s",
        "/v1/events?index=18446744073709551616",
        "/v1/events?index=-1",
    ] {
        let (status, body) = api.get(path).await;
        assert!(status == 422 || status == 400, "{path}: {status} {body}");
        assert_eq!(body["error"]["code"], "invalid", "{path}: {body}");
    }
    let (status, body) = api.get("/v1/events?index=9223372036854775808").await;
    assert_eq!(status, 422);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("out of range"),
        "{body}"
    );
    let (status, body) = api.get("/v1/events?index=9223372036854775807").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!([]), "nothing comes after the largest index");
}

#[tokio::test]
async fn check_refuses_a_damaged_database_and_passes_a_sound_one() {
    let dir = TestDir::new("state-check");
    let (data, _) = killed_cluster(&dir).await;
    let server = ServerProc::start(&data, &["--check"]);
    assert!(
        server.log().contains("passed its integrity check"),
        "{}",
        server.log()
    );
    drop(server);
    // Everything into the main file, then damage a page past the schema's first ones.
    let db = data.join("state.db");
    {
        let conn = rusqlite_open(&db);
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
    }
    let len = std::fs::metadata(&db).unwrap().len();
    assert!(len > 8 * 4096, "{len}");
    let mut bytes = std::fs::read(&db).unwrap();
    for b in &mut bytes[5 * 4096..7 * 4096] {
        *b = 0x5a;
    }
    std::fs::write(&db, bytes).unwrap();
    let mut cmd = Command::new(bin_path("csivol-server"));
    cmd.args(["serve", "--listen=127.0.0.1:0", "--check"])
        .arg(format!("--data-dir={}", data.display()));
    let (status, out) = run_to_exit("csivol-server serve --check", cmd, WAIT);
    assert!(!status.success(), "{out}");
    assert!(out.contains("failed its integrity check"), "{out}");
    assert!(out.contains("hint: restore the latest backup"), "{out}");
}

fn rusqlite_open(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

/// `GET /v1/volumes` streams the whole list across its read chunks (500 volumes each) and
/// pages it with `?limit=&after=`; both give every volume once, in name order.
#[tokio::test]
async fn the_volume_list_streams_and_pages_the_same_volumes() {
    let dir = TestDir::new("state-list");
    let server = ServerProc::start(&dir.join("server"), &[]);
    let api = server.api();
    let mut want: Vec<String> = (0..1203).map(|i| format!("vol-{i:05}")).collect();
    for batch in want.chunks(100) {
        let puts: Vec<_> = batch
            .iter()
            .map(|name| {
                let api = api.clone();
                let name = name.clone();
                tokio::spawn(async move { register(&api, &name).await })
            })
            .collect();
        for p in puts {
            p.await.unwrap();
        }
    }
    want.sort();
    let (status, all) = api.get("/v1/volumes").await;
    assert_eq!(status, 200, "{all}");
    let streamed: Vec<&str> = (all.as_array().unwrap().iter())
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(streamed, want, "the streamed list, in name order");

    let mut paged: Vec<String> = Vec::new();
    loop {
        let path = match paged.last() {
            Some(last) => format!("/v1/volumes?limit=400&after={last}"),
            None => "/v1/volumes?limit=400".to_owned(),
        };
        let (status, page) = api.get(&path).await;
        assert_eq!(status, 200, "{page}");
        let page = page.as_array().unwrap();
        paged.extend(page.iter().map(|v| v["name"].as_str().unwrap().to_owned()));
        if page.len() < 400 {
            break;
        }
    }
    assert_eq!(paged, want, "the pages, in name order");

    let (status, body) = api.get("/v1/volumes?state=attached&limit=10").await;
    assert_eq!((status, body), (200, json!([])), "filters apply to pages");
    // A count out of its range cannot succeed as sent (422); `after` alone does not parse.
    for (bad, want) in [
        ("/v1/volumes?limit=0", 422),
        ("/v1/volumes?after=vol-00001", 400),
    ] {
        let (status, body) = api.get(bad).await;
        assert_eq!(status, want, "{bad}: {body}");
    }
}

/// A listing whose read fails after its first chunk was sent ends its body broken: the
/// client must never take what came before for the whole list. The read and the shaping
/// of the list run on two threads, and the end of the array is written only after the
/// read said it read everything.
#[tokio::test]
async fn a_list_whose_read_fails_part_way_is_broken_not_short() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("state-list-broken");
    let mut server = ServerProc::start(&dir.join("server"), &[]);
    let api = server.api();
    for i in 0..700 {
        register(&api, &format!("vol-{i:05}")).await;
    }
    server.proc.kill();
    // A row this server cannot decode, in the second chunk of 500.
    let conn = rusqlite_open(&server.data_dir.join("state.db"));
    let changed = conn
        .execute(
            "UPDATE volumes SET context = 'not json' WHERE name = 'vol-00600'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    server.restart_after_kill();

    let addr = server.url.trim_start_matches("http://").to_owned();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /v1/volumes HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        server.token
    );
    sock.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, sock.read_to_end(&mut answer))
        .await
        .expect("the server ends the answer")
        .ok();
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    assert!(
        body.contains("\"vol-00000\""),
        "the first chunk was sent before the read failed: {}",
        &body[..body.len().min(300)]
    );
    assert!(
        !body.ends_with("0\r\n\r\n"),
        "the chunked body must not end as a complete one: ...{}",
        &body[body.len().saturating_sub(300)..]
    );
    let list = dechunk(body.as_bytes());
    assert!(
        serde_json::from_slice::<serde_json::Value>(&list).is_err() && !list.ends_with(b"]"),
        "what was sent is not a whole JSON array: ...{}",
        String::from_utf8_lossy(&list[list.len().saturating_sub(300)..])
    );
    assert!(
        !body.contains("\"vol-00600\""),
        "nothing from the row that failed"
    );
}

/// The data of a chunked HTTP body, as far as it goes.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = body.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&body[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0) else {
            break;
        };
        let data = &body[eol + 2..];
        out.extend_from_slice(&data[..size.min(data.len())]);
        body = data.get(size + 2..).unwrap_or_default();
    }
    out
}

/// Registers a single-node-writer file-system volume `name` of plugin `hp`; it must be new.
async fn register(api: &csivol_tests::Api, name: &str) {
    let (status, body) = api
        .put(
            &format!("/v1/volumes/{name}"),
            json!({"plugin": "hp", "external_id": name, "access_mode": "single-node-writer", "attachment": "file-system"}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}
