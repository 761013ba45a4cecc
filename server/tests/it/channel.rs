//! The node channel (`GET /v1/nodes/{node}/channel`, HTTP/1.1 Upgrade) against the real
//! server, played by the shared client's channel end (the real agent has its own tests in
//! `node/channel`): over mutual TLS, with its node's certificate only; heartbeats answered
//! as requests are, pushes of the desired index, a revoked token ending it; channels keep
//! their place under the connection limit and in the long-poll budget; on a server that
//! does not lead an etcd-backed cluster, heartbeats on the channel keep a node ready, and
//! an open channel without them does not.

use std::sync::Arc;
use std::time::{Duration, Instant};

use csivol_api::NodeStatus;
use csivol_client::channel::{ChannelError, Shared};
use csivol_tests::{Api, FakeAgent, TestDir, eventually};
use serde_json::json;

use super::{WAIT, claim, register_volume, start};
use csivol_tests::etcd::start_ha;

/// An open channel, served by a task of its own until dropped.
struct Chan {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<ChannelError>,
}

impl Chan {
    async fn open(api: &Api, node: &str) -> Result<Self, csivol_client::Error> {
        let (reader, writer) = api
            .client()
            .channel(node)
            .await?
            .start()
            .await
            .expect("the server's hello");
        let shared = Arc::new(Shared::default());
        let serving = Arc::clone(&shared);
        let task = tokio::spawn(async move { serving.serve(reader, writer).await });
        eventually("the first push", WAIT, || async {
            shared.is_open().then_some(())
        })
        .await;
        Ok(Self { shared, task })
    }

    async fn beat(&self) -> Result<csivol_api::HeartbeatResponse, csivol_client::Error> {
        (self.shared.heartbeat(Duration::from_secs(10)).await).expect("an answer on the channel")
    }

    fn pushed(&self) -> u64 {
        self.shared.subscribe().borrow().pushed
    }
}

