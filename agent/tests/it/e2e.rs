//! The agent binary with the real server and a real plugin: claims made through the API
//! become real mounts; kill -9 of the agent mid-way; a lost node coming back; self-fencing
//! while the server is down.

use std::time::Duration;

use csivol_tests::{TestDir, eventually, is_mounted, wait_for};
use serde_json::json;

use super::procs::{
    AgentProc, Logs, Server, claim, claim_state, create_volume, gone, ready, wait_volume,
};
use super::support::{Hostpath, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_become_mounts_and_releases_detach() {
    let dir = TestDir::new("node-e2e");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    let _logs = Logs(&agent);
    let node = eventually("the node registered", WAIT, || async {
        let (status, n) = api.get("/v1/nodes/n1").await;
        (status == 200).then_some(n)
    })
    .await;
    assert_eq!(node["plugins"][0]["node_id"], "csi-n1");
    assert_eq!(node["plugins"][0]["controller"], true);

    create_volume(&api, "v1", "single-node-multi-writer").await;
    claim(&api, "v1", "a1").await;
    claim(&api, "v1", "a2").await;
    let t1 = ready(&api, "v1", "a1").await;
    let t2 = ready(&api, "v1", "a2").await;
    assert!(is_mounted(&t1) && is_mounted(&t2));
    std::fs::write(t1.join("f"), "shared").unwrap();
    assert_eq!(std::fs::read_to_string(t2.join("f")).unwrap(), "shared");
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1);
    assert_eq!(hp.count("ControllerPublishVolume", "OK"), 1);

    api.delete("/v1/volumes/v1/claims/a1").await;
    gone(&api, "v1", "a1").await;
    assert!(!t1.exists() && is_mounted(&t2));
    api.delete("/v1/volumes/v1/claims/a2").await;
    gone(&api, "v1", "a2").await;
    // The last release unstages, which lets the server controller-unpublish.
    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert_eq!(hp.count("NodeUnstageVolume", "OK"), 1);
    assert_eq!(hp.count("ControllerUnpublishVolume", "OK"), 1);
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_stage_and_publish() {
    let dir = TestDir::new("node-e2e-kill-stage");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--delay=NodePublishVolume=2s"]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    // Killed once the agent recorded the staging and while NodePublishVolume runs.
    wait_for("the volume staged and being published", WAIT, || {
        let staged = agent.db_state("SELECT state FROM stagings WHERE volume = 'v1'");
        let publishing = agent.db_state("SELECT state FROM publications WHERE volume = 'v1'");
        (staged.as_deref() == Some("staged") && publishing.as_deref() == Some("publishing"))
            .then_some(())
    });
    agent.restart_after_kill();
    let _logs = Logs(&agent);

    let target = ready(&api, "v1", "a1").await;
    assert!(is_mounted(&target));
    assert_eq!(hp.count("NodeStageVolume", "OK"), 1, "not staged twice");
    assert_eq!(
        dir.mounts().len(),
        2,
        "no doubled mount: {:?}",
        dir.mounts()
    );

    api.delete("/v1/volumes/v1/claims/a1").await;
    wait_volume(&api, "v1", "free").await;
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_between_unpublish_and_unstage() {
    let dir = TestDir::new("node-e2e-kill-unstage");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--delay=NodeUnstageVolume=2s"]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    ready(&api, "v1", "a1").await;
    api.delete("/v1/volumes/v1/claims/a1").await;
    // Killed once the publication is gone and while NodeUnstageVolume runs.
    wait_for("the volume being unstaged", WAIT, || {
        let unstaging = agent.db_state("SELECT state FROM stagings WHERE volume = 'v1'");
        let published = agent.db_state("SELECT group_concat(alloc) FROM publications");
        (unstaging.as_deref() == Some("unstaging") && published.is_none()).then_some(())
    });
    agent.restart_after_kill();
    let _logs = Logs(&agent);

    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert!(
        dir.mounts().is_empty(),
        "no leaked mount: {:?}",
        dir.mounts()
    );
    assert_eq!(hp.count("ControllerUnpublishVolume", "OK"), 1);
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_is_lost_and_resumes_its_claims_when_back() {
    let dir = TestDir::new("node-e2e-lost");
    let server = Server::start(&dir, &["--heartbeat-ttl=1s"]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let mut agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;

    agent.proc.kill();
    wait_volume(&api, "v1", "blocked").await;
    assert_eq!(
        claim_state(&api, "v1", "a1").await.unwrap()["state"],
        "blocked"
    );
    assert!(
        is_mounted(&target),
        "nothing is taken down without the node"
    );
    // The claim cannot be released while its node is away.
    let (status, _) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 423);

    agent.restart_after_kill();
    let _logs = Logs(&agent);
    // Back, the agent reports what is still mounted from the volume; nobody released the
    // claim meanwhile and its workload may still run, so it is ready again, untouched.
    let back = ready(&api, "v1", "a1").await;
    assert_eq!(back, target);
    assert!(is_mounted(&target), "the mount was kept");
    let (_, events) = api.get("/v1/events?volume=v1").await;
    assert!(events.to_string().contains("claim-resumed"), "{events}");
    // And it is released the normal way.
    let (status, _) = api.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202);
    gone(&api, "v1", "a1").await;
    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_fences_while_the_server_is_down_and_reports_it() {
    let dir = TestDir::new("node-e2e-fence");
    let mut server = Server::start(&dir, &[]).await;
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &["--fence-after=1s"]);
    let _logs = Logs(&agent);
    let api = server.api.clone();
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    let target = ready(&api, "v1", "a1").await;
    let (_, node) = api.get("/v1/nodes/n1").await;
    assert_eq!(node["fence_after"], "1s", "{node}");

    server.proc.kill();
    wait_for("the node to fence itself", WAIT, || {
        dir.mounts().is_empty().then_some(())
    });
    assert!(!target.exists());

    server.restart().await;
    let api = server.api.clone();
    let node = eventually("the fence reported", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        n["fenced_at"].is_string().then_some(n)
    })
    .await;
    assert_eq!(node["status"], "ready", "{node}");
    let (_, events) = api.get("/v1/events?node=n1").await;
    assert!(
        events.to_string().contains("node fenced itself"),
        "{events}"
    );
    // The server never declared the node lost, so its claim still stands: the agent
    // follows the server again and publishes it anew.
    let target = ready(&api, "v1", "a1").await;
    eventually("the target mounted again", WAIT, || async {
        is_mounted(&target).then_some(())
    })
    .await;
    hp.assert_no_lifecycle_violation();
    assert!(agent.data_dir.join("agent.db").exists());
}

/// The agent's memory with 100 published volumes: a measurement, not a check. Run with
/// `cargo test -p csivol-agent --test it rss -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run it by name"]
async fn rss_with_100_published_volumes() {
    const VOLUMES: usize = 100;
    let dir = TestDir::new("node-e2e-rss");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--no-fsync"]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &[]);
    let _logs = Logs(&agent);
    let rss = |field: &str| {
        let status = std::fs::read_to_string(format!("/proc/{}/status", agent.proc.pid())).unwrap();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap())
            .unwrap()
    };
    eventually("the node registered", WAIT, || async {
        (api.get("/v1/nodes/n1").await.0 == 200).then_some(())
    })
    .await;
    println!("agent RSS after start: {} KiB", rss("VmRSS:"));
    for i in 0..VOLUMES {
        let (status, body) = api
            .post(
                &format!("/v1/volumes/v{i}/create"),
                json!({"plugin": "hp", "access_mode": "single-node-writer", "attachment": "file-system", "capacity_bytes": 1 << 20}),
            )
            .await;
        assert!(status == 202 || status == 200, "{status} {body}");
    }
    for i in 0..VOLUMES {
        wait_volume(&api, &format!("v{i}"), "free").await;
        claim(&api, &format!("v{i}"), "a").await;
    }
    for i in 0..VOLUMES {
        let target = ready(&api, &format!("v{i}"), "a").await;
        assert!(is_mounted(&target));
    }
    assert_eq!(dir.mounts().len(), 2 * VOLUMES);
    // Let a heartbeat and a resync of the desired state pass with everything published.
    let (_, node) = api.get("/v1/nodes/n1").await;
    let seen = node["last_heartbeat"].clone();
    eventually("another heartbeat", Duration::from_secs(60), || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        (n["last_heartbeat"] != seen).then_some(())
    })
    .await;
    println!(
        "agent with {VOLUMES} published volumes: VmRSS {} KiB, VmHWM (peak) {} KiB",
        rss("VmRSS:"),
        rss("VmHWM:")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_claim_shows_its_error_then_times_out_and_is_cleaned_up() {
    let dir = TestDir::new("node-e2e-failing");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &["--fail=NodePublishVolume=UNAVAILABLE"]);
    let config = dir.join("agent.toml");
    std::fs::write(&config, "volume_ready_timeout = \"2s\"\n").unwrap();
    let agent = AgentProc::start(
        &dir,
        &server,
        &token,
        &hp,
        &[&format!("--config={}", config.display())],
    );
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;

    // While the agent retries, operators see the last error and the next try.
    let c = eventually("the claim's error", WAIT, || async {
        claim_state(&api, "v1", "a1")
            .await
            .filter(|c| c["error"].is_string())
    })
    .await;
    assert_eq!(c["state"], "publishing", "{c}");
    assert!(
        c["error"].as_str().unwrap().starts_with("UNAVAILABLE"),
        "{c}"
    );
    assert!(c["next_retry_at"].is_string(), "{c}");

    // After volume_ready_timeout the claim fails, and what was begun is taken down.
    let (_, events) = eventually("the claim failed", WAIT, || async {
        let (status, e) = api.get("/v1/events?volume=v1").await;
        e.to_string().contains("TIMEOUT").then_some((status, e))
    })
    .await;
    assert!(
        events.to_string().contains("last error: NodePublishVolume"),
        "the timeout names the last error: {events}"
    );
    gone(&api, "v1", "a1").await;
    let v = wait_volume(&api, "v1", "free").await;
    assert_eq!(v["attachments"], json!([]), "{v}");
    assert!(dir.mounts().is_empty(), "{:?}", dir.mounts());
    hp.assert_no_lifecycle_violation();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_fences_when_the_server_hangs() {
    use rustix::process::{Pid, Signal, kill_process};
    let dir = TestDir::new("node-e2e-hang");
    let server = Server::start(&dir, &[]).await;
    let api = server.api.clone();
    let token = server.node_token(&dir, "n1").await;
    let hp = Hostpath::start(&dir, "n1", &[]);
    let agent = AgentProc::start(&dir, &server, &token, &hp, &["--fence-after=1s"]);
    let _logs = Logs(&agent);
    create_volume(&api, "v1", "single-node-writer").await;
    claim(&api, "v1", "a1").await;
    ready(&api, "v1", "a1").await;

    // The server still accepts connections but answers nothing.
    let pid = Pid::from_raw(server.proc.pid() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    // Within the fence time and a heartbeat, not after a hung request's own timeout (15 s).
    let fenced = std::panic::catch_unwind(|| {
        wait_for("the node to fence itself", Duration::from_secs(10), || {
            dir.mounts().is_empty().then_some(())
        })
    });
    kill_process(pid, Signal::CONT).unwrap();
    fenced.expect("fenced while the server hung");
    eventually("the fence reported", WAIT, || async {
        let (_, n) = api.get("/v1/nodes/n1").await;
        n["fenced_at"].is_string().then_some(())
    })
    .await;
    hp.assert_no_lifecycle_violation();
}
