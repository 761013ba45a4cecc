//! Agents' reports, one test per kind of report (the controller operations' reports are
//! in `ops` and `volumes`), and the reports that are ignored.

use csivol_api::{AttachmentState, ClaimMode, ClaimState, DetachRequest, Report};

use super::{Env, plugin_error, published};

/// A cluster with node `n1` hosting the controller, volume `v` and claim `a1` on `n1`,
/// attached and publishing.
async fn publishing() -> Env {
    let env = Env::new();
    env.register("n1", true, &[]).await;
    env.volume("v", "single-node-writer").await;
    env.claim("v", "a1", "n1", ClaimMode::Write).await.unwrap();
    env.controller_published("n1").await;
    env
}

#[tokio::test]
async fn controller_published_attaches_with_the_publish_context() {
    let env = publishing().await;
    let a = env.read(|c| c.attachment("v", "n1")).await.unwrap();
    assert_eq!(a.state, AttachmentState::Attached);
    assert_eq!(a.publish_context["device"], "/dev/v");
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Publishing)
    );
    assert!(env.ops().await.is_empty());
    assert_eq!(
        env.events_of("volume-attached").await,
        ["volume-attached v n1 -"]
    );
}

#[tokio::test]
async fn published_makes_the_claim_ready_with_its_target_and_another_nodes_report_is_ignored() {
    let env = publishing().await;
    env.register("n2", false, &[]).await;
    env.report("n2", vec![published("v", "a1")]).await;
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Publishing),
        "not n2's claim"
    );

    env.report("n1", vec![published("v", "a1")]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.state, ClaimState::Ready);
    assert_eq!(c.target_path.as_deref(), Some("/targets/v/a1"));
    assert_eq!(env.events_of("claim-ready").await, ["claim-ready v n1 a1"]);
}

#[tokio::test]
async fn waiting_says_what_a_publishing_claim_waits_for() {
    let env = publishing().await;
    let waiting = Report::Waiting {
        volume: "v".into(),
        alloc: "a1".into(),
        reason: "target not mounted yet".into(),
        since_ms: 1_000,
        timeout_ms: 30_000,
    };
    env.report("n1", vec![waiting.clone()]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(
        c.waiting,
        Some(("target not mounted yet".into(), 1_000, 30_000))
    );
    // Ready clears it, and a ready claim takes no waiting report.
    env.report("n1", vec![published("v", "a1")]).await;
    env.report("n1", vec![waiting]).await;
    assert_eq!(env.claim_row("v", "a1").await.unwrap().waiting, None);
}

#[tokio::test]
async fn condition_is_recorded_once_per_change() {
    let env = publishing().await;
    env.report("n1", vec![published("v", "a1")]).await;
    let abnormal = Report::Condition {
        volume: "v".into(),
        alloc: "a1".into(),
        abnormal: true,
        message: "disk degraded".into(),
    };
    env.report("n1", vec![abnormal.clone(), abnormal]).await;
    assert_eq!(
        env.claim_row("v", "a1").await.unwrap().condition.as_deref(),
        Some("disk degraded")
    );
    env.report(
        "n1",
        vec![Report::Condition {
            volume: "v".into(),
            alloc: "a1".into(),
            abnormal: false,
            message: "healthy".into(),
        }],
    )
    .await;
    assert_eq!(env.claim_row("v", "a1").await.unwrap().condition, None);
    assert_eq!(env.events_of("volume-condition").await.len(), 2);
}

#[tokio::test]
async fn drift_sends_a_ready_claim_back_to_publishing_and_the_next_publish_is_its_repair() {
    let env = publishing().await;
    let drift = Report::Drift {
        volume: "v".into(),
        alloc: "a1".into(),
        reason: "target unmounted".into(),
    };
    // Only a ready claim drifts.
    env.report("n1", vec![drift.clone()]).await;
    assert!(env.events_of("claim-drift").await.is_empty());

    env.report("n1", vec![published("v", "a1"), drift]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.state, ClaimState::Publishing);
    assert_eq!(c.error.as_deref(), Some("drift: target unmounted"));
    env.report("n1", vec![published("v", "a1")]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.state, ClaimState::Ready);
    assert_eq!(c.error, None);
    assert_eq!(
        env.events_of("claim-repaired").await,
        ["claim-repaired v n1 a1"]
    );
    assert_eq!(
        env.events_of("claim-ready").await.len(),
        1,
        "ready once, repaired once"
    );
}

/// A drift is a fact of the claim, not words of its error: a step of the republish that
/// fails and is retried (its error replacing the drift's words) leaves the drift, and the
/// publish that follows is still its repair, not a first readiness.
#[tokio::test]
async fn a_drifted_claim_whose_republish_hit_an_error_is_still_repaired() {
    let env = publishing().await;
    env.report("n1", vec![published("v", "a1")]).await;
    let drift = Report::Drift {
        volume: "v".into(),
        alloc: "a1".into(),
        reason: "target unmounted".into(),
    };
    let busy = Report::ClaimError {
        volume: "v".into(),
        alloc: "a1".into(),
        error: plugin_error("UNAVAILABLE", false),
    };
    env.report("n1", vec![drift, busy]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.error.as_deref(), Some("UNAVAILABLE: the plugin says no"));
    env.report("n1", vec![published("v", "a1")]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));
    assert_eq!(
        env.events_of("claim-repaired").await,
        ["claim-repaired v n1 a1"],
        "the republish is the drift's repair"
    );
    assert_eq!(env.events_of("claim-ready").await.len(), 1, "ready once");
}

