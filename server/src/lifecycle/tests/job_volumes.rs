//! Per-job volumes: recorded with their claim in one write, the claim granted once
//! CreateVolume answered, the volume deleted once nothing holds it, and refused below
//! the schema that keeps them.

use csivol_api::{ClaimMode, ClaimRequest, FreshClaimRequest, FreshSource, Report};
use serde_json::json;

use super::Env;
use crate::lifecycle::Claimant;
use crate::model::Lifecycle;

fn request(alloc: &str, ttl_ms: Option<u64>) -> FreshClaimRequest {
    FreshClaimRequest {
        name: "db".into(),
        source: FreshSource::Spec(Box::new(
            serde_json::from_value(json!({
                "plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system",
            }))
            .unwrap(),
        )),
        claim: ClaimRequest {
            ttl_ms,
            ..ClaimRequest::new(alloc, "n1", ClaimMode::Write)
        },
    }
}

async fn fresh(
    env: &Env,
    req: FreshClaimRequest,
) -> crate::error::ApiResult<(csivol_api::Claim, bool)> {
    sent(env, req, None).await
}

/// A request sent at `sent_at` (unix ms; `X-Csivol-Sent-At`).
async fn sent(
    env: &Env,
    req: FreshClaimRequest,
    sent_at: Option<i64>,
) -> crate::error::ApiResult<(csivol_api::Claim, bool)> {
    sent_in(env, csivol_api::DEFAULT_NAMESPACE, req, sent_at).await
}

/// A request of namespace `ns`, sent at `sent_at`.
async fn sent_in(
    env: &Env,
    ns: &str,
    req: FreshClaimRequest,
    sent_at: Option<i64>,
) -> crate::error::ApiResult<(csivol_api::Claim, bool)> {
    let ns = ns.to_owned();
    env.write(move |ctx, l| {
        super::super::create_fresh_claim(
            ctx,
            &ns,
            &req,
            &Claimant::operator("op"),
            l,
            sent_at,
            &|_, spec| Ok(spec),
        )
    })
    .await
}

/// CreateVolume's answer to `op`: made as `disk-1`.
fn created(op: &crate::model::OpRow) -> Report {
    Report::Created {
        op: op.id as u64,
        attempt: op.attempt,
        external_id: "disk-1".into(),
        capacity_bytes: 1024,
        context: Default::default(),
        accessible_topology: Vec::new(),
        made_for: None,
    }
}

