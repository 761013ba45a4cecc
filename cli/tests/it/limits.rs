//! What the CLI reads and prints is bounded and safe: `-o json` escapes what a terminal
//! obeys, spec files are bounded and never echo a secret, durations are range-checked, a
//! wait a busy server turns away is asked again, and `status` names a backend volume
//! registered under two names.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
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
async fn a_json_error_on_stderr_escapes_what_a_terminal_obeys() {
    let env = Env::start("json-error-escapes");
    env.volume("v", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let wait = env.spawn(&[
        "claim",
        "v",
        "--node",
        "n1",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "2m",
        "-o",
        "json",
    ]);
    let api = env.api();
    eventually("the claim recorded", WAIT, || async {
        (api.get("/v1/volumes/v/claims/a1").await.0 == 200).then_some(())
    })
    .await;
    // The plugin's final error fails the claim; the wait says so, quoting it.
    n1.report(json!([{"kind": "claim_error", "volume": "v", "alloc": "a1",
        "error": {"code": "INVALID_ARGUMENT", "message": SAID, "final": true}}]))
        .await;
    let r = wait.await.unwrap();
    assert_eq!(r.code, 1, "{r}");
    let raw: Vec<char> = r
        .stderr
        .chars()
        .filter(|c| *c != '\n' && csivol_api::is_control(*c))
        .collect();
    assert!(
        raw.is_empty(),
        "stderr wrote {raw:?} raw:\n{}",
        r.stderr.escape_debug()
    );
    for escaped in [
        "\\u009b", "\\u0085", "\\u202e", "\\u2066", "\\u2028", "\\u2029",
    ] {
        assert!(r.stderr.contains(escaped), "{escaped} in {}", r.stderr);
    }
    // One JSON document, whose message reads back as the plugin said it.
    let error: serde_json::Value = serde_json::from_str(r.stderr.trim()).unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains(SAID), "{}", message.escape_debug());
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

/// The one long-poll slot of a server started with `--max-long-polls=1`, held by a
/// blocking query on volume `other` until [`Slot::free`] changes that volume.
struct Slot(tokio::task::JoinHandle<(u16, serde_json::Value)>);

async fn hold_the_slot(api: &Api) -> Slot {
    let index = api
        .send("GET", "/v1/volumes/other", None)
        .await
        .unwrap()
        .index
        .unwrap();
    let holder = {
        let api = api.clone();
        // Asked again while a probe below holds the slot for its millisecond.
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
    Slot(holder)
}

impl Slot {
    /// `other` changes: its blocking query answers and frees the slot.
    async fn free(self, api: &Api) {
        let changed = json!({"plugin": "hp", "external_id": "ext-other", "access_mode": "single-node-writer",
            "attachment": "file-system", "parameters": {"changed": "yes"}});
        let (status, body) = api.put("/v1/volumes/other", changed).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(self.0.await.unwrap().0, 200);
    }
}

/// `csivol args`, its stderr in a file of the test dir.
fn spawn_logged(env: &Env, args: &[&str], name: &str) -> (tokio::process::Child, PathBuf) {
    let stderr = env.dir.join(format!("{name}.stderr"));
    let mut cmd = env.command(args);
    cmd.stderr(Stdio::from(std::fs::File::create(&stderr).unwrap()));
    (cmd.spawn().unwrap(), stderr)
}

/// Until `cli` says that the server turned its wait away and that it asks again; it must
/// not have exited meanwhile.
async fn turned_away(cli: &mut tokio::process::Child, stderr: &Path) {
    eventually("the wait turned away and asked again", WAIT, || {
        let exited = cli.try_wait().unwrap();
        let said = std::fs::read_to_string(stderr).unwrap_or_default();
        async move {
            assert!(exited.is_none(), "csivol exited with {exited:?}:\n{said}");
            said.contains("the server turned the wait away for now (too many long-polls in flight")
                .then_some(())
        }
    })
    .await;
}

/// What `cli` printed once it ended, within a minute.
async fn ended(cli: tokio::process::Child, stderr: &Path) -> (Option<i32>, String, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), cli.wait_with_output())
        .await
        .expect("the wait ended once the slot was free")
        .unwrap();
    let said = std::fs::read_to_string(stderr).unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        said,
    )
}

