//! A real agent and plugin over two servers sharing a real 3-member etcd: the agent is
//! given both addresses, claims made through one server become mounts and wake a blocking
//! query on the other, and when the agent's first server is killed it carries on through
//! the second without anyone's help.

use std::time::Duration;

use csivol_tests::{TestDir, eventually, is_mounted};
use serde_json::json;

use super::procs::{AgentProc, claim, claim_state, create_volume, gone, ready};
use super::support::{Hostpath, WAIT};
use csivol_tests::etcd::start_ha;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_both_servers_serves_claims_through_either_and_fails_over() {
    let dir = TestDir::new("node-ha");
    let mut ha = start_ha(&dir, &["--heartbeat-ttl=3s"]);
    let (a, b) = (ha.a.api(), ha.b.api());
    let (status, t) = a
        .post(
            "/v1/tokens",
            json!({"role": "node", "node": "n1", "controllers": ["hp"]}),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    let token = dir.join("n1.token");
    std::fs::write(&token, t["token"].as_str().unwrap()).unwrap();
    let hp = Hostpath::start(&dir, "n1", &[]);
    let args = vec![
        "run".to_owned(),
        format!("--server={},{}", ha.a.url, ha.b.url),
        "--node=n1".to_owned(),
        format!("--data-dir={}", dir.join("agent").display()),
        format!("--token-file={}", token.display()),
        format!("--plugin=hp=unix://{}", hp.socket.display()),
        format!("--controller=hp=unix://{}", hp.socket.display()),
    ];
    let log = dir.join("agent");
    let _agent = AgentProc::spawn(&args, &log, 1);
    eventually("the node registered, seen through B", WAIT, || async {
        (b.get("/v1/nodes/n1").await.0 == 200).then_some(())
    })
    .await;

    // Created through B (CreateVolume runs on the agent, which talks to A), claimed
    // through A; a blocking query on B wakes as the claim moves on.
    create_volume(&b, "v1", "single-node-writer").await;
    claim(&a, "v1", "a1").await;
    // One read, at once: B answers only once its copy holds etcd's last commit (reads are
    // consistent), however late its watch brings A's write on a busy machine.
    let c = claim_state(&b, "v1", "a1").await.expect("B sees the claim");
    let index = c["index"].as_u64().unwrap();
    let (status, woke) = b
        .get(&format!("/v1/volumes/v1/claims/a1?index={index}&wait=20s"))
        .await;
    assert_eq!(status, 200, "{woke}");
    assert!(woke["index"].as_u64().unwrap() > index, "{woke}");
    let target = ready(&b, "v1", "a1").await;
    assert!(is_mounted(&target), "{} is mounted", target.display());

    // The agent's first server dies: it goes on through the second, with no operator.
    ha.a.proc.kill();
    let (status, body) = b.delete("/v1/volumes/v1/claims/a1").await;
    assert_eq!(status, 202, "{body}");
    gone(&b, "v1", "a1").await;
    assert!(
        !is_mounted(&target),
        "released: {} unmounted",
        target.display()
    );
    claim(&b, "v1", "a2").await;
    let target = ready(&b, "v1", "a2").await;
    assert!(is_mounted(&target));
    // Still alive as far as the surviving server can tell, across heartbeat TTLs.
    let since = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(4) {
        let (_, n) = b.get("/v1/nodes/n1").await;
        assert_eq!(n["status"], "ready", "{n}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (status, body) = b.delete("/v1/volumes/v1/claims/a2").await;
    assert_eq!(status, 202, "{body}");
    gone(&b, "v1", "a2").await;
}