/// The API shows a drift as a field (what found it, since when, why) and, as before, in
/// the claim's error while nothing replaced it; the repair ends both.
#[tokio::test]
async fn the_api_shows_a_drift_as_a_field_and_in_the_error() {
    let env = publishing().await;
    env.report("n1", vec![published("v", "a1")]).await;
    let drift = Report::Drift {
        volume: "v".into(),
        alloc: "a1".into(),
        reason: "target unmounted".into(),
    };
    env.report("n1", vec![drift]).await;
    let row = env.claim_row("v", "a1").await.unwrap();
    let c = env.read(move |conn| conn.claim_to_api(&row)).await;
    assert_eq!(c.error.as_deref(), Some("drift: target unmounted"));
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["drift"]["found"], "check", "{json}");
    assert_eq!(json["drift"]["reason"], "target unmounted", "{json}");
    let since = json["drift"]["since"].as_str().unwrap_or_default();
    assert!(
        humantime::parse_rfc3339(since).is_ok(),
        "since when, as a time: {json}"
    );
    env.report("n1", vec![published("v", "a1")]).await;
    let row = env.claim_row("v", "a1").await.unwrap();
    let c = env.read(move |conn| conn.claim_to_api(&row)).await;
    assert_eq!(c.error, None);
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json.get("drift"), None, "repaired: {json}");
}

/// A condition reported while the target had drifted ("not mounted") was about the mount
/// the repair replaced: the repaired claim shows none until the plugin is asked again.
#[tokio::test]
async fn a_repaired_claim_forgets_the_condition_of_the_mount_it_replaced() {
    let env = publishing().await;
    env.report("n1", vec![published("v", "a1")]).await;
    let abnormal = Report::Condition {
        volume: "v".into(),
        alloc: "a1".into(),
        abnormal: true,
        message: "/t/v/a1 is not mounted".into(),
    };
    let drift = Report::Drift {
        volume: "v".into(),
        alloc: "a1".into(),
        reason: "target unmounted".into(),
    };
    env.report("n1", vec![abnormal, drift]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.condition.as_deref(), Some("/t/v/a1 is not mounted"));
    env.report("n1", vec![published("v", "a1")]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.state, ClaimState::Ready);
    assert_eq!(c.condition, None, "repaired: {c:?}");
}

