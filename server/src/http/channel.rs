//! `GET /v1/nodes/{node}/channel`: a node agent's cheap wait (the line protocol is
//! `csivol_api::channel`). An idle node otherwise holds a hyper connection open for its
//! desired-state long-poll, with hyper's read and write buffers (24 KiB and more); after the
//! upgrade the connection is a socket and one small task: heartbeats arrive as `hb` lines
//! and are answered by the same code as `POST .../heartbeat`, and the node's desired index
//! is pushed whenever it changes, after which the agent fetches the changes without waiting.

use std::time::Instant;

use axum::http::header::{AUTHORIZATION, CONNECTION, UPGRADE};
use csivol_api::channel::{self, AgentLine, ServerLine};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::listen::Closing;
use super::*;

/// How long closing a channel may take.
const SHUTDOWN: Duration = Duration::from_secs(1);

pub(super) async fn open(
    State(app): State<App>,
    Path(node): Path<String>,
    mut req: Request,
) -> ApiResult<Response> {
    if !app.node_channel {
        // What an older server answers, so agents take the same fallback.
        return Err(ApiError::not_found("no such endpoint")
            .with_hint("this server runs with --no-node-channel"));
    }
    let headers = req.headers();
    let caller = app.caller(headers)?;
    caller.require_node(&node)?;
    name("node", &node)?;
    let asks = |h, want: &str| {
        headers.get_all(h).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(want)))
        })
    };
    if !asks(CONNECTION, "upgrade") || !asks(UPGRADE, channel::UPGRADE) {
        let e = ApiError::invalid(format!(
            "the node channel needs `Connection: upgrade` and `Upgrade: {}`",
            channel::UPGRADE
        ));
        return Ok(error::with_status(&e, StatusCode::UPGRADE_REQUIRED));
    }
    // Kept to check the token again at every heartbeat, as `POST .../heartbeat` does: a
    // revoked token ends the channel at the next one.
    let token = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let on_upgrade = req
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
        .ok_or_else(|| ApiError::internal("this connection cannot be upgraded"))?;
    let closing = req.extensions().get::<Closing>().cloned();
    // The channel replaces the node's long-poll and takes its place in that budget.
    let permit = app.long_poll(true)?;
    tokio::spawn(async move {
        let _permit = permit;
        match on_upgrade.await {
            Ok(io) => {
                app.metrics.node_channels.inc();
                let mut io = TokioIo::new(io);
                let served = serve(&app, &node, &token, &mut io, closing).await;
                // Closed properly (TLS close_notify), however it ended.
                let _ = tokio::time::timeout(SHUTDOWN, io.shutdown()).await;
                app.metrics.node_channels.dec();
                if let Err(e) = served {
                    tracing::debug!(node, error = %e, "node channel closed");
                }
            }
            Err(e) => tracing::debug!(node, error = %e, "node channel upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(CONNECTION, "upgrade")
        .header(UPGRADE, channel::UPGRADE)
        .body(axum::body::Body::empty())
        .map_err(|e| ApiError::internal(format!("failed to answer the upgrade: {e}")))
}

/// The answer to one heartbeat, for `POST .../heartbeat` and the channel alike: liveness
/// (with the etcd store, forwarded to the other servers from there), `lost` when the node
/// must register again, not found when the server does not know it.
pub(super) async fn heartbeat(
    app: &App,
    node: &str,
    channel: bool,
) -> ApiResult<HeartbeatResponse> {
    app.metrics.heartbeat(channel);
    let (status, ticket) = app.live.heartbeat_ticket(node, now_ms()).ok_or_else(|| {
        ApiError::not_found(format!("node `{node}` is not registered"))
            .with_hint("the agent registers again")
    })?;
    if let Some(t) = ticket
        && !app.live.passed_in_time(t).await
    {
        return Err(ApiError::unavailable(format!(
            "this server cannot pass heartbeats on to the other servers: etcd did not \
             take its last forward within {}",
            humantime::format_duration(app.live.forward_within())
        ))
        .with_hint("the agent sends its heartbeats to its next server"));
    }
    Ok(HeartbeatResponse {
        status,
        heartbeat_ttl_ms: app.live.ttl().as_millis() as u64,
    })
}

/// The channel until the agent closes it, goes silent for a TTL, breaks the protocol, or
/// the server stops.
async fn serve(
    app: &App,
    node: &str,
    token: &str,
    io: &mut (impl AsyncRead + AsyncWrite + Unpin),
    closing: Option<Closing>,
) -> std::io::Result<()> {
    let key = Key::Node(node.to_owned());
    let mut sent = app.db.hub.index(&key);
    let hello = format!(
        "{}{}",
        ServerLine::Hello.encode(),
        ServerLine::Desired(sent).encode()
    );
    io.write_all(hello.as_bytes()).await?;
    let mut closing = closing.map(|c| c.0);
    // Lines are a few bytes: they gather in a fixed buffer inside the task.
    let mut lines = channel::Lines::default();
    let mut heard = Instant::now();
    loop {
        // An agent heartbeats at a third of the TTL at most: one silent for a whole TTL is
        // gone (its node is lost by now), and its channel with it.
        let silence = app.live.ttl().saturating_sub(heard.elapsed());
        if silence.is_zero() {
            return Ok(());
        }
        tokio::select! {
            read = io.read(lines.space()) => {
                let n = read?;
                if n == 0 {
                    return Ok(());
                }
                lines.filled(n);
                heard = Instant::now();
                while let Some(line) = lines.next_line() {
                    let answer = match line.and_then(|l| AgentLine::parse(&l)) {
                        Ok(AgentLine::Beat) => beat(app, node, token).await,
                        Err(e) => return Err(std::io::Error::other(e)),
                    };
                    io.write_all(answer.encode().as_bytes()).await?;
                    if let ServerLine::Refused { code, .. } = &answer
                        && *code != csivol_api::ErrorCode::NotFound
                    {
                        // A refused token or node: the channel ends with the answer.
                        return Ok(());
                    }
                }
            }
            index = app.db.hub.wait(&key, sent, silence) => {
                if index > sent {
                    sent = index;
                    io.write_all(ServerLine::Desired(index).encode().as_bytes()).await?;
                }
            }
            () = closed(&mut closing) => return Ok(()),
        }
    }
}

/// Resolves when the server begins to stop (never without the accept loop's signal).
async fn closed(closing: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match closing {
        Some(c) => {
            let _ = c.wait_for(|c| *c).await;
        }
        None => std::future::pending().await,
    }
}

/// A heartbeat line's answer: the token checked as on every request, then [`heartbeat`].
async fn beat(app: &App, node: &str, token: &str) -> ServerLine {
    let allowed = app
        .tokens
        .authenticate(Some(token))
        .and_then(|caller| caller.require_node(node));
    let answer = match allowed {
        Ok(()) => heartbeat(app, node, true).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(hb) => ServerLine::Beat(hb),
        Err(e) => ServerLine::Refused {
            code: e.code(),
            message: e.message,
        },
    }
}
