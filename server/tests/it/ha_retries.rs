//! Exact retries across two servers over etcd: copies of one keyed request sent to both at
//! once are carried out once, a late copy through the other server brings nothing back, and
//! the client sends a keyed request whose answer was lost on one server to the other.

use csivol_client::Method;
use csivol_client::once::Once;
use csivol_tests::etcd::start_ha;
use csivol_tests::proxy::LossyProxy;
use csivol_tests::{Api, FakeAgent, TestDir};
use serde_json::json;

use super::retries::{ready_with, release_until_gone, replayed, send};
use super::{claim_state, register_volume};

#[tokio::test]
async fn a_keyed_claim_is_carried_out_once_across_two_servers() {
    let dir = TestDir::new("ha-retries");
    let ha = start_ha(&dir, &[]);
    let (a, b) = (ha.a.api(), ha.b.api());
    let n1 = FakeAgent::new(&ha.a, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&a, "v", "single-node-single-writer").await;
    register_volume(&a, "w", "single-node-single-writer").await;
    let body = json!({"alloc": "c", "node": "n1", "mode": "write"});

    // Copies of one request sent to both servers at once: their commits compare the state
    // each read, so the one that loses runs again on the winner's rows and finds its key.
    let once = Once::new("ha-burst");
    let copies: Vec<_> = (0..16)
        .map(|i| {
            let api = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (once, body) = (once.clone(), body.clone());
            tokio::spawn(async move {
                send(&api, Method::POST, "/v1/volumes/w/claims", &body, &once).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in copies {
        answers.push(c.await.unwrap());
    }
    assert!(
        answers
            .iter()
            .all(|r| r.status == 201 && r.body == answers[0].body)
    );
    assert_eq!(answers.iter().filter(|r| !replayed(r)).count(), 1);

    // A claim made through one server, released through the other, and its late copy
    // landing on the other: the first answer, and the claim stays released.
    let once = Once::new("ha-late");
    let first = ready_with(&a, &n1, "v", "a", &once).await;
    release_until_gone(&b, &n1, "v", "a").await;
    let late = send(
        &b,
        Method::POST,
        "/v1/volumes/v/claims",
        &json!({"alloc": "a", "node": "n1", "mode": "write"}),
        &once,
    )
    .await;
    assert!(replayed(&late), "{}", String::from_utf8_lossy(&late.body));
    assert_eq!((late.status, &late.body), (first.status, &first.body));
    assert_eq!(claim_state(&a, "v", "a").await, None);
    assert_eq!(claim_state(&b, "v", "a").await, None);

    // The client in front of both: the first server acts on a keyed claim but its answer
    // is lost; the client sends it again to the second, which answers the first answer.
    let lossy = LossyProxy::start(&ha.a.url);
    lossy.drop_answers(1);
    let both = Api::new(&format!("{},{}", lossy.url, ha.b.url), Some(&ha.a.token));
    let once = Once::new("ha-failover");
    let body = json!({"alloc": "f", "node": "n1", "mode": "write"});
    let answer = send(&both, Method::POST, "/v1/volumes/v/claims", &body, &once).await;
    assert_eq!(
        answer.status,
        201,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(
        lossy.mutations().len(),
        1,
        "the first server got the request once"
    );
    assert!(
        replayed(&answer),
        "the second server answered the first one's answer"
    );
    let (_, events) = a.get("/v1/events?volume=v&alloc=f").await;
    let created = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "claim-created")
        .count();
    assert_eq!(created, 1, "{events}");
}
