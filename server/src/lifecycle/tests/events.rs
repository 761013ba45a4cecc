//! The event log's bounds: a message cut to its size, and pruning by count and by bytes,
//! in batches, never dropping an operator's action before the count does.

use csivol_rules::kinds::EventKind;

use super::Env;
use crate::limits::EventBounds;

/// Appends an event of `kind` whose message is `bytes` long.
async fn append(env: &Env, kind: EventKind, alloc: &str, bytes: usize) {
    let alloc = alloc.to_owned();
    env.write(move |ctx, _| {
        super::super::events::event(
            ctx,
            kind,
            None,
            None,
            Some(&alloc),
            "test",
            "m".repeat(bytes),
        )
    })
    .await
    .unwrap();
}

/// Prunes as the background task does: again while a batch was dropped whole.
async fn prune(env: &Env, bounds: EventBounds) -> usize {
    let mut total = 0;
    loop {
        let n = env
            .write(move |ctx, _| super::super::prune_events(ctx, &bounds))
            .await
            .unwrap();
        total += n;
        if n < bounds.batch {
            return total;
        }
    }
}

async fn allocs(env: &Env) -> Vec<String> {
    env.read(|c| {
        Ok(c.events(0, &Default::default(), u32::MAX)?
            .into_iter()
            .map(|e| e.alloc.unwrap_or_default())
            .collect())
    })
    .await
}

#[tokio::test]
async fn a_long_message_is_kept_cut_saying_how_much_went() {
    let env = Env::new();
    append(&env, EventKind::ClaimFailed, "a", 20_000).await;
    let message = env
        .read(|c| Ok(c.events(0, &Default::default(), 10)?.remove(0).message))
        .await;
    assert!(message.starts_with(&"m".repeat(8192)), "{}", message.len());
    assert!(
        message.ends_with("... (11808 bytes more not kept)"),
        "{}",
        &message[8192..]
    );
}

#[tokio::test]
async fn past_its_bytes_the_log_drops_the_oldest_but_not_operators_actions() {
    let env = Env::new();
    // The oldest events are an operator's; then 40 events of 1,000 bytes, 10 of which fit.
    append(&env, EventKind::TokenCreated, "op-1", 1_000).await;
    append(&env, EventKind::VolumeUnblocked, "op-2", 1_000).await;
    for i in 0..40 {
        append(&env, EventKind::ClaimCreated, &format!("c{i}"), 1_000).await;
    }
    // An event's bytes: its kind, actor, message and alloc.
    let size = |kind: &str, alloc: &str| kind.len() + "test".len() + 1_000 + alloc.len();
    let operators = size("token-created", "op-1") + size("volume-unblocked", "op-2");
    let bounds = EventBounds {
        kept: 1_000,
        bytes: (operators + 10 * size("claim-created", "c30")) as i64,
        batch: 7,
    };
    // In batches of 7: 7, 7, 7, 7, then the last 2 of the 30 that do not fit.
    assert_eq!(prune(&env, bounds).await, 30);
    let left = allocs(&env).await;
    let mut want = vec!["op-1".to_owned(), "op-2".to_owned()];
    want.extend((30..40).map(|i| format!("c{i}")));
    assert_eq!(left, want);
    assert_eq!(
        prune(&env, bounds).await,
        0,
        "within its bounds, nothing goes"
    );

    // The count drops operators' actions like any other event, the oldest first.
    let bounds = EventBounds {
        kept: 5,
        bytes: i64::MAX,
        batch: 100,
    };
    assert_eq!(prune(&env, bounds).await, 7);
    let left = allocs(&env).await;
    assert_eq!(left, ["c35", "c36", "c37", "c38", "c39"]);
}
