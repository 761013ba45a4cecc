//! The volume listing reads volumes in place from the rows the store copied, and writes
//! them with its own borrowed form: for every shape of volume it must write exactly the JSON
//! that `GET /v1/volumes/NAME` writes from the decoded row.

use super::*;
use crate::views::{self, VolumeFilter};

/// Volumes of every shape a listing shows: free, with every optional column set (and text
/// that JSON must escape), ready with an attachment, with a queue, blocked, failed.
async fn every_shape() -> Env {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    env.register("n2", false, &[]).await;
    env.volume("a-free", "multi-node-multi-writer").await;

    let mut rich = spec("single-node-writer");
    rich.fs_type = "ext4".into();
    rich.mount_flags = vec!["noatime".into(), "discard".into()];
    rich.context = [("zone".into(), "a \"quoted\" \\ zone, é".into())].into();
    rich.parameters = [("tier".into(), "gold".into())].into();
    env.write(move |ctx, _| crate::lifecycle::register_volume(ctx, "b-rich", rich.clone(), "op"))
        .await
        .unwrap();
    env.write(|ctx, _| {
        ctx.tx.execute(
            "UPDATE volumes SET secrets = '{\"token\":\"s3cret\",\"user\":\"u\"}', \
             capacity_bytes = 1073741824, error = 'quota \"exceeded\"\n\u{1b}[31m', \
             expansion = ?1, accessible_topology = '[{\"zone\":\"a\"},{\"zone\":\"b\"}]', \
             topology_request = '{\"required\":[{\"zone\":\"a\"}]}', \
             mutable_parameters = '{\"iops\":\"100\"}', modification = ?2 \
             WHERE name = 'b-rich'",
            [
                r#"{"capacity_bytes":2147483648,"phase":"failed","nodes":[],"error":"no room","requested_at":"2026-01-02T03:04:05.006Z"}"#,
                r#"{"parameters":{"iops":"200"},"state":"infeasible","error":"too fast","requested_at":"2026-01-02T03:04:05.006Z"}"#,
            ],
        )?;
        Ok(())
    })
    .await
    .unwrap();

    env.volume("c-ready", "single-node-writer").await;
    env.ready_claim("c-ready", "a1", "ctl").await;

    env.volume("d-queued", "single-node-writer").await;
    env.ready_claim("d-queued", "a1", "ctl").await;
    for (alloc, node) in [("a2", "n2"), ("a3", "n1")] {
        let mut queued = ClaimRequest::new(alloc, node, ClaimMode::Write);
        queued.queue = true;
        queued.labels = [("job".into(), "https://ci.example/1?a=b&c=\"d\"".into())].into();
        env.claim_with("d-queued", queued).await.unwrap();
    }
    assert_eq!(
        env.claim_state("d-queued", "a3").await,
        Some(ClaimState::Queued)
    );

    env.volume("e-blocked", "multi-node-multi-writer").await;
    env.claim("e-blocked", "a1", "n1", ClaimMode::Write)
        .await
        .unwrap();
    env.write(|ctx, _| {
        ctx.tx.execute(
            "UPDATE claims SET state = 'blocked' WHERE volume = 'e-blocked'",
            [],
        )?;
        Ok(())
    })
    .await
    .unwrap();
    env.volume("f-failed", "single-node-reader-only").await;
    env.write(|ctx, _| {
        ctx.tx.execute(
            "UPDATE volumes SET lifecycle = 'failed', error = 'CreateVolume: out of space' \
             WHERE name = 'f-failed'",
            [],
        )?;
        Ok(())
    })
    .await
    .unwrap();
    env
}

/// What `GET /v1/volumes/NAME` answers for each of `names`, as one JSON array.
async fn as_got(env: &Env, names: &[&str]) -> String {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    env.read(move |c| {
        let got = names
            .iter()
            .map(|n| crate::lifecycle::volume_view(c, n))
            .collect::<ApiResult<Vec<_>>>()?;
        Ok(serde_json::to_string(&got).unwrap())
    })
    .await
}

async fn listed(env: &Env, filter: VolumeFilter, after: Option<&str>, limit: usize) -> String {
    let after = after.map(str::to_owned);
    let page = env
        .read(move |c| {
            views::list_volumes(
                c,
                &filter,
                after.as_deref(),
                limit,
                &crate::usage::NodeSamples::new(85.0),
            )
        })
        .await;
    String::from_utf8(page).unwrap()
}

const ALL: [&str; 6] = [
    "a-free",
    "b-rich",
    "c-ready",
    "d-queued",
    "e-blocked",
    "f-failed",
];

#[tokio::test]
async fn a_listing_writes_each_volume_as_its_own_read_does() {
    let env = every_shape().await;
    let whole = listed(&env, VolumeFilter::default(), None, 1000).await;
    assert_eq!(whole, as_got(&env, &ALL).await);
    // The secrets' names are listed, never their values.
    assert!(
        whole.contains(r#""secret_keys":["token","user"]"#),
        "{whole}"
    );
    assert!(!whole.contains("s3cret"), "{whole}");

    // The streamed listing's pages, each its own read, written as the server writes them.
    let mut pages = Vec::new();
    let mut after = String::new();
    loop {
        let from = after.clone();
        let chunk = env
            .read(move |c| c.volume_chunk(&from, None, views::LIST_CHUNK))
            .await;
        let Some(last) = chunk.last.clone() else {
            break;
        };
        let mut page = Vec::new();
        for v in views::shape(
            &chunk,
            &VolumeFilter::default(),
            &crate::usage::NodeSamples::new(85.0),
        ) {
            let first = page.is_empty();
            views::write_listed(&mut page, first, &v.unwrap()).unwrap();
        }
        pages.push(String::from_utf8(page).unwrap());
        after = last;
    }
    let streamed = format!("[{}]", pages.join(","));
    assert_eq!(streamed, whole);
}

#[tokio::test]
async fn pages_and_filters_of_a_listing_match_the_volumes_read_one_by_one() {
    let env = every_shape().await;
    let all = VolumeFilter::default;
    assert_eq!(
        listed(&env, all(), None, 2).await,
        as_got(&env, &ALL[..2]).await
    );
    assert_eq!(
        listed(&env, all(), Some("b-rich"), 3).await,
        as_got(&env, &ALL[2..5]).await
    );
    assert_eq!(listed(&env, all(), Some("f-failed"), 3).await, "[]");

    let state = |s| VolumeFilter {
        state: Some(s),
        ..all()
    };
    assert_eq!(
        listed(&env, state(api::VolumeState::Free), None, 1000).await,
        as_got(&env, &["a-free", "b-rich"]).await
    );
    assert_eq!(
        listed(&env, state(api::VolumeState::Blocked), None, 1000).await,
        as_got(&env, &["e-blocked"]).await
    );
    assert_eq!(
        listed(&env, state(api::VolumeState::Failed), None, 1).await,
        as_got(&env, &["f-failed"]).await
    );
    let node = |n: &str| VolumeFilter {
        node: Some(n.into()),
        ..all()
    };
    assert_eq!(
        listed(&env, node("n1"), None, 1000).await,
        as_got(&env, &["d-queued", "e-blocked"]).await
    );
    assert_eq!(
        listed(&env, node("ctl"), None, 1000).await,
        as_got(&env, &["c-ready", "d-queued"]).await
    );
}
