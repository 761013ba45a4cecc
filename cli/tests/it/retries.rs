//! Exact retries through the real `csivol`: a claim whose answer the network lost is sent
//! again with the same key and carried out once, and the lost first copy, replayed byte for
//! byte after the release, brings nothing back.

use csivol_tests::eventually;
use csivol_tests::proxy::{LossyProxy, send_raw};
use serde_json::json;

use crate::support::{Env, WAIT, make_ready, run};

/// The request's `Idempotency-Key` header, as sent.
fn key_of(request: &[u8]) -> Option<String> {
    String::from_utf8_lossy(request).lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("idempotency-key:")
            .map(|k| k.trim().to_owned())
    })
}

#[tokio::test]
async fn a_claim_whose_answer_was_lost_is_carried_out_once_and_its_late_copy_brings_nothing_back() {
    let env = Env::start("retries-lost-answer");
    env.volume("v", "single-node-single-writer").await;
    let n1 = env.node("n1", 0).await;
    let proxy = LossyProxy::start(&env.server.url);
    proxy.drop_answers(1);

    let mut cmd = env.command(&["claim", "v", "--node", "n1", "--alloc", "a"]);
    cmd.env("CSIVOL_ADDR", &proxy.url);
    let r = run(cmd).await;
    assert_eq!(r.code, 0, "{r}");
    assert!(
        r.stderr
            .contains("claimed volume v for alloc a on node n1 (write)"),
        "{r}"
    );
    let sent = proxy.mutations();
    assert_eq!(sent.len(), 2, "sent, its answer lost, sent again");
    let key = key_of(&sent[0]).expect("a key");
    assert_eq!(key_of(&sent[1]), Some(key), "the same key on the retry");
    assert_eq!(sent[0], sent[1], "the same request, byte for byte");

    make_ready(&n1, &n1, "v", "a").await;
    let r = env.run(&["release", "v", "--alloc", "a"]).await;
    assert_eq!(r.code, 0, "{r}");
    n1.report(json!([{"kind": "unpublished", "volume": "v", "alloc": "a"}]))
        .await;
    let api = env.api();
    eventually("the claim gone", WAIT, || async {
        (api.get("/v1/volumes/v/claims/a").await.0 == 404).then_some(())
    })
    .await;

    // The lost first copy, delayed in the network, lands after the release.
    let url = env.server.url.clone();
    let first = sent[0].clone();
    let late = tokio::task::spawn_blocking(move || send_raw(&url, &first))
        .await
        .unwrap();
    assert_eq!(late.status, 201, "{}", String::from_utf8_lossy(&late.body));
    assert_eq!(late.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        api.get("/v1/volumes/v/claims/a").await.0,
        404,
        "still released"
    );
    let (_, events) = api.get("/v1/events?volume=v&alloc=a").await;
    let created = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "claim-created")
        .count();
    assert_eq!(created, 1, "{events}");
    // The volume is free for the next job.
    let r = env
        .run(&["claim", "v", "--node", "n1", "--alloc", "b"])
        .await;
    assert_eq!(r.code, 0, "{r}");
}
