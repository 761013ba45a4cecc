//! Volume labels and pools over real HTTP, with a node agent played by the test: a pool
//! takes the volumes its selector matches and refuses to share one with another pool; a
//! claim from it gets the warmest free member (same key, staged here, prefix, cold), skips
//! members out of service, records a member's key only when its job succeeded, and is
//! refused like a busy volume when every member is taken, or with `queue` waits in the
//! pool's line, recorded once however often it is sent.

use csivol_tests::{Api, FakeAgent, TestDir};
use serde_json::{Value, json};

use super::{claim_state, start};

async fn labelled_volume(api: &Api, name: &str, labels: Value) {
    let (status, body) = api
        .put(
            &format!("/v1/volumes/{name}"),
            json!({"plugin": "hp", "external_id": format!("ext-{name}"),
                   "access_mode": "single-node-single-writer", "attachment": "file-system",
                   "labels": labels}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
}

async fn pool_claim(api: &Api, alloc: &str, key: &str, restore: &[&str]) -> (u16, Value) {
    api.post(
        "/v1/pools/cache/claims",
        json!({"claim": {"alloc": alloc, "node": "n1", "mode": "write"},
               "cache_key": key, "restore_keys": restore}),
    )
    .await
}

/// A server, its node `n1` kept alive (hosting the controller), and pool `cache` of one
/// member, `m1`.
async fn pool_of_m1(
    dir: &TestDir,
) -> (csivol_tests::ServerProc, FakeAgent, csivol_tests::KeepAlive) {
    let server = start(dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    let beating = n1.keep_alive();
    labelled_volume(&api, "m1", json!({"pool": "cache"})).await;
    let (status, p) = api
        .put("/v1/pools/cache", json!({"selector": {"pool": "cache"}}))
        .await;
    assert_eq!(status, 201, "{p}");
    (server, n1, beating)
}

/// Claims from the pool and says which member it got and why.
async fn chosen(api: &Api, alloc: &str, key: &str, restore: &[&str]) -> (String, String) {
    let (status, c) = pool_claim(api, alloc, key, restore).await;
    assert_eq!(status, 201, "{c}");
    assert_eq!(c["pool"]["pool"], "cache", "{c}");
    assert_eq!(c["pool"]["cache_key"], key, "{c}");
    (
        c["volume"].as_str().unwrap().to_owned(),
        c["pool"]["why"].as_str().unwrap().to_owned(),
    )
}

/// The claim attached and published by the node (which is also the controller host).
async fn publish(api: &Api, n1: &FakeAgent, volume: &str, alloc: &str) {
    let op = n1.wait_op("publish").await;
    n1.report(json!([{"kind": "controller_published", "op": op["id"], "attempt": op["attempt"], "publish_context": {}}])).await;
    n1.report(json!([{"kind": "published", "volume": volume, "alloc": alloc, "target_path": format!("/mnt/{alloc}")}])).await;
    assert_eq!(
        claim_state(api, volume, alloc).await.as_deref(),
        Some("ready")
    );
}

/// Releases the claim (`succeeded`: its job said so) and unpublishes it; with `unstage`,
/// the node also unstages and the volume is detached.
async fn release(
    api: &Api,
    n1: &FakeAgent,
    volume: &str,
    alloc: &str,
    succeeded: bool,
    unstage: bool,
) {
    let path = format!("/v1/volumes/{volume}/claims/{alloc}?succeeded={succeeded}");
    let (status, body) = api.delete(&path).await;
    assert_eq!(status, 202, "{body}");
    n1.report(json!([{"kind": "unpublished", "volume": volume, "alloc": alloc}]))
        .await;
    assert_eq!(claim_state(api, volume, alloc).await, None);
    if unstage {
        n1.report(json!([{"kind": "unstaged", "volume": volume}]))
            .await;
        let op = n1.wait_op("unpublish").await;
        n1.report(
            json!([{"kind": "controller_unpublished", "op": op["id"], "attempt": op["attempt"]}]),
        )
        .await;
        let (_, v) = api.get(&format!("/v1/volumes/{volume}")).await;
        assert_eq!(v["state"], "free", "{v}");
    }
}

fn member<'a>(pool: &'a Value, volume: &str) -> &'a Value {
    pool["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["volume"] == volume)
        .unwrap_or_else(|| panic!("{volume} in {pool}"))
}

#[tokio::test]
async fn a_pool_takes_its_labelled_volumes_and_shares_none_with_another() {
    let dir = TestDir::new("server-pools-overlap");
    let server = start(&dir, &[]);
    let api = server.api();
    labelled_volume(&api, "c1", json!({"pool": "cache"})).await;
    labelled_volume(&api, "c2", json!({})).await;
    labelled_volume(&api, "x1", json!({"team": "x"})).await;

    let (status, v) = api
        .post(
            "/v1/volumes/c2/labels",
            json!({"set": {"pool": "cache", "tier": "ssd"}}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["labels"], json!({"pool": "cache", "tier": "ssd"}), "{v}");
    let (status, v) = api
        .post("/v1/volumes/c2/labels", json!({"remove": ["tier"]}))
        .await;
    assert_eq!(
        (status, &v["labels"]),
        (200, &json!({"pool": "cache"})),
        "{v}"
    );

    let (status, p) = api
        .put(
            "/v1/pools/cache",
            json!({"selector": {"pool": "cache"}, "linger_ms": 600000}),
        )
        .await;
    assert_eq!(status, 201, "{p}");
    let names: Vec<&str> = p["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["volume"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c1", "c2"], "{p}");
    // The same spec again changes nothing.
    let (status, _) = api
        .put(
            "/v1/pools/cache",
            json!({"selector": {"pool": "cache"}, "linger_ms": 600000}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, p) = api
        .put("/v1/pools/xs", json!({"selector": {"team": "x"}}))
        .await;
    assert_eq!(status, 201, "{p}");

    // A selector that takes another pool's member is refused, naming both.
    let (status, e) = api
        .put("/v1/pools/again", json!({"selector": {"pool": "cache"}}))
        .await;
    assert_eq!(status, 409, "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("takes volume `c1`, a member of pool `cache`") && m.contains("one pool at most"),
        "{e}"
    );
    // So is a label that would put a volume in two pools; its labels stay as they were.
    let (status, e) = api
        .post("/v1/volumes/x1/labels", json!({"set": {"pool": "cache"}}))
        .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains(
            "volume `x1` would belong to two pools, `cache` (pool=cache) and `xs` (team=x)"
        ),
        "{e}"
    );
    let (_, v) = api.get("/v1/volumes/x1").await;
    assert_eq!(v["labels"], json!({"team": "x"}), "{v}");
    // Nor at registration.
    let (status, e) = api
        .put(
            "/v1/volumes/both",
            json!({"plugin": "hp", "external_id": "ext-both", "access_mode": "single-node-single-writer",
                   "attachment": "file-system", "labels": {"pool": "cache", "team": "x"}}),
        )
        .await;
    assert_eq!(status, 409, "{e}");

    let (status, all) = api.get("/v1/pools").await;
    assert_eq!(status, 200);
    assert_eq!(all.as_array().unwrap().len(), 2, "{all}");
    let (status, _) = api.delete("/v1/pools/xs").await;
    assert_eq!(status, 204);
    let (status, e) = api.get("/v1/pools/xs").await;
    assert_eq!(status, 404, "{e}");
    let (status, e) = api.put("/v1/pools/empty", json!({"selector": {}})).await;
    assert_eq!(status, 422, "{e}");
    let (_, events) = api.get("/v1/events").await;
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    for k in ["volume-labelled", "pool-created", "pool-deleted"] {
        assert!(kinds.contains(&k), "{k}: {kinds:?}");
    }
}

#[tokio::test]
async fn a_pool_claim_gets_the_warmest_free_member_and_a_failed_job_keeps_the_old_key() {
    let dir = TestDir::new("server-pools-warmth");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    for m in ["m1", "m2", "m3", "m4"] {
        labelled_volume(&api, m, json!({"pool": "cache"})).await;
    }
    let (status, p) = api
        .put("/v1/pools/cache", json!({"selector": {"pool": "cache"}}))
        .await;
    assert_eq!(status, 201, "{p}");

    // Every member is cold: the first by name. Its job succeeds: it keeps the key.
    assert_eq!(
        chosen(&api, "a1", "feature-a", &[]).await,
        ("m1".into(), "cold".into())
    );
    publish(&api, &n1, "m1", "a1").await;
    release(&api, &n1, "m1", "a1", true, true).await;
    // A cold member without a key goes before one holding another key's cache.
    assert_eq!(
        chosen(&api, "a2", "main-2", &[]).await,
        ("m2".into(), "cold".into())
    );
    publish(&api, &n1, "m2", "a2").await;
    release(&api, &n1, "m2", "a2", true, true).await;
    // A failed job leaves the member's key as it was (none).
    assert_eq!(
        chosen(&api, "a3", "dev", &[]).await,
        ("m3".into(), "cold".into())
    );
    publish(&api, &n1, "m3", "a3").await;
    release(&api, &n1, "m3", "a3", false, true).await;
    let (_, p) = api.get("/v1/pools/cache").await;
    assert_eq!(member(&p, "m1")["cache_key"], "feature-a", "{p}");
    assert_eq!(member(&p, "m2")["cache_key"], "main-2", "{p}");
    assert!(member(&p, "m3").get("cache_key").is_none(), "{p}");
    // m3 again, left staged on n1: released and unpublished, not unstaged.
    assert_eq!(
        chosen(&api, "a4", "dev", &[]).await,
        ("m3".into(), "cold".into())
    );
    publish(&api, &n1, "m3", "a4").await;
    release(&api, &n1, "m3", "a4", false, false).await;
    let (_, p) = api.get("/v1/pools/cache").await;
    assert_eq!(member(&p, "m3")["staged_on"], json!(["n1"]), "{p}");

    // Same key over staged here over prefix over cold; each claim holds its member.
    assert_eq!(
        chosen(&api, "b1", "feature-a", &["main"]).await,
        ("m1".into(), "warm: same key `feature-a`".into())
    );
    assert_eq!(
        chosen(&api, "b2", "feature-b", &["main"]).await,
        ("m3".into(), "staged here".into())
    );
    assert_eq!(
        chosen(&api, "b3", "feature-c", &["main"]).await,
        ("m2".into(), "warm: prefix `main` (its key `main-2`)".into())
    );
    // A member out of service is skipped: with it the only free one, none is free.
    let (status, _) = api
        .post(
            "/v1/volumes/m4/eligibility",
            json!({"eligibility": "draining"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, e) = pool_claim(&api, "b4", "feature-d", &[]).await;
    assert_eq!(status, 409, "{e}");
    let m = e["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("no member of pool `cache` is free: of its 4 member(s)")
            && m.contains("3 held, 1 out of service"),
        "{e}"
    );
    assert!(
        e["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("csivol pool show cache"),
        "{e}"
    );
    // A busy named volume is refused with the same status.
    let (status, busy) = api
        .post(
            "/v1/volumes/m1/claims",
            json!({"alloc": "b9", "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 409, "{busy}");
    let (status, _) = api
        .post(
            "/v1/volumes/m4/eligibility",
            json!({"eligibility": "eligible"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        chosen(&api, "b4", "feature-d", &[]).await,
        ("m4".into(), "cold".into())
    );
    // Asked again, the alloc's claim is the answer, with its choice.
    let (status, again) = pool_claim(&api, "b4", "feature-d", &[]).await;
    assert_eq!((status, &again["volume"]), (200, &json!("m4")), "{again}");
    assert_eq!(again["pool"]["choice"], "cold", "{again}");

    let (_, p) = api.get("/v1/pools/cache").await;
    assert_eq!(member(&p, "m1")["holders"], json!(["b1"]), "{p}");
    assert_eq!(
        (p["recent_claims"].as_u64(), p["warm_hits"].as_u64()),
        (Some(8), Some(1)),
        "{p}"
    );
    let (_, events) = api.get("/v1/events?volume=m1").await;
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["kind"] == "pool-member-chosen"
                && e["message"]
                    .as_str()
                    .unwrap()
                    .contains("warm: same key `feature-a`")),
        "{events}"
    );
}

/// A claim from a pool whose lease ran out says nothing to its pool; a later claim of the
/// same alloc on that volume, by name, is no pool's claim and records no key.
#[tokio::test]
async fn a_later_claim_of_the_same_alloc_is_not_taken_for_an_expired_pool_claim() {
    let dir = TestDir::new("server-pools-expired");
    let (server, n1, _beating) = pool_of_m1(&dir).await;
    let api = server.api();
    let (status, c) = api
        .post(
            "/v1/pools/cache/claims",
            json!({"claim": {"alloc": "z", "node": "n1", "mode": "write", "ttl_ms": 1000},
                   "cache_key": "old"}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    publish(&api, &n1, "m1", "z").await;
    csivol_tests::eventually("the lease to run out", super::WAIT, || async {
        (claim_state(&api, "m1", "z").await.as_deref() == Some("releasing")).then_some(())
    })
    .await;
    n1.report(json!([{"kind": "unpublished", "volume": "m1", "alloc": "z"}]))
        .await;
    assert_eq!(claim_state(&api, "m1", "z").await, None);
    let (status, c) = api
        .post(
            "/v1/volumes/m1/claims",
            json!({"alloc": "z", "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 201, "{c}");
    assert!(c.get("pool").is_none(), "{c}");
    let (status, c) = api.get("/v1/volumes/m1/claims/z").await;
    assert!(status == 200 && c.get("pool").is_none(), "{c}");
    let (status, body) = api.delete("/v1/volumes/m1/claims/z?succeeded=true").await;
    assert_eq!(status, 202, "{body}");
    let (_, p) = api.get("/v1/pools/cache").await;
    assert!(member(&p, "m1").get("cache_key").is_none(), "{p}");
}

/// A claim in a pool's line over real HTTP, retried: the same `Idempotency-Key` is answered
/// the first answer (one claim in line, and after its grant still that answer, never a
/// second claim or member); a late copy without a key, sent before the claim left the
/// line, does not join it again; a claim in line is followed, renewed and released through
/// the pool.
#[tokio::test]
async fn a_claim_in_a_pools_line_is_recorded_once_however_often_it_is_sent() {
    use csivol_client::Method;
    use csivol_client::once::Once;

    use super::retries::{json_of, replayed, send};

    let dir = TestDir::new("server-pools-line");
    let (server, n1, _beating) = pool_of_m1(&dir).await;
    let api = server.api();
    assert_eq!(chosen(&api, "h", "main", &[]).await.0, "m1");
    publish(&api, &n1, "m1", "h").await;

    let body = json!({"claim": {"alloc": "w", "node": "n1", "mode": "write", "queue": true,
                                "ttl_ms": 600_000}});
    let once = Once::new("line-w");
    let first = send(&api, Method::POST, "/v1/pools/cache/claims", &body, &once).await;
    assert_eq!(first.status, 201);
    let w = json_of(&first);
    assert_eq!(
        (
            &w["volume"],
            &w["state"],
            &w["queue_position"],
            &w["pool"]["choice"]
        ),
        (&json!(""), &json!("queued"), &json!(1), &json!("waiting")),
        "{w}"
    );
    let again = send(&api, Method::POST, "/v1/pools/cache/claims", &body, &once).await;
    assert!(replayed(&again));
    assert_eq!(json_of(&again), w);
    let (_, p) = api.get("/v1/pools/cache").await;
    assert_eq!(p["line"].as_array().map(Vec::len), Some(1), "{p}");
    let (status, renewed) = api.post("/v1/pools/cache/claims/w/renew", json!({})).await;
    assert_eq!(
        (status, &renewed["state"]),
        (200, &json!("queued")),
        "{renewed}"
    );

    // h releases m1: w gets it; the same request again is still its first answer, and a
    // copy without a key finds w's claim on m1, not a second claim.
    release(&api, &n1, "m1", "h", false, false).await;
    let (status, c) = api.get("/v1/pools/cache/claims/w").await;
    assert_eq!((status, &c["volume"]), (200, &json!("m1")), "{c}");
    let late = send(&api, Method::POST, "/v1/pools/cache/claims", &body, &once).await;
    assert!(replayed(&late));
    assert_eq!(json_of(&late), w);
    let (status, c) = api.post("/v1/pools/cache/claims", body.clone()).await;
    assert_eq!((status, &c["volume"]), (200, &json!("m1")), "{c}");
    let (_, p) = api.get("/v1/pools/cache").await;
    assert!(p.get("line").is_none(), "{p}");

    // A second claim waits, leaves the line when released (204), and a copy of its request
    // sent before that does not bring it back.
    let sent = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let body = json!({"claim": {"alloc": "x", "node": "n1", "mode": "write", "queue": true}});
    let (status, x) = api.post("/v1/pools/cache/claims", body.clone()).await;
    assert_eq!((status, &x["state"]), (201, &json!("queued")), "{x}");
    let (status, _) = api.delete("/v1/pools/cache/claims/x").await;
    assert_eq!(status, 204);
    let late = send(
        &api,
        Method::POST,
        "/v1/pools/cache/claims",
        &body,
        &Once::unkeyed().sent_at(sent),
    )
    .await;
    assert_eq!(late.status, 409);
    assert!(
        json_of(&late)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pool `cache`'s line"),
        "{}",
        json_of(&late)
    );
    let (status, e) = api.get("/v1/pools/cache/claims/x").await;
    assert_eq!(status, 404, "{e}");
    // The claim that holds a member is released through the pool too.
    let (status, c) = api.delete("/v1/pools/cache/claims/w").await;
    assert_eq!((status, &c["volume"]), (202, &json!("m1")), "{c}");
}
