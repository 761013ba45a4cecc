//! A claim belongs to the token that made it: a claimer token renews and releases only
//! its own claims and cannot take another's over by asking for it again; an operator may
//! release any, named in the event; claims recorded before claimers were recorded belong
//! to no token, and only operators release them.

use csivol_tests::{Api, FakeAgent, ServerProc, TestDir};
use serde_json::{Value, json};

use crate::{WAIT, register_volume, start};

async fn claimer(api: &Api, name: &str) -> Api {
    let (s, t) = api
        .post("/v1/tokens", json!({"role": "claimer", "name": name}))
        .await;
    assert_eq!(s, 201, "{t}");
    api.with_token(t["token"].as_str())
}

async fn claim(api: &Api, alloc: &str) -> (u16, Value) {
    api.post(
        "/v1/volumes/v/claims",
        json!({"alloc": alloc, "node": "n1", "mode": "write", "ttl_ms": 600_000}),
    )
    .await
}

async fn release(api: &Api, alloc: &str) -> (u16, Value) {
    api.delete(&format!("/v1/volumes/v/claims/{alloc}")).await
}

async fn renew(api: &Api, alloc: &str) -> (u16, Value) {
    api.post(
        &format!("/v1/volumes/v/claims/{alloc}/renew"),
        json!({"ttl_ms": 600_000}),
    )
    .await
}

/// A 403 saying whose claim it is and what would do it, naming no other token.
#[track_caller]
fn not_its_own(status: u16, body: &Value, doing: &str, alloc: &str) {
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "the claim of alloc `{alloc}` on volume `v` was made by another token: this token may {doing} only the claims it made"
        ),
        "{body}"
    );
    let hint = body["error"]["hint"].as_str().unwrap();
    assert!(hint.contains("operator token"), "{body}");
    assert!(!body.to_string().contains("team-a"), "{body}");
}

/// Volume `v` (any number of claims) on node `n1`, which holds nothing.
async fn volume(server: &ServerProc, api: &Api) -> FakeAgent {
    let n1 = FakeAgent::new(server, "n1").await;
    n1.register(0, false, json!([])).await;
    register_volume(api, "v", "multi-node-multi-writer").await;
    n1
}

#[tokio::test]
async fn a_claimer_token_renews_and_releases_only_its_own_claims() {
    let dir = TestDir::new("owners-tokens");
    let server = start(&dir, &[]);
    let api = server.api();
    let _n1 = volume(&server, &api).await;
    let a = claimer(&api, "team-a").await;
    let b = claimer(&api, "team-b").await;
    assert_eq!(claim(&a, "job-a").await.0, 201);
    assert_eq!(claim(&b, "job-b").await.0, 201);
    let (_, before) = api.get("/v1/volumes/v/claims/job-a").await;

    // Team b's token can neither renew, release nor re-ask for team a's claim.
    let (s, body) = renew(&b, "job-a").await;
    not_its_own(s, &body, "renew", "job-a");
    let (s, body) = release(&b, "job-a").await;
    not_its_own(s, &body, "release", "job-a");
    let (s, body) = claim(&b, "job-a").await;
    assert_eq!(s, 409, "{body}");
    assert_eq!(
        body["error"]["message"],
        "alloc `job-a` already holds a claim on volume `v`, made by another token: a repeated claim request must come from the token that made the claim",
        "{body}"
    );
    // Nothing changed: the claim is where it was, its lease as team a set it.
    let (_, after) = api.get("/v1/volumes/v/claims/job-a").await;
    assert_eq!(
        (&after["state"], &after["expires_at"]),
        (&before["state"], &before["expires_at"]),
        "{after}"
    );

    // Its own token renews it, asks for it again, and releases it.
    assert_eq!(renew(&a, "job-a").await.0, 200);
    assert_eq!(claim(&a, "job-a").await.0, 200);
    let (s, body) = release(&a, "job-a").await;
    assert_eq!(s, 202, "{body}");

    // An operator releases team b's claim, and the event names the operator.
    let (s, body) = release(&api, "job-b").await;
    assert_eq!(s, 202, "{body}");
    let (_, events) = api.get("/v1/events?volume=v&limit=1000").await;
    let released: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["alloc"] == "job-b" && e["kind"] == "claim-releasing")
        .collect();
    assert_eq!(released.len(), 1, "{events}");
    let actor = released[0]["actor"].as_str().unwrap();
    assert!(actor.starts_with("operator:"), "{actor}");
}

#[tokio::test]
async fn claims_recorded_before_their_tokens_were_belong_to_no_token() {
    let dir = TestDir::new("owners-upgrade");
    let data = dir.join("server");
    let mut server = ServerProc::start(&data, &[]);
    let api = server.api();
    let _n1 = volume(&server, &api).await;
    let ci = claimer(&api, "ci").await;
    for alloc in ["old-1", "old-2"] {
        assert_eq!(claim(&ci, alloc).await.0, 201);
    }
    server.proc.terminate(WAIT);
    // The schema before claimers were recorded (the release before this one's).
    let conn = rusqlite::Connection::open(data.join("state.db")).unwrap();
    crate::back_to_the_previous_schema(&conn);
    drop(conn);

    let server = ServerProc::start(&data, &[]);
    let api = server.api();
    let ci = Api::new(&server.url, ci.token.as_deref());
    // Asking again is answered as before; releasing takes an operator.
    assert_eq!(claim(&ci, "old-1").await.0, 200);
    for (status, body) in [release(&ci, "old-1").await, renew(&ci, "old-2").await] {
        assert_eq!(status, 403, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.ends_with(
                "so it belongs to no token: only a token that holds `release-any` may release it"
            ) || message.ends_with(
                "so it belongs to no token: only a token that holds `release-any` may renew it"
            ),
            "{body}"
        );
    }
    assert_eq!(renew(&api, "old-2").await.0, 200);
    for alloc in ["old-1", "old-2"] {
        let (s, body) = release(&api, alloc).await;
        assert_eq!(s, 202, "{body}");
    }
    // New claims are the token's own again.
    assert_eq!(claim(&ci, "new-1").await.0, 201);
    assert_eq!(release(&ci, "new-1").await.0, 202);
}
