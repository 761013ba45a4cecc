//! Claims brought up and taken down through a real plugin, with faults injected.

use std::time::Duration;

use csivol_api::Report;
use csivol_tests::{TestDir, is_mounted};

use super::support::{Agent, Hostpath, config, desired};
use csivol_agent::ReadyCheck;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_share_one_staging_and_the_last_release_unstages() {
    let dir = TestDir::new("node-lifecycle");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let v = hp.attached("v1").await;
    let mut agent = Agent::start(config(&dir, vec![hp.spec("hp")])).await;

    let reg = agent.core.registration(None);
    assert_eq!(reg.plugins.len(), 1);
    let node = reg.plugins[0].node.as_ref().expect("node plugin facts");
    assert_eq!(node.info.node_id, "csi-n1");
    assert!(node.capabilities.stage_unstage_volume);
    assert_eq!(reg.plugins[0].controller, None);
    assert!(reg.published.is_empty() && reg.staged.is_empty());

    // First claim: staged, published, mounted, and the volume's data is there.
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    let t1 = agent.published(&v, "a1").await;
    assert_eq!(t1, agent.core.data_dir().join("targets/v1/a1"));
    assert!(is_mounted(&t1), "{} is mounted", t1.display());
    std::fs::write(t1.join("hello"), "from a1").unwrap();
    assert_eq!(
        std::fs::read_to_string(hp.data_dir(&v).join("hello")).unwrap(),
        "from a1"
    );
    let staging = agent.core.data_dir().join("staging/hp/v1");
    assert!(is_mounted(&staging));

    // Second claim of the same volume reuses the staging.
    agent.core.set_desired(desired(
        vec![v.publish("a1"), v.publish("a2")],
        vec![],
        vec![],
    ));
    let t2 = agent.published(&v, "a2").await;
    assert_eq!(
        std::fs::read_to_string(t2.join("hello")).unwrap(),
        "from a1"
    );
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1, "staged once");
    assert_eq!(dir.mounts().len(), 3, "{:?}", dir.mounts());
    let reg = agent.core.registration(None);
    assert_eq!(reg.published.len(), 2);
    assert_eq!(reg.staged, ["v1"]);

    // Releasing one keeps the other and the staging.
    agent.core.set_desired(desired(
        vec![v.publish("a2")],
        vec![v.unpublish("a1")],
        vec![],
    ));
    agent.unpublished(&v, "a1").await;
    assert!(!t1.exists());
    assert!(is_mounted(&t2) && is_mounted(&staging));
    assert!(
        !agent
            .seen
            .iter()
            .any(|r| matches!(r, Report::Unstaged { .. })),
        "not unstaged while a claim remains: {:?}",
        agent.seen
    );

    // Releasing the last unpublishes, then unstages, and only then says so.
    agent
        .core
        .set_desired(desired(vec![], vec![v.unpublish("a2")], vec![]));
    agent.unpublished(&v, "a2").await;
    agent.unstaged(&v).await;
    assert_eq!(
        hp.count("NodeUnstageVolume", "OK"),
        1,
        "NodeUnstageVolume succeeded before the report"
    );
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    assert!(!staging.exists());
    // The server then asks to unstage: it is told again, idempotently.
    agent.clear();
    agent
        .core
        .set_desired(desired(vec![], vec![], vec![v.unstage()]));
    agent.unstaged(&v).await;
    assert_eq!(hp.count("NodeUnstageVolume", "OK"), 1);
    let reg = agent.core.registration(None);
    assert!(reg.published.is_empty() && reg.staged.is_empty());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anything_no_desired_claim_covers_is_taken_down() {
    let dir = TestDir::new("node-uncovered");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let v1 = hp.attached("v1").await;
    let v2 = hp.attached("v2").await;
    let mut agent = Agent::start(config(&dir, vec![hp.spec("hp")])).await;
    agent.core.set_desired(desired(
        vec![v1.publish("a1"), v2.publish("a2")],
        vec![],
        vec![],
    ));
    agent.published(&v1, "a1").await;
    agent.published(&v2, "a2").await;
    assert_eq!(dir.mounts().len(), 4);

    // The server forgot v2's claim (an operator unblocked it, say): v2 comes down, v1 stays.
    agent
        .core
        .set_desired(desired(vec![v1.publish("a1")], vec![], vec![]));
    agent.unpublished(&v2, "a2").await;
    agent.unstaged(&v2).await;
    assert_eq!(dir.mounts().len(), 2, "{:?}", dir.mounts());
    assert!(is_mounted(&agent.core.data_dir().join("targets/v1/a1")));
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_without_staging_or_controller() {
    let dir = TestDir::new("node-plugin-kinds");
    // Node-only with staging, and node-only without staging, on one node.
    let staged = Hostpath::start(&dir, "staged", &["--no-controller"]);
    let direct = Hostpath::start(&dir, "direct", &["--no-controller", "--no-stage"]);
    let mut v1 = staged.create("v1").await;
    v1.plugin = "staged".into();
    let mut v2 = direct.create("v2").await;
    v2.plugin = "direct".into();
    let mut agent = Agent::start(config(
        &dir,
        vec![staged.spec("staged"), direct.spec("direct")],
    ))
    .await;
    let reg = agent.core.registration(None);
    let ids: Vec<_> = reg.plugins.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["direct", "staged"]);
    assert!(
        !reg.plugins[0]
            .node
            .as_ref()
            .unwrap()
            .capabilities
            .stage_unstage_volume
    );

    agent.core.set_desired(desired(
        vec![v1.publish("a1"), v2.publish("a2")],
        vec![],
        vec![],
    ));
    let t1 = agent.published(&v1, "a1").await;
    let t2 = agent.published(&v2, "a2").await;
    assert!(is_mounted(&t1) && is_mounted(&t2));
    assert_eq!(direct.count("NodeStageVolume", "OK"), 0);
    assert_eq!(staged.count("NodeStageVolume", "OK"), 1);
    assert_eq!(agent.core.registration(None).staged, ["v1"]);
    std::fs::write(t2.join("f"), "direct").unwrap();
    assert_eq!(
        std::fs::read_to_string(direct.data_dir(&v2).join("f")).unwrap(),
        "direct"
    );

    agent.core.set_desired(desired(
        vec![],
        vec![v1.unpublish("a1"), v2.unpublish("a2")],
        vec![],
    ));
    // Without staging, the volume is reported unstaged once its last claim is down.
    agent.unstaged(&v2).await;
    agent.unstaged(&v1).await;
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    staged.assert_no_lifecycle_violation();
    direct.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_is_retried_until_ready() {
    let dir = TestDir::new("node-retry");
    // A timed-out call may have happened: it is retried to a definite answer too.
    let hp = Hostpath::start(
        &dir,
        "n1",
        &[
            "--fail=NodeStageVolume=UNAVAILABLE:2",
            "--fail=NodePublishVolume=DEADLINE_EXCEEDED:1",
        ],
    );
    let v = hp.attached("v1").await;
    let mut agent = Agent::start(config(&dir, vec![hp.spec("hp")])).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    let err = agent.claim_error(&v, "a1", false).await;
    assert_eq!(err.code, "UNAVAILABLE");
    assert!(err.message.contains("NodeStageVolume"), "{}", err.message);
    assert!(err.next_retry_at_ms.is_some(), "says when it retries");
    let target = agent.published(&v, "a1").await;
    assert!(is_mounted(&target));
    let stages: Vec<_> = hp
        .calls()
        .into_iter()
        .filter(|c| c["rpc"] == "NodeStageVolume")
        .map(|c| c["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(stages, ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
    assert_eq!(hp.count("NodePublishVolume", "DEADLINE_EXCEEDED"), 1);
    let errors: Vec<_> = agent
        .seen
        .iter()
        .filter_map(|r| match r {
            Report::ClaimError { error, .. } => Some(error.code.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        errors,
        ["UNAVAILABLE", "UNAVAILABLE", "DEADLINE_EXCEEDED"],
        "one report per failed try"
    );
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_argument_fails_the_claim_with_the_plugins_message() {
    let dir = TestDir::new("node-invalid");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let mut v = hp.attached("v1").await;
    // The volume context CreateVolume returned is missing: the plugin refuses the call.
    v.context.clear();
    let mut agent = Agent::start(config(&dir, vec![hp.spec("hp")])).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    let err = agent.claim_error(&v, "a1", true).await;
    assert_eq!(err.code, "INVALID_ARGUMENT");
    assert!(
        err.message.contains("`volume_context` must carry"),
        "the plugin's message: {}",
        err.message
    );
    // What was begun is cleaned up without the server asking, and not retried.
    agent.unstaged(&v).await;
    assert_eq!(hp.count("NodeStageVolume", "INVALID_ARGUMENT"), 1);
    assert!(dir.mounts().is_empty());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_calls_per_plugin_stay_within_the_limit() {
    let dir = TestDir::new("node-concurrency");
    let hp = Hostpath::start(&dir, "n1", &["--delay=NodePublishVolume=300ms"]);
    let mut vols = Vec::new();
    for i in 0..6 {
        vols.push(hp.attached(&format!("v{i}")).await);
    }
    let mut cfg = config(&dir, vec![hp.spec("hp")]);
    cfg.node_concurrency = 2;
    let mut agent = Agent::start(cfg).await;
    agent.core.set_desired(desired(
        vols.iter().map(|v| v.publish("a")).collect(),
        vec![],
        vec![],
    ));
    for v in &vols {
        agent.published(v, "a").await;
    }
    let node_calls: Vec<u64> = hp
        .calls()
        .iter()
        .filter(|c| c["rpc"].as_str().unwrap().starts_with("Node"))
        .map(|c| c["in_flight"].as_u64().unwrap())
        .collect();
    let max = node_calls.iter().copied().max().unwrap();
    assert_eq!(
        max, 2,
        "at most node_concurrency calls in flight, and the volumes did run in parallel: {node_calls:?}"
    );
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_not_ready_in_time_fails_and_is_cleaned_up() {
    let dir = TestDir::new("node-ready-timeout");
    // Marker files instead of mounts: with the mount check, the target never becomes ready.
    let hp = Hostpath::start(&dir, "n1", &["--mount=none"]);
    let v = hp.attached("v1").await;
    let mut cfg = config(&dir, vec![hp.spec("hp")]);
    cfg.volume_ready_timeout = Duration::from_millis(500);
    let mut agent = Agent::start(cfg).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    let err = agent.claim_error(&v, "a1", true).await;
    assert_eq!(err.code, "TIMEOUT");
    assert!(
        err.message.contains("is not ready after"),
        "{}",
        err.message
    );
    agent.unpublished(&v, "a1").await;
    agent.unstaged(&v).await;
    let target = agent.core.data_dir().join("targets/v1/a1");
    assert!(!target.exists(), "the plugin removed the target");
    assert!(agent.core.store().publications().is_empty());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exists_check_serves_plugins_that_do_not_mount() {
    let dir = TestDir::new("node-ready-exists");
    let hp = Hostpath::start(&dir, "n1", &["--mount=none"]);
    let v = hp.attached("v1").await;
    let mut cfg = config(&dir, vec![hp.spec("hp")]);
    cfg.ready_check = ReadyCheck::Exists;
    let mut agent = Agent::start(cfg).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    let target = agent.published(&v, "a1").await;
    assert!(target.join(".csivol-hostpath").is_file());
    assert!(dir.mounts().is_empty());
    agent
        .core
        .set_desired(desired(vec![], vec![v.unpublish("a1")], vec![]));
    agent.unstaged(&v).await;
    assert!(!target.exists());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_unstage_is_reported_and_retried_before_unstaged() {
    let dir = TestDir::new("node-unstage-retry");
    let hp = Hostpath::start(&dir, "n1", &["--fail=NodeUnstageVolume=UNAVAILABLE:1"]);
    let v = hp.attached("v1").await;
    let mut agent = Agent::start(config(&dir, vec![hp.spec("hp")])).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    agent.published(&v, "a1").await;
    agent
        .core
        .set_desired(desired(vec![], vec![v.unpublish("a1")], vec![v.unstage()]));
    let failed = agent
        .wait("a volume error", |r| {
            matches!(r, Report::VolumeError { .. })
        })
        .await;
    let Report::VolumeError { volume, error } = failed else {
        unreachable!()
    };
    assert_eq!(volume, v.name);
    assert_eq!(error.code, "UNAVAILABLE");
    assert!(
        !error.is_final && error.next_retry_at_ms.is_some(),
        "{error:?}"
    );
    // Unstaged comes only once NodeUnstageVolume has succeeded.
    agent.unstaged(&v).await;
    let unstages: Vec<_> = hp
        .calls()
        .into_iter()
        .filter(|c| c["rpc"] == "NodeUnstageVolume")
        .map(|c| c["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(unstages, ["UNAVAILABLE", "OK"]);
    hp.assert_no_lifecycle_violation();
}
