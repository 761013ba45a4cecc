//! The shared API client (`csivol-client`) against a real server: the agent's typed calls,
//! and each kind of failure its callers tell apart (refused with the API's error code, an
//! answer of the wrong shape, a deadline passed, no server at all).

use std::time::{Duration, Instant};

use csivol_api::{ErrorCode, NodeStatus, RegisterRequest, ReportBatch, Role, TokenRequest, Volume};
use csivol_client::{Body, Client, Error, Method, StatusCode};
use csivol_tests::{ServerProc, TestDir};
use serde_json::json;

fn client(server: &ServerProc, token: Option<&str>) -> Client {
    Client::builder(&server.url)
        .token(token.map(str::to_owned))
        .request_timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_node_registers_heartbeats_polls_and_reports_through_typed_calls() {
    let dir = TestDir::new("client-agent");
    let server = ServerProc::start(&dir.join("server"), &[]);
    let operator = client(&server, Some(&server.token));
    let token = operator
        .create_token(&TokenRequest {
            role: Role::Node,
            node: Some("n1".into()),
            name: None,
            ttl_ms: None,
            controllers: vec!["hp".into()],
            capabilities: Vec::new(),
            volumes: Vec::new(),
            namespaces: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(token.node.as_deref(), Some("n1"));
    let node = operator.with_token(Some(token.token));

    let req: RegisterRequest = serde_json::from_value(json!({
        "plugins": [{
            "id": "hp",
            "info": {"name": "hostpath.csivol.dev", "vendor_version": "1"},
            "capabilities": {"controller_service": false, "volume_accessibility_constraints": false},
            "node": {
                "info": {"node_id": "csi-n1", "max_volumes_per_node": 0},
                "capabilities": {"stage_unstage_volume": true, "get_volume_stats": false, "volume_condition": false, "single_node_multi_writer": false}
            },
            "controller": null,
        }],
    }))
    .unwrap();
    let registered = node.register("n1", &req).await.unwrap();
    assert!(registered.heartbeat_ttl_ms > 0, "{registered:?}");
    let beat = node.heartbeat("n1", None).await.unwrap();
    assert_eq!(beat.status, NodeStatus::Ready);
    let nodes = operator.nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].name, "n1");

    // Nothing to do, and nothing changes: the blocking query answers after its wait, with
    // the same index, within the request deadline on top of the wait.
    let first = node
        .desired("n1", 0, None, None, Duration::from_millis(10))
        .await
        .unwrap();
    assert!(first.publish.is_empty() && first.controller_ops.is_empty());
    let asked = Instant::now();
    let again = node
        .desired(
            "n1",
            first.index,
            Some(first.index),
            first.generation.as_deref(),
            Duration::from_millis(500),
        )
        .await
        .unwrap();
    assert!(
        asked.elapsed() >= Duration::from_millis(400),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(again.index, first.index);
    // Asked for the changes since the state it holds: none.
    assert_eq!(
        again.changes,
        Some(csivol_api::DesiredChanges {
            since: first.index,
            volumes: vec![]
        })
    );

    node.reports("n1", &ReportBatch { reports: vec![] })
        .await
        .unwrap();

    // A node token acts only for its own node; the answer carries the API's error code.
    let e = node.heartbeat("n2", None).await.unwrap_err();
    match &e {
        Error::Refused {
            status,
            error: Some(body),
            ..
        } => {
            assert_eq!(*status, StatusCode::FORBIDDEN, "{e}");
            assert_eq!(body.code, ErrorCode::Unauthorized, "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn failures_are_told_apart() {
    let dir = TestDir::new("client-errors");
    let mut server = ServerProc::start(&dir.join("server"), &[]);
    let operator = client(&server, Some(&server.token));

    // Refused, with the API's error body: not found, and a token the server does not know.
    let e = operator
        .get::<Volume>("/v1/volumes/nope")
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    match &e {
        Error::Refused {
            error: Some(body), ..
        } => assert_eq!(body.code, ErrorCode::NotFound),
        other => panic!("{other:?}"),
    }
    let stranger = operator.with_token(Some("not-a-token".into()));
    match stranger.nodes().await.unwrap_err() {
        Error::Refused {
            status,
            error: Some(body),
            ..
        } => {
            assert_eq!(status, StatusCode::UNAUTHORIZED);
            assert_eq!(body.code, ErrorCode::Unauthorized);
        }
        other => panic!("{other:?}"),
    }

    // A success of the wrong shape.
    let e = operator.get::<Vec<u32>>("/v1/health").await.unwrap_err();
    assert!(
        matches!(&e, Error::Invalid { status, .. } if *status == StatusCode::OK),
        "{e:?}"
    );

    // A raw answer is whatever the server said, refusals included.
    let raw = operator
        .send::<()>(
            Method::POST,
            "/v1/tokens",
            Body::Bytes(b"{not json".to_vec()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(raw.status, StatusCode::BAD_REQUEST);
    assert!(raw.into_answer::<serde_json::Value>().is_err());

    // A deadline shorter than the server's wait: no answer, and the error says it timed
    // out, which is what the CLI turns into "did not answer in time".
    let index = operator
        .watch::<Vec<serde_json::Value>>(
            "/v1/events",
            &csivol_client::Cursor::default(),
            Duration::from_millis(10),
        )
        .await
        .unwrap()
        .index
        .expect("an index header");
    let path = csivol_client::blocking_path("/v1/events", index, Duration::from_secs(20));
    let e = operator
        .send::<()>(
            Method::GET,
            &path,
            Body::None,
            Some(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    match &e {
        Error::Unreachable { source, .. } => assert!(source.is_timeout(), "{e:?}"),
        other => panic!("{other:?}"),
    }

    // No server at all.
    server.proc.kill();
    let e = operator.nodes().await.unwrap_err();
    match &e {
        Error::Unreachable { url, source } => {
            assert!(url.ends_with("/v1/nodes"), "{url}");
            assert!(!source.is_timeout(), "{e:?}");
        }
        other => panic!("{other:?}"),
    }
}

/// A server that accepts connections and answers every request it reads with `status`
/// (`None`: it reads and never answers, as a server cut off from the network would).
/// Runs until the test ends.
fn stand_in(status: Option<u16>) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            if let Some(s) = status {
                let body = r#"{"error":{"code":"unavailable","message":"stand-in"}}"#;
                let _ = write!(
                    conn,
                    "HTTP/1.1 {s} Stand-in\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
            held.push(conn);
        }
    });
    url
}

/// A request that may be carried out twice moves on to the next server when one answers
/// 503 or nothing within its deadline; any other request moves on only when it could not
/// connect, since the silent server may have carried it out.
#[tokio::test]
async fn idempotent_requests_move_on_from_a_silent_or_unavailable_server() {
    let dir = TestDir::new("client-idempotent");
    let server = ServerProc::start(&dir.join("server"), &[]);
    let within = Some(Duration::from_millis(500));
    for first in [stand_in(None), stand_in(Some(503))] {
        let both = Client::builder(&format!("{first},{}", server.url))
            .build()
            .unwrap();
        let raw = both
            .send_idempotent::<()>(Method::GET, "/v1/health", Body::None, within)
            .await
            .unwrap();
        assert_eq!(raw.status, StatusCode::OK, "answered by the real server");
        assert_eq!(both.base(), server.url, "which is asked first from now on");

        let again = Client::builder(&format!("{first},{}", server.url))
            .build()
            .unwrap();
        let sent = again
            .send::<()>(Method::GET, "/v1/health", Body::None, within)
            .await;
        match sent {
            Err(Error::Unreachable { source, .. }) => assert!(source.is_timeout(), "{source}"),
            Ok(raw) => assert_eq!(raw.status.as_u16(), 503, "the stand-in's answer"),
            Err(e) => panic!("{e}"),
        }
        assert_eq!(
            again.base(),
            first,
            "a plain request stays where it was answered"
        );
        again.avoid_current();
        assert_eq!(
            again.base(),
            server.url,
            "avoided, the next server comes first"
        );
    }
    // Every server refusing: the last answer is the caller's.
    let none = Client::builder(&format!("{},{}", stand_in(Some(503)), stand_in(Some(503))))
        .build()
        .unwrap();
    let e = none.heartbeat("n1", within).await.unwrap_err();
    assert_eq!(e.status(), Some(StatusCode::SERVICE_UNAVAILABLE), "{e}");
}

/// A request with an `Idempotency-Key` may be sent again: it moves on from a server that
/// answers 503 or nothing, and after a round of every server, is sent again up to three
/// rounds in all; one without a key is sent once, since the silent server may have carried
/// it out.
#[tokio::test]
async fn keyed_requests_are_sent_again_when_unanswered_and_unkeyed_ones_are_not() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use csivol_client::once::Once;

    let dir = TestDir::new("client-keyed");
    let server = ServerProc::start(&dir.join("server"), &[]);
    let within = Some(Duration::from_secs(2));
    // One backend volume has one name: each volume its own external id.
    let spec_of = |id: &str| json!({"plugin": "hp", "external_id": id, "access_mode": "single-node-writer", "attachment": "file-system"});
    let spec = spec_of("e");
    for (i, first) in [stand_in(None), stand_in(Some(503))]
        .into_iter()
        .enumerate()
    {
        let spec = spec_of(&format!("e-{i}"));
        let both = Client::builder(&format!("{first},{}", server.url))
            .token(Some(server.token.clone()))
            .build()
            .unwrap();
        let path = format!("/v1/volumes/keyed-{i}");
        let once = Once::new(format!("key-{i}"));
        let raw = both
            .send_once(Method::PUT, &path, Body::Json(&spec), within, &once)
            .await
            .unwrap();
        assert_eq!(
            raw.status,
            StatusCode::CREATED,
            "answered by the real server"
        );

        let again = Client::builder(&format!("{first},{}", server.url))
            .token(Some(server.token.clone()))
            .build()
            .unwrap();
        let path = format!("/v1/volumes/unkeyed-{i}");
        let sent = again
            .send_once(
                Method::PUT,
                &path,
                Body::Json(&spec),
                within,
                &Once::unkeyed(),
            )
            .await;
        match sent {
            Err(Error::Unreachable { source, .. }) => assert!(source.is_timeout(), "{source}"),
            Ok(raw) => assert_eq!(raw.status.as_u16(), 503, "the stand-in's answer"),
            Err(e) => panic!("{e}"),
        }
    }

    // A server that answers 503 each time: three rounds for a keyed request, one otherwise.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&asked);
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 8192];
            let _ = conn.read(&mut buf);
            counted.fetch_add(1, Ordering::SeqCst);
            let body = r#"{"error":{"code":"unavailable","message":"stand-in"}}"#;
            let _ = write!(
                conn,
                "HTTP/1.1 503 Stand-in\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let busy = Client::builder(&url).build().unwrap();
    let raw = busy
        .send_once(
            Method::PUT,
            "/v1/volumes/x",
            Body::Json(&spec),
            within,
            &Once::new("k"),
        )
        .await
        .unwrap();
    assert_eq!(raw.status.as_u16(), 503, "the last answer is the caller's");
    assert_eq!(asked.load(Ordering::SeqCst), 3);
    let raw = busy
        .send_once(
            Method::PUT,
            "/v1/volumes/x",
            Body::Json(&spec),
            within,
            &Once::unkeyed(),
        )
        .await
        .unwrap();
    assert_eq!(raw.status.as_u16(), 503);
    assert_eq!(asked.load(Ordering::SeqCst), 4, "sent once");
}
