//! What the CLI reads and prints is bounded and safe: `-o json` escapes what a terminal
//! obeys, spec files are bounded and never echo a secret, durations are range-checked, a
//! wait a busy server turns away is asked again, and `status` names a backend volume
//! registered under two names.

use std::process::Stdio;
use std::time::Duration;

use csivol_tests::{ServerProc, eventually};
use serde_json::json;

use crate::support::{Env, WAIT, make_ready};

/// What a plugin says, with C1 controls, bidirectional overrides and isolates, and the
/// Unicode line and paragraph separators in it.
const SAID: &str =
    "csi \u{9b}31m \u{85}nel \u{202e}txt.exe\u{202c} \u{2066}iso\u{2069} a\u{2028}b\u{2029}c";

#[tokio::test]
async fn json_output_escapes_what_a_terminal_obeys() {
    let env = Env::start("json-escapes");
    env.volume("v", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let r = env
        .run(&["claim", "v", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    n1.report(json!([{"kind": "claim_error", "volume": "v", "alloc": "a1",
        "error": {"code": "UNAVAILABLE", "message": SAID, "final": false, "next_retry_at_ms": 1}}]))
        .await;
    for args in [
        &["volume", "show", "v", "-o", "json"][..],
        &["claim", "list", "-o", "json"],
        &["status", "v", "-o", "json"],
    ] {
        let r = env.run(args).await;
        assert_eq!(r.code, 0, "{r}");
        let raw: Vec<char> = r
            .stdout
            .chars()
            .filter(|c| *c != '\n' && csivol_api::is_control(*c))
            .collect();
        assert!(
            raw.is_empty(),
            "{args:?} wrote {raw:?} raw:\n{}",
            r.stdout.escape_debug()
        );
        for escaped in [
            "\\u009b", "\\u0085", "\\u202e", "\\u2066", "\\u2028", "\\u2029",
        ] {
            assert!(
                r.stdout.contains(escaped),
                "{args:?}: {escaped} in {}",
                r.stdout
            );
        }
    }
    // The value reads back as the plugin said it.
    let r = env.run(&["volume", "show", "v", "-o", "json"]).await;
    let error = r.json()["claims"][0]["error"].as_str().unwrap().to_owned();
    assert!(error.ends_with(SAID), "{}", error.escape_debug());
}

#[tokio::test]
async fn spec_files_are_bounded_and_never_echo_a_secret() {
    let env = Env::start("spec-bounds");
    let head = "name = \"v\"\nplugin = \"hp\"\nexternal_id = \"e\"\n\
                access_mode = \"single-node-writer\"\nattachment = \"file-system\"\n";
    // A secret written where a table belongs is refused without being shown.
    let toml = env.file("s.toml", &format!("{head}secrets = \"CLEARTEXT-s3cret\"\n"));
    let json_spec = env.file(
        "s.json",
        &json!({"name": "v", "plugin": "hp", "external_id": "e", "access_mode": "single-node-writer",
            "attachment": "file-system", "secrets": "CLEARTEXT-s3cret"})
        .to_string(),
    );
    let list = env.file(
        "l.toml",
        &format!("{head}secrets = [\"CLEARTEXT-s3cret\"]\n"),
    );
    for spec in [&toml, &json_spec, &list] {
        let r = env.run(&["volume", "register", spec]).await;
        assert_eq!(r.code, 2, "{r}");
        assert!(
            !r.to_string().contains("CLEARTEXT"),
            "a secret is echoed:\n{r}"
        );
        assert!(r.stderr.contains("`secrets` must be a table"), "{r}");
    }
    // What is not a regular file, and what is too large, is not read.
    let fifo = env.dir.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let dir = env.dir.join("home").display().to_string();
    let fifo = fifo.display().to_string();
    for path in ["/dev/zero", &fifo, &dir] {
        let r = env.run(&["volume", "register", path]).await;
        assert_eq!(r.code, 2, "{r}");
        assert!(r.stderr.contains("is not a regular file"), "{r}");
    }
    let large = env.file("large.toml", &format!("{head}# {}\n", "x".repeat(2 << 20)));
    let r = env.run(&["volume", "create", &large]).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(r.stderr.contains("is larger than 1024 KiB"), "{r}");
    // A capacity past CSI's int64.
    let huge = env.file(
        "huge.json",
        &json!({"name": "c", "plugin": "hp", "access_mode": "single-node-writer",
            "attachment": "file-system", "capacity_bytes": u64::MAX})
        .to_string(),
    );
    let r = env.run(&["volume", "create", &huge]).await;
    assert_eq!(r.code, 2, "{r}");
    assert!(
        r.stderr
            .contains("`capacity_bytes` 18446744073709551615 is out of range"),
        "{r}"
    );
    let (_, volumes) = env.api().get("/v1/volumes").await;
    assert_eq!(volumes, json!([]), "nothing was recorded");
}

#[tokio::test]
async fn durations_beyond_a_hundred_years_are_refused() {
    let env = Env::start("durations");
    env.volume("v", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;
    for args in [
        &[
            "claim",
            "v",
            "--node",
            "n1",
            "--alloc",
            "a1",
            "--ttl",
            "300000000y",
            "--wait",
        ][..],
        &[
            "claim",
            "v",
            "--node",
            "n1",
            "--alloc",
            "a1",
            "--ttl",
            "200000000y",
        ],
        &[
            "token",
            "create",
            "--role",
            "claimer",
            "--ttl",
            "300000000y",
        ],
    ] {
        let r = env.run(args).await;
        assert_eq!(r.code, 2, "{r}");
        assert!(
            r.stderr
                .contains("is longer than 100 years, the longest duration csivol takes"),
            "{r}"
        );
    }
    let (status, _) = env.api().get("/v1/volumes/v/claims/a1").await;
    assert_eq!(status, 404, "no claim was made");
}

#[tokio::test]
async fn a_wait_a_busy_server_turns_away_is_asked_again() {
    let env = Env::start_with("wait-busy", &["--max-long-polls=1"]);
    env.volume("v1", "single-node-writer").await;
    env.volume("other", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let api = env.api();

    // The one long-poll slot is held by a blocking query on `other`, until it changes.
    let index = api
        .send("GET", "/v1/volumes/other", None)
        .await
        .unwrap()
        .index
        .unwrap();
    let holder = {
        let api = api.clone();
        // Asked again while the probe below holds the slot for its millisecond.
        tokio::spawn(async move {
            loop {
                let answer = api
                    .get(&format!("/v1/volumes/other?index={index}&wait=300s"))
                    .await;
                if answer.0 != 503 {
                    return answer;
                }
            }
        })
    };
    eventually("the slot held", WAIT, || async {
        let (status, _) = api.get("/v1/events?index=1000000&wait=1ms").await;

        (status == 503).then_some(())
    })
    .await;

    // The claim is recorded; its wait is turned away, and asked again.
    let stderr = env.dir.join("claim.stderr");
    let mut cmd = env.command(&[
        "claim",
        "v1",
        "--node",
        "n1",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "2m",
    ]);
    cmd.stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()));
    let mut cli = cmd.spawn().unwrap();
    eventually("the wait turned away and asked again", WAIT, || {
        let exited = cli.try_wait().unwrap();
        let said = std::fs::read_to_string(&stderr).unwrap_or_default();
        async move {
            assert!(exited.is_none(), "csivol exited with {exited:?}:\n{said}");
            said.contains("the server turned the wait away for now (too many long-polls in flight")
                .then_some(())
        }
    })
    .await;
    make_ready(&n1, &n1, "v1", "a1").await;
    // Still turned away: it cannot have seen the claim ready.
    assert!(cli.try_wait().unwrap().is_none());

    // `other` changes: its blocking query answers and frees the slot; the wait gets in.
    let changed = json!({"plugin": "hp", "external_id": "ext-other", "access_mode": "single-node-writer",
        "attachment": "file-system", "parameters": {"changed": "yes"}});
    let (status, body) = api.put("/v1/volumes/other", changed).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(holder.await.unwrap().0, 200);
    let out = tokio::time::timeout(Duration::from_secs(60), cli.wait_with_output())
        .await
        .expect("the wait ended once the slot was free")
        .unwrap();
    let said = std::fs::read_to_string(&stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("state:        ready")
    );
}

#[tokio::test]
async fn status_names_a_backend_volume_registered_under_two_names() {
    let mut env = Env::start("status-duplicates");
    env.volume("a", "single-node-writer").await;
    env.volume("c", "single-node-writer").await;
    // An older server let `b` take `a`'s external id; today's refuses it.
    let data = env.dir.join("server");
    env.server.proc.terminate(WAIT);
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
        "INSERT INTO volumes (name, {columns}) SELECT 'b', {columns} FROM volumes WHERE name = 'a';\
         UPDATE volumes SET secrets = '{{}}' WHERE name = 'b';"
    ))
    .unwrap();
    drop(conn);
    env.server = ServerProc::start(&data, &[]);

    let r = env.run(&["status"]).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stdout.contains(
            "backend volumes registered under several names (each name can take a single-writer claim on it):\n  [hp] ext-a: a, b\n    keep one name: deregister the others once nothing claims them (csivol volume deregister b)\n"
        ),
        "{r}"
    );
    let r = env.run(&["status", "-o", "json"]).await;
    assert_eq!(
        r.json()["duplicate_volumes"],
        json!([{"plugin": "hp", "external_id": "ext-a", "volumes": ["a", "b"]}])
    );
}