impl Drop for Chan {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn node_status(api: &Api) -> String {
    let (status, n) = api.get("/v1/nodes/n1").await;
    assert_eq!(status, 200, "{n}");
    n["status"].as_str().unwrap().to_owned()
}

/// A token for `node`, and its id.
async fn node_token(op: &Api, node: &str) -> (String, String) {
    let (status, t) = op
        .post(
            "/v1/tokens",
            json!({"role": "node", "node": node, "controllers": ["hp"]}),
        )
        .await;
    assert_eq!(status, 201, "{t}");
    (
        t["token"].as_str().unwrap().to_owned(),
        t["id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_channel_over_mutual_tls_beats_pushes_and_ends_with_its_token() {
    let dir = TestDir::new("channel-tls");
    let tls = dir.join("tls");
    let mut init = std::process::Command::new(csivol_tests::bin_path("csivol-server"));
    init.args(["tls", "init", &format!("--dir={}", tls.display())])
        .args(["--node=n1", "--node=n2"]);
    let (status, out) = csivol_tests::run_to_exit("tls init", init, Duration::from_secs(30));
    assert!(status.success(), "{out}");
    let server = start(
        &dir,
        &[
            &format!("--tls-cert={}", tls.join("server.pem").display()),
            &format!("--tls-key={}", tls.join("server-key.pem").display()),
            &format!("--tls-client-ca={}", tls.join("ca.pem").display()),
            "--heartbeat-ttl=2s",
        ],
    );
    let ca = tls.join("ca.pem");
    let op = Api::with_tls(&server.url, Some(&server.token), &ca, None);
    let (token, token_id) = node_token(&op, "n1").await;
    let as_node = |cert: &str| {
        let (pem, key) = (
            tls.join(format!("node-{cert}.pem")),
            tls.join(format!("node-{cert}-key.pem")),
        );
        Api::with_tls(&server.url, Some(&token), &ca, Some((&pem, &key)))
    };

    // n1's token with n2's certificate: refused as on every node endpoint.
    match Chan::open(&as_node("n2"), "n1").await {
        Err(csivol_client::Error::Refused { status, text, .. }) => {
            assert_eq!(status, 403, "{text}");
            assert!(text.contains("not for node `n1`"), "{text}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a channel opened with another node's certificate"),
    }

    let n1 = FakeAgent {
        api: as_node("n1"),
        node: "n1".into(),
    };
    let mut chan = Chan::open(&n1.api, "n1").await.expect("the channel");
    let e = chan.beat().await.expect_err("not registered yet");
    assert!(e.is_not_found(), "{e}");
    n1.register(0, true, json!([])).await;
    let hb = chan.beat().await.expect("a heartbeat");
    assert_eq!((hb.status, hb.heartbeat_ttl_ms), (NodeStatus::Ready, 2000));

    // Heartbeats on the channel alone keep the node ready past the TTL.
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(5) {
        assert_eq!(chan.beat().await.unwrap().status, NodeStatus::Ready);
        assert_eq!(node_status(&op).await, "ready");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // A claim on n1 changes its desired state: the channel says so.
    let before = chan.pushed();
    register_volume(&op, "v1", "single-node-writer").await;
    let (status, c) = claim(&op, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    eventually("the change pushed", WAIT, || async {
        (chan.pushed() > before).then_some(())
    })
    .await;
    let (status, d) = n1
        .api
        .get(&format!(
            "/v1/nodes/n1/desired?index={}&wait=0s",
            chan.pushed() - 1
        ))
        .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["index"].as_u64(), Some(chan.pushed()), "{d}");
    assert_eq!(d["controller_ops"].as_array().map(Vec::len), Some(1), "{d}");

    // A revoked token: the next heartbeat is refused, and the server ends the channel.
    let (status, body) = op.delete(&format!("/v1/tokens/{token_id}")).await;
    assert!(status == 200 || status == 204, "{status} {body}");
    let e = chan.beat().await.expect_err("a revoked token");
    assert!(e.to_string().contains("revoked"), "{e}");
    let why = tokio::time::timeout(WAIT, &mut chan.task)
        .await
        .expect("the channel ended");
    assert!(matches!(why, Ok(ChannelError::Closed)), "{why:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_channels_hold_their_connections_under_the_limit() {
    let dir = TestDir::new("channel-limit");
    let server = start(
        &dir,
        &[
            "--max-connections=2",
            "--max-long-polls=2",
            "--header-timeout=1s",
        ],
    );
    let op = server.api();
    let (t1, _) = node_token(&op, "n1").await;
    let (t2, _) = node_token(&op, "n2").await;
    // Each its own client, so each its own connection; the operator's idle connection
    // closes after the header timeout to make room for the second.
    let n1 = Chan::open(&Api::new(&server.url, Some(&t1)), "n1").await;
    let n2 = Chan::open(&Api::new(&server.url, Some(&t2)), "n2").await;
    let (n1, n2) = (n1.expect("n1's channel"), n2.expect("n2's channel"));

    // Both places are taken for as long as the channels are open, however quiet they are.
    let health = tokio::spawn({
        let api = Api::new(&server.url, None);
        async move { api.get("/v1/health").await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!health.is_finished(), "a third connection got in");
    assert!(
        n2.beat().await.unwrap_err().is_not_found(),
        "n2's channel still answers"
    );
    drop(n1);
    let (status, _) = tokio::time::timeout(WAIT, health).await.unwrap().unwrap();
    assert_eq!(status, 200, "in once a channel closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_channel_takes_a_place_in_the_long_poll_budget() {
    let dir = TestDir::new("channel-long-polls");
    let server = start(&dir, &["--max-long-polls=1"]);
    let op = server.api();
    let (t1, _) = node_token(&op, "n1").await;
    let (t2, _) = node_token(&op, "n2").await;
    let _n1 = Chan::open(&Api::new(&server.url, Some(&t1)), "n1")
        .await
        .expect("n1's channel");
    match Chan::open(&Api::new(&server.url, Some(&t2)), "n2").await {
        Err(csivol_client::Error::Refused { status, text, .. }) => {
            assert_eq!(status, 503, "{text}");
            assert!(text.contains("--max-long-polls"), "{text}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a second channel within a budget of one"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_heartbeats_on_a_server_that_does_not_lead_keep_the_node_ready() {
    let dir = TestDir::new("channel-ha");
    let ha = start_ha(&dir, &["--heartbeat-ttl=3s"]);
    let leader_is_a = eventually("a leader", WAIT, || async {
        const LEADS: &str = "this server leads now";
        if ha.a.log().contains(LEADS) {
            Some(true)
        } else if ha.b.log().contains(LEADS) {
            Some(false)
        } else {
            None
        }
    })
    .await;
    let (leader, other) = if leader_is_a {
        (ha.a.api(), ha.b.api())
    } else {
        (ha.b.api(), ha.a.api())
    };
    let (token, _) = node_token(&leader, "n1").await;
    let n1 = FakeAgent {
        api: other.with_token(Some(&token)),
        node: "n1".into(),
    };
    // The token made on the leader reaches the other server through etcd.
    eventually("the other server to know n1's token", WAIT, || async {
        let (status, _) = n1.api.post("/v1/nodes/n1/heartbeat", json!({})).await;
        (status == 404).then_some(())
    })
    .await;
    n1.register(0, true, json!([])).await;
    let chan = Chan::open(&n1.api, "n1").await.expect("the channel");
    let since = Instant::now();
    let (mut taken, mut refused) = (0, 0);
    while since.elapsed() < Duration::from_secs(8) {
        match chan.beat().await {
            Ok(beat) => {
                assert_eq!(beat.status, NodeStatus::Ready);
                taken += 1;
            }
            // When etcd takes longer than the forward bound (a quarter of the TTL), as it
            // may on a busy machine, the server refuses the beat rather than take it
            // without passing it on, and an agent sends its next beat elsewhere. That
            // refusal is the only one allowed; the leader must still hear the node.
            Err(csivol_client::Error::Refused { status, .. }) if status.as_u16() == 503 => {
                refused += 1;
            }
            Err(e) => panic!("a heartbeat on the channel: {e}"),
        }
        assert_eq!(node_status(&leader).await, "ready", "the leader hears n1");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(taken > refused, "{taken} beats taken, {refused} refused");
    // The channel stays open but carries no heartbeat: the leader's TTL decides.
    let quiet = Instant::now();
    eventually("n1 lost on the leader", WAIT, || async {
        (node_status(&leader).await == "lost").then_some(())
    })
    .await;
    assert!(
        quiet.elapsed() >= Duration::from_secs(2),
        "lost after {:?}, before its TTL",
        quiet.elapsed()
    );
}

/// The pushed changes that follow `held`, in order, until `done` is true of one (which
/// is the last returned).
async fn follow(
    chan: &Chan,
    held: &mut u64,
    what: &str,
    done: impl Fn(&csivol_api::DesiredState) -> bool,
) -> Vec<csivol_api::DesiredState> {
    let mut seen = Vec::new();
    eventually(what, WAIT, || {
        let mut found = false;
        while let Some(d) = chan.shared.take_pushed(*held, None) {
            *held = d.index;
            found = done(&d);
            seen.push(d);
            if found {
                break;
            }
        }
        async move { found.then_some(()) }
    })
    .await;
    seen
}

fn batch(reports: serde_json::Value) -> csivol_api::ReportBatch {
    serde_json::from_value(json!({ "reports": reports })).expect("a report batch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_2_pushes_the_changed_entries_and_takes_reports() {
    let dir = TestDir::new("channel-v2");
    let server = start(&dir, &[]);
    let op = server.api();
    let (token, token_id) = node_token(&op, "n1").await;
    let n1 = FakeAgent {
        api: server.api().with_token(Some(&token)),
        node: "n1".into(),
    };
    let mut chan = Chan::open(&n1.api, "n1").await.expect("the channel");
    assert!(chan.shared.subscribe().borrow().v2, "version 2 chosen");
    n1.register(0, true, json!([])).await;
    assert_eq!(chan.beat().await.unwrap().status, NodeStatus::Ready);
    // A registration changes the node as a whole: the server says `desired <index>` and
    // the agent fetches the whole state, from which the chain of pushes goes on.
    let mut held = eventually("the registration told", WAIT, || async {
        let index = n1.desired().await["index"].as_u64().unwrap();
        (chan.pushed() == index).then_some(index)
    })
    .await;

    register_volume(&op, "v1", "single-node-writer").await;
    let (status, c) = claim(&op, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let pushed = follow(&chan, &mut held, "the controller publish pushed", |d| {
        !d.controller_ops.is_empty()
    })
    .await;
    let last = pushed.last().unwrap();
    let changes = last.changes.as_ref().expect("pushed as changes");
    assert_eq!(changes.volumes, ["v1"], "{last:?}");
    // What was pushed is what the request answers for the same changes.
    let (status, fetched) = n1
        .api
        .get(&format!("/v1/nodes/n1/desired?since={}", changes.since))
        .await;
    assert_eq!(status, 200, "{fetched}");
    assert_eq!(serde_json::to_value(last).unwrap(), fetched);

    // Reports on the channel are committed before they are answered.
    let cop = &last.controller_ops[0];
    let done = batch(json!([{"kind": "controller_published", "op": cop.id,
        "attempt": cop.attempt, "publish_context": {}}]));
    let answer = chan.shared.report(&done, Duration::from_secs(10)).await;
    assert!(matches!(answer, Some(Ok(()))), "{answer:?}");
    let (_, v) = op.get("/v1/volumes/v1").await;
    assert_eq!(v["claims"][0]["state"], "publishing", "{v}");
    let pushed = follow(&chan, &mut held, "the node publish pushed", |d| {
        d.publish.iter().any(|p| p.alloc == "a1")
    })
    .await;
    assert!(pushed.iter().all(|d| d.changes.is_some()), "{pushed:?}");
    let published = batch(json!([{"kind": "published", "volume": "v1", "alloc": "a1",
        "target_path": "/t"}]));
    let answer = chan
        .shared
        .report(&published, Duration::from_secs(10))
        .await;
    assert!(matches!(answer, Some(Ok(()))), "{answer:?}");
    let (_, v) = op.get("/v1/volumes/v1").await;
    assert_eq!(v["claims"][0]["state"], "ready", "{v}");

    // A revoked token: the report is refused, and the server ends the channel.
    let (status, body) = op.delete(&format!("/v1/tokens/{token_id}")).await;
    assert!(status == 200 || status == 204, "{status} {body}");
    let answer = chan
        .shared
        .report(&published, Duration::from_secs(10))
        .await;
    match answer {
        Some(Err(e)) => assert!(e.to_string().contains("revoked"), "{e}"),
        other => panic!("a report with a revoked token: {other:?}"),
    }
    let why = tokio::time::timeout(WAIT, &mut chan.task)
        .await
        .expect("the channel ended");
    assert!(matches!(why, Ok(ChannelError::Closed)), "{why:?}");
}

/// The next line (or the HTTP head, with `end` `\r\n\r\n`) from a raw channel, with
/// what was read past it kept in `got`; `None` when the channel ends first.
async fn read_to(io: &mut tokio::net::TcpStream, got: &mut Vec<u8>, end: &[u8]) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(at) = got.windows(end.len()).position(|w| w == end) {
            let line: Vec<u8> = got.drain(..at + end.len()).collect();
            return Some(String::from_utf8_lossy(&line[..at]).into_owned());
        }
        let mut buf = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, io.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_speaks_version_1_only_gets_version_1() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("channel-v1");
    let server = start(&dir, &[]);
    let op = server.api();
    let (token, _) = node_token(&op, "n1").await;
    let n1 = FakeAgent {
        api: server.api().with_token(Some(&token)),
        node: "n1".into(),
    };
    n1.register(0, true, json!([])).await;
    let addr = server.url.trim_start_matches("http://").to_owned();
    let mut io = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let ask = format!(
        "GET /v1/nodes/n1/channel HTTP/1.1\r\nHost: {addr}\r\nConnection: upgrade\r\n\
         Upgrade: csivol-channel/1\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    io.write_all(ask.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let head = read_to(&mut io, &mut got, b"\r\n\r\n").await.unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("\r\nupgrade: csivol-channel/1"), "{head}");
    assert_eq!(
        read_to(&mut io, &mut got, b"\n").await.unwrap(),
        "csivol-channel 1"
    );
    let line = read_to(&mut io, &mut got, b"\n").await.unwrap();
    assert!(line.starts_with("desired "), "{line}");

    // A change is told as the index alone.
    register_volume(&op, "v1", "single-node-writer").await;
    let (status, c) = claim(&op, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let line = read_to(&mut io, &mut got, b"\n").await.unwrap();
    let index: Option<u64> = line.strip_prefix("desired ").and_then(|i| i.parse().ok());
    assert!(index.is_some(), "{line}");

    // A version 2 line is unknown in version 1: the channel ends.
    io.write_all(b"report {\"reports\":[]}\n").await.unwrap();
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(WAIT, io.read_to_end(&mut rest)).await;
    assert!(matches!(ended, Ok(Ok(_))), "{ended:?}");
    let rest = String::from_utf8_lossy(&rest);
    assert!(!rest.contains("reported"), "{rest}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reports_answer_and_the_push_its_commit_caused_arrive_in_one_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = TestDir::new("channel-together");
    let server = start(&dir, &[]);
    let op = server.api();
    let (token, _) = node_token(&op, "n1").await;
    let n1 = FakeAgent {
        api: server.api().with_token(Some(&token)),
        node: "n1".into(),
    };
    n1.register(0, true, json!([])).await;
    let addr = server.url.trim_start_matches("http://").to_owned();
    let mut io = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let ask = format!(
        "GET /v1/nodes/n1/channel HTTP/1.1\r\nHost: {addr}\r\nConnection: upgrade\r\n\
         Upgrade: csivol-channel/2\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    io.write_all(ask.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let head = read_to(&mut io, &mut got, b"\r\n\r\n").await.unwrap();
    assert!(
        head.to_ascii_lowercase().starts_with("http/1.1 101"),
        "{head}"
    );
    assert_eq!(
        read_to(&mut io, &mut got, b"\n").await.unwrap(),
        "csivol-channel 2"
    );
    let line = read_to(&mut io, &mut got, b"\n").await.unwrap();
    assert!(line.starts_with("desired "), "{line}");

    // A claim on n1, which hosts the controller: its ControllerPublish is pushed to n1.
    register_volume(&op, "v1", "single-node-writer").await;
    let (status, c) = claim(&op, "v1", "a1", "n1", "write").await;
    assert_eq!(status, 201, "{c}");
    let op_of = |line: &str| -> Option<(u64, u64)> {
        let d: serde_json::Value = serde_json::from_str(line.strip_prefix("changes ")?).ok()?;
        let o = d["controller_ops"].get(0)?;
        Some((o["id"].as_u64()?, o["attempt"].as_u64()?))
    };
    let (id, attempt) = loop {
        let line = read_to(&mut io, &mut got, b"\n")
            .await
            .expect("the ControllerPublish pushed");
        if let Some(o) = op_of(&line) {
            break o;
        }
    };

    // Its success attaches the volume, which gives n1 the claim to publish: the answer to
    // the report and that change leave the server together.
    let report = json!({"reports": [{"kind": "controller_published", "op": id,
        "attempt": attempt, "publish_context": {}}]});
    io.write_all(format!("report {report}\n").as_bytes())
        .await
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let n = tokio::time::timeout(WAIT, io.read(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    let read = String::from_utf8_lossy(&buf[..n]).into_owned();
    let mut lines = read.lines();
    assert_eq!(lines.next(), Some("reported 1"), "{read}");
    let push: serde_json::Value = lines
        .next()
        .and_then(|l| l.strip_prefix("changes "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_else(|| panic!("the push in the same read as the answer: {read:?}"));
    assert_eq!(push["publish"][0]["alloc"], "a1", "{push}");
}
