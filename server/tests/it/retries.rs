//! Exact retries over real HTTP: a mutating request's `Idempotency-Key` and send time. A
//! delayed duplicate of a claim is answered its first answer and brings back nothing; a
//! claim sent before its alloc's release is refused and one sent after accepted; a key
//! names one request, per token; refusals are kept like answers; concurrent copies run
//! once; keys and tombstones are forgotten after the server's request memory.

use std::path::Path;

use csivol_client::once::Once;
use csivol_client::{Body, Method, Raw};
use csivol_tests::{Api, FakeAgent, ServerProc, TestDir, eventually};
use serde_json::{Value, json};

use super::{WAIT, claim_state, register_volume, start};

/// Sends `body` to `path` as one request with `once`, and returns the answer as it came.
pub(crate) async fn send(api: &Api, method: Method, path: &str, body: &Value, once: &Once) -> Raw {
    api.client()
        .send_once(method, path, Body::Json(body), None, once)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub(crate) fn json_of(raw: &Raw) -> Value {
    serde_json::from_slice(&raw.body).unwrap_or(Value::Null)
}

pub(crate) fn replayed(raw: &Raw) -> bool {
    raw.headers
        .get(csivol_api::REPLAYED_HEADER)
        .is_some_and(|v| v == "true")
}

fn claim_body(alloc: &str, node: &str) -> Value {
    json!({"alloc": alloc, "node": node, "mode": "write"})
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Claims `alloc` with `once` through `api`, drives it to ready as the agents would, and
/// returns the first answer.
pub(crate) async fn ready_with(
    api: &Api,
    n1: &FakeAgent,
    volume: &str,
    alloc: &str,
    once: &Once,
) -> Raw {
    let path = format!("/v1/volumes/{volume}/claims");
    let first = send(api, Method::POST, &path, &claim_body(alloc, "n1"), once).await;
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert!(!replayed(&first));
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    n1.report(json!([{"kind": "published", "volume": volume, "alloc": alloc, "target_path": format!("/mnt/{alloc}")}])).await;
    assert_eq!(
        claim_state(api, volume, alloc).await.as_deref(),
        Some("ready")
    );
    first
}

/// Releases `alloc`'s claim through `api` and has `n1` unpublish it, until it is gone.
pub(crate) async fn release_until_gone(api: &Api, n1: &FakeAgent, volume: &str, alloc: &str) {
    let (status, body) = api
        .delete(&format!("/v1/volumes/{volume}/claims/{alloc}"))
        .await;
    assert_eq!(status, 202, "{body}");
    n1.report(json!([{"kind": "unpublished", "volume": volume, "alloc": alloc}]))
        .await;
    eventually(&format!("{alloc}'s claim gone"), WAIT, || async {
        claim_state(api, volume, alloc)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

async fn created_events(api: &Api, volume: &str, alloc: &str) -> usize {
    let (_, events) = api
        .get(&format!("/v1/events?volume={volume}&alloc={alloc}"))
        .await;
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "claim-created")
        .count()
}

#[tokio::test]
async fn a_delayed_duplicate_of_a_claim_is_answered_its_first_answer_and_brings_back_nothing() {
    let dir = TestDir::new("retries-duplicate");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "single-node-single-writer").await;

    let once = Once::new("claim-a-1");
    let first = ready_with(&api, &n1, "v", "a", &once).await;
    release_until_gone(&api, &n1, "v", "a").await;

    // The first copy of the request, delayed in the network, lands after the release.
    let late = send(
        &api,
        Method::POST,
        "/v1/volumes/v/claims",
        &claim_body("a", "n1"),
        &once,
    )
    .await;
    assert_eq!(late.status, 201, "{}", String::from_utf8_lossy(&late.body));
    assert!(replayed(&late), "a repeat says it is one");
    assert_eq!(late.body, first.body, "the first answer, as it was sent");
    assert_eq!(late.index, first.index);
    assert_eq!(
        claim_state(&api, "v", "a").await,
        None,
        "the claim stays released"
    );
    let (_, v) = api.get("/v1/volumes/v").await;
    assert_eq!(v["claims"], json!([]), "{v}");
    assert_eq!(created_events(&api, "v", "a").await, 1, "recorded once");

    // The volume is free for whoever claims it next.
    let (status, body) = super::claim(&api, "v", "b", "n1", "write").await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn a_claim_sent_before_its_alloc_was_released_is_refused_and_one_sent_after_accepted() {
    let dir = TestDir::new("retries-tombstone");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "single-node-single-writer").await;
    let path = "/v1/volumes/v/claims";

    ready_with(&api, &n1, "v", "a", &Once::new("first")).await;
    // A copy of a claim request, without a key, sent before the release and landing after.
    let sent_before = now_ms();
    release_until_gone(&api, &n1, "v", "a").await;
    let late = Once::unkeyed().sent_at(sent_before);
    let refused = send(&api, Method::POST, path, &claim_body("a", "n1"), &late).await;
    assert_eq!(
        refused.status,
        409,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    let e = &json_of(&refused)["error"];
    assert_eq!(e["code"], "conflict");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.starts_with("alloc `a` of volume `v` was released at "),
        "{message}"
    );
    assert!(
        message.contains("a claim request sent before its alloc's release is not recorded again"),
        "{message}"
    );
    assert!(e["hint"].as_str().unwrap().contains("claim again"), "{e}");
    assert_eq!(claim_state(&api, "v", "a").await, None);

    // A new job reusing the alloc's name, sent after the release, is accepted.
    let reuse = send(
        &api,
        Method::POST,
        path,
        &claim_body("a", "n1"),
        &Once::unkeyed(),
    )
    .await;
    assert_eq!(
        reuse.status,
        201,
        "{}",
        String::from_utf8_lossy(&reuse.body)
    );

    // Releasing an alloc that holds no claim leaves a tombstone too: a claim of it still on
    // its way (unanswered, sent before that release) is not recorded when it lands.
    let before = now_ms();
    let (status, body) = api.delete("/v1/volumes/v/claims/never").await;
    assert_eq!(status, 404, "{body}");
    let old = Once::unkeyed().sent_at(before);
    let refused = send(&api, Method::POST, path, &claim_body("never", "n1"), &old).await;
    assert_eq!(
        refused.status,
        409,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    assert_eq!(claim_state(&api, "v", "never").await, None);
}

/// A claim request sent before the state was restored from a backup, landing after the
/// restore (a late copy, or a retry of one whose answer was lost), is refused: the restored
/// state knows neither the alloc's release nor the request's kept answer, and would record
/// a claim nobody holds. A claim sent after the restore is judged on the restored state.
#[tokio::test]
async fn a_claim_sent_before_a_restore_and_landing_after_it_brings_back_nothing() {
    let dir = TestDir::new("retries-restore");
    let mut server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "multi-node-multi-writer").await;
    let backup = dir.join("backup.db");
    let resp = api.send("GET", "/v1/backup", None).await.unwrap();
    assert_eq!(resp.status, 200);
    std::fs::write(&backup, &resp.body).unwrap();

    // Claimed (its answer taken as lost by the client) and released, after the backup.
    let once = Once::new("before-the-restore");
    ready_with(&api, &n1, "v", "a", &once).await;
    release_until_gone(&api, &n1, "v", "a").await;

    let data = server.data_dir.clone();
    server.proc.terminate(WAIT);
    let (ok, out) = super::state::server_command(&[
        "restore",
        &format!("--from={}", backup.display()),
        &format!("--data-dir={}", data.display()),
        "--force",
    ]);
    assert!(ok, "{out}");
    let again = ServerProc::start(&data, &[]);
    let api = again.api();
    let path = "/v1/volumes/v/claims";

    // The same request again, with its key and its send time: the restored state has
    // neither its answer nor the release.
    let late = send(&api, Method::POST, path, &claim_body("a", "n1"), &once).await;
    assert_eq!(late.status, 409, "{}", String::from_utf8_lossy(&late.body));
    let e = &json_of(&late)["error"];
    let message = e["message"].as_str().unwrap();
    assert!(
        message.starts_with("the state was restored from a backup"),
        "{message}"
    );
    assert!(message.contains("nothing was recorded"), "{message}");
    assert!(e["hint"].as_str().unwrap().contains("claim again"), "{e}");
    assert_eq!(claim_state(&api, "v", "a").await, None);
    assert_eq!(created_events(&api, "v", "a").await, 0);

    // A claim sent after the restore is recorded.
    let fresh = send(
        &api,
        Method::POST,
        path,
        &claim_body("a", "n1"),
        &Once::new("after-the-restore"),
    )
    .await;
    assert_eq!(
        fresh.status,
        201,
        "{}",
        String::from_utf8_lossy(&fresh.body)
    );
    assert!(claim_state(&api, "v", "a").await.is_some());
}

#[tokio::test]
async fn a_key_names_one_request_for_one_token_and_a_refusal_is_kept_like_an_answer() {
    let dir = TestDir::new("retries-keys");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "multi-node-multi-writer").await;
    register_volume(&api, "solo", "single-node-single-writer").await;
    let path = "/v1/volumes/v/claims";

    let once = Once::new("k1");
    let first = send(&api, Method::POST, path, &claim_body("a", "n1"), &once).await;
    assert_eq!(first.status, 201);

    // The same key with another body, or on another route: 422, naming the problem, and
    // nothing done.
    let other = send(&api, Method::POST, path, &claim_body("b", "n1"), &once).await;
    assert_eq!(
        other.status,
        422,
        "{}",
        String::from_utf8_lossy(&other.body)
    );
    let e = &json_of(&other)["error"];
    assert_eq!(
        e["message"],
        "Idempotency-Key `k1` was first used for this request (POST /v1/volumes/v/claims) \
         with another body: a key names one request, and only a repeat of that request may \
         carry it"
    );
    assert!(
        e["hint"].as_str().unwrap().contains("new Idempotency-Key"),
        "{e}"
    );
    assert_eq!(claim_state(&api, "v", "b").await, None);
    let release = send(
        &api,
        Method::DELETE,
        "/v1/volumes/v/claims/a",
        &Value::Null,
        &once,
    )
    .await;
    assert_eq!(release.status, 422);
    let message = json_of(&release)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("first used for another request (POST /v1/volumes/v/claims)"),
        "{message}"
    );
    assert_eq!(
        claim_state(&api, "v", "a").await.as_deref(),
        Some("attaching")
    );
    // A refused misuse does not hide the first answer.
    let again = send(&api, Method::POST, path, &claim_body("a", "n1"), &once).await;
    assert!(replayed(&again) && again.status == 201 && again.body == first.body);

    // Per token: another token's same key and body is another request, decided afresh
    // (the alloc holds a claim the first token made: refused, not the first token's 201
    // replayed).
    let (_, t) = api
        .post("/v1/tokens", json!({"role": "claimer", "name": "ci-2"}))
        .await;
    let other_token = api.with_token(t["token"].as_str());
    let theirs = send(
        &other_token,
        Method::POST,
        path,
        &claim_body("a", "n1"),
        &once,
    )
    .await;
    assert_eq!(
        theirs.status,
        409,
        "{}",
        String::from_utf8_lossy(&theirs.body)
    );
    assert!(
        String::from_utf8_lossy(&theirs.body).contains("made by another token"),
        "{}",
        String::from_utf8_lossy(&theirs.body)
    );
    assert!(!replayed(&theirs));

    // A refusal the state decided is kept: a late copy of a claim refused while the volume
    // was held is refused again after it is free, not carried out.
    let (status, _) = super::claim(&api, "solo", "holder", "n1", "write").await;
    assert_eq!(status, 201);
    let wanted = Once::new("k-solo");
    let spath = "/v1/volumes/solo/claims";
    let refused = send(
        &api,
        Method::POST,
        spath,
        &claim_body("late", "n1"),
        &wanted,
    )
    .await;
    assert_eq!(
        refused.status,
        409,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    let (status, body) = api.delete("/v1/volumes/solo/claims/holder").await;
    assert_eq!(status, 202, "{body}");
    n1.report(json!([{"kind": "unpublished", "volume": "solo", "alloc": "holder"}]))
        .await;
    eventually("the holder gone", WAIT, || async {
        claim_state(&api, "solo", "holder")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let late = send(
        &api,
        Method::POST,
        spath,
        &claim_body("late", "n1"),
        &wanted,
    )
    .await;
    assert_eq!(late.status, 409);
    assert!(replayed(&late));
    assert_eq!(late.body, refused.body);
    assert_eq!(claim_state(&api, "solo", "late").await, None);
    // A malformed key is refused before anything is looked up or done.
    let bad = send(
        &api,
        Method::POST,
        path,
        &claim_body("c", "n1"),
        &Once::new("a b"),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", String::from_utf8_lossy(&bad.body));
    let message = json_of(&bad)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with("invalid Idempotency-Key header"),
        "{message}"
    );
    assert_eq!(claim_state(&api, "v", "c").await, None);
}

#[tokio::test]
async fn concurrent_copies_of_one_keyed_request_are_carried_out_once() {
    let dir = TestDir::new("retries-concurrent");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "multi-node-multi-writer").await;

    // Sixty-four copies at once: they meet in the writer, most in one group commit.
    let once = Once::new("burst");
    let copies: Vec<_> = (0..64)
        .map(|_| {
            let (api, once) = (api.clone(), once.clone());
            tokio::spawn(async move {
                send(
                    &api,
                    Method::POST,
                    "/v1/volumes/v/claims",
                    &claim_body("a", "n1"),
                    &once,
                )
                .await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in copies {
        answers.push(c.await.unwrap());
    }
    assert!(
        answers.iter().all(|a| a.status == 201),
        "every copy gets the first answer"
    );
    assert!(answers.iter().all(|a| a.body == answers[0].body));
    assert_eq!(
        answers.iter().filter(|a| !replayed(a)).count(),
        1,
        "one copy was carried out, the others repeat its answer"
    );
    assert_eq!(created_events(&api, "v", "a").await, 1);
}

/// How many request keys and tombstones `state.db` holds.
fn kept_rows(data_dir: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open_with_flags(
        data_dir.join("state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let count = |table: &str| -> i64 {
        conn.query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
            .unwrap()
    };
    (count("request_keys"), count("claim_tombstones"))
}

#[tokio::test]
async fn keys_and_tombstones_are_forgotten_after_the_request_memory() {
    let dir = TestDir::new("retries-memory");
    let server: ServerProc = start(&dir, &["--request-memory=10s"]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "single-node-single-writer").await;
    let path = "/v1/volumes/v/claims";

    let once = Once::new("short-lived");
    let first = ready_with(&api, &n1, "v", "a", &once).await;
    release_until_gone(&api, &n1, "v", "a").await;
    let (keys, tombstones) = kept_rows(&server.data_dir);
    assert!(
        keys >= 1 && tombstones == 1,
        "{keys} keys, {tombstones} tombstones"
    );
    let repeat = send(&api, Method::POST, path, &claim_body("a", "n1"), &once).await;
    assert!(replayed(&repeat) && repeat.body == first.body);

    // Past the memory the key is forgotten, and the request too old to be judged: it is
    // refused as such rather than carried out.
    let too_old = eventually("the key forgotten", WAIT, || async {
        let r = send(&api, Method::POST, path, &claim_body("a", "n1"), &once).await;
        (!replayed(&r)).then_some(r)
    })
    .await;
    assert_eq!(
        too_old.status,
        409,
        "{}",
        String::from_utf8_lossy(&too_old.body)
    );
    let message = json_of(&too_old)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("longer ago than this server remembers requests and releases (10s)"),
        "{message}"
    );
    assert_eq!(claim_state(&api, "v", "a").await, None);

    // The leader prunes both.
    eventually("keys and tombstones pruned", WAIT, || async {
        (kept_rows(&server.data_dir) == (0, 0)).then_some(())
    })
    .await;
    // A new claim of the alloc is accepted.
    let reuse = send(
        &api,
        Method::POST,
        path,
        &claim_body("a", "n1"),
        &Once::new("new"),
    )
    .await;
    assert_eq!(reuse.status, 201);
}