#[tokio::test]
async fn the_claim_waits_for_create_volume_and_the_volume_goes_once_released() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    let e = fresh(&env, request("a1", None)).await.unwrap_err();
    assert!(format!("{e:?}").contains("needs a lease"), "{e:?}");

    let (c, new) = fresh(&env, request("a1", Some(60_000))).await.unwrap();
    assert!(new);
    assert_eq!(c.state.as_str(), "queued", "waits for its volume");
    let volume = c.volume.clone();
    assert!(
        volume.starts_with("db-") && volume.len() == "db-".len() + 10,
        "{volume}"
    );
    // Another request of the alloc for the name while its claim is held (a CI matrix's
    // legs sharing one run id, or a copy without its key) is refused; nothing is made
    // twice. A retry with its key is answered before the lifecycle, by the key.
    let e = fresh(&env, request("a1", Some(60_000))).await.unwrap_err();
    assert!(
        format!("{e:?}").contains("already holds per-job volume"),
        "{e:?}"
    );
    assert_eq!(env.ops().await, [format!("create {volume} - n1 0")]);

    // Another job cannot copy this job's volume: its data is this job's alone.
    let copy = FreshClaimRequest {
        source: FreshSource::Volume(volume.clone()),
        ..request("a2", Some(60_000))
    };
    let e = fresh(&env, copy).await.unwrap_err();
    assert!(
        format!("{e:?}").contains("another job's per-job volume"),
        "{e:?}"
    );

    let op = env.ops_of("n1").await.remove(0);
    let payload: serde_json::Value = serde_json::from_str(&op.payload).unwrap();
    let csi_name = payload["csi_name"].as_str().unwrap();
    assert!(
        csi_name.starts_with(&format!("csivol-{volume}-")),
        "{csi_name}"
    );
    env.report("n1", vec![created(&op)]).await;
    let state = env.claim_state(&volume, "a1").await.unwrap();
    assert_ne!(state.as_str(), "queued", "granted once created");

    env.controller_published("n1").await;
    env.report("n1", vec![super::published(&volume, "a1")])
        .await;
    assert_eq!(
        env.claim_state(&volume, "a1").await.unwrap().as_str(),
        "ready"
    );
    env.release(&volume, "a1").await.unwrap();
    env.report(
        "n1",
        vec![
            Report::Unpublished {
                volume: volume.clone(),
                alloc: "a1".into(),
            },
            Report::Unstaged {
                volume: volume.clone(),
            },
        ],
    )
    .await;
    // Still attached: nothing is deleted before ControllerUnpublish succeeded.
    let v = volume.clone();
    let row = env.read(move |c| c.require_volume(&v)).await;
    assert_eq!(row.lifecycle, Lifecycle::Ready);
    let unpublish = env
        .ops_of("n1")
        .await
        .into_iter()
        .find(|o| o.kind.as_str() == "unpublish")
        .expect("ControllerUnpublish asked for");
    env.report(
        "n1",
        vec![Report::ControllerUnpublished {
            op: unpublish.id as u64,
            attempt: unpublish.attempt,
        }],
    )
    .await;
    let v = volume.clone();
    let row = env.read(move |c| c.require_volume(&v)).await;
    assert_eq!(
        row.lifecycle,
        Lifecycle::Deleting,
        "{:?}",
        env.events().await
    );
    assert!(
        env.ops()
            .await
            .iter()
            .any(|o| o.starts_with(&format!("delete {volume}"))),
        "{:?}",
        env.ops().await
    );

    // The plugin refuses the deletion for good: the volume stays, with its error, and the
    // leader's sweep does not ask again at once (it would, every few seconds, for ever).
    let delete = env
        .ops_of("n1")
        .await
        .into_iter()
        .find(|o| o.kind.as_str() == "delete")
        .expect("DeleteVolume asked for");
    env.report(
        "n1",
        vec![Report::OpError {
            op: delete.id as u64,
            attempt: delete.attempt,
            error: super::plugin_error("FAILED_PRECONDITION", true),
        }],
    )
    .await;
    env.write(|ctx, l| crate::lifecycle::collect_job_volumes(ctx, l))
        .await
        .unwrap();
    let v = volume.clone();
    let row = env.read(move |c| c.require_volume(&v)).await;
    assert_eq!(
        row.lifecycle,
        Lifecycle::Ready,
        "kept, with the plugin's error"
    );
    assert!(row.error.is_some());
    assert_eq!(env.events_of("volume-deleting").await.len(), 1);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        !env.read(move |c| crate::lifecycle::any_job_volume_due(c, now))
            .await
    );

    // A late copy of the job's request, sent before its release, makes nothing; a request
    // sent after it (the alloc reused) gets a volume of its own.
    let e = sent(&env, request("a1", Some(60_000)), Some(1))
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("released"), "{e:?}");
    let (c, new) = sent(&env, request("a1", Some(60_000)), Some(i64::MAX / 2))
        .await
        .unwrap();
    assert!(new);
    assert_ne!(c.volume, volume);
}

