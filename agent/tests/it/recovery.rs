//! A core that stops mid-way (dropped like a crash) and a new one on the same data dir:
//! the node converges with nothing staged twice and no mount leaked.

use csivol_api::Report;
use csivol_tests::{TestDir, eventually, is_mounted};

use super::support::{Agent, Hostpath, WAIT, config, desired};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_stage_and_publish() {
    let dir = TestDir::new("node-crash-stage");
    let mut hp = Hostpath::start(&dir, "n1", &["--fail=NodePublishVolume=UNAVAILABLE"]);
    let v = hp.attached("v1").await;
    let cfg = config(&dir, vec![hp.spec("hp")]);
    let mut agent = Agent::start(cfg.clone()).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    // Staged, then the publish fails and is being retried: stop there.
    agent.claim_error(&v, "a1", false).await;
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1);
    agent.crash();
    hp.restart(&[]);

    let mut agent = Agent::start(cfg).await;
    // Recovery kept the staging it is sure of and undid the publication it is not.
    let reg = agent.core.registration(None);
    assert_eq!(reg.staged, ["v1"]);
    assert!(reg.published.is_empty());
    assert_eq!(dir.mounts().len(), 1, "{:?}", dir.mounts());
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    let target = agent.published(&v, "a1").await;
    assert!(is_mounted(&target));
    assert_eq!(
        dir.mounts().len(),
        2,
        "no doubled mount: {:?}",
        dir.mounts()
    );
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1, "not staged twice");

    agent
        .core
        .set_desired(desired(vec![], vec![v.unpublish("a1")], vec![]));
    agent.unstaged(&v).await;
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_unpublish_and_unstage() {
    let dir = TestDir::new("node-crash-unstage");
    let mut hp = Hostpath::start(&dir, "n1", &["--fail=NodeUnstageVolume=UNAVAILABLE"]);
    let v = hp.attached("v1").await;
    let cfg = config(&dir, vec![hp.spec("hp")]);
    let mut agent = Agent::start(cfg.clone()).await;
    agent
        .core
        .set_desired(desired(vec![v.publish("a1")], vec![], vec![]));
    agent.published(&v, "a1").await;
    agent
        .core
        .set_desired(desired(vec![], vec![v.unpublish("a1")], vec![]));
    agent.unpublished(&v, "a1").await;
    // The unstage fails and is retried; it must not be reported.
    eventually("a failed unstage", WAIT, || async {
        (hp.count("NodeUnstageVolume", "UNAVAILABLE") > 0).then_some(())
    })
    .await;
    let reports = agent.crash();
    assert!(
        !reports.iter().any(|r| matches!(r, Report::Unstaged { .. })),
        "never reported unstaged before NodeUnstageVolume succeeded: {reports:?}"
    );
    assert_eq!(dir.mounts().len(), 1, "the staging is still there");
    hp.restart(&[]);

    let mut agent = Agent::start(cfg).await;
    // Recovery finished the unstage before registering.
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    let reg = agent.core.registration(None);
    assert!(reg.staged.is_empty() && reg.published.is_empty());
    agent
        .core
        .set_desired(desired(vec![], vec![], vec![v.unstage()]));
    agent.unstaged(&v).await;
    assert_eq!(hp.count("NodeUnstageVolume", "OK"), 1);
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_keeps_what_is_ready_and_reports_it() {
    let dir = TestDir::new("node-restart-ready");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let v = hp.attached("v1").await;
    let cfg = config(&dir, vec![hp.spec("hp")]);
    let mut agent = Agent::start(cfg.clone()).await;
    agent.core.set_desired(desired(
        vec![v.publish("a1"), v.publish("a2")],
        vec![],
        vec![],
    ));
    agent.published(&v, "a1").await;
    agent.published(&v, "a2").await;
    agent.crash();

    let mut agent = Agent::start(cfg).await;
    let reg = agent.core.registration(None);
    assert_eq!(reg.published.len(), 2);
    assert_eq!(reg.staged, ["v1"]);
    assert_eq!(dir.mounts().len(), 3);
    // The same desired state again: nothing is called, the claims are confirmed.
    let calls = hp.calls().len();
    agent.core.set_desired(desired(
        vec![v.publish("a1"), v.publish("a2")],
        vec![],
        vec![],
    ));
    agent.published(&v, "a1").await;
    agent.published(&v, "a2").await;
    assert_eq!(hp.calls().len(), calls, "{:?}", &hp.calls()[calls..]);

    // Someone unmounts a target behind the agent's back: the next resync notices and
    // publishes it again.
    let t1 = agent.core.data_dir().join("targets/v1/a1");
    rustix::mount::unmount(&t1, rustix::mount::UnmountFlags::empty()).unwrap();
    agent.clear();
    agent.core.resync();
    agent.published(&v, "a1").await;
    assert!(is_mounted(&t1));
    assert_eq!(dir.mounts().len(), 3, "{:?}", dir.mounts());

    agent.core.set_desired(desired(
        vec![],
        vec![v.unpublish("a1"), v.unpublish("a2")],
        vec![],
    ));
    agent.unstaged(&v).await;
    assert!(dir.mounts().is_empty());
    hp.assert_no_lifecycle_violation();
}