#[tokio::test]
async fn a_wait_a_busy_server_turns_away_is_asked_again() {
    let env = Env::start_with("wait-busy", &["--max-long-polls=1"]);
    env.volume("v1", "single-node-writer").await;
    env.volume("other", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let api = env.api();
    let slot = hold_the_slot(&api).await;

    // The claim is recorded; its wait is turned away, and asked again.
    let args = [
        "claim",
        "v1",
        "--node",
        "n1",
        "--alloc",
        "a1",
        "--wait",
        "--timeout",
        "2m",
    ];
    let (mut cli, stderr) = spawn_logged(&env, &args, "claim");
    turned_away(&mut cli, &stderr).await;
    make_ready(&n1, &n1, "v1", "a1").await;
    // Still turned away: it cannot have seen the claim ready.
    assert!(cli.try_wait().unwrap().is_none());

    // Once the slot is free, the wait gets in.
    slot.free(&api).await;
    let (code, stdout, said) = ended(cli, &stderr).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(stdout.contains("state:        ready"), "{stdout}");
}

/// The node's releases are what a drain follows: the agent unmounts and unstages, the
/// controller detaches.
async fn taken_down(n1: &FakeAgent, volume: &str, alloc: &str) {
    n1.report(json!([
        {"kind": "unpublished", "volume": volume, "alloc": alloc},
        {"kind": "unstaged", "volume": volume}
    ]))
    .await;
    let op = n1.wait_op("unpublish").await;
    n1.report(
        json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
    )
    .await;
}

#[tokio::test]
async fn a_drain_a_busy_server_turns_away_is_asked_again_from_its_place() {
    let env = Env::start_with("drain-busy", &["--max-long-polls=1"]);
    env.volume("v1", "single-node-writer").await;
    env.volume("other", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let r = env
        .run(&["claim", "v1", "--node", "n1", "--alloc", "a1"])
        .await;
    assert_eq!(r.code, 0, "{r}");
    make_ready(&n1, &n1, "v1", "a1").await;
    let api = env.api();
    let slot = hold_the_slot(&api).await;

    let args = ["node", "drain", "n1", "--wait", "--deadline", "2m"];
    let (mut cli, stderr) = spawn_logged(&env, &args, "drain");
    turned_away(&mut cli, &stderr).await;
    // The owner releases and the node empties while the follow is turned away: it is
    // asked again from the place it had, so what happened meanwhile is not missed.
    let (status, body) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    taken_down(&n1, "v1", "a1").await;
    assert!(cli.try_wait().unwrap().is_none());

    slot.free(&api).await;
    let (code, stdout, said) = ended(cli, &stderr).await;
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(
        stdout,
        "node n1 is drained: nothing is claimed on or attached to it\n"
    );
}

#[tokio::test]
async fn a_run_whose_release_a_busy_server_turns_away_asks_again() {
    let env = Env::start_with("run-busy", &["--max-long-polls=1"]);
    env.volume("v1", "single-node-writer").await;
    env.volume("other", "single-node-writer").await;
    let n1 = env.node("n1", 0).await;
    let api = env.api();
    // The job says it started, then waits for the test's word to end.
    let (started, go) = (env.dir.join("started"), env.dir.join("go"));
    let job = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.1; done",
        started.display(),
        go.display()
    );
    let args = [
        "run",
        "v1",
        "--node",
        "n1",
        "--alloc",
        "a1",
        "--timeout",
        "2m",
        "--",
        "sh",
        "-c",
        &job,
    ];
    let (mut cli, stderr) = spawn_logged(&env, &args, "run");
    eventually("the claim recorded", WAIT, || async {
        (api.get("/v1/volumes/v1/claims/a1").await.0 == 200).then_some(())
    })
    .await;
    make_ready(&n1, &n1, "v1", "a1").await;
    eventually("the job started", WAIT, || async {
        started.exists().then_some(())
    })
    .await;

    // The job ends while the server is busy: the release is asked for, and the first read
    // of the wait for it to finish is turned away, and asked again.
    let slot = hold_the_slot(&api).await;
    std::fs::write(&go, "").unwrap();
    turned_away(&mut cli, &stderr).await;
    eventually("the release asked for", WAIT, || async {
        let (_, c) = api.get("/v1/volumes/v1/claims/a1").await;
        (c["state"] == "releasing").then_some(())
    })
    .await;
    taken_down(&n1, "v1", "a1").await;
    assert!(cli.try_wait().unwrap().is_none());

    slot.free(&api).await;
    let (code, _, said) = ended(cli, &stderr).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("released every claim of alloc a1"), "{said}");
}

#[tokio::test]
async fn a_claimer_past_its_claims_limit_is_refused_with_exit_4() {
    let conf = TestDir::new("claims-limit-config");
    let path = conf.join("server.toml");
    std::fs::write(&path, "[limits]\nclaims_per_claimer = 1\n").unwrap();
    let env = Env::start_with("claims-limit", &[&format!("--config={}", path.display())]);
    env.volume("v1", "single-node-writer").await;
    env.volume("v2", "single-node-writer").await;
    let _n1 = env.node("n1", 0).await;
    let (_, t) = env
        .api()
        .post("/v1/tokens", json!({"role": "claimer", "name": "ci"}))
        .await;
    let as_ci = |args: &[&str]| {
        let mut cmd = env.command(args);
        cmd.env("CSIVOL_TOKEN", t["token"].as_str().unwrap());
        crate::support::run(cmd)
    };
    let r = as_ci(&["claim", "v1", "--node", "n1", "--alloc", "a1"]).await;
    assert_eq!(r.code, 0, "{r}");
    snap!(as_ci(&["claim", "v2", "--node", "n1", "--alloc", "a2"]).await, @r"
    exit: 4
    --- stdout
    --- stderr
    error: failed to claim volume `v2` for alloc `a2` on node `n1`: claimer:ci holds 1 claim (queued ones included), as many as this server allows one claimer token (`claims_per_claimer` in its [limits])
    hint: release the claims it no longer needs (a claim with a lease, --ttl, is released when it is not renewed), or ask an operator to raise [limits] claims_per_claimer
    ");
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
