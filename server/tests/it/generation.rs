//! Indexes belong to a generation of the state: a client holding an index of another
//! generation, or (an agent of the release before, which names none) an index ahead of the
//! state, is answered at once with the whole state and a cursor of the state now, never
//! left waiting for the state to pass an index it went back from.

use std::time::Duration;

use csivol_tests::{FakeAgent, TestDir};
use serde_json::{Value, json};

use super::{make_ready, register_volume, start};

/// Far past any wait the server lets a query take (`wait=300s`): an answer within it came
/// at once, not at the end of the wait.
const AT_ONCE: Duration = Duration::from_secs(60);

#[tokio::test]
async fn an_agent_that_names_no_generation_is_answered_at_once_when_its_index_is_ahead() {
    let dir = TestDir::new("generation-older-agent");
    let server = start(&dir, &[]);
    let api = server.api();
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&api, "v", "single-node-writer").await;
    make_ready(&api, &n1, &n1, "v", "a1").await;
    let index = n1.desired().await["index"].as_u64().unwrap();

    // An agent of the release before, which held a state the server's went back from (a
    // backup restored under it): it names no generation, and its index is ahead.
    let ahead = index + 1000;
    let path = format!("/v1/nodes/n1/desired?since={ahead}&index={ahead}&wait=300s");
    let raw = tokio::time::timeout(AT_ONCE, n1.api.send("GET", &path, None))
        .await
        .expect("answered at once, not at the end of its wait")
        .unwrap();
    assert_eq!(raw.status, 200);
    let d: Value = serde_json::from_slice(&raw.body).unwrap();
    assert!(d.get("changes").is_none(), "the whole state: {d}");
    assert_eq!(d["publish"][0]["alloc"], "a1", "{d}");
    assert_eq!(
        d["index"].as_u64(),
        Some(index),
        "an index of the state now"
    );
    assert!(d["generation"].is_string(), "{d}");
    assert_eq!(raw.index, Some(index));

    // From there it waits as before: nothing changed.
    let path = format!("/v1/nodes/n1/desired?since={index}&index={index}&wait=300ms");
    let raw = n1.api.send("GET", &path, None).await.unwrap();
    let d: Value = serde_json::from_slice(&raw.body).unwrap();
    assert_eq!(d["changes"]["volumes"], json!([]), "{d}");
}

#[tokio::test]
async fn a_cursor_of_another_generation_is_answered_at_once() {
    let dir = TestDir::new("generation-cursor");
    let mut server = start(&dir, &[]);
    let n1 = FakeAgent::new(&server, "n1").await;
    n1.register(0, true, json!([])).await;
    register_volume(&server.api(), "v", "single-node-writer").await;
    make_ready(&server.api(), &n1, &n1, "v", "a1").await;
    let before = server
        .api()
        .send("GET", "/v1/volumes/v", None)
        .await
        .unwrap();
    let old = before
        .generation
        .clone()
        .expect("answers name their generation");

    // Every start of a SQLite server begins a new generation: its file may be a backup
    // restored under it.
    server.restart_after_kill();
    let api = server.api();
    let now = api.send("GET", "/v1/volumes/v", None).await.unwrap();
    let new = now.generation.clone().unwrap();
    assert_ne!(new, old);
    let index = now.index.unwrap();

    for path in [
        format!("/v1/volumes/v?index={index}&wait=300s"),
        format!("/v1/volumes/v/claims/a1?index={index}&wait=300s"),
        "/v1/events?index=1000000&wait=300s".to_owned(),
    ] {
        let answer = tokio::time::timeout(
            AT_ONCE,
            api.client()
                .get_in::<Value>(&path, Some(&old), Duration::from_secs(330)),
        )
        .await
        .unwrap_or_else(|_| panic!("{path}: not answered at once"))
        .unwrap();
        assert_eq!(answer.generation.as_deref(), Some(new.as_str()), "{path}");
        if path.starts_with("/v1/events") {
            // The log's place of the state now: what was logged since it began.
            assert!(
                answer.index.unwrap() < 1_000_000,
                "{path}: {:?}",
                answer.index
            );
        }
    }

    // The same cursor in this generation waits as before.
    let path = format!("/v1/volumes/v?index={index}&wait=300ms");
    let started = std::time::Instant::now();
    let answer = api
        .client()
        .get_in::<Value>(&path, Some(&new), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!(answer.index, Some(index));
}
