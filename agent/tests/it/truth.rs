//! Node truth: a claim is ready only while its volume is really mounted from the volume at
//! its target. Mounts that vanish behind a running agent are found and repaired; an agent
//! restarted over vanished mounts stages and publishes again; a paused node resumes what
//! nobody took from it; a plugin killed mid-publish converges; a readiness wait says what
//! it waits for and ends when the claim is released.

use std::path::Path;

use csivol_agent::ReadyCheck;
use csivol_agent::mounts::{Checker, Staging, Target};
use csivol_rules::agent::observed::Observation;
use csivol_tests::{TestDir, eventually, is_mounted, wait_for};
use rustix::mount::{UnmountFlags, mount_bind, unmount};
use serde_json::json;

use super::procs::{
    self, Logs, OneNode, claim, claim_state, create_volume, fast_config, gone, ready, staging_of,
    wait_events, wait_volume,
};
use super::support::WAIT;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_behind_a_running_agent_is_found_and_repaired() {
    let dir = TestDir::new("node-truth-drift");
    let config = fast_config(&dir, "2m");
    let OneNode {
        server: _server,
        api,
        hp,
        agent,
    } = OneNode::start(&dir, &[], &[], &[&config]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;
    std::fs::write(target.join("before.txt"), "kept").unwrap();
    let staging = staging_of(&agent, "v1");
    assert!(is_mounted(&staging));

    // An operator unmounts the staging behind the agent.
    unmount(&staging, UnmountFlags::empty()).unwrap();
    let drift = wait_events(&api, "v1", "claim-drift", 1).await;
    assert!(
        drift[0]["message"]
            .as_str()
            .unwrap()
            .contains("staging of v1 is no longer mounted"),
        "{drift:?}"
    );
    wait_events(&api, "v1", "claim-repaired", 1).await;
    ready(&api, "v1", "a1").await;
    assert!(is_mounted(&staging), "staged again");
    assert_eq!(
        std::fs::read_to_string(target.join("before.txt")).unwrap(),
        "kept"
    );

    // Then the target itself.
    unmount(&target, UnmountFlags::empty()).unwrap();
    let drift = wait_events(&api, "v1", "claim-drift", 2).await;
    assert!(
        drift[1]["message"]
            .as_str()
            .unwrap()
            .contains("target of v1 is no longer mounted"),
        "{drift:?}"
    );
    wait_events(&api, "v1", "claim-repaired", 2).await;
    ready(&api, "v1", "a1").await;
    assert_eq!(
        std::fs::read_to_string(target.join("before.txt")).unwrap(),
        "kept",
        "the volume's data at the target again"
    );
    let (_, metrics) = api.get("/v1/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(metrics.contains("csivol_claim_drifts_total 2"), "{metrics}");
    assert_eq!(
        dir.mounts().len(),
        2,
        "no doubled mount: {:?}",
        dir.mounts()
    );
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_claim_over_a_vanished_staging_stages_it_again() {
    let dir = TestDir::new("node-truth-new-claim");
    // The default resync (30s) does not come during this test: the publish step checks.
    let OneNode {
        server: _server,
        api,
        hp,
        agent,
    } = OneNode::start(&dir, &[], &[], &[]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-multi-writer").await;
    claim(&api, "v1", "a1").await;
    let t1 = ready(&api, "v1", "a1").await;
    std::fs::write(t1.join("shared.txt"), "from a1").unwrap();
    unmount(staging_of(&agent, "v1"), UnmountFlags::empty()).unwrap();

    claim(&api, "v1", "a2").await;
    let t2 = ready(&api, "v1", "a2").await;
    assert_eq!(
        std::fs::read_to_string(t2.join("shared.txt")).unwrap(),
        "from a1",
        "published from the volume, not from an empty directory"
    );
    assert_eq!(hp.count("NodeStageVolume", "OK"), 2, "staged again");
    assert_eq!(hp.count("NodePublishVolume", "FAILED_PRECONDITION"), 0);
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_over_vanished_mounts_stages_and_publishes_again() {
    let dir = TestDir::new("node-truth-restart");
    let OneNode {
        server: _server,
        api,
        hp,
        mut agent,
    } = OneNode::start(&dir, &[], &[], &[]).await;
    create_volume(&api, "v1", "single-node-writer").await;
    create_volume(&api, "v2", "single-node-multi-writer").await;
    let claims = [("v1", "a1"), ("v2", "b1"), ("v2", "b2")];
    let mut targets = Vec::new();
    for (v, a) in claims {
        claim(&api, v, a).await;
        let t = ready(&api, v, a).await;
        std::fs::write(t.join(format!("{a}.txt")), a).unwrap();
        targets.push(t);
    }
    assert_eq!(hp.count("NodeStageVolume", "OK"), 2);

    // kill -9, and everything it mounted is unmounted behind it (say, by a cleanup script).
    agent.proc.kill();
    let mut mounts = dir.mounts();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in &mounts {
        unmount(m, UnmountFlags::empty()).unwrap();
    }
    assert!(dir.mounts().is_empty());
    agent.restart_after_kill();
    let _logs = Logs(&agent);
    // Registering, the agent says nothing is mounted: the server stops calling the claims
    // ready, and from then on no claim is ready unless its data is at its target.
    wait_events(&api, "v1", "claim-drift", 1).await;
    wait_events(&api, "v2", "claim-drift", 2).await;
    eventually(
        "every claim ready again, never ready without its mount",
        WAIT,
        || async {
            let mut all = true;
            for ((v, a), t) in claims.iter().zip(&targets) {
                let state = claim_state(&api, v, a).await.unwrap()["state"].clone();
                if state == "ready" {
                    let data = std::fs::read_to_string(t.join(format!("{a}.txt")));
                    assert_eq!(
                        data.as_deref().ok(),
                        Some(*a),
                        "{v}/{a} ready without its volume at {}",
                        t.display()
                    );
                } else {
                    all = false;
                }
            }
            all.then_some(())
        },
    )
    .await;
    assert_eq!(hp.count("NodeStageVolume", "OK"), 4, "both staged again");
    for t in &targets {
        assert!(is_mounted(t));
    }
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_resumes_its_claims_and_takes_down_what_was_unblocked() {
    use rustix::process::{Pid, Signal, kill_process};
    let dir = TestDir::new("node-truth-paused");
    let OneNode {
        server: _server,
        api,
        hp,
        mut agent,
    } = OneNode::start(&dir, &["--heartbeat-ttl=1s"], &[], &[]).await;
    let mut targets = Vec::new();
    for (v, a) in [("v1", "a1"), ("v2", "b1"), ("v3", "c1")] {
        create_volume(&api, v, "single-node-writer").await;
        claim(&api, v, a).await;
        let t = ready(&api, v, a).await;
        std::fs::write(t.join("work.txt"), a).unwrap();
        targets.push(t);
    }

    // Stopped (not killed) past the TTL: lost, its claims blocked, others refused.
    let pid = Pid::from_raw(agent.proc.pid() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    for v in ["v1", "v2", "v3"] {
        wait_volume(&api, v, "blocked").await;
    }
    let (status, body) = api
        .post(
            "/v1/volumes/v1/claims",
            json!({"alloc": "other", "node": "n1", "mode": "write"}),
        )
        .await;
    assert_eq!(status, 423, "{body}");
    // Meanwhile an operator gives up on v3.
    let (status, body) = api
        .post(
            "/v1/volumes/v3/unblock",
            json!({"reason": "test: the operator took v3 back"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    gone(&api, "v3", "c1").await;

    kill_process(pid, Signal::CONT).unwrap();
    // Back: the claims nobody released are ready again, their mounts and data untouched;
    // the one released meanwhile is taken down.
    for (v, a, t) in [("v1", "a1", &targets[0]), ("v2", "b1", &targets[1])] {
        let back = ready(&api, v, a).await;
        assert_eq!(&back, t);
        assert!(is_mounted(t));
        assert_eq!(std::fs::read_to_string(t.join("work.txt")).unwrap(), a);
        wait_events(&api, v, "claim-resumed", 1).await;
    }
    wait_for("v3 taken down on the node", WAIT, || {
        (!is_mounted(&targets[2]) && !is_mounted(&staging_of(&agent, "v3"))).then_some(())
    });
    wait_events(&api, "v3", "claim-taken-down", 1).await;
    assert_eq!(
        hp.count("NodePublishVolume", "OK"),
        3,
        "nothing was published again"
    );
    // Registered with what was really mounted, the unblocked one included.
    assert!(
        agent.log().contains("published=3 staged=3"),
        "registered with what is really mounted: {}",
        agent.log()
    );
    hp.assert_no_lifecycle_violation();

    let status = agent
        .proc
        .terminate(WAIT)
        .expect("the agent stops on SIGTERM");
    assert!(status.success(), "{status}");
    assert!(
        is_mounted(&targets[0]),
        "stopping the agent leaves volumes mounted"
    );
}

/// A node paused past its TTL while its staging was unmounted comes back without the
/// claim mounted: nobody released the claim, so it is published again (staged, published,
/// checked), never released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_whose_staging_vanished_republishes_the_claim() {
    use rustix::process::{Pid, Signal, kill_process};
    let dir = TestDir::new("node-truth-paused-unmounted");
    let OneNode {
        server: _server,
        api,
        hp,
        agent,
    } = OneNode::start(&dir, &["--heartbeat-ttl=1s"], &[], &[]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;
    std::fs::write(target.join("work.txt"), "kept").unwrap();
    let staging = staging_of(&agent, "v1");

    let pid = Pid::from_raw(agent.proc.pid() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    wait_volume(&api, "v1", "blocked").await;
    // Meanwhile the node's mounts go (a cleanup script, a plugin restart): the staging
    // first, then the target bound from it.
    unmount(&target, UnmountFlags::empty()).unwrap();
    unmount(&staging, UnmountFlags::empty()).unwrap();
    kill_process(pid, Signal::CONT).unwrap();

    let republished = wait_events(&api, "v1", "claim-republished", 1).await;
    assert!(
        republished[0]["message"]
            .as_str()
            .unwrap()
            .contains("came back without it mounted"),
        "{republished:?}"
    );
    let back = ready(&api, "v1", "a1").await;
    assert_eq!(back, target);
    assert!(is_mounted(&staging) && is_mounted(&target));
    assert_eq!(
        std::fs::read_to_string(target.join("work.txt")).unwrap(),
        "kept"
    );
    wait_events(&api, "v1", "claim-repaired", 1).await;
    let kinds: Vec<String> = procs::events(&api, "v1")
        .await
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !kinds.iter().any(|k| k == "claim-released"),
        "nobody released it: {kinds:?}"
    );
    assert_eq!(hp.count("NodeStageVolume", "OK"), 2, "staged again");
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_mid_publish_converges() {
    let dir = TestDir::new("node-truth-plugin-kill");
    let OneNode {
        server: _server,
        api,
        mut hp,
        agent,
    } = OneNode::start(&dir, &[], &["--delay=NodePublishVolume=3s"], &[]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    wait_for("NodePublishVolume under way", WAIT, || {
        agent
            .db_state("SELECT state FROM publications WHERE volume = 'v1'")
            .filter(|s| s == "publishing")
    });
    hp.restart(&[]);
    let target = ready(&api, "v1", "a1").await;
    assert!(is_mounted(&target));
    assert_eq!(
        dir.mounts().len(),
        2,
        "no doubled mount: {:?}",
        dir.mounts()
    );
    api.delete("/v1/volumes/v1/claims/a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(
        dir.mounts().is_empty(),
        "no leaked mount: {:?}",
        dir.mounts()
    );
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readiness_wait_says_what_it_waits_for_and_a_release_ends_it() {
    let dir = TestDir::new("node-truth-waiting");
    let config = fast_config(&dir, "5m");
    // A plugin that answers NodePublishVolume without mounting anything.
    let OneNode {
        server: _server,
        api,
        hp: _hp,
        agent,
    } = OneNode::start(&dir, &[], &["--publish-without-mount"], &[&config]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let c = eventually("the claim to say what it waits for", WAIT, || async {
        claim_state(&api, "v1", "a1")
            .await
            .filter(|c| c["waiting"].is_object())
    })
    .await;
    assert_eq!(c["state"], "publishing", "{c}");
    let reason = c["waiting"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("published; waiting for the target to hold the volume: target of v1 is no longer mounted"),
        "{c}"
    );
    assert_eq!(c["waiting"]["timeout_ms"], 300_000, "{c}");
    assert!(c["waiting"]["since"].is_string(), "{c}");

    // A release does not wait for the 5-minute readiness timeout.
    let (status, _) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202);
    gone(&api, "v1", "a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abnormal_volume_condition_is_shown_on_the_claim() {
    let dir = TestDir::new("node-truth-condition");
    let config = fast_config(&dir, "2m");
    let OneNode {
        server: _server,
        api,
        hp,
        agent,
    } = OneNode::start(&dir, &[], &[], &[&config]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    ready(&api, "v1", "a1").await;
    let (_, v) = api.get("/v1/volumes/v1").await;
    let abnormal = hp.state_dir.join("abnormal");
    std::fs::create_dir_all(&abnormal).unwrap();
    let marker = abnormal.join(v["external_id"].as_str().unwrap());
    std::fs::write(&marker, "disk errors on the backing device").unwrap();

    let c = eventually("the condition on the claim", WAIT, || async {
        claim_state(&api, "v1", "a1")
            .await
            .filter(|c| c["condition"].is_string())
    })
    .await;
    assert_eq!(c["condition"], "disk errors on the backing device", "{c}");
    assert_eq!(
        c["state"], "ready",
        "a condition is shown, not acted on: {c}"
    );
    let (_, metrics) = api.get("/v1/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(metrics.contains("csivol_claims_abnormal 1"), "{metrics}");
    wait_events(&api, "v1", "volume-condition", 1).await;

    std::fs::remove_file(&marker).unwrap();
    eventually("the condition cleared", WAIT, || async {
        claim_state(&api, "v1", "a1")
            .await
            .filter(|c| c["condition"].is_null())
    })
    .await;
    wait_events(&api, "v1", "volume-condition", 2).await;
}

/// A target unmounted behind the agent: the plugin reports it abnormal ("... is not
/// mounted") and the drift is repaired; once repaired, `csivol claim list` shows no
/// condition of the mount that went away, not even until the next resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repaired_claim_shows_no_condition_of_the_mount_it_replaced() {
    let dir = TestDir::new("node-truth-repaired-condition");
    // Resyncs far enough apart that the one after the repair cannot hide a stale condition.
    let config = dir.join("agent.toml");
    std::fs::write(&config, "resync_interval = \"5s\"\n").unwrap();
    let OneNode {
        server,
        api,
        hp: _hp,
        agent,
    } = OneNode::start(&dir, &[], &[], &[&format!("--config={}", config.display())]).await;
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;

    unmount(&target, UnmountFlags::empty()).unwrap();
    wait_events(&api, "v1", "claim-repaired", 1).await;
    let mut cmd = std::process::Command::new(csivol_tests::bin_path("csivol"));
    cmd.args(["claim", "list", "--volume", "v1", "-o", "json"])
        .env("CSIVOL_ADDR", server.url())
        .env("CSIVOL_TOKEN", server.api.token.as_deref().unwrap())
        .env_remove("CSIVOL_TOKEN_FILE");
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let claims: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &claims[0];
    assert_eq!(c["state"], "ready", "{claims}");
    assert!(
        c.get("condition").is_none_or(|v| v.is_null()),
        "no condition of the mount the repair replaced: {claims}"
    );
}

/// The readiness check on real mounts: a target bound from an empty directory of the node
/// is refused, a target bound from the mounted staging is ready, and once a plugin is seen
/// to stage nothing, a target bound from its own directory is ready without a staging mount.
#[test]
fn readiness_refuses_a_bind_of_an_empty_local_directory() {
    let dir = TestDir::new("node-truth-mounts");
    let data_dir = dir.path().canonicalize().unwrap().join("agent");
    let volume = dir
        .path()
        .canonicalize()
        .unwrap()
        .join("backend")
        .join("v1");
    let staging = data_dir.join("staging/hp/v1");
    let target = data_dir.join("targets/v1/a1");
    for d in [&volume, &staging, &target] {
        std::fs::create_dir_all(d).unwrap();
    }
    let check = |target: &Path, staged: Option<&Observation>| {
        Checker::read(&data_dir).unwrap().target(
            ReadyCheck::Mount,
            Target {
                volume: "v1",
                path: target,
                observed: None,
                block: false,
            },
            Some(Staging {
                volume: "v1",
                path: &staging,
                observed: staged,
                block: false,
            }),
        )
    };
    let observe = || Checker::read(&data_dir).unwrap().observe(&staging, true);
    // The bug: the staging is not mounted, and the target is bound from it.
    mount_bind(&staging, &target).unwrap();
    let e = check(&target, Some(&observe())).unwrap_err();
    assert!(e.contains("bind of the node's own directory"), "{e}");
    unmount(&target, UnmountFlags::empty()).unwrap();

    // A plugin that stages nothing and binds its own directory at the target.
    let nothing = observe();
    assert_eq!(nothing.kind(), "none");
    mount_bind(&volume, &target).unwrap();
    let seen = check(&target, Some(&nothing)).unwrap();
    assert_eq!(seen.mount.unwrap().root, volume);
    unmount(&target, UnmountFlags::empty()).unwrap();

    // Staged for real, then published from the staging.
    mount_bind(&volume, &staging).unwrap();
    let staged = observe();
    assert_eq!(staged.kind(), "mount");
    mount_bind(&staging, &target).unwrap();
    assert!(check(&target, Some(&staged)).is_ok());
    // Without a mount at all.
    let bare = data_dir.join("targets/v1/a2");
    std::fs::create_dir_all(&bare).unwrap();
    assert!(
        check(&bare, Some(&staged))
            .unwrap_err()
            .contains("no longer mounted")
    );
}