#[tokio::test]
async fn a_claim_error_is_retried_or_fails_the_claim_when_final() {
    let env = publishing().await;
    let error = |is_final| Report::ClaimError {
        volume: "v".into(),
        alloc: "a1".into(),
        error: plugin_error("UNAVAILABLE", is_final),
    };
    env.report("n1", vec![error(false)]).await;
    let c = env.claim_row("v", "a1").await.unwrap();
    assert_eq!(c.state, ClaimState::Publishing);
    assert_eq!(c.error.as_deref(), Some("UNAVAILABLE: the plugin says no"));
    assert_eq!(c.next_retry_at, Some(4_102_444_800_000));

    env.report("n1", vec![error(true)]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Failed));
    assert_eq!(
        env.events_of("claim-failed").await,
        ["claim-failed v n1 a1"]
    );
}

#[tokio::test]
async fn unpublished_and_unstaged_take_a_released_claim_down_to_the_controller() {
    let env = publishing().await;
    env.report("n1", vec![published("v", "a1")]).await;
    let unpublished = Report::Unpublished {
        volume: "v".into(),
        alloc: "a1".into(),
    };
    // A claim that nobody released stays.
    env.report("n1", vec![unpublished.clone()]).await;
    assert_eq!(env.claim_state("v", "a1").await, Some(ClaimState::Ready));

    env.release("v", "a1").await.unwrap();
    env.report("n1", vec![unpublished]).await;
    assert!(env.claim_row("v", "a1").await.is_none());
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Unstaging)
    );
    assert_eq!(
        env.events_of("claim-released").await,
        ["claim-released v n1 a1"]
    );

    env.report(
        "n1",
        vec![Report::VolumeError {
            volume: "v".into(),
            error: plugin_error("INTERNAL", false),
        }],
    )
    .await;
    let a = env.read(|c| c.attachment("v", "n1")).await.unwrap();
    assert_eq!(
        a.error.as_deref(),
        Some("NodeUnstageVolume failed: INTERNAL: the plugin says no")
    );

    env.report("n1", vec![Report::Unstaged { volume: "v".into() }])
        .await;
    assert_eq!(
        env.attachment_state("v", "n1").await,
        Some(AttachmentState::Detaching)
    );
    assert_eq!(env.ops().await, ["unpublish v n1 n1 0"]);
    let op = env.ops_of("n1").await.remove(0);
    env.report(
        "n1",
        vec![Report::ControllerUnpublished {
            op: op.id as u64,
            attempt: 0,
        }],
    )
    .await;
    assert_eq!(env.attachment_state("v", "n1").await, None);
    assert!(env.ops().await.is_empty());
    assert_eq!(
        env.events_of("volume-detached").await,
        ["volume-detached v n1 -"]
    );
}

#[tokio::test]
async fn fenced_records_when_the_agent_fenced_itself() {
    let env = publishing().await;
    env.report(
        "n1",
        vec![Report::Fenced {
            at_ms: 1_700_000_000_000,
            volumes: vec!["v".into()],
        }],
    )
    .await;
    let n = env.read(|c| c.require_node("n1")).await;
    assert_eq!(n.fenced_at, Some(1_700_000_000_000));
    let message: String = env
        .read(|c| {
            let events = c.events(0, &Default::default(), 10_000)?;
            let fenced = events.into_iter().find(|e| e.kind == "node-fenced");
            Ok(fenced.expect("a node-fenced event").message)
        })
        .await;
    assert!(message.ends_with("took down v"), "{message}");
}

/// A listing that shows `v` (`ext-1`) published to the nodes with the given plugin ids.
fn listing(published: &[&str]) -> Report {
    Report::ControllerVolumes {
        plugin: "hp".into(),
        started_ms: csivol_api::limits::MAX_TIME_MS,
        volumes: vec![csivol_api::ListedVolume {
            external_id: "ext-1".into(),
            published_node_ids: published.iter().map(|s| (*s).to_owned()).collect(),
            abnormal: None,
            capacity_bytes: 0,
            context: Default::default(),
        }],
    }
}

