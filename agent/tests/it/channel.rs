//! The real agent and the node channel: its heartbeats keep the node ready and an agent
//! stopped with its channel open goes lost at the TTL; a claim and its release reach it
//! as pushed changes and its reports go back on the channel, without a request; against a server without the channel it heartbeats and
//! long-polls as before.

use std::time::{Duration, Instant};

use csivol_tests::{Api, TestDir, eventually, is_mounted};

use super::procs::{Logs, OneNode, claim, create_volume, gone, ready};
use super::support::WAIT;

/// One sample of the server's Prometheus text, by its full name with labels.
async fn metric(api: &Api, name: &str) -> f64 {
    let (status, text) = api.get("/v1/metrics").await;
    assert_eq!(status, 200, "{text}");
    let text = text.as_str().expect("Prometheus text").to_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

const CHANNEL_BEATS: &str = r#"csivol_heartbeats_total{via="channel"}"#;
const REQUEST_BEATS: &str = r#"csivol_heartbeats_total{via="request"}"#;
const CHANNEL_REPORTS: &str = r#"csivol_node_reports_total{via="channel"}"#;
const REQUEST_REPORTS: &str = r#"csivol_node_reports_total{via="request"}"#;

async fn node_status(api: &Api) -> String {
    let (status, n) = api.get("/v1/nodes/n1").await;
    assert_eq!(status, 200, "{n}");
    n["status"].as_str().unwrap().to_owned()
}

/// Waits until the agent follows its desired state through the channel (no long-poll in
/// flight from then on).
async fn channel_followed(one: &OneNode) {
    eventually("the agent following the channel", WAIT, || async {
        let open = metric(&one.api, "csivol_node_channels").await == 1.0;
        (open
            && one
                .agent
                .log()
                .contains("the desired state follows the node channel"))
        .then_some(())
    })
    .await;
}

fn signal(one: &OneNode, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(one.agent.proc.pid() as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_heartbeats_keep_the_node_ready_and_a_stopped_agent_goes_lost_at_the_ttl() {
    let dir = TestDir::new("node-channel-beats");
    let one = OneNode::start(&dir, &["--heartbeat-ttl=2s"], &[], &[]).await;
    let _logs = Logs(&one.agent);
    channel_followed(&one).await;
    let (channel, request) = (
        metric(&one.api, CHANNEL_BEATS).await,
        metric(&one.api, REQUEST_BEATS).await,
    );
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(6) {
        assert_eq!(node_status(&one.api).await, "ready");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        metric(&one.api, CHANNEL_BEATS).await >= channel + 4.0,
        "heartbeats came on the channel"
    );
    assert_eq!(
        metric(&one.api, REQUEST_BEATS).await,
        request,
        "and none as requests"
    );

    // Stopped, its connection still open: the channel is no heartbeat, the TTL decides.
    signal(&one, rustix::process::Signal::STOP);
    let stopped = Instant::now();
    eventually("n1 lost", WAIT, || async {
        (node_status(&one.api).await == "lost").then_some(())
    })
    .await;
    let took = stopped.elapsed();
    assert!(
        took >= Duration::from_millis(1200) && took < Duration::from_secs(5),
        "lost {took:?} after the agent stopped, with a TTL of 2s"
    );
    // Resumed: told `lost` on the channel or refused, it registers again.
    signal(&one, rustix::process::Signal::CONT);
    eventually("n1 ready again", WAIT, || async {
        (node_status(&one.api).await == "ready").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reaches_the_agent_through_the_channel_without_a_request() {
    let dir = TestDir::new("node-channel-claim");
    let one = OneNode::start(&dir, &[], &[], &[]).await;
    let _logs = Logs(&one.agent);
    channel_followed(&one).await;
    // A first cycle: the agent fetches the state the channel opened at by request, and
    // follows pushes from there; once a cycle went through, it holds what was pushed last.
    create_volume(&one.api, "v0", "single-node-writer").await;
    claim(&one.api, "v0", "a0").await;
    ready(&one.api, "v0", "a0").await;
    one.api.delete("/v1/volumes/v0/claims/a0").await;
    gone(&one.api, "v0", "a0").await;
    let waits = metric(&one.api, "csivol_desired_waits_total").await;
    let fetches = metric(&one.api, "csivol_desired_fetches_total").await;
    let pushes = metric(&one.api, "csivol_desired_pushes_total").await;
    let (on_channel, as_requests) = (
        metric(&one.api, CHANNEL_REPORTS).await,
        metric(&one.api, REQUEST_REPORTS).await,
    );

    create_volume(&one.api, "v1", "single-node-writer").await;
    claim(&one.api, "v1", "a1").await;
    let target = ready(&one.api, "v1", "a1").await;
    assert!(is_mounted(&target));
    one.api.delete("/v1/volumes/v1/claims/a1").await;
    gone(&one.api, "v1", "a1").await;
    assert!(!is_mounted(&target));
    assert_eq!(
        metric(&one.api, "csivol_desired_waits_total").await,
        waits,
        "no desired-state query waited on the server"
    );
    // The claim and its release reached the agent as pushed changes, and its reports went
    // back on the channel: the whole cycle cost the agent no request.
    assert_eq!(
        metric(&one.api, "csivol_desired_fetches_total").await,
        fetches,
        "no desired-state query at all"
    );
    assert!(metric(&one.api, "csivol_desired_pushes_total").await >= pushes + 2.0);
    assert!(
        metric(&one.api, CHANNEL_REPORTS).await >= on_channel + 2.0,
        "published and unpublished reported on the channel"
    );
    assert_eq!(metric(&one.api, REQUEST_REPORTS).await, as_requests);
    assert_eq!(metric(&one.api, "csivol_node_channels").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn against_a_server_without_the_channel_the_agent_heartbeats_and_long_polls() {
    let dir = TestDir::new("node-channel-fallback");
    let one = OneNode::start(&dir, &["--no-node-channel", "--heartbeat-ttl=2s"], &[], &[]).await;
    let _logs = Logs(&one.agent);
    eventually("the agent told there is no channel", WAIT, || async {
        (one.agent.log())
            .contains("does not offer the node channel")
            .then_some(())
    })
    .await;
    create_volume(&one.api, "v1", "single-node-writer").await;
    claim(&one.api, "v1", "a1").await;
    let target = ready(&one.api, "v1", "a1").await;
    assert!(is_mounted(&target));
    let request = metric(&one.api, REQUEST_BEATS).await;
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(5) {
        assert_eq!(node_status(&one.api).await, "ready");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(metric(&one.api, REQUEST_BEATS).await >= request + 3.0);
    assert_eq!(metric(&one.api, CHANNEL_BEATS).await, 0.0);
    assert_eq!(metric(&one.api, "csivol_node_channels").await, 0.0);
    assert!(metric(&one.api, "csivol_desired_waits_total").await >= 1.0);
    one.api.delete("/v1/volumes/v1/claims/a1").await;
    gone(&one.api, "v1", "a1").await;
}