/// A per-job volume of a namespace is made there: keyed in it, its CSI name carrying it,
/// copied only from what lives there, and counted against that namespace's quota alone.
/// The same alloc and name in another namespace is another job's, neither refused by nor
/// named to this one; a namespace that does not exist makes nothing.
#[tokio::test]
async fn a_per_job_volume_is_made_in_the_namespace_the_job_names() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    let e = sent_in(&env, "team-a", request("a1", Some(60_000)), None)
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("no namespace `team-a`"), "{e:?}");
    assert!(env.ops().await.is_empty(), "nothing made");

    env.write(|ctx, _| super::super::create_namespace(ctx, "team-a", "op"))
        .await
        .unwrap();
    let (c, new) = sent_in(&env, "team-a", request("a1", Some(60_000)), None)
        .await
        .unwrap();
    assert!(new);
    assert_eq!(c.namespace, "team-a");
    assert!(c.volume.starts_with("db-"), "{c:?}");
    let key = csivol_api::volume_key("team-a", &c.volume);
    let op = env.ops_of("n1").await.remove(0);
    let payload: serde_json::Value = serde_json::from_str(&op.payload).unwrap();
    let csi_name = payload["csi_name"].as_str().unwrap();
    assert!(
        csi_name.starts_with(&format!("csivol-team-a.{}-", c.volume)),
        "{csi_name}"
    );
    let k = key.clone();
    assert!(env.read(move |c| c.job_volume(&k)).await.is_some());

    // The same alloc and name in `default` is another job's volume, made beside it.
    let (other, new) = fresh(&env, request("a1", Some(60_000))).await.unwrap();
    assert!(new);
    assert_eq!(other.namespace, "default");
    // The same alloc and name again in team-a is refused, naming the volume in team-a.
    let e = sent_in(&env, "team-a", request("a1", Some(60_000)), None)
        .await
        .unwrap_err();
    assert!(
        e.message.contains(&format!("(volume `{}`)", c.volume)),
        "{e:?}"
    );

    // What it copies is read in its namespace: `default`'s volume of that name is not
    // team-a's.
    let copy = FreshClaimRequest {
        source: FreshSource::Volume(other.volume.clone()),
        ..request("a2", Some(60_000))
    };
    let e = sent_in(&env, "team-a", copy, None).await.unwrap_err();
    assert_eq!(e.code(), csivol_api::ErrorCode::NotFound, "{e:?}");

    // Its quota of per-job volumes counts team-a's alone.
    let q = csivol_api::Quota {
        fresh_volumes: Some(1),
        ..Default::default()
    };
    env.write(move |ctx, _| super::super::set_namespace_quota(ctx, "team-a", &q, "op"))
        .await
        .unwrap();
    let e = sent_in(&env, "team-a", request("a3", Some(60_000)), None)
        .await
        .unwrap_err();
    assert!(e.message.contains("namespace `team-a`"), "{e:?}");
    assert!(e.message.contains("1 used"), "{e:?}");
    fresh(&env, request("a3", Some(60_000))).await.unwrap();
}

/// With the etcd store a cluster runs on the previous schema until `upgrade finalize`: a
/// per-job volume is refused then (a server of the previous release would never delete
/// it), and nothing is recorded.
#[tokio::test]
async fn below_the_schema_that_keeps_them_a_per_job_volume_is_refused() {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.write(|ctx, _| {
        ctx.tx
            .execute_batch("DROP TABLE job_volumes;")
            .map_err(crate::error::ApiError::from)
    })
    .await
    .unwrap();
    let e = fresh(&env, request("a1", Some(60_000))).await.unwrap_err();
    assert!(format!("{e:?}").contains("upgrade finalize"), "{e:?}");
    assert!(env.ops().await.is_empty(), "nothing queued");
    let none = env.read(|c| c.claims(None, None)).await;
    assert!(none.is_empty(), "nothing recorded: {none:?}");
}

/// A per-job volume whose CreateVolume answers while its claim's node is lost grants
/// nothing then (the node may start nothing); when the node comes back its queued claim
/// is granted, not left queued until its lease runs out and its volume is deleted under
/// a job that waited for it all along. The queued claim held nothing, so the loss
/// blocked nothing of the volume.
#[tokio::test]
async fn a_claim_queued_while_its_node_was_lost_is_granted_when_it_returns() {
    let env = Env::new();
    env.register("ctl", true, &[]).await;
    env.register("n1", false, &[]).await;
    let (c, _) = fresh(&env, request("a1", Some(60_000))).await.unwrap();
    let volume = c.volume.clone();
    env.write(|ctx, l| crate::lifecycle::nodes::mark_lost(ctx, "n1", "no heartbeat", l))
        .await
        .unwrap();
    assert!(env.events_of("volume-blocked").await.is_empty());
    assert!(
        env.last_message("node-lost", "n1")
            .await
            .contains("0 claim(s) and 0 attachment(s) blocked"),
        "{:?}",
        env.events().await
    );
    let op = env.ops_of("ctl").await.remove(0);
    env.report("ctl", vec![created(&op)]).await;
    assert_eq!(
        env.claim_state(&volume, "a1").await.unwrap().as_str(),
        "queued",
        "its node is lost"
    );

    assert!(env.register("n1", false, &[]).await, "it had been lost");
    let state = env.claim_state(&volume, "a1").await.unwrap();
    assert_ne!(state.as_str(), "queued", "{:?}", env.events().await);
    env.controller_published("ctl").await;
    env.report("n1", vec![super::published(&volume, "a1")])
        .await;
    assert_eq!(
        env.claim_state(&volume, "a1").await.unwrap().as_str(),
        "ready"
    );
}
