//! Self-fencing: everything taken down, recorded, held across a restart until reported.

use csivol_agent::FenceState;
use csivol_tests::TestDir;

use super::support::{Agent, Hostpath, WAIT, config, desired};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_takes_everything_down_and_holds_until_the_server_heard() {
    let dir = TestDir::new("node-fence");
    let hp = Hostpath::start(&dir, "n1", &[]);
    let v1 = hp.attached("v1").await;
    let v2 = hp.attached("v2").await;
    let cfg = config(&dir, vec![hp.spec("hp")]);
    let mut agent = Agent::start(cfg.clone()).await;
    let wanted = || desired(vec![v1.publish("a1"), v2.publish("a2")], vec![], vec![]);
    agent.core.set_desired(wanted());
    agent.published(&v1, "a1").await;
    agent.published(&v2, "a2").await;

    let fence = agent.core.fence().await.unwrap();
    assert_eq!(fence.volumes, ["v1", "v2"]);
    agent.unpublished(&v1, "a1").await;
    agent.unpublished(&v2, "a2").await;
    agent.unstaged(&v1).await;
    agent.unstaged(&v2).await;
    let mut state = agent.core.fence_state();
    tokio::time::timeout(
        WAIT,
        state.wait_for(|s| matches!(s, FenceState::Complete(_))),
    )
    .await
    .expect("the fence completes")
    .unwrap();
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    let fences = agent.core.store().fences().await.unwrap();
    assert_eq!(fences.len(), 1);
    assert_eq!(fences[0].volumes, ["v1", "v2"]);
    assert!(fences[0].completed_ms.is_some() && fences[0].reported_ms.is_none());

    // Restarted before the server heard of it: still fenced, whatever the desired state.
    agent.crash();
    let mut agent = Agent::start(cfg).await;
    assert!(matches!(
        &*agent.core.fence_state().borrow(),
        FenceState::Complete(f) if f.id == fence.id
    ));
    agent.core.set_desired(wanted());
    agent.core.idle().await;
    assert!(agent.core.store().is_empty());
    let reports = agent.drain();
    assert!(
        reports.is_empty(),
        "nothing happens while fenced: {reports:?}"
    );

    // Once reported, the agent follows the server again, but only a desired state given
    // after that: an older one may be stale.
    agent.core.fence_reported(fence.id).await.unwrap();
    agent.core.idle().await;
    assert!(agent.drain().is_empty());
    assert!(agent.core.store().is_empty());
    agent.core.set_desired(wanted());
    agent.published(&v1, "a1").await;
    agent.published(&v2, "a2").await;
    assert_eq!(*agent.core.fence_state().borrow(), FenceState::No);
    let fences = agent.core.store().fences().await.unwrap();
    assert!(fences[0].reported_ms.is_some());
    hp.assert_no_lifecycle_violation();
}
