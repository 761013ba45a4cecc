//! The leader's fence over a real etcd: once-only writes (here, recording a lost node)
//! commit only while the leader key is still the one this server created. The key is
//! taken over by hand while the server still believes it leads: its loss is refused, it
//! steps down, and once the key is free it leads again and records the loss.

use std::time::{Duration, Instant};

use csivol_tests::etcd::EtcdCluster;
use csivol_tests::{FakeAgent, ServerProc, TestDir, eventually};
use serde_json::json;

use super::WAIT;

const LEADS: &str = "this server leads now";
const KEY: &[u8] = b"/csivol/leader";

#[tokio::test]
async fn a_leader_whose_key_was_taken_records_nothing_until_it_leads_again() {
    let dir = TestDir::new("ha-fence");
    let etcd = EtcdCluster::start(dir.path(), 1);
    let a = ServerProc::start(
        &dir.join("a"),
        &[
            "--store=etcd",
            &format!("--etcd-endpoints={}", etcd.endpoints()),
            &format!("--secrets-key-file={}", dir.join("secrets.key").display()),
            "--heartbeat-ttl=2s",
            // Renewed (and the key checked) every 10 s: the loss below comes first.
            "--etcd-lease-ttl=30s",
        ],
    );
    let api = a.api();
    eventually("the server to lead", WAIT, || async {
        a.log().contains(LEADS).then_some(())
    })
    .await;
    let n1 = FakeAgent::new(&a, "n1").await;
    n1.register(0, false, json!([])).await;
    let beating = n1.keep_alive();

    // Someone else's key, with a lease of its own: the server is not told.
    let endpoints: Vec<String> = etcd.members.iter().map(|m| m.client_url.clone()).collect();
    let client = csivol_etcd_client::Client::new(&endpoints).unwrap();
    let lease = client.lease_grant(Duration::from_secs(60)).await.unwrap();
    client
        .txn(
            vec![],
            vec![csivol_etcd_client::delete(KEY.to_vec())],
            vec![],
        )
        .await
        .unwrap();
    let taken = client
        .txn(
            vec![csivol_etcd_client::create_revision_is(KEY.to_vec(), 0)],
            vec![csivol_etcd_client::put(
                KEY.to_vec(),
                b"impostor".to_vec(),
                lease,
            )],
            vec![],
        )
        .await
        .unwrap();
    assert!(taken.succeeded, "the key was free to take");

    // n1 falls silent. The server's clock expires it, but its write compares a term that
    // is no longer the key's: refused, and n1 stays ready.
    drop(beating);
    eventually("the loss to be refused by the fence", WAIT, || async {
        let log = a.log();
        (log.contains("failed to record a lost node") && log.contains("no longer leads"))
            .then_some(())
    })
    .await;
    assert_eq!(api.get("/v1/nodes/n1").await.1["status"], "ready");
    eventually("the server to step down", WAIT, || async {
        a.log()
            .contains("the leader key is no longer this server's")
            .then_some(())
    })
    .await;
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_secs(1) {
        assert_eq!(
            api.get("/v1/nodes/n1").await.1["status"],
            "ready",
            "a server that does not lead records no loss"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The key is free again: the server leads once more, gives n1 a fresh TTL, and
    // records its loss.
    client.lease_revoke(lease).await.unwrap();
    eventually("the server to lead again", WAIT, || async {
        (a.log().matches(LEADS).count() >= 2).then_some(())
    })
    .await;
    eventually("n1 lost, recorded by the leader", WAIT, || async {
        (api.get("/v1/nodes/n1").await.1["status"] == "lost").then_some(())
    })
    .await;
}