#[tokio::test]
async fn controller_listings_are_compared_from_a_controller_host_and_confirmed_twice() {
    let env = publishing().await;
    env.register("n2", false, &[]).await;
    // n2 does not host the controller: its listing does not count.
    for _ in 0..2 {
        env.report("n2", vec![listing(&[])]).await;
    }
    assert!(env.read(|c| c.controller_findings(None)).await.is_empty());

    // n1's attachment is missing at the plugin, and v is published to n2 behind csivol's
    // back: found by the first listing, shown and said by the second, said once.
    env.report("n1", vec![listing(&["csi-n2"])]).await;
    assert!(env.events_of("attachment-missing").await.is_empty());
    let found = env.read(|c| c.controller_findings(None)).await;
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|(_, k)| !k.confirmed));
    for _ in 0..2 {
        env.report("n1", vec![listing(&["csi-n2"])]).await;
    }
    assert_eq!(
        env.events_of("attachment-missing").await,
        ["attachment-missing v n1 -"]
    );
    assert_eq!(
        env.events_of("attachment-leaked").await,
        ["attachment-leaked v n2 -"]
    );
    // Nothing was fixed: the attachment is as it was.
    let a = env.read(|c| c.attachment("v", "n1")).await.unwrap();
    assert_eq!(a.state, AttachmentState::Attached);

    // The storage system agrees again: both resolved.
    env.report("n1", vec![listing(&["csi-n1"])]).await;
    assert_eq!(env.events_of("finding-resolved").await.len(), 2);
    assert!(env.read(|c| c.controller_findings(None)).await.is_empty());
}

#[tokio::test]
async fn a_confirmed_leak_is_detached_only_by_an_operator_through_controller_unpublish() {
    let env = publishing().await;
    env.register("n2", false, &[]).await;
    let detach = |dry_run: bool| {
        let req = DetachRequest {
            node: "n2".into(),
            reason: if dry_run {
                ""
            } else {
                "left by the old cluster"
            }
            .into(),
            force: false,
            dry_run,
        };
        env.write(move |ctx, l| super::super::detach(ctx, "v", &req, "op", l))
    };
    // Before the leak is confirmed there is nothing of `v` on n2 to detach.
    assert!(detach(true).await.unwrap().actions.is_empty());
    for _ in 0..2 {
        env.report("n1", vec![listing(&["csi-n1", "csi-n2"])]).await;
    }
    assert_eq!(
        env.events_of("attachment-leaked").await,
        ["attachment-leaked v n2 -"]
    );
    let plan = detach(true).await.unwrap();
    let actions: Vec<_> = plan
        .actions
        .iter()
        .map(|a| format!("{} {} {}", a.action, a.volume, a.node))
        .collect();
    assert_eq!(actions, ["unpublish-leaked v n2"]);
    assert_eq!(env.attachment_state("v", "n2").await, None, "a dry run");
    assert!(env.ops().await.is_empty(), "a dry run queues nothing");

    detach(false).await.unwrap();
    assert_eq!(
        env.attachment_state("v", "n2").await,
        Some(AttachmentState::Detaching)
    );
    assert_eq!(env.ops().await, ["unpublish v n2 n1 0"]);
    assert_eq!(
        env.events_of("volume-detach").await,
        ["volume-detach v n2 -"]
    );
    // csivol now records the publication (detaching): the next listing resolves the
    // finding and finds nothing new.
    env.report("n1", vec![listing(&["csi-n1", "csi-n2"])]).await;
    assert_eq!(env.events_of("attachment-leaked").await.len(), 1);
    assert_eq!(env.events_of("finding-resolved").await.len(), 1);
    assert!(env.read(|c| c.controller_findings(None)).await.is_empty());
    let op = env.ops_of("n1").await.remove(0);
    env.report(
        "n1",
        vec![Report::ControllerUnpublished {
            op: op.id as u64,
            attempt: op.attempt,
        }],
    )
    .await;
    assert_eq!(env.attachment_state("v", "n2").await, None);
    assert_eq!(
        env.events_of("volume-detached").await,
        ["volume-detached v n2 -"]
    );
    // The storage system agrees; n1's claim never moved.
    env.report("n1", vec![listing(&["csi-n1"])]).await;
    assert!(env.read(|c| c.controller_findings(None)).await.is_empty());
    assert_eq!(
        env.claim_state("v", "a1").await,
        Some(ClaimState::Publishing)
    );
}
