//! etcd members killed one after another (-9) under a steady claim load from several
//! clients through two servers: while a quorum is up no request fails, none is lost and
//! none is granted twice. A request in flight on the member that died goes to another
//! member within the request (a commit whose answer was lost is sent again; its compare
//! lets only one of the two land, and the head it puts says whose it was).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use csivol_tests::etcd::{Ha, start_ha};
use csivol_tests::{Api, TestDir};
use serde_json::json;
use tokio::sync::Mutex;

use super::ha_faults::{Sent, check_nothing_lost_nothing_twice, wait_sent};
use super::two_nodes_and_volumes;

/// Claims one volume after another from `tasks` clients, each claim through one server and
/// a read of its volume through the other, until `stop`; every answer is recorded, reads'
/// failures as status 0 or the error's.
fn claims_and_reads(
    apis: [Api; 2],
    volumes: usize,
    tasks: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<Mutex<Vec<Sent>>>,
    failed_reads: Arc<Mutex<Vec<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|t| {
            let (apis, stop, sent, failed_reads) = (
                apis.clone(),
                stop.clone(),
                sent.clone(),
                failed_reads.clone(),
            );
            tokio::spawn(async move {
                let mut k = 0;
                while !stop.load(Ordering::SeqCst) {
                    let volume = format!("v{}", (k * 7 + t) % volumes);
                    let alloc = format!("a{t}-{k}");
                    let node = if k % 2 == 0 { "n1" } else { "n2" };
                    let body = json!({"alloc": alloc, "node": node, "mode": "write"});
                    let (writer, reader) = (&apis[(k + t) % 2], &apis[(k + t + 1) % 2]);
                    let path = format!("/v1/volumes/{volume}/claims");
                    let (status, code) = match writer.send("POST", &path, Some(body)).await {
                        Ok(raw) => {
                            let v: serde_json::Value =
                                serde_json::from_slice(&raw.body).unwrap_or_default();
                            let code = v["error"]["message"].as_str().unwrap_or("").to_owned();
                            (raw.status.as_u16(), code)
                        }
                        Err(e) => (0, e.to_string()),
                    };
                    sent.lock()
                        .await
                        .push((volume.clone(), alloc, status, code));
                    match reader
                        .send("GET", &format!("/v1/volumes/{volume}"), None)
                        .await
                    {
                        Ok(raw) if raw.status == 200 => {}
                        Ok(raw) => failed_reads.lock().await.push(format!(
                            "{} {}",
                            raw.status,
                            String::from_utf8_lossy(&raw.body)
                        )),
                        Err(e) => failed_reads.lock().await.push(e.to_string()),
                    }
                    k += 1;
                }
            })
        })
        .collect()
}

#[tokio::test]
async fn killing_each_etcd_member_in_turn_fails_no_request() {
    let dir = TestDir::new("ha-member-kills");
    let Ha { mut etcd, a, b } = start_ha(&dir, &[]);
    let (aa, bb) = (a.api(), b.api());
    let volumes = 24;
    two_nodes_and_volumes(&a, &aa, volumes, "multi-node-single-writer").await;
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let failed_reads = Arc::new(Mutex::new(Vec::new()));
    let tasks = claims_and_reads(
        [aa.clone(), bb.clone()],
        volumes,
        6,
        stop.clone(),
        sent.clone(),
        failed_reads.clone(),
    );
    wait_sent(&sent, 30).await;
    // Each member in turn, the leader among them: killed under the load, the load goes on
    // without it, then it comes back before the next one goes.
    for i in 0..etcd.members.len() {
        etcd.kill(i);
        let killed_at = sent.lock().await.len();
        wait_sent(&sent, killed_at + 40).await;
        etcd.restart(i);
        etcd.wait_healthy();
        let back_at = sent.lock().await.len();
        wait_sent(&sent, back_at + 10).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    let sent = sent.lock().await.clone();
    let failed: Vec<_> = sent
        .iter()
        .filter(|(_, _, status, _)| ![201, 409].contains(status))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} claims failed while a quorum was up: {failed:?}",
        failed.len(),
        sent.len()
    );
    let failed_reads = failed_reads.lock().await.clone();
    if !failed_reads.is_empty() {
        eprintln!("--- A ---\n{}\n--- B ---\n{}", a.log(), b.log());
    }
    assert!(
        failed_reads.is_empty(),
        "{} reads failed while a quorum was up: {failed_reads:?}",
        failed_reads.len()
    );
    let granted = check_nothing_lost_nothing_twice(&aa, &sent, volumes).await;
    check_nothing_lost_nothing_twice(&bb, &sent, volumes).await;
    eprintln!(
        "{} claims and as many reads under three member kills: 0 failed, {granted} volumes granted",
        sent.len()
    );
}

/// The test harness itself: a member started again while another socket holds its client
/// port exits at once (etcd cannot move ports: its peers know them); waiting for the
/// cluster starts it again until the port is free, instead of timing out on a dead member.
#[test]
fn a_restarted_member_whose_port_was_taken_is_started_again() {
    let dir = TestDir::new("etcd-port-taken");
    let mut etcd = csivol_tests::etcd::EtcdCluster::start(dir.path(), 3);
    etcd.kill(0);
    let addr = etcd.members[0]
        .client_url
        .strip_prefix("http://")
        .expect("a plain HTTP client URL")
        .to_owned();
    let squatter = std::net::TcpListener::bind(&addr).expect("the killed member's port");
    etcd.restart(0);
    csivol_tests::wait_for(
        "the restarted member to exit on its taken port",
        std::time::Duration::from_secs(60),
        || etcd.members[0].has_exited().then_some(()),
    );
    let freed = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(2));
        drop(squatter);
    });
    etcd.wait_healthy();
    freed.join().unwrap();
    assert!(etcd.members[0].healthy());
}
