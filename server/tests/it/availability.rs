//! One volume taken out of service by an operator, over real HTTP with node agents played
//! by the test: new claims are refused saying who and why, claims it has stay, its queued
//! claims wait through a release and are granted in their order once it is back.

use csivol_tests::{FakeAgent, TestDir};
use serde_json::json;

use super::{claim_state, make_ready, register_volume, start};

#[tokio::test]
async fn a_volume_out_of_service_takes_no_new_claims_and_its_queue_waits() {
    let dir = TestDir::new("server-availability");
    let server = start(&dir, &[]);
    let api = server.api();
    let host = FakeAgent::new(&server, "host").await;
    let n2 = FakeAgent::new(&server, "n2").await;
    host.register(0, true, json!([])).await;
    n2.register(0, false, json!([])).await;
    register_volume(&api, "v", "single-node-single-writer").await;
    make_ready(&api, &host, &n2, "v", "a1").await;
    let (status, q) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "q1", "node": "n2", "mode": "write", "queue": true}),
        )
        .await;
    assert_eq!((status, &q["state"]), (201, &json!("queued")), "{q}");

    let (status, v) = api
        .post(
            "/v1/volumes/v/eligibility",
            json!({"eligibility": "ineligible", "reason": "restoring last night's copy"}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["availability"]["eligibility"], "ineligible", "{v}");
    assert_eq!(v["availability"]["reason"], "restoring last night's copy");
    assert!(
        v["availability"]["actor"]
            .as_str()
            .unwrap()
            .starts_with("operator:"),
        "{v}"
    );
    // Asked again, nothing changes (and no second event).
    let (status, _) = api
        .post(
            "/v1/volumes/v/eligibility",
            json!({"eligibility": "ineligible", "reason": "restoring last night's copy"}),
        )
        .await;
    assert_eq!(status, 200);

    // New claims are refused, queued or not, saying who and why and what puts it back.
    for queue in [false, true] {
        let (status, body) = api
            .post(
                "/v1/volumes/v/claims",
                json!({"alloc": "b1", "node": "n2", "mode": "write", "queue": queue}),
            )
            .await;
        assert_eq!(status, 409, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("volume `v` is not eligible for new claims")
                && message.contains("restoring last night's copy"),
            "{body}"
        );
        assert!(
            body["error"]["hint"]
                .as_str()
                .unwrap()
                .contains("csivol volume eligibility v --enable"),
            "{body}"
        );
    }
    // The claims it has stay: asking for one again is answered.
    let (status, again) = api
        .post(
            "/v1/volumes/v/claims",
            json!({"alloc": "a1", "node": "n2", "mode": "write"}),
        )
        .await;
    assert_eq!((status, &again["state"]), (200, &json!("ready")), "{again}");

    // The holder leaves: the queued claim waits, the volume being out of service.
    let (status, _) = api.delete("/v1/volumes/v/claims/a1").await;
    assert_eq!(status, 202);
    n2.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a1"}]))
        .await;
    assert_eq!(claim_state(&api, "v", "a1").await, None);
    assert_eq!(
        claim_state(&api, "v", "q1").await.as_deref(),
        Some("queued")
    );

    // Back in service: the queue grants its head at once.
    let (status, v) = api
        .post(
            "/v1/volumes/v/eligibility",
            json!({"eligibility": "eligible"}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(v.get("availability").is_none(), "{v}");
    let state = claim_state(&api, "v", "q1").await.unwrap();
    assert!(
        ["pending", "attaching", "publishing"].contains(&state.as_str()),
        "{state}"
    );
    let (_, events) = api.get("/v1/events?volume=v").await;
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "volume-ineligible").count(),
        1,
        "{kinds:?}"
    );
    assert!(kinds.contains(&"volume-eligible"), "{kinds:?}");
    assert!(kinds.contains(&"claim-granted"), "{kinds:?}");

    // An unknown volume is said to be unknown.
    let (status, body) = api
        .post(
            "/v1/volumes/nope/eligibility",
            json!({"eligibility": "draining"}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
}
