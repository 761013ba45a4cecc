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
    env.write(move |ctx, l| {
        super::super::create_fresh_claim(ctx, &req, &Claimant::operator("op"), l)
    })
    .await
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
    // A retry is answered with the claim it made; nothing is made twice.
    let (again, new) = fresh(&env, request("a1", Some(60_000))).await.unwrap();
    assert!(!new);
    assert_eq!(again.volume, volume);
    assert_eq!(env.ops().await, [format!("create {volume} - n1 0")]);

    let op = env.ops_of("n1").await.remove(0);
    let payload: serde_json::Value = serde_json::from_str(&op.payload).unwrap();
    let csi_name = payload["csi_name"].as_str().unwrap();
    assert!(
        csi_name.starts_with(&format!("csivol-{volume}-")),
        "{csi_name}"
    );
    env.report(
        "n1",
        vec![Report::Created {
            op: op.id as u64,
            attempt: 0,
            external_id: "disk-1".into(),
            capacity_bytes: 1024,
            context: Default::default(),
            accessible_topology: Vec::new(),
        }],
    )
    .await;
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
